// Tuning knobs of the kernels (fast paths on or off, 32-bit offsets, buffer budgets). They are
// chosen in Python (nitorch_jit/backends/tuning.py: the environment read once, overrides for
// tests and benchmarks) and handed to each library that links torch right after it is loaded,
// through the one C entry point that NJ_DEFINE_SET_TUNING() defines. A torch-free kernel
// library (NJ_KERNEL_LIB) holds none: it reads its binding's through the host table
// (core/host.h), so there is one set per process. Kernels read them here, never the
// environment.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/host.h"

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
  kOutputCacheMB,     // CPU: MiB of freed large outputs kept for reuse, per library (host_output.h)
  kParallelMinWork,   // CPU: least work per thread of a parallel region (parallel.h)
  kNumKnobs
};

// One set per library (hidden: the CPU and CUDA libraries of a module do not share it). The
// initial values are placeholders: Python sets every knob before the library's first op runs.
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
inline int64_t* values() {
  static int64_t v[kNumKnobs] = {1, 0, 1, 1, 256, 0, 0, 1 << 19};
  return v;
}

inline int64_t get(Knob k) {
#if defined(NJ_KERNEL_LIB)
  return __atomic_load_n(host::knobs() + k, __ATOMIC_RELAXED);
#else
  return __atomic_load_n(values() + k, __ATOMIC_RELAXED);
#endif
}

// Run after every change of the knobs, when set (host_output.h: trims its cache to the budget).
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
inline std::atomic<void (*)()>& on_change() {
  static std::atomic<void (*)()> hook{nullptr};
  return hook;
}

}  // namespace tuning
}  // namespace nitorch_jit

// Defines `int64_t nitorch_jit_set_tuning(const int64_t* v, int64_t n)` (sets the first n
// knobs) and `int64_t nitorch_jit_get_tuning(int64_t* v, int64_t n)` (reads them back, for
// tests); both return how many knobs the library has. Once per library, in the file that
// registers its ops.
#define NJ_DEFINE_SET_TUNING()                                                          \
  extern "C" __attribute__((visibility("default"))) int64_t nitorch_jit_set_tuning(     \
      const int64_t* v, int64_t n) {                                                    \
    for (int64_t k = 0; k < n && k < nitorch_jit::tuning::kNumKnobs; ++k)               \
      __atomic_store_n(nitorch_jit::tuning::values() + k, v[k], __ATOMIC_RELAXED);          \
    if (auto hook = nitorch_jit::tuning::on_change().load()) hook();                    \
    return nitorch_jit::tuning::kNumKnobs;                                              \
  }                                                                                     \
  extern "C" __attribute__((visibility("default"))) int64_t nitorch_jit_get_tuning(     \
      int64_t* v, int64_t n) {                                                          \
    for (int64_t k = 0; k < n && k < nitorch_jit::tuning::kNumKnobs; ++k)               \
      v[k] = nitorch_jit::tuning::get(static_cast<nitorch_jit::tuning::Knob>(k));       \
    return nitorch_jit::tuning::kNumKnobs;                                              \
  }
