// The vector primitives of the AVX2 fast paths (select.h): the lane order of a block, products kept
// apart from the adds, cubic weights in lanes, tap loads, transposes and horizontal sums. Every
// function is compiled for AVX2 + FMA (NJ_AVX2) and inlined into the paths, which are chosen at run
// time when the CPU has it.
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <immintrin.h>

#include <cstdint>

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// Lanes hold the points of an 8-point block in the order S = 0 1 4 5 2 3 6 7: what the
// deinterleave of a packed [.., 2] grid yields, and what the pair gathers take as indices (the
// pairs of points 0 1 4 5 and 2 3 6 7 deinterleave to the natural order). nat() maps S to the
// natural order (64-bit chunks 0 2 1 3).
#define NJ_AVX2 NJ_TARGET_AVX2_FMA __attribute__((always_inline)) inline

NJ_AVX2 __m256 nat_ps(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
}

// A product that the compiler may not fuse with the add that follows (GCC contracts a * b + c
// into an FMA in FMA-enabled code unless told not to; the scalar path has no FMA). Any vector.
template <class V>
NJ_AVX2 V nofuse(V p) {
  asm("" : "+x"(p));
  return p;
}
NJ_AVX2 __m256 mul_nf(__m256 a, __m256 b) { return nofuse(_mm256_mul_ps(a, b)); }

// Cubic B-spline weights of the taps i0 .. i0+3 at fractional position u (S: float or double, V:
// its vector): core/spline.h's SplineTaps<3, 0> operation by operation (no FMA), so that a vector
// path rounds as the scalar one does.
template <typename S, class V>
NJ_AVX2 void cubic_weights(V u, V* w) {
  const S s = S(1) / S(6);
  V t = nofuse(((S(0) - u) + S(3)) * u);   // w0 = (((-u + 3) u - 3) u + 1) s
  w[0] = (nofuse((t - S(3)) * u) + S(1)) * s;
  t = nofuse(nofuse((nofuse(S(3) * u) - S(6)) * u) * u);  // w1 = (((3 u - 6) u) u + 4) s
  w[1] = (t + S(4)) * s;
  t = nofuse((nofuse(S(-3) * u) + S(3)) * u);  // w2 = (((-3 u + 3) u + 3) u + 1) s
  w[2] = (nofuse((t + S(3)) * u) + S(1)) * s;
  w[3] = ((u * u) * u) * s;  // w3 = ((u u) u) s
}

// Taps k and k+1 of one source row for 8 points (natural order): row + base[lane] + {0, 1}.
NJ_AVX2 void tap_pairs(const float* row, __m128i blo, __m128i bhi, __m256& t0, __m256& t1) {
  const double* r = reinterpret_cast<const double*>(row);
  const __m256 lo = _mm256_castpd_ps(_mm256_i32gather_pd(r, blo, 4));
  const __m256 hi = _mm256_castpd_ps(_mm256_i32gather_pd(r, bhi, 4));
  t0 = _mm256_shuffle_ps(lo, hi, 0x88);
  t1 = _mm256_shuffle_ps(lo, hi, 0xDD);
}

// 4 vectors of 8 lanes in, out[4 j + t] = w[t] lane j out (the 4 values of each point together).
NJ_AVX2 void transpose4x8(const __m256* w, float* out) {
  const __m256 t0 = _mm256_unpacklo_ps(w[0], w[1]), t1 = _mm256_unpacklo_ps(w[2], w[3]);
  const __m256 t2 = _mm256_unpackhi_ps(w[0], w[1]), t3 = _mm256_unpackhi_ps(w[2], w[3]);
  const __m256 r0 = _mm256_shuffle_ps(t0, t1, 0x44), r1 = _mm256_shuffle_ps(t0, t1, 0xEE);
  const __m256 r2 = _mm256_shuffle_ps(t2, t3, 0x44), r3 = _mm256_shuffle_ps(t2, t3, 0xEE);
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(r0, r1, 0x20));       // points 0, 1
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(r2, r3, 0x20));   // 2, 3
  _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(r0, r1, 0x31));  // 4, 5
  _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(r2, r3, 0x31));  // 6, 7
}

// Points 2m, 2m+1 in the halves of p[m] (4 values each): their 8 sums, natural order.
NJ_AVX2 __m256 hsum4x8(const __m256* p) {
  // lanes: (0 2 4 6 | 1 3 5 7)
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
  const __m128 even = _mm256_castps256_ps128(h), odd = _mm256_extractf128_ps(h, 1);
  return _mm256_set_m128(_mm_unpackhi_ps(even, odd), _mm_unpacklo_ps(even, odd));
}

// The 4 taps of one bilinear point, tap (a, b) in lane 2 a + b: two 64-bit loads.
NJ_AVX2 __m128 bilinear_taps(const float* q, int64_t s1) {
  return _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(q)),
                      reinterpret_cast<const __m64*>(q + s1));
}

// 8 vectors in, their 8 horizontal sums out (lane j: the sum of p[j]).
NJ_AVX2 __m256 hsum8(const __m256* p) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(p[4], p[5]), _mm256_hadd_ps(p[6], p[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// The 8 x 8 transpose: out[j] lane t = in[t] lane j.
NJ_AVX2 void transpose8(const __m256* in, __m256* out) {
  __m256 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(in[k], in[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(in[k], in[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    out[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

// The 8 taps of one trilinear point, tap (a, b, c) in lane 4 a + 2 b + c: the pairs (i, i+1) of
// its 2 x 2 source rows, four 64-bit loads.
NJ_AVX2 __m256 trilinear_taps(const float* q, int64_t s0, int64_t s1) {
  const __m128 z = _mm_setzero_ps();
  const __m128 lo = _mm_loadh_pi(_mm_loadl_pi(z, reinterpret_cast<const __m64*>(q)),
                                 reinterpret_cast<const __m64*>(q + s1));
  const __m128 hi = _mm_loadh_pi(_mm_loadl_pi(z, reinterpret_cast<const __m64*>(q + s0)),
                                 reinterpret_cast<const __m64*>(q + s0 + s1));
  return _mm256_set_m128(hi, lo);
}

// The 4 taps of 8 bilinear points as 4 vectors (tap (a, b): t_ab, one lane per point): per
// point two 64-bit loads, then a transpose.
NJ_AVX2 void bilinear_taps8(const float* img, const int32_t* idx, int64_t s1, __m256& t00,
                            __m256& t01, __m256& t10, __m256& t11) {
  __m256 m[4];  // points j and j + 4
  for (int j = 0; j < 4; ++j)
    m[j] = _mm256_set_m128(bilinear_taps(img + idx[j + 4], s1), bilinear_taps(img + idx[j], s1));
  const __m256 u0 = _mm256_unpacklo_ps(m[0], m[1]), u1 = _mm256_unpacklo_ps(m[2], m[3]);
  const __m256 u2 = _mm256_unpackhi_ps(m[0], m[1]), u3 = _mm256_unpackhi_ps(m[2], m[3]);
  t00 = _mm256_shuffle_ps(u0, u1, 0x44);
  t01 = _mm256_shuffle_ps(u0, u1, 0xEE);
  t10 = _mm256_shuffle_ps(u2, u3, 0x44);
  t11 = _mm256_shuffle_ps(u2, u3, 0xEE);
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
