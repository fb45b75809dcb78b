// The CUDA binding of resize (issue 31): the only CUDA file with torch headers, compiled by the
// host compiler (no device code), on the stable ABI or the classic headers (core/torch_api.h,
// core/torch_api_cuda.h) from this one source. The host logic is host.cuh with the CUDA policy
// (current device and stream); the line kernels are torch-free libraries, one per launcher and
// dtype ('resize.filter.float32.cuda', kernels.def), built by nvcc for the GPU present the first
// time a call needs one.
#include "core/torch_api.h"
#include "lines/cuda_binding.h"
#include "lines/cuda_policy.cuh"
#include "resize/cuda/host.cuh"

NJ_LINES_FILTER_FROM(resize)
NJ_LINES_GATHER_FROM(resize)

NJ_DEFINE_SET_TUNING()
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::resize::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  NJ_IMPL(m, "resize", &Ops::resize);
  NJ_IMPL(m, "resize_adjoint", &Ops::resize_adjoint);
}
