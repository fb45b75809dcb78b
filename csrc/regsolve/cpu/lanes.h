// The vector lanes of the CPU regsolve kernels: shifted sums of source rows held in vector
// registers (sum_taps) and the voxel solves of a row in lanes (solve_lanes), each in a
// baseline build (16-byte vectors) and an AVX2 one (32-byte), chosen at run time (use_avx2).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/platform.h"
#include "core/tuning.h"
#include "regsolve/cpu/plan.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {


#if defined(NJ_GNU_VECTORS)
#define NJ_RS_VECTOR 1
#define NJ_RS_INLINE NJ_ALWAYS_INLINE
// Vectors of B bytes in registers. Memory is read and written through memcpy, which the
// compiler turns into one unaligned vector move: a row starts anywhere. (Not through a pointer
// to a vector type whose typedef lowers its alignment: that attribute is sugar on the typedef,
// and clang drops it once the lvalue passes through a reference, e.g. a load() returning
// `const VU&`, and then emits aligned moves that fault, issue 40.)
template <int B, typename T>
struct Vec {
  typedef T V __attribute__((vector_size(B)));
  static constexpr int L = B / sizeof(T);
  // through an out-parameter: a vector returned by value changes the ABI where AVX is not
  // enabled (gcc warns), and these inline into the AVX2 builds too
  static NJ_RS_INLINE void load(V& v, const T* p) { std::memcpy(&v, p, sizeof(V)); }
  static NJ_RS_INLINE void store(T* p, const V& v) { std::memcpy(p, &v, sizeof(V)); }
};

// o[m] += sum_t cs[t] * base[offs[t] + m] (m < cnt): chunks of U vectors held in registers
// while every tap is added (one load per tap and element; o is read and written once; U
// independent sums rather than a latency-bound single one). The last chunk is moved back to
// end at cnt (cnt >= U L): computed from zero, only its elements past the previous chunks are
// added.
template <int B, int U, typename T>
NJ_RS_INLINE void sum_chunks(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs,
                             int n) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int64_t L = W::L, UL = U * L;
  for (int64_t m = 0; m < cnt; m += UL) {
    const bool last = m + UL > cnt;
    const int64_t from = last ? cnt - UL : m;
    V a[U];
    for (int u = 0; u < U; ++u) {
      a[u] = V{};
      if (!last) W::load(a[u], o + m + u * L);
    }
    for (int t = 0; t < n; ++t) {
      const T* p = base + offs[t] + from;
      const T c = cs[t];
      for (int u = 0; u < U; ++u) {
        V x;
        W::load(x, p + u * L);
        a[u] += c * x;
      }
    }
    if (!last) {
      for (int u = 0; u < U; ++u) W::store(o + m + u * L, a[u]);
      continue;
    }
    T buf[UL];
    for (int u = 0; u < U; ++u) W::store(buf + u * L, a[u]);
    for (int64_t q = m; q < cnt; ++q) o[q] += buf[q - from];
  }
}

// The same for L <= cnt < 8 L (short rows: relax's colours) in one chunk of ceil(cnt / L)
// vectors, the last one moved back to end at cnt where it would pass it.
template <int B, int U, typename T>
NJ_RS_INLINE void sum_short(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs,
                            int n) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int64_t L = W::L, want = (U - 1) * L;
  const int64_t last = cnt - L;  // <= want
  V a[U];
  for (int u = 0; u + 1 < U; ++u) W::load(a[u], o + u * L);
  a[U - 1] = V{};
  for (int t = 0; t < n; ++t) {
    const T* p = base + offs[t];
    const T c = cs[t];
    V x;
    for (int u = 0; u + 1 < U; ++u) {
      W::load(x, p + u * L);
      a[u] += c * x;
    }
    W::load(x, p + last);
    a[U - 1] += c * x;
  }
  for (int u = 0; u + 1 < U; ++u) W::store(o + u * L, a[u]);
  T buf[L];
  W::store(buf, a[U - 1]);
  for (int64_t q = want; q < cnt; ++q) o[q] += buf[q - last];
}

template <int B, typename T>
NJ_RS_INLINE void sum_taps_vec(T* o, int64_t cnt, const T* base, const int64_t* offs,
                               const T* cs, int n) {
  constexpr int64_t L = Vec<B, T>::L;
  if (cnt >= 8 * L) return sum_chunks<B, 8>(o, cnt, base, offs, cs, n);
  switch ((cnt + L - 1) / L) {
    case 0:
    case 1:
      break;
#define NJ_RS_SHORT(U) \
  case U:              \
    return sum_short<B, U>(o, cnt, base, offs, cs, n);
    NJ_RS_SHORT(2)
    NJ_RS_SHORT(3)
    NJ_RS_SHORT(4)
    NJ_RS_SHORT(5)
    NJ_RS_SHORT(6)
    NJ_RS_SHORT(7)
    NJ_RS_SHORT(8)
#undef NJ_RS_SHORT
  }
  if (cnt >= L) return sum_chunks<B, 1>(o, cnt, base, offs, cs, n);
  for (int t = 0; t < n; ++t)
    for (int64_t q = 0; q < cnt; ++q) o[q] += cs[t] * base[offs[t] + q];
}

