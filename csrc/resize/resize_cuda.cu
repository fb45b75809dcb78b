// CUDA resize ops: the CUDA policy and the registration under the CUDA key. The host logic is
// resize_cuda_host.cuh, the kernels resize_kernels.cu (no torch header).
#include <torch/library.h>

#include "nitorch_jit/lines_cuda_policy.cuh"
#include "resize_cuda_host.cuh"

TORCH_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::resize::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  m.impl("resize", &Ops::resize);
  m.impl("resize_adjoint", &Ops::resize_adjoint);
}
