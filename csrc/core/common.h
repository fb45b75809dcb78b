// Portability macros shared by the host (C++) and device (CUDA) kernels of nitorch_jit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define NJ_HD __host__ __device__
#define NJ_INLINE __forceinline__
#define NJ_UNROLL _Pragma("unroll")
#define NJ_NO_UNROLL _Pragma("unroll 1")
#define NJ_LAMBDA_INLINE
#else
#include "core/platform.h"
#define NJ_HD
#define NJ_INLINE NJ_ALWAYS_INLINE
#define NJ_UNROLL  // gcc/clang fully unroll loops with small constant trip counts at -O3
#define NJ_NO_UNROLL
#if defined(_MSC_VER) && !defined(__clang__)
#define NJ_LAMBDA_INLINE  // MSVC has no attribute for a lambda's operator()
#else
#define NJ_LAMBDA_INLINE __attribute__((always_inline))
#endif
#endif

namespace nitorch_jit {

// floor(x) as an integer, for |x| < 2^62 (callers clamp larger values first). Avoids a libm
// call on baseline x86-64 (no SSE4.1 round instruction without -march flags).
template <typename T>
NJ_HD NJ_INLINE int64_t floor_to_int(T x) {
  int64_t i = static_cast<int64_t>(x);  // truncation toward zero
  return (static_cast<T>(i) > x) ? i - 1 : i;
}

}  // namespace nitorch_jit
