// The state the compiled libraries keep for the whole process (issue 31): the tuning knobs and
// the cache of freed large CPU outputs (core/host_output.h). One per process, however many
// bindings are loaded: each binding starts on a state of its own, and Python hands the first
// loaded binding's state to every later one right after loading it
// (nitorch_jit_adopt_process_state, core/tuning.h), so all of them read one array of knobs and
// share one block cache. Plain C, for the same reason as core/host.h: a classic binding and a
// stable-ABI one, or bindings built with either libstdc++ ABI, share it.
#pragma once

#include <cstdint>

extern "C" {

// A cache of large blocks (core/host_output.h): the code of the library that installed it.
typedef struct nj_block_cache {
  void* (*take)(int64_t bytes);          // a block of exactly `bytes`, or NULL
  void (*give)(void* p, int64_t bytes);  // a freed block: kept, or given back to the OS
  void (*trim)(void);                    // give back what exceeds the budget knob
} nj_block_cache;

#define NJ_PROCESS_ABI 1
#define NJ_MAX_KNOBS 16

typedef struct nj_process {
  int64_t abi;                          // NJ_PROCESS_ABI of the library that made it
  int64_t knobs[NJ_MAX_KNOBS];          // core/tuning.h's order, atomic relaxed loads/stores
  const nj_block_cache* blocks;         // NULL until a library with a block cache installs its own
} nj_process;

}  // extern "C"

namespace nitorch_jit {
namespace process {

// This library's own state (hidden: one per library until it adopts the process's). The knob
// values are placeholders: Python sets every knob before a library's first op runs.
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
inline nj_process& own() {
  static nj_process p{NJ_PROCESS_ABI, {1, 0, 1, 1, 256, 0, 0, 1 << 19}, nullptr};
  return p;
}

// The state this library uses: its own, or the process's once adopted (at load, before any
// of its ops runs).
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
inline nj_process*& current() {
  static nj_process* p = &own();
  return p;
}

}  // namespace process
}  // namespace nitorch_jit