// Lane-wise sqrt (the lanes passed are > 0). By pointer: a vector argument of a function
// compiled for AVX would change the ABI; not always_inline: the AVX2 one inlines into the
// AVX2 builds only. The compiler's builtins, which immintrin.h's _mm*_sqrt_p* wrap: that
// header is 70k lines of intrinsics, a second of parsing for a kernel library that needs four.
template <int B, typename T>
struct VecSqrt {
  static inline void run(typename Vec<B, T>::V* v) {
    for (int l = 0; l < Vec<B, T>::L; ++l) (*v)[l] = std::sqrt((*v)[l]);
  }
};
#if defined(NJ_X86_64)
template <>
struct VecSqrt<16, float> {
  static inline void run(Vec<16, float>::V* v) { *v = __builtin_ia32_sqrtps(*v); }
};
template <>
struct VecSqrt<16, double> {
  static inline void run(Vec<16, double>::V* v) {
    *v = __builtin_ia32_sqrtpd(*v);
  }
};
#endif
#if defined(NJ_AVX2_PATHS)
template <>
struct VecSqrt<32, float> {
  NJ_TARGET_AVX2 static inline void run(Vec<32, float>::V* v) {
    *v = __builtin_ia32_sqrtps256(*v);
  }
};
template <>
struct VecSqrt<32, double> {
  NJ_TARGET_AVX2 static inline void run(Vec<32, double>::V* v) {
    *v = __builtin_ia32_sqrtpd256(*v);
  }
};
#endif

// Lower triangle of a C x C block, packed: (r, k), k <= r.
constexpr int tri(int r, int k) { return r * (r + 1) / 2 + k; }

// regsolve::chol_factor (FACT) and chol_subst on L voxels at once, one per lane: the same
// operations in the same order, the branches as selects. a: the lower triangle (tri), z the
// right-hand side, overwritten by the solution.
template <int B, int NC, bool FACT, typename T>
NJ_RS_INLINE void chol_lanes(typename Vec<B, T>::V* a, typename Vec<B, T>::V* z) {
  typedef typename Vec<B, T>::V V;
  const V zero = V{}, one = zero + T(1);
  if (FACT) {
    for (int j = 0; j < NC; ++j) {
      V d = a[tri(j, j)];
      for (int k = 0; k < j; ++k) d -= a[tri(j, k)] * a[tri(j, k)];
      const auto ok = d > zero;  // also NaN
      V root = ok ? d : one;
      VecSqrt<B, T>::run(&root);
      const V inv = ok ? one / root : zero;
      a[tri(j, j)] = inv;
      for (int r = j + 1; r < NC; ++r) {
        V v = a[tri(r, j)];
        for (int k = 0; k < j; ++k) v -= a[tri(r, k)] * a[tri(j, k)];
        a[tri(r, j)] = ok ? v * inv : zero;
      }
    }
  }
  for (int r = 0; r < NC; ++r) {
    const V inv = a[tri(r, r)];
    V v = z[r];
    for (int k = 0; k < r; ++k) v -= a[tri(r, k)] * z[k];
    z[r] = inv != zero ? v * inv : zero;
  }
  for (int r = NC - 1; r >= 0; --r) {
    const V inv = a[tri(r, r)];
    V v = z[r];
    for (int k = r + 1; k < NC; ++k) v -= a[tri(k, r)] * z[k];
    z[r] = inv != zero ? v * inv : zero;
  }
}

// The voxel solves of elements [m0, m1) of a row, in lanes: vo[c * ldo + m] <- A_m^-1
// vi[c * ldi + m] (vo and vi apart), with A_m's lower triangle a[tri(r, k)][m] (FACT:
// factorised here), or else its factor. A last partial vector is moved back to end at m1 (its
// first elements solved twice, the same way), or with fewer than L elements padded with
// zeros (solution 0).
template <int B, int NC, bool FACT, typename T>
NJ_RS_INLINE void solve_lanes(const T* const* a, const T* vi, int64_t ldi, T* vo, int64_t ldo,
                              int64_t m0, int64_t m1) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int L = W::L, NT = NC * (NC + 1) / 2;
  for (int64_t m = m0; m < m1; m += L) {
    V A[NT], Z[NC];
    if (m + L > m1 && m1 - m0 >= L) m = m1 - L;
    const int64_t n = std::min<int64_t>(L, m1 - m);
    if (n == L) {
      for (int j = 0; j < NT; ++j) W::load(A[j], a[j] + m);
      for (int c = 0; c < NC; ++c) W::load(Z[c], vi + c * ldi + m);
    } else {
      for (int c = 0; c < NC; ++c) Z[c] = V{};
      for (int64_t l = 0; l < n; ++l)
        for (int c = 0; c < NC; ++c) Z[c][l] = vi[c * ldi + m + l];
      for (int j = 0; j < NT; ++j) {
        A[j] = V{};
        for (int64_t l = 0; l < n; ++l) A[j][l] = a[j][m + l];
      }
    }
    chol_lanes<B, NC, FACT, T>(A, Z);
    if (n == L) {
      for (int c = 0; c < NC; ++c) W::store(vo + c * ldo + m, Z[c]);
    } else {
      for (int64_t l = 0; l < n; ++l)
        for (int c = 0; c < NC; ++c) vo[c * ldo + m + l] = Z[c][l];
    }
  }
}

