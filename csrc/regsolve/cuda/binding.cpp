// The CUDA binding of regsolve (issue 31): the only CUDA file with torch headers, compiled by the
// host compiler (no device code). The host logic is host.cuh (its checks shared with the CPU ops:
// regsolve/host.h) with the CUDA policy; the kernels are torch-free libraries, one per op and dtype
// ('regsolve.reg_matvec.float32.cuda', kernels.def), built by nvcc for the GPU present the first
// time a call needs one. The launchers that host.cuh calls (params.cuh) are defined here as calls
// into those libraries.
#include <atomic>

#include "core/binding.h"
#include "core/torch_api.h"
#include "lines/cuda_policy.cuh"
#include "regsolve/cuda/host.cuh"

namespace nitorch_jit {
namespace regsolve {
namespace cuda {
namespace {

// A launch error comes back from the kernel library as its text and is raised here as the
// op's error, so the launchers report success to the host code.
cudaError_t run(std::atomic<nj_kernel_fn>* slots, const char* op, const Params& p, bool dbl,
                bool i32, cudaStream_t stream) {
  const KernelCall call{&p, dbl ? 1 : 0, i32 ? 1 : 0, stream};
  binding::run_kernel(slots[dbl], "regsolve", op, dbl ? "float64" : "float32", "cuda", &call);
  return cudaSuccess;
}

}  // namespace

cudaError_t matvec(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  static std::atomic<nj_kernel_fn> slots[2];
  return run(slots, "reg_matvec", p, dbl, i32, stream);
}
cudaError_t precond(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  static std::atomic<nj_kernel_fn> slots[2];
  return run(slots, "reg_precond", p, dbl, i32, stream);
}
cudaError_t relax(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  static std::atomic<nj_kernel_fn> slots[2];
  return run(slots, "reg_relax_", p, dbl, i32, stream);
}

}  // namespace cuda
}  // namespace regsolve
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CUDA, m) {
  using Ops = nitorch_jit::regsolve::cuda::Ops<nitorch_jit::lines_cuda::CudaPolicy>;
  NJ_IMPL(m, "reg_matvec", &Ops::reg_matvec);
  NJ_IMPL(m, "reg_precond", &Ops::reg_precond);
  NJ_IMPL(m, "reg_relax_", &Ops::reg_relax_);
}
