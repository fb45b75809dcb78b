// CUDA splinc ops: the CUDA policy and the registration under the CUDA key. The host logic is
// host.cuh, the kernels kernels.cu (no torch header).
// Host code only: the device passes skip it (parsing the torch headers for the device took a
// third of this file's compile time, for nothing).
#ifndef __CUDA_ARCH__
#include <torch/library.h>

#include "lines/cuda_policy.cuh"
#include "splinc/cuda/host.cuh"

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::splinc::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  m.impl("spline_coeff_nd", &Ops::spline_coeff_nd);
  m.impl("spline_coeff_nd_", &Ops::spline_coeff_nd_);
}

#endif  // __CUDA_ARCH__
