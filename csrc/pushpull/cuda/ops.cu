// CUDA pushpull ops: the CUDA policy of host.cuh (current device and stream,
// kernel errors raised as exceptions) and the registration under the CUDA key. The kernels are
// in the other .cu files of this folder (kernels.cuh), which include no torch header.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "pushpull/cuda/host.cuh"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {
namespace {

struct CudaPolicy {
  static constexpr const char* kDevice = "CUDA";
  static constexpr bool kHalf = true;
  static bool on_device(const at::Tensor& t) { return t.is_cuda(); }
  using Guard = c10::cuda::CUDAGuard;
  template <int OP>
  static void run_kernel(const Params& p, Dtype dtype, bool i32) {
    C10_CUDA_CHECK(launch<OP>(p, dtype, i32, c10::cuda::getCurrentCUDAStream().stream()));
  }
};

using CudaOps = Ops<CudaPolicy>;

}  // namespace
}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using nitorch_jit::pushpull::cuda::CudaOps;
  m.impl("grid_pull", &CudaOps::grid_pull);
  m.impl("grid_push", &CudaOps::grid_push);
  m.impl("grid_grad", &CudaOps::grid_grad);
  m.impl("grid_pushgrad", &CudaOps::grid_pushgrad);
  m.impl("grid_grad_dot", &CudaOps::grid_grad_dot);
  m.impl("grid_hess_dot", &CudaOps::grid_hess_dot);
  m.impl("grid_pull_backward", &CudaOps::grid_pull_backward);
  m.impl("affine_pull", &CudaOps::affine_pull);
  m.impl("affine_push", &CudaOps::affine_push);
  m.impl("affine_grad_dot", &CudaOps::affine_grad_dot);
}
