// The CUDA binding of pushpull (issue 31): the only CUDA file with torch headers, compiled by the
// host compiler (no device code), on the stable ABI or the classic headers (core/torch_api.h,
// core/torch_api_cuda.h) from this one source. It runs the host side of host.cuh (checks, geometry,
// outputs) with the CUDA policy below (current device and stream) and registers the ops under the
// CUDA key. The kernels are torch-free libraries, one per op and dtype
// ('pushpull.grid_pull.float32.cuda', kernels.def), built by nvcc for the GPU present the first
// time a call needs one, and found by name (core/binding.h).
#include <atomic>

#include "core/binding.h"
#include "core/torch_api.h"
#include "core/torch_api_cuda.h"
#include "pushpull/cuda/host.cuh"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {
namespace {

// The op's name in the kernel names, from kernels.def (one OpKind, one name).
constexpr const char* kernel_op(int kind) {
#define NJ_CUDA_KERNEL(op, unit, k, dtypes) \
  if (kind == k) return #op;
#include "pushpull/cuda/kernels.def"
#undef NJ_CUDA_KERNEL
  return "?";
}

constexpr const char* kDtypeNames[] = {"float16", "bfloat16", "float32", "float64"};

struct CudaPolicy {
  static constexpr const char* kDevice = "CUDA";
  static constexpr bool kHalf = true;
  static bool on_device(const api::Tensor& t) { return t.is_cuda(); }
  using Guard = api::CudaGuard;
  template <int OP>
  static void run_kernel(const Params& p, Dtype dtype, bool i32) {
    static std::atomic<nj_kernel_fn> slots[4];  // the entry of each dtype, once found
    const KernelCall call{&p, static_cast<int>(dtype), i32 ? 1 : 0, api::cuda_stream()};
    binding::run_kernel(slots[dtype], "pushpull", kernel_op(OP), kDtypeNames[dtype], "cuda",
                        &call);
  }
};

using CudaOps = Ops<CudaPolicy>;

}  // namespace
}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()        // the knobs host.cuh reads (tiles, 32-bit offsets)
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using nitorch_jit::pushpull::cuda::CudaOps;
  NJ_IMPL(m, "grid_pull", &CudaOps::grid_pull);
  NJ_IMPL(m, "grid_push", &CudaOps::grid_push);
  NJ_IMPL(m, "grid_grad", &CudaOps::grid_grad);
  NJ_IMPL(m, "grid_pushgrad", &CudaOps::grid_pushgrad);
  NJ_IMPL(m, "grid_grad_dot", &CudaOps::grid_grad_dot);
  NJ_IMPL(m, "grid_hess_dot", &CudaOps::grid_hess_dot);
  NJ_IMPL(m, "grid_pull_backward", &CudaOps::grid_pull_backward);
  NJ_IMPL(m, "affine_pull", &CudaOps::affine_pull);
  NJ_IMPL(m, "affine_push", &CudaOps::affine_push);
  NJ_IMPL(m, "affine_grad_dot", &CudaOps::affine_grad_dot);
}
