// The line launchers of lines/cuda.h, as a CUDA binding defines them (issue 31): each call finds
// the kernel library of its launcher and dtype by name (core/binding.h; built the first time
// a call needs it, for the GPU present) and hands it the call. Expand NJ_LINES_FILTER_FROM and
// NJ_LINES_GATHER_FROM once each, in the CUDA binding of a module whose host code calls them.
#pragma once

#include <atomic>

#include "core/binding.h"
#include "lines/cuda.h"

// A launch error comes back from the kernel library as its text and is raised here as the op's
// error, so the launchers report success to the host code. A module defines the launchers its
// host code calls: splinc the filter, resize both.
#define NJ_LINES_FILTER_FROM(MODULE)                                                           \
  namespace nitorch_jit {                                                                     \
  namespace lines_cuda {                                                                      \
  cudaError_t filter(void* x, bool dbl, int64_t outer, int64_t n, int64_t inner,              \
                     const splinc::LinePlan* plan, cudaStream_t stream) {                     \
    static std::atomic<nj_kernel_fn> slots[2];                                                \
    const FilterCall call{x, outer, n, inner, plan, stream, dbl ? 1 : 0};                     \
    binding::run_kernel(slots[dbl], #MODULE, "filter", dbl ? "float64" : "float32", "cuda",  \
                        &call);                                                               \
    return cudaSuccess;                                                                       \
  }                                                                                           \
  }                                                                                           \
  }

#define NJ_LINES_GATHER_FROM(MODULE)                                                           \
  namespace nitorch_jit {                                                                     \
  namespace lines_cuda {                                                                      \
  cudaError_t gather(const void* in, void* out, bool dbl, int64_t outer, int64_t lin,         \
                     int64_t lout, int64_t inner, const int32_t* idx, const void* w, int K,   \
                     bool i32, cudaStream_t stream) {                                         \
    static std::atomic<nj_kernel_fn> slots[2];                                                \
    const GatherCall call{in, out, outer, lin, lout, inner, idx, w, K, dbl ? 1 : 0,           \
                          i32 ? 1 : 0, stream};                                               \
    binding::run_kernel(slots[dbl], #MODULE, "gather", dbl ? "float64" : "float32", "cuda",  \
                        &call);                                                               \
    return cudaSuccess;                                                                       \
  }                                                                                           \
  }                                                                                           \
  }
