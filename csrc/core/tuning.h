// Tuning knobs of the kernels (fast paths on or off, 32-bit offsets, buffer budgets). They are
// chosen in Python (nitorch_jit/backends/tuning.py: the environment read once, overrides for
// tests and benchmarks) and handed to the libraries through the C entry points that
// NJ_DEFINE_SET_TUNING() defines. They live in the process state (core/process.h): one array
// per process, shared by every binding; a torch-free kernel library (NJ_KERNEL_LIB) reads it
// through the host table (core/host.h). Kernels read them here, never the environment.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/host.h"
#include "core/process.h"

namespace nitorch_jit {
namespace tuning {

// The order of nitorch_jit/ops/tuning.py's KNOBS.
enum Knob : int {
  kAvx2 = 0,          // CPU AVX2+FMA paths allowed (when the CPU has them)
  kRegsolveGeneric,   // CPU regularisers: every voxel through the generic per-point code
  kCudaTiles,         // CUDA: block-tiled scatter for push / pull backward
  kCudaIndex32,       // CUDA: 32-bit offsets allowed where they fit
  kPushBufferMB,      // CPU push: MiB of private per-thread outputs before atomics
  kHugePages,         // CPU: transparent huge pages advised for large outputs (opt-in; host_output.h)
  kOutputCacheMB,     // CPU: MiB of freed large outputs kept for reuse, per process (host_output.h)
  kParallelMinWork,   // CPU: least work per thread of a parallel region (parallel.h)
  kNumKnobs
};

static_assert(kNumKnobs <= NJ_MAX_KNOBS, "core/process.h holds NJ_MAX_KNOBS knobs");

// The knobs of the process state this library uses (core/process.h).
inline int64_t* values() { return process::current()->knobs; }

inline int64_t get(Knob k) {
#if defined(NJ_KERNEL_LIB)
  return platform::atomic_load_relaxed(host::knobs() + k);
#else
  return platform::atomic_load_relaxed(values() + k);
#endif
}

}  // namespace tuning
}  // namespace nitorch_jit

// Defines, once per library, in the file that registers its ops:
// - `int64_t nitorch_jit_set_tuning(const int64_t* v, int64_t n)`: sets the first n knobs (then
//   trims the block cache to its budget); `nitorch_jit_get_tuning(int64_t* v, int64_t n)` reads
//   them back (tests). Both return how many knobs the library has.
// - `void* nitorch_jit_process_state()`: the state this library uses; and
//   `int64_t nitorch_jit_adopt_process_state(void* p)`: use `p` (another library's) from now
//   on; 0, or this library's NJ_PROCESS_ABI when `p` was made with another (nothing changes).
#define NJ_DEFINE_SET_TUNING()                                                         \
  extern "C" NJ_EXPORT int64_t nitorch_jit_set_tuning(const int64_t* v, int64_t n) {   \
    for (int64_t k = 0; k < n && k < nitorch_jit::tuning::kNumKnobs; ++k)              \
      nitorch_jit::platform::atomic_store_relaxed(nitorch_jit::tuning::values() + k,   \
                                                  v[k]);                               \
    const nj_block_cache* blocks = nitorch_jit::platform::atomic_load_acquire(         \
        &nitorch_jit::process::current()->blocks);                                     \
    if (blocks != nullptr) blocks->trim();                                             \
    return nitorch_jit::tuning::kNumKnobs;                                             \
  }                                                                                    \
  extern "C" NJ_EXPORT int64_t nitorch_jit_get_tuning(                                 \
      int64_t* v, int64_t n) {                                                         \
    for (int64_t k = 0; k < n && k < nitorch_jit::tuning::kNumKnobs; ++k)              \
      v[k] = nitorch_jit::tuning::get(static_cast<nitorch_jit::tuning::Knob>(k));      \
    return nitorch_jit::tuning::kNumKnobs;                                             \
  }                                                                                    \
  extern "C" NJ_EXPORT void* nitorch_jit_process_state() {                             \
    return nitorch_jit::process::current();                                            \
  }                                                                                    \
  extern "C" NJ_EXPORT int64_t                                                         \
  nitorch_jit_adopt_process_state(void* p) {                                           \
    auto* state = static_cast<nj_process*>(p);                                         \
    if (state->abi != NJ_PROCESS_ABI) return NJ_PROCESS_ABI;                           \
    nitorch_jit::process::current() = state;                                           \
    return 0;                                                                          \
  }
