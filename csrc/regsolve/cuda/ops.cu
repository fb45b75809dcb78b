// CUDA regsolve ops: the CUDA policy and the registration under the CUDA key. The host logic
// is host.cuh (its checks shared with the CPU ops: regsolve/host.h), the kernels
// kernels.cu (no torch header).
// Host code only: the device passes skip it (as csrc/resize/cuda/ops.cu).
#ifndef __CUDA_ARCH__
#include <torch/library.h>

#include "lines/cuda_policy.cuh"
#include "regsolve/cuda/host.cuh"

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::regsolve::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  m.impl("reg_matvec", &Ops::reg_matvec);
  m.impl("reg_precond", &Ops::reg_precond);
  m.impl("reg_relax_", &Ops::reg_relax_);
}

#endif  // __CUDA_ARCH__
