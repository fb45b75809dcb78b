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

// floor(x) as an integer, for |x| < 2^62 (callers clamp larger values first), and x - floor(x)
// in frac. Avoids a libm call on baseline x86-64 (no SSE4.1 round instruction without -march
// flags). frac is taken from the truncation's float value, not from the integer converted back:
// that conversion sat on every point's critical path (clang selects branch-free and paid it
// twice, issue 40). f > x only for a negative non-integer x, |x| < 2^23 in float, where f - 1 is
// exact: the same values as x - T(floor).
template <typename T>
NJ_HD NJ_INLINE int64_t floor_split(T x, T& frac) {
  int64_t i = static_cast<int64_t>(x);  // truncation toward zero
  T f = static_cast<T>(i);
  const bool down = f > x;
  i -= down ? 1 : 0;
  f -= down ? T(1) : T(0);
  frac = x - f;
  return i;
}

template <typename T>
NJ_HD NJ_INLINE int64_t floor_to_int(T x) {
  T frac;
  return floor_split(x, frac);
}

}  // namespace nitorch_jit
