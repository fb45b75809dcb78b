// Instantiation stub: the CUDA kernels of grid_hess_dot for every dtype (kernels.cuh holds
// them; docs/pushpull-spec.md). One file per op, so that nvcc builds the ops in parallel.
#include "pushpull/cuda/kernels.cuh"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {

template <>
cudaError_t launch<kHessDot>(const Params& p, Dtype dtype, bool i32, cudaStream_t stream) {
  // fast paths (bit o: every dim of order o) with 32-bit / 64-bit offsets
  return launch_all<HessDotOp, (1 << 1) | (1 << 3), 0>(p, dtype, i32, stream);
}

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit
