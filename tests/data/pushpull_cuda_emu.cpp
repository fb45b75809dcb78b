// Host emulation of the CUDA pushpull kernels (tests/test_cuda_emu.py): compiles the CUDA
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

// CUDA built-ins, emulated: one thread at a time.
static dim3 blockIdx, threadIdx, gridDim, blockDim;

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}

template <class F>
void nj_emulate_launch(dim3 grid, dim3 block, F&& kernel) {
  gridDim = grid;
  blockDim = block;
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x)
      for (unsigned t = 0; t < block.x; ++t) {
        blockIdx = dim3(x, y, 1);
        threadIdx = dim3(t, 0, 0);
        kernel();
      }
}

// Blocks of the tiled scatter (pushpull_tiles.cuh): its steps, separated by __syncthreads() on
// a GPU, run one after the other, each over every thread of the block (in reverse order every
// other step, so that a step that depends on the order of its threads shows); the block's
// shared window starts as NaN (all bits set: shared memory is not initialised).
static int64_t nj_phased_launches = 0;  // read by the tests (nj_emu::emu_phased_launches)

template <class N, class F>
void nj_emulate_phased_launch(dim3 grid, dim3 block, size_t shared_bytes, N&& steps, F&& step) {
  ++nj_phased_launches;
  gridDim = grid;
  blockDim = block;
  void* shared = std::malloc(shared_bytes);
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x) {
      blockIdx = dim3(x, y, 1);
      threadIdx = dim3(0, 0, 0);
      std::memset(shared, 0xff, shared_bytes);
      const int64_t n = steps();
      for (int64_t s = 0; s < n; ++s)
        for (unsigned i = 0; i < block.x; ++i) {
          threadIdx = dim3(s % 2 ? block.x - 1 - i : i, 0, 0);
          step(shared, s);
        }
    }
  std::free(shared);
}

#include <type_traits>  // (standard headers first: they use __attribute__((__noinline__)))
#define __noinline__ __attribute__((noinline))
#include "grad_cuda.cu"
#include "graddot_cuda.cu"
#include "hessdot_cuda.cu"
#include "pullback_cuda.cu"
#include "pull_cuda.cu"
#include "push_cuda.cu"
#include "pushgrad_cuda.cu"
#undef __noinline__

#include <torch/library.h>

#include "pushpull_cuda_host.cuh"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {
namespace {

struct EmuPolicy {
  static constexpr const char* kDevice = "CPU (CUDA emulation)";
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

TORCH_LIBRARY_IMPL(nj_emu, CPU, m) {
  using nitorch_jit::pushpull::cuda::EmuOps;
  m.impl("grid_pull", &EmuOps::grid_pull);
  m.impl("grid_push", &EmuOps::grid_push);
  m.impl("grid_grad", &EmuOps::grid_grad);
  m.impl("grid_pushgrad", &EmuOps::grid_pushgrad);
  m.impl("grid_grad_dot", &EmuOps::grid_grad_dot);
  m.impl("grid_hess_dot", &EmuOps::grid_hess_dot);
  m.impl("grid_pull_backward", &EmuOps::grid_pull_backward);
}

// How many tiled launches ran (the tests check that the tiled scatter was taken).
TORCH_LIBRARY_FRAGMENT(nj_emu, m) {
  m.def("emu_phased_launches() -> int", [] { return nj_phased_launches; });
}
