// The CUDA binding of resize (issue 31): the only CUDA file with torch headers, compiled by the
// host compiler (no device code). The host logic is host.cuh with the CUDA policy (current
// device and stream); the line kernels are torch-free libraries, one per launcher and dtype
// ('resize.filter.float32.cuda', kernels.def), built by nvcc for the GPU present the first time a
// call needs one.
#include <torch/library.h>

#include "lines/cuda_binding.h"
#include "lines/cuda_policy.cuh"
#include "resize/cuda/host.cuh"

NJ_LINES_FILTER_FROM(resize)
NJ_LINES_GATHER_FROM(resize)

NJ_DEFINE_SET_TUNING()
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

TORCH_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::resize::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  m.impl("resize", &Ops::resize);
  m.impl("resize_adjoint", &Ops::resize_adjoint);
}