#define NJ_RS_SUM_ARGS(T) T *o, int64_t cnt, const T *base, const int64_t *offs, const T *cs, int n
#define NJ_RS_SUM_PASS o, cnt, base, offs, cs, n
#define NJ_RS_SOLVE_ARGS(T)                                                             \
  const T *const *a, const T *vi, int64_t ldi, T *vo, int64_t ldo, int64_t m0, int64_t m1, \
      int nc, bool fact
#define NJ_RS_SOLVE_PASS a, vi, ldi, vo, ldo, m0, m1

// every channel count 1..3, with and without the factorisation
template <int B, typename T>
NJ_RS_INLINE void solve_lanes_any(NJ_RS_SOLVE_ARGS(T)) {
  switch (nc * 2 + fact) {
    case 2: return solve_lanes<B, 1, false>(NJ_RS_SOLVE_PASS);
    case 3: return solve_lanes<B, 1, true>(NJ_RS_SOLVE_PASS);
    case 4: return solve_lanes<B, 2, false>(NJ_RS_SOLVE_PASS);
    case 5: return solve_lanes<B, 2, true>(NJ_RS_SOLVE_PASS);
    case 6: return solve_lanes<B, 3, false>(NJ_RS_SOLVE_PASS);
    default: return solve_lanes<B, 3, true>(NJ_RS_SOLVE_PASS);
  }
}

inline void sum_taps_v(NJ_RS_SUM_ARGS(float)) { sum_taps_vec<16>(NJ_RS_SUM_PASS); }
inline void sum_taps_v(NJ_RS_SUM_ARGS(double)) { sum_taps_vec<16>(NJ_RS_SUM_PASS); }
inline void solve_lanes_v(NJ_RS_SOLVE_ARGS(float)) {
  solve_lanes_any<16>(NJ_RS_SOLVE_PASS, nc, fact);
}
inline void solve_lanes_v(NJ_RS_SOLVE_ARGS(double)) {
  solve_lanes_any<16>(NJ_RS_SOLVE_PASS, nc, fact);
}
#if defined(NJ_AVX2_PATHS)
#define NJ_RS_AVX2 1
// Compiled for AVX2 (chosen at run time when the CPU has it; NI_JIT_DISABLE_AVX2=1 disables)
NJ_TARGET_AVX2 inline void sum_taps_avx2(NJ_RS_SUM_ARGS(float)) {
  sum_taps_vec<32>(NJ_RS_SUM_PASS);
}
NJ_TARGET_AVX2 inline void sum_taps_avx2(NJ_RS_SUM_ARGS(double)) {
  sum_taps_vec<32>(NJ_RS_SUM_PASS);
}
NJ_TARGET_AVX2 inline void solve_lanes_avx2(NJ_RS_SOLVE_ARGS(float)) {
  solve_lanes_any<32>(NJ_RS_SOLVE_PASS, nc, fact);
}
NJ_TARGET_AVX2 inline void solve_lanes_avx2(NJ_RS_SOLVE_ARGS(double)) {
  solve_lanes_any<32>(NJ_RS_SOLVE_PASS, nc, fact);
}
#endif
#endif

inline bool use_avx2() {
#if defined(NJ_RS_AVX2)
  return platform::cpu_has_avx2_fma() && tuning::get(tuning::kAvx2);
#else
  return false;
#endif
}

// o[m] += sum_t cs[t] * base[offs[t] + m] (m < cnt)
template <typename T>
void sum_taps(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs, int n,
              bool avx2) {
#if defined(NJ_RS_AVX2)
  if (avx2) return sum_taps_avx2(o, cnt, base, offs, cs, n);
#endif
  (void)avx2;
#if defined(NJ_RS_VECTOR)
  sum_taps_v(o, cnt, base, offs, cs, n);
#else
  for (int t = 0; t < n; ++t)
    for (int64_t q = 0; q < cnt; ++q) o[q] += cs[t] * base[offs[t] + q];
#endif
}

}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit
