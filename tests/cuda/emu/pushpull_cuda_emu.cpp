// Host emulation of the CUDA pushpull kernels (tests/cuda/emu/test_pushpull.py): compiles the CUDA
// sources of csrc/pushpull (kernels, dispatch and host logic) with the host compiler and runs
// every "thread" of every launch one after the other on the CPU. It checks the kernels' logic
// (indexing, tap lists, fast/border/generic paths, dtypes, 32/64-bit offsets) on machines
// without a GPU; it cannot check what only a GPU does (concurrency, atomics, memory spaces).
// The ops are registered under the CPU key of the namespace nj_emu (schemas defined by the test).
#define NJ_PUSHPULL_EMULATE 1
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

using std::isfinite;

#include "cuda_emu.h"

#include <cstdio>
#include <type_traits>  // (standard headers first: they use __attribute__((__noinline__)))

#include "core/cuda_entry.h"
#include "core/host.h"
#define __noinline__ __attribute__((noinline))
#include "pushpull/cuda/grad.cu"
#include "pushpull/cuda/graddot.cu"
#include "pushpull/cuda/hessdot.cu"
#include "pushpull/cuda/pullback.cu"
#include "pushpull/cuda/pull.cu"
#include "pushpull/cuda/push.cu"
#include "pushpull/cuda/pushgrad.cu"
#undef __noinline__

#include <torch/library.h>

#include "pushpull/cuda/host.cuh"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {
namespace {

struct EmuPolicy {
  static constexpr const char* kDevice = "CPU (CUDA emulation)";
  static constexpr bool kHalf = true;
  static bool on_device(const at::Tensor& t) { return t.is_cpu(); }
  struct Guard {
    explicit Guard(c10::Device) {}
  };
  template <int OP>
  static void run_kernel(const Params& p, Dtype dtype, bool i32) {
    TORCH_CHECK(launch<OP>(p, dtype, i32, nullptr) == cudaSuccess, "emulated launch failed");
  }
};

using EmuOps = Ops<EmuPolicy>;

}  // namespace
}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nj_emu, CPU, m) {
  using nitorch_jit::pushpull::cuda::EmuOps;
  m.impl("grid_pull", &EmuOps::grid_pull);
  m.impl("grid_push", &EmuOps::grid_push);
  m.impl("grid_grad", &EmuOps::grid_grad);
  m.impl("grid_pushgrad", &EmuOps::grid_pushgrad);
  m.impl("grid_grad_dot", &EmuOps::grid_grad_dot);
  m.impl("grid_hess_dot", &EmuOps::grid_hess_dot);
  m.impl("grid_pull_backward", &EmuOps::grid_pull_backward);
  m.impl("affine_pull", &EmuOps::affine_pull);
  m.impl("affine_push", &EmuOps::affine_push);
  m.impl("affine_grad_dot", &EmuOps::affine_grad_dot);
}

// How many tiled launches ran (the tests check that the tiled scatter was taken).
TORCH_LIBRARY_FRAGMENT(nj_emu, m) {
  m.def("emu_phased_launches() -> int", [] { return nj_phased_launches; });
}
