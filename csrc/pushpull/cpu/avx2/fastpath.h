// Fast paths on CPU with AVX2 + FMA (compiled for that target only, chosen at run time when the
// CPU has it), every dim of the same order: grid_pull / affine_pull of orders 1 and 3 in 2-D and
// 3-D (float32) and in 3-D (float64), and grid_pull_backward of order 1 in 2-D and 3-D
// (float32; push_cpu.cpp). pull_cpu.cpp's older Pull1Avx2 serves sources whose last dim is
// strided.
//
// A block of points of a row at a time (8 floats, 4 doubles): coordinates (deinterleaved or
// plain loads, or computed from the matrix), interior test, base indices and weights in vector
// registers, one lane per point; the weights are then transposed to one vector per point. The
// taps are read point by point with plain loads of contiguous taps (pairs at order 1, runs of 4
// at order 3), never gathered: gathers are slow on some CPUs (Zen 5 here: the gather version of
// the 3-D order-1 pull was slower than the scalar code). Weights are computed once per point
// and reused by every channel. A point whose support leaves the source (out of range,
// non-finite) is redone by the scalar fast path, which applies the bound and extrapolate rules;
// with extrapolate off, points outside the field of view read zero in the vector path. With
// extrapolate on, the pulls first fold coordinates on dct1 / dct2 dims into the source
// (MirrorFold), so that only points near its border remain for the scalar path.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include <type_traits>
#include <vector>

#include "pushpull/cpu/loop.h"

#define NJ_FASTPATH_AVX2 1

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// Lanes hold the points of an 8-point block in the order S = 0 1 4 5 2 3 6 7: what the
// deinterleave of a packed [.., 2] grid yields, and what the pair gathers take as indices (the
// pairs of points 0 1 4 5 and 2 3 6 7 deinterleave to the natural order). nat() maps S to the
// natural order (64-bit chunks 0 2 1 3).
#define NJ_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

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

// Cubic B-spline weights of the taps i0 .. i0+3 at fractional position u (S: float or double,
// V: its vector): spline.h's SplineTaps<3, 0> operation by operation (no FMA), so that a vector
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

// Coordinate d of the points l, l+1, ... of a row (8 floats or 4 doubles, natural order):
// gathered from a grid row (lane: the points' offsets, 0, 1, ... times the row stride), or
// computed from the matrix as AffineRow::coord does (the same operations in the same order, no
// FMA: the same bits as the grid affine_grid builds, so affine_pull equals grid_pull).
NJ_AVX2 __m256 coords8(const GridRow<float>& r, int d, int64_t l, __m256i lane) {
  const float* g = r.gp + l * r.g2 + d * r.gD;
  // planar coordinates (a [D, *points] array seen as a grid, e.g. scipy's): a plain load
  return r.g2 == 1 ? _mm256_loadu_ps(g) : _mm256_i32gather_ps(g, lane, 4);
}
NJ_AVX2 __m256 coords8(const AffineRow<float>& r, int d, int64_t l, __m256i) {
  const __m256 i = _mm256_cvtepi32_ps(_mm256_add_epi32(
      _mm256_set1_epi32(static_cast<int>(r.i2 + l)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  return _mm256_add_ps(_mm256_set1_ps(r.r[d]), mul_nf(_mm256_set1_ps(r.a[d]), i));
}
NJ_AVX2 __m256d coords4(const GridRow<double>& r, int d, int64_t l, __m128i lane) {
  const double* g = r.gp + l * r.g2 + d * r.gD;
  return r.g2 == 1 ? _mm256_loadu_pd(g) : _mm256_i32gather_pd(g, lane, 8);
}
NJ_AVX2 __m256d coords4(const AffineRow<double>& r, int d, int64_t l, __m128i) {
  const __m256d i = _mm256_cvtepi32_pd(
      _mm_add_epi32(_mm_set1_epi32(static_cast<int>(r.i2 + l)), _mm_setr_epi32(0, 1, 2, 3)));
  return _mm256_add_pd(_mm256_set1_pd(r.r[d]), nofuse(_mm256_mul_pd(_mm256_set1_pd(r.a[d]), i)));
}

// All 3 coordinates of the points l, l+1, ... of a 3-D row. A packed grid (a contiguous
// [.., 3] row) is read with three plain loads and deinterleaved (blends, then one permutation
// per coordinate): gathers are slow on some CPUs (Zen: the coordinate gathers took a fifth of
// the order-3 pull).
NJ_AVX2 void coords8x3(const GridRow<float>& r, int64_t l, __m256i lane, __m256* x) {
  if (r.g2 == 3 && r.gD == 1) {
    const float* g = r.gp + 3 * l;
    const __m256 a = _mm256_loadu_ps(g), b = _mm256_loadu_ps(g + 8), c = _mm256_loadu_ps(g + 16);
    // coordinate k of point p sits at 3 p + k: in a, b, c at lanes that never collide
    x[0] = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(a, b, 0x92), c, 0x24),
                                    _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5));
    x[1] = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(a, b, 0x24), c, 0x49),
                                    _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6));
    x[2] = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(a, b, 0x49), c, 0x92),
                                    _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7));
  } else {
    for (int k = 0; k < 3; ++k) x[k] = coords8(r, k, l, lane);
  }
}
NJ_AVX2 void coords8x3(const AffineRow<float>& r, int64_t l, __m256i lane, __m256* x) {
  for (int k = 0; k < 3; ++k) x[k] = coords8(r, k, l, lane);
}
NJ_AVX2 void coords4x3(const GridRow<double>& r, int64_t l, __m128i lane, __m256d* x) {
  if (r.g2 == 3 && r.gD == 1) {
    const double* g = r.gp + 3 * l;
    const __m256d a = _mm256_loadu_pd(g), b = _mm256_loadu_pd(g + 4), c = _mm256_loadu_pd(g + 8);
    x[0] = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(a, b, 0x4), c, 0x2), 0x6C);
    x[1] = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(a, b, 0x9), c, 0x4), 0xB1);
    x[2] = _mm256_permute4x64_pd(_mm256_blend_pd(_mm256_blend_pd(a, b, 0x2), c, 0x9), 0xC6);
  } else {
    for (int k = 0; k < 3; ++k) x[k] = coords4(r, k, l, lane);
  }
}
NJ_AVX2 void coords4x3(const AffineRow<double>& r, int64_t l, __m128i lane, __m256d* x) {
  for (int k = 0; k < 3; ++k) x[k] = coords4(r, k, l, lane);
}

// LastCell (order-1 pulls): a coordinate exactly on the last voxel, x == n - 1, is taken as the
// end of cell n - 2 (weights 0 and 1) rather than the start of cell n - 1, whose second tap lies
// outside: the same value, but the vector path takes it (an identity grid's last plane, row and
// column; the flat parts of linear dct2, which MirrorFold clamps to n - 1). Not for gradients:
// the derivative there is one-sided, and this would change its side. last_cell gives the cell,
// min(floor(x), n - 2), and the lanes with x <= n - 1 (NaN: none; its cell n - 2 is unused).
NJ_AVX2 __m256 last_cell(__m256 x, __m256 last, __m256 cell, __m256& in) {
  in = _mm256_cmp_ps(x, last, _CMP_LE_OQ);
  return _mm256_min_ps(_mm256_floor_ps(x), cell);
}
NJ_AVX2 __m256d last_cell(__m256d x, __m256d last, __m256d cell, __m256d& in) {
  in = _mm256_cmp_pd(x, last, _CMP_LE_OQ);
  return _mm256_min_pd(_mm256_floor_pd(x), cell);
}

// The mirror fold (bounds.h, mirror_fold) of extrapolated coordinates, lane by lane (T: float or
// double): a pull's lane outside [c0, c0 + h] on a dct1 / dct2 dim moves to the point of that
// range with the same value, so that the vector path takes most of the points outside the
// source instead of the much slower scalar path. The fold is exact: x - c0 is checked to be
// exact, q p is an integer below 2^23, t - q p is exact (Sterbenz) even when the rounded
// quotient q is one off (the abs and min then still give the fold), and r + c0 is exact. Lanes
// with x - c0 inexact, |x - c0| >= 2^22 or NaN keep their coordinate. Linear dct2 is then
// clamped off its flat parts (bounds.h, mirror_flat), which the vector path could not take. Not
// for gradients with respect to the grid: they would need the fold's sign.
template <typename T>
struct MirrorFold {
  using V = std::conditional_t<std::is_same_v<T, float>, __m256, __m256d>;
  bool on[3] = {false, false, false};
  T c0[3], p[3], inv_p[3], lo[3], hi[3];  // [lo, hi]: [c0, c0 + h] less the flat parts

  MirrorFold(const Geom& G, bool enable) {
    if (!enable || !G.extrapolate) return;  // not extrapolating: points outside read zero
    for (int k = 3 - G.D; k < 3; ++k) {
      double c;
      int64_t h;
      if (!mirror_fold(G.bound[k], G.src[k], c, h) || h > (int64_t(1) << 20)) continue;
      on[k] = true;
      c0[k] = static_cast<T>(c);
      p[k] = static_cast<T>(2 * h);
      inv_p[k] = T(1) / p[k];
      const double flat = mirror_flat(G.bound[k], G.order[k]);
      lo[k] = static_cast<T>(c + flat);
      hi[k] = static_cast<T>(c + static_cast<double>(h) - flat);
    }
  }

  __attribute__((target("avx2,fma"), always_inline)) inline V operator()(int k, V x) const {
    if (!on[k]) return x;
    const V outside = bor(cmp<_CMP_LT_OQ>(x, splat(lo[k])), cmp<_CMP_GT_OQ>(x, splat(hi[k])));
    if (!any(outside)) return x;  // most blocks (folding all cost an order-3 pull ~15%)
    const V d = x - c0[k], t = abs(d);
    const V m = t - floor(t * inv_p[k]) * p[k];
    const V y = min(max(min(abs(m), abs(p[k] - m)) + c0[k], splat(lo[k])), splat(hi[k]));
    const V exact = band(cmp<_CMP_LT_OQ>(t, splat(T(1 << 22))), cmp<_CMP_EQ_OQ>(d + c0[k], x));
    return blend(x, y, band(outside, exact));
  }

 private:
  NJ_AVX2 static __m256 splat(float a) { return _mm256_set1_ps(a); }
  NJ_AVX2 static __m256d splat(double a) { return _mm256_set1_pd(a); }
  template <int P>
  NJ_AVX2 static __m256 cmp(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, P); }
  template <int P>
  NJ_AVX2 static __m256d cmp(__m256d a, __m256d b) { return _mm256_cmp_pd(a, b, P); }
  NJ_AVX2 static bool any(__m256 m) { return _mm256_movemask_ps(m) != 0; }
  NJ_AVX2 static bool any(__m256d m) { return _mm256_movemask_pd(m) != 0; }
  NJ_AVX2 static __m256 abs(__m256 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  NJ_AVX2 static __m256d abs(__m256d a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.), a); }
  NJ_AVX2 static __m256 floor(__m256 a) { return _mm256_floor_ps(a); }
  NJ_AVX2 static __m256d floor(__m256d a) { return _mm256_floor_pd(a); }
  NJ_AVX2 static __m256 min(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
  NJ_AVX2 static __m256d min(__m256d a, __m256d b) { return _mm256_min_pd(a, b); }
  NJ_AVX2 static __m256 max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  NJ_AVX2 static __m256d max(__m256d a, __m256d b) { return _mm256_max_pd(a, b); }
  NJ_AVX2 static __m256 band(__m256 a, __m256 b) { return _mm256_and_ps(a, b); }
  NJ_AVX2 static __m256d band(__m256d a, __m256d b) { return _mm256_and_pd(a, b); }
  NJ_AVX2 static __m256 bor(__m256 a, __m256 b) { return _mm256_or_ps(a, b); }
  NJ_AVX2 static __m256d bor(__m256d a, __m256d b) { return _mm256_or_pd(a, b); }
  NJ_AVX2 static __m256 blend(__m256 a, __m256 b, __m256 m) { return _mm256_blendv_ps(a, b, m); }
  NJ_AVX2 static __m256d blend(__m256d a, __m256d b, __m256d m) {
    return _mm256_blendv_pd(a, b, m);
  }
};

// The points a vector block cannot take go through the scalar fast path one by one (it applies
// the bound and extrapolate rules). Out of line: keeps the vector loops' registers free.
template <int O, int DIM, int DER, class Op, typename T = float>
struct ScalarPoints {
  const Geom& G;
  FastPoint<T, O, DIM, DER, Op, true> scalar;
  const CoordRule<T> rule;

  ScalarPoints(const Geom& G_, const Op& op) : G(G_), scalar(G_, op), rule(G_, DIM) {}

  // point j of the row starting at pt
  template <class Row>
  __attribute__((noinline)) void point(Point pt, const Row& r, int64_t j) {
    pt.p += j;
    pt.i[2] += j;
    T x[3] = {T(0), T(0), T(0)};
    const bool ok = rule.load(r, j, x);
    scalar(pt, x, ok);
  }
  // the points of block l..l+LANES-1 whose in_mask bit is clear
  template <int LANES = 8, class Row>
  __attribute__((target("avx2,fma"))) void block(const Point& pt, const Row& r, int64_t l,
                                                   int in_mask) {
    if (in_mask == (1 << LANES) - 1) return;
    // The scalar path may call SSE (non-VEX) code: clear the upper halves first.
    _mm256_zeroupper();
    for (int j = 0; j < LANES; ++j)
      if (!((in_mask >> j) & 1)) point(pt, r, l + j);
  }
  // the points l..count-1 (a row's tail)
  template <class Row>
  __attribute__((target("avx2,fma"))) void tail(const Point& pt, const Row& r, int64_t l,
                                                  int64_t count) {
    _mm256_zeroupper();
    for (; l < count; ++l) point(pt, r, l);
  }
};

// 0, 1, ..., 7 times the grid's row stride: the gather offsets of 8 consecutive points
NJ_AVX2 __m256i row_lanes(const Geom& G) {
  return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                            _mm256_set1_epi32(static_cast<int>(G.g[2])));
}

// Splits natural-order base indices into the S-order halves the pair gathers take.
NJ_AVX2 void pair_bases(__m256i base, __m128i& blo, __m128i& bhi) {
  base = _mm256_castps_si256(nat_ps(_mm256_castsi256_ps(base)));  // nat is its own inverse
  blo = _mm256_castsi256_si128(base);
  bhi = _mm256_extracti128_si256(base, 1);
}

// One 8-point block of a grid row, what every 2-D fast path needs: base indices (S order, 0 for
// lanes outside), which lanes are interior (natural order) and the fractional positions.
struct Block2d {
  __m256i base;      // base index i1 * s1 + i2 (natural order)
  __m128i blo, bhi;  // the same, lanes S 0..3 and S 4..7
  int in_mask;       // bit j: point j of the block has its whole support inside the source
  __m256 u1, u2;     // fractional positions along internal dims 1 and 2 (natural order)
};

// Reads the coordinates of 8 consecutive points of a row (internal dims 1, 2) for order O;
// fold: a pull's, mirror-folds extrapolated coordinates (MirrorFold).
template <int O>
struct Coords2d {
  bool packed;  // a contiguous [.., 2] grid: plain loads
  __m256i lane, lim1, lim2, s1;
  __m256 shift;
  MirrorFold<float> fold;  // a pull's: extrapolated coordinates mirror-folded
  bool pull_last;          // a pull's, order 1: x == n - 1 is interior (LastCell)
  __m256 last1, last2, cell1, cell2;  // n - 1, n - 2 along dims 1, 2

  __attribute__((target("avx2,fma"))) explicit Coords2d(const Geom& G, bool pull = false)
      : packed(G.gD == 1 && G.g[2] == 2), fold(G, pull), pull_last(pull && O == 1) {
    lane = row_lanes(G);
    shift = _mm256_set1_ps(static_cast<float>((O - 1) / 2));  // first tap offset
    // interior: 0 <= i0 and i0 + O <= n - 1
    lim1 = _mm256_set1_epi32(static_cast<int>(G.src[1] - O));
    lim2 = _mm256_set1_epi32(static_cast<int>(G.src[2] - O));
    s1 = _mm256_set1_epi32(static_cast<int>(G.sst[1]));
    last1 = _mm256_set1_ps(static_cast<float>(G.src[1] - 1));
    last2 = _mm256_set1_ps(static_cast<float>(G.src[2] - 1));
    cell1 = _mm256_set1_ps(static_cast<float>(G.src[1] - 2));
    cell2 = _mm256_set1_ps(static_cast<float>(G.src[2] - 2));
  }

  template <class Row>
  __attribute__((target("avx2,fma"), always_inline)) inline void load(const Row& r, int64_t l,
                                                                      Block2d& blk) const {
    __m256 x1, x2;
    if constexpr (std::is_same_v<Row, GridRow<float>>) {
      if (packed) {  // deinterleave: lanes in S order, then natural
        const float* g = r.gp + 2 * l;
        const __m256 a = _mm256_loadu_ps(g), b = _mm256_loadu_ps(g + 8);
        x1 = nat_ps(_mm256_shuffle_ps(a, b, 0x88));
        x2 = nat_ps(_mm256_shuffle_ps(a, b, 0xDD));
      } else {
        x1 = coords8(r, 0, l, lane);
        x2 = coords8(r, 1, l, lane);
      }
    } else {
      x1 = coords8(r, 0, l, lane);
      x2 = coords8(r, 1, l, lane);
    }
    x1 = _mm256_sub_ps(fold(1, x1), shift);
    x2 = _mm256_sub_ps(fold(2, x2), shift);
    __m256 f1, f2;
    __m256i in1, in2;
    if (pull_last) {
      __m256 m1, m2;
      f1 = last_cell(x1, last1, cell1, m1);
      f2 = last_cell(x2, last2, cell2, m2);
      in1 = _mm256_castps_si256(m1);
      in2 = _mm256_castps_si256(m2);
    } else {
      f1 = _mm256_floor_ps(x1);
      f2 = _mm256_floor_ps(x2);
      in1 = _mm256_cmpgt_epi32(lim1, _mm256_cvttps_epi32(f1));
      in2 = _mm256_cmpgt_epi32(lim2, _mm256_cvttps_epi32(f2));
    }
    const __m256i i1 = _mm256_cvttps_epi32(f1), i2 = _mm256_cvttps_epi32(f2);  // NaN -> INT_MIN
    const __m256i minus1 = _mm256_set1_epi32(-1);
    const __m256i inside =
        _mm256_and_si256(_mm256_and_si256(in1, _mm256_cmpgt_epi32(i1, minus1)),
                         _mm256_and_si256(in2, _mm256_cmpgt_epi32(i2, minus1)));
    // lanes whose support leaves the source read voxel 0 (a safe address: every dim has
    // >= O + 1 voxels) and are redone by the scalar path
    blk.base = _mm256_and_si256(_mm256_add_epi32(_mm256_mullo_epi32(i1, s1), i2), inside);
    pair_bases(blk.base, blk.blo, blk.bhi);
    blk.in_mask = _mm256_movemask_ps(_mm256_castsi256_ps(inside));
    blk.u1 = _mm256_sub_ps(x1, f1);
    blk.u2 = _mm256_sub_ps(x2, f2);
  }
};

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

// grid_pull, 2-D, order 1: as Pull3dAvx2 (below) in 2-D: per block the 4 weights of each point,
// kept for a chunk of blocks; per channel and point its 4 taps as two 64-bit loads, two points
// per vector, and the block's products summed together. No gathers.
template <class Op>
struct Pull2dLinearAvx2 {
  static constexpr int kChunk = 32;  // blocks whose weights are kept (4 KiB)
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 2, 0, Op> rest;

  Pull2dLinearAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<1> coords(G, true);
    const int64_t s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    const __m256 one = _mm256_set1_ps(1.f);
    alignas(32) float wts[kChunk][32];  // block k: point j's 4 weights at 4 j
    alignas(32) int32_t idx[kChunk][8];
    int mask[kChunk];
    int64_t l = 0;
    while (l + 8 <= count) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, (count - l) / 8));
      for (int k = 0; k < nb; ++k) {
        Block2d blk;
        coords.load(r, l + 8 * k, blk);
        const __m256 w10 = _mm256_sub_ps(one, blk.u1), w20 = _mm256_sub_ps(one, blk.u2);
        const __m256 w[4] = {_mm256_mul_ps(w10, w20), _mm256_mul_ps(w10, blk.u2),
                             _mm256_mul_ps(blk.u1, w20), _mm256_mul_ps(blk.u1, blk.u2)};
        transpose4x8(w, wts[k]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(idx[k]), blk.base);
        mask[k] = blk.in_mask;
      }
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        float* o = ob + c * op.P + l;
        for (int k = 0; k < nb; ++k) {
          __m256 prod[4];
          for (int m = 0; m < 4; ++m)
            prod[m] = _mm256_mul_ps(_mm256_set_m128(bilinear_taps(img + idx[k][2 * m + 1], s1),
                                                    bilinear_taps(img + idx[k][2 * m], s1)),
                                    _mm256_load_ps(wts[k] + 8 * m));
          _mm256_storeu_ps(o + 8 * k, hsum4x8(prod));
        }
      }
      for (int k = 0; k < nb; ++k) rest.block(pt, r, l + 8 * k, mask[k]);
      l += 8 * nb;
    }
    rest.tail(pt, r, l, count);
  }
};

// grid_pull, 2-D, order 3: per block the cubic weights in vector lanes; per channel the 4 taps
// of each of the 4 source rows as two pair gathers, contracted without FMAs, in the scalar
// path's order: this path rounds exactly as the scalar one (a test holds it to that), but for
// mirror-folded points (their weights are those of 1 - u, in reverse order).
template <class Op>
struct Pull2dCubicAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<3, 2, 0, Op> rest;

  Pull2dCubicAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<3> coords(G, true);
    const int64_t s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      Block2d blk;
      coords.load(r, l, blk);
      __m256 w1[4], w2[4];
      cubic_weights<float>(blk.u1, w1);
      cubic_weights<float>(blk.u2, w2);
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        __m256 acc = _mm256_setzero_ps();
        for (int y = 0; y < 4; ++y) {
          const float* src_row = img + y * s1;
          __m256 t[4];
          tap_pairs(src_row, blk.blo, blk.bhi, t[0], t[1]);
          tap_pairs(src_row + 2, blk.blo, blk.bhi, t[2], t[3]);
          __m256 v = mul_nf(w2[0], t[0]);
          for (int k = 1; k < 4; ++k) v = _mm256_add_ps(v, mul_nf(w2[k], t[k]));
          acc = y == 0 ? mul_nf(w1[0], v) : _mm256_add_ps(acc, mul_nf(w1[y], v));
        }
        _mm256_storeu_ps(ob + c * op.P + l, acc);
      }
      rest.block(pt, r, l, blk.in_mask);
    }
    rest.tail(pt, r, l, count);
  }
};

// grid_pull_backward, order 1: per block, the weights once; per channel, the 4 taps of each
// point (two 64-bit loads, then a transpose to one vector per tap), the grid gradient
// contracted with the incoming gradient in vector registers, and the 4 scatter adds of each
// interior point in scalar code (points of one block may share voxels), in the order of the
// scalar path (point by point, so the same sums up to rounding). Op is PullBackOp
// (push_cpu.cpp) adding plainly into op.out.
template <class Op>
struct PullBack2dAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 2, 1, Op> rest;

  PullBack2dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<1> coords(G);
    const int64_t s1 = G.sst[1];
    const int64_t vstep = op.gs.s[2];  // incoming gradient: stride along the row
    const __m256i vlane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(vstep)));
    const float* vrow = op.gr + op.gs.at(pt);
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.N;
    float* gg = op.gg + (pt.b * op.P + pt.p) * 2;
    const __m256 one = _mm256_set1_ps(1.f);
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      Block2d blk;
      coords.load(r, l, blk);
      const __m256 w10 = _mm256_sub_ps(one, blk.u1), w11 = blk.u1;
      const __m256 w20 = _mm256_sub_ps(one, blk.u2), w21 = blk.u2;
      alignas(32) int32_t idx[8];  // base indices, natural order
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
      for (int64_t c = 0; c < op.C; ++c) {
        const float* vp = vrow + c * op.gs.sC + l * vstep;
        const __m256 v = vstep == 1 ? _mm256_loadu_ps(vp) : _mm256_i32gather_ps(vp, vlane, 4);
        const float* img = ib + c * op.sC;
        __m256 t00, t01, t10, t11;
        bilinear_taps8(img, idx, s1, t00, t01, t10, t11);
        // d/du1 and d/du2 of the bilinear form
        const __m256 r0 = _mm256_fmadd_ps(w21, t01, _mm256_mul_ps(w20, t00));
        const __m256 r1 = _mm256_fmadd_ps(w21, t11, _mm256_mul_ps(w20, t10));
        const __m256 d1 = _mm256_sub_ps(r1, r0);
        const __m256 d2 = _mm256_fmadd_ps(w11, _mm256_sub_ps(t11, t10),
                                          _mm256_mul_ps(w10, _mm256_sub_ps(t01, t00)));
        // a zero incoming gradient adds nothing (as in the scalar path: not even 0 * inf)
        const __m256 nz = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ);
        acc1 = _mm256_add_ps(acc1, _mm256_and_ps(nz, _mm256_mul_ps(v, d1)));
        acc2 = _mm256_add_ps(acc2, _mm256_and_ps(nz, _mm256_mul_ps(v, d2)));
        const __m256 a0 = _mm256_mul_ps(w10, v), a1 = _mm256_mul_ps(w11, v);
        alignas(32) float p00[8], p01[8], p10[8], p11[8];
        _mm256_store_ps(p00, _mm256_mul_ps(a0, w20));
        _mm256_store_ps(p01, _mm256_mul_ps(a0, w21));
        _mm256_store_ps(p10, _mm256_mul_ps(a1, w20));
        _mm256_store_ps(p11, _mm256_mul_ps(a1, w21));
        float* out = ob + c * op.N;
        for (int j = 0; j < 8; ++j) {
          if (!((blk.in_mask >> j) & 1)) continue;
          float* o = out + idx[j];
          o[0] += p00[j];
          o[1] += p01[j];
          o[s1] += p10[j];
          o[s1 + 1] += p11[j];
        }
      }
      // grid gradient [.., 2] interleaved: (acc1[j], acc2[j]) for j = 0..7
      const __m256 lo = _mm256_unpacklo_ps(acc1, acc2), hi = _mm256_unpackhi_ps(acc1, acc2);
      _mm256_storeu_ps(gg + 2 * l, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(gg + 2 * l + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      rest.block(pt, r, l, blk.in_mask);
    }
    rest.tail(pt, r, l, count);
  }
};
// 3-D, order 1: from the coordinates of 8 consecutive points, the base index
// i0 * s0 + i1 * s1 + i2 (0 outside), interior lanes and fractions (natural order).
struct Block3d {
  __m256i base;
  int in_mask;
  __m256 u[3];
  __m256 keep;  // lanes inside the field of view (all, with extrapolate): others read zero
  int done;     // lanes a pull's vector path completes: in_mask and the lanes outside
};

struct Coords3d {
  __m256i lane, lim[3], st[3];
  bool clip;  // extrapolate off: points outside [-tol, n - 1 + tol] read zero (CoordRule)
  __m256 lo, hi[3];
  MirrorFold<float> fold;  // a pull's: extrapolated coordinates mirror-folded
  bool pull;               // a pull's: the last voxel's coordinate n - 1 is interior (LastCell)
  __m256 last[3], cell[3];  // n - 1, n - 2

  __attribute__((target("avx2,fma"))) explicit Coords3d(const Geom& G, bool pull_ = false)
      : clip(!G.extrapolate), fold(G, pull_), pull(pull_) {
    lane = row_lanes(G);
    const CoordRule<float> rule(G, 3);
    lo = _mm256_set1_ps(rule.lo);
    for (int k = 0; k < 3; ++k) {
      lim[k] = _mm256_set1_epi32(static_cast<int>(G.src[k] - 1));
      st[k] = _mm256_set1_epi32(static_cast<int>(G.sst[k]));
      hi[k] = _mm256_set1_ps(rule.hi[k]);
      last[k] = _mm256_set1_ps(static_cast<float>(G.src[k] - 1));
      cell[k] = _mm256_set1_ps(static_cast<float>(G.src[k] - 2));
    }
  }

  template <class Row>
  __attribute__((target("avx2,fma"), always_inline)) inline void load(const Row& r, int64_t l,
                                                                      Block3d& blk) const {
    const __m256i minus1 = _mm256_set1_epi32(-1);
    __m256i inside = minus1, base = _mm256_setzero_si256();
    __m256 xs[3];
    coords8x3(r, l, lane, xs);
    for (int k = 0; k < 3; ++k) {
      const __m256 x = fold(k, xs[k]);
      __m256 f;
      __m256i in_k;
      if (pull) {
        __m256 m;
        f = last_cell(x, last[k], cell[k], m);
        in_k = _mm256_castps_si256(m);
      } else {
        f = _mm256_floor_ps(x);
        in_k = _mm256_cmpgt_epi32(lim[k], _mm256_cvttps_epi32(f));
      }
      const __m256i i = _mm256_cvttps_epi32(f);  // NaN, huge -> INT_MIN: not inside
      inside = _mm256_and_si256(inside, _mm256_and_si256(in_k, _mm256_cmpgt_epi32(i, minus1)));
      base = _mm256_add_epi32(base, _mm256_mullo_epi32(i, st[k]));
      blk.u[k] = _mm256_sub_ps(x, f);
    }
    blk.base = _mm256_and_si256(base, inside);
    blk.in_mask = _mm256_movemask_ps(_mm256_castsi256_ps(inside));
    blk.keep = _mm256_castsi256_ps(minus1);
    if (clip)  // ordered compares: NaN is outside, as in CoordRule
      for (int k = 0; k < 3; ++k)
        blk.keep = _mm256_and_ps(blk.keep, _mm256_and_ps(_mm256_cmp_ps(xs[k], lo, _CMP_GE_OQ),
                                                         _mm256_cmp_ps(xs[k], hi[k], _CMP_LE_OQ)));
    blk.done = blk.in_mask | (~_mm256_movemask_ps(blk.keep) & 0xFF);
  }
};

// grid_pull_backward, 3-D, order 1: as PullBack2dAvx2 with 8 taps (four 64-bit loads per point
// and channel, then a transpose) and 8 scalar scatter adds per interior point.
template <class Op>
struct PullBack3dAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 3, 1, Op> rest;

  PullBack3dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const Coords3d coords(G);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const int64_t vstep = op.gs.s[2];
    const __m256i vlane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(vstep)));
    const float* vrow = op.gr + op.gs.at(pt);
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.N;
    float* gg = op.gg + (pt.b * op.P + pt.p) * 3;
    const __m256 one = _mm256_set1_ps(1.f);
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      Block3d blk;
      coords.load(r, l, blk);
      __m256 w[3][2];
      for (int k = 0; k < 3; ++k) {
        w[k][0] = _mm256_sub_ps(one, blk.u[k]);
        w[k][1] = blk.u[k];
      }
      __m256 w01[2][2];  // w0[a] * w1[b]
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) w01[a][b] = _mm256_mul_ps(w[0][a], w[1][b]);
      alignas(32) int32_t idx[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t c = 0; c < op.C; ++c) {
        const float* vp = vrow + c * op.gs.sC + l * vstep;
        const __m256 v = vstep == 1 ? _mm256_loadu_ps(vp) : _mm256_i32gather_ps(vp, vlane, 4);
        const float* img = ib + c * op.sC;
        __m256 t[8];  // tap 4 a + 2 b + c, one lane per point
        for (int j = 0; j < 8; ++j) t[j] = trilinear_taps(img + idx[j], s0, s1);
        transpose8(t, t);
        __m256 r[2][2], e[2][2];  // along dim 2: value w2 . t and difference t1 - t0
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const __m256 t0 = t[4 * a + 2 * b], t1 = t[4 * a + 2 * b + 1];
            r[a][b] = _mm256_fmadd_ps(w[2][1], t1, _mm256_mul_ps(w[2][0], t0));
            e[a][b] = _mm256_sub_ps(t1, t0);
          }
        __m256 q[2], dq1[2], dq2[2];
        for (int a = 0; a < 2; ++a) {
          q[a] = _mm256_fmadd_ps(w[1][1], r[a][1], _mm256_mul_ps(w[1][0], r[a][0]));
          dq1[a] = _mm256_sub_ps(r[a][1], r[a][0]);
          dq2[a] = _mm256_fmadd_ps(w[1][1], e[a][1], _mm256_mul_ps(w[1][0], e[a][0]));
        }
        const __m256 d0 = _mm256_sub_ps(q[1], q[0]);
        const __m256 d1 = _mm256_fmadd_ps(w[0][1], dq1[1], _mm256_mul_ps(w[0][0], dq1[0]));
        const __m256 d2 = _mm256_fmadd_ps(w[0][1], dq2[1], _mm256_mul_ps(w[0][0], dq2[0]));
        const __m256 nz = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ);
        acc[0] = _mm256_add_ps(acc[0], _mm256_and_ps(nz, _mm256_mul_ps(v, d0)));
        acc[1] = _mm256_add_ps(acc[1], _mm256_and_ps(nz, _mm256_mul_ps(v, d1)));
        acc[2] = _mm256_add_ps(acc[2], _mm256_and_ps(nz, _mm256_mul_ps(v, d2)));
        alignas(32) float pw[8][8];  // tap (a, b, c) -> row 4a + 2b + c, one column per point
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const __m256 ab = _mm256_mul_ps(w01[a][b], v);
            _mm256_store_ps(pw[4 * a + 2 * b], _mm256_mul_ps(ab, w[2][0]));
            _mm256_store_ps(pw[4 * a + 2 * b + 1], _mm256_mul_ps(ab, w[2][1]));
          }
        float* out = ob + c * op.N;
        for (int j = 0; j < 8; ++j) {
          if (!((blk.in_mask >> j) & 1)) continue;
          float* o = out + idx[j];
          o[0] += pw[0][j];
          o[1] += pw[1][j];
          o[s1] += pw[2][j];
          o[s1 + 1] += pw[3][j];
          o[s0] += pw[4][j];
          o[s0 + 1] += pw[5][j];
          o[s0 + s1] += pw[6][j];
          o[s0 + s1 + 1] += pw[7][j];
        }
      }
      alignas(32) float ga[3][8];
      for (int k = 0; k < 3; ++k) _mm256_store_ps(ga[k], acc[k]);
      float* go = gg + 3 * l;
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 3; ++k) go[3 * j + k] = ga[k][j];
      rest.block(pt, r, l, blk.in_mask);
    }
    rest.tail(pt, r, l, count);
  }
};
// grid_pull, 3-D, order 1: per 8-point block the 8 trilinear weights of each point, computed
// with one lane per point and transposed to one vector per point; per point and channel its 8
// taps as four 64-bit loads times its weights, and the block's 8 products summed together (a
// horizontal-add tree). Plain loads, no gathers (on Zen the pair gathers this replaced were 1.5x
// slower). Channels are the outer loop over a chunk of blocks whose weights are kept: one channel
// at a time reads 4 source rows as streams (all channels at once: 4 C streams, more than the
// hardware prefetchers follow; 8 channels then cost 10x one).
constexpr int64_t kPrefetchPlaneBytes = int64_t(128) << 10;

template <class Op>
struct Pull3dAvx2 {
  static constexpr int kChunk = 16;  // blocks whose weights are kept (16 KiB)
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 3, 0, Op> rest;

  Pull3dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const Coords3d coords(G, true);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    const __m256 one = _mm256_set1_ps(1.f);
    // large source planes: the rows of a chunk's points are prefetched while its weights are
    // computed (a 256 x 256 x 176 affine pull: 15 -> 13.5 ms); small ones stay in L1/L2, where
    // the prefetches only cost (a 128^3 pull: 2.8 -> 3.2 ms)
    const bool prefetch = G.src[1] * G.src[2] * int64_t(sizeof(float)) >= kPrefetchPlaneBytes;
    alignas(32) __m256 wts[kChunk][8];  // block k, point j: its 8 tap weights
    alignas(32) int32_t idx[kChunk][8];
    __m256 keep[kChunk];
    int mask[kChunk], any_in[kChunk];
    int64_t l = 0;
    while (l + 8 <= count) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, (count - l) / 8));
      for (int k = 0; k < nb; ++k) {
        Block3d blk;
        coords.load(r, l + 8 * k, blk);
        any_in[k] = blk.in_mask;
        __m256 w[3][2];
        for (int d = 0; d < 3; ++d) {
          w[d][0] = _mm256_sub_ps(one, blk.u[d]);
          w[d][1] = blk.u[d];
        }
        __m256 wt[8];  // tap 4 a + 2 b + c, one lane per point
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const __m256 ab = _mm256_mul_ps(w[0][a], w[1][b]);
            wt[4 * a + 2 * b] = _mm256_mul_ps(ab, w[2][0]);
            wt[4 * a + 2 * b + 1] = _mm256_mul_ps(ab, w[2][1]);
          }
        transpose8(wt, wts[k]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(idx[k]), blk.base);
        keep[k] = blk.keep;
        mask[k] = blk.done;
        if (prefetch)
          for (int j = 0; j < 8; ++j) {
            const float* q = ib + idx[k][j];
            for (const float* row : {q, q + s1, q + s0, q + s0 + s1})
              _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
          }
      }
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        float* o = ob + c * op.P + l;
        for (int k = 0; k < nb; ++k) {
          if (any_in[k] == 0) {  // no interior lane: zeros (outside) or redone by the scalar path
            _mm256_storeu_ps(o + 8 * k, _mm256_setzero_ps());
            continue;
          }
          __m256 prod[8];
          for (int j = 0; j < 8; ++j)
            prod[j] = _mm256_mul_ps(trilinear_taps(img + idx[k][j], s0, s1), wts[k][j]);
          _mm256_storeu_ps(o + 8 * k, _mm256_and_ps(hsum8(prod), keep[k]));
        }
      }
      for (int k = 0; k < nb; ++k) rest.block(pt, r, l + 8 * k, mask[k]);
      l += 8 * nb;
    }
    rest.tail(pt, r, l, count);
  }
};

// grid_pull, 3-D, order 3, one vector of lanes per block of points (8 floats or 4 doubles):
// coordinates, interior test, base indices and weights of a block in vector registers, then
// stored; per point and channel the 16 source rows of 4 taps are read as plain vector loads (4
// contiguous taps: no gather), contracted with the dim-1 and dim-0 weights, and the 4 sums left
// with the dim-2 weights. The block's points are reduced together (a horizontal-add tree) and
// stored as one vector. FMAs throughout: this path rounds unlike the scalar one (affine_pull
// takes it too, so the two still agree bit for bit).
template <typename T>
struct CubicLanes;

template <>
struct CubicLanes<float> {
  static constexpr int N = 8;
  using V = __m256;
  using VI = __m256i;
  NJ_AVX2 static VI lanes(const Geom& G) { return row_lanes(G); }
  template <class Row>
  NJ_AVX2 static void coords(const Row& r, int64_t l, VI lane, V* x) {
    coords8x3(r, l, lane, x);
  }
  NJ_AVX2 static V floor(V x) { return _mm256_floor_ps(x); }
  NJ_AVX2 static __m256i to_int(V f) { return _mm256_cvttps_epi32(f); }  // NaN -> INT_MIN
  NJ_AVX2 static __m256i ivec(int64_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  NJ_AVX2 static __m256i iand(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
  NJ_AVX2 static __m256i iadd(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
  NJ_AVX2 static __m256i imul(__m256i a, __m256i b) { return _mm256_mullo_epi32(a, b); }
  NJ_AVX2 static __m256i igt(__m256i a, __m256i b) { return _mm256_cmpgt_epi32(a, b); }
  NJ_AVX2 static int mask(__m256i m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m)); }
  NJ_AVX2 static void store_int(int32_t* p, __m256i v) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
  }
  NJ_AVX2 static void store(float* p, V v) { _mm256_store_ps(p, v); }
  NJ_AVX2 static void store_zero(float* p) { _mm256_storeu_ps(p, _mm256_setzero_ps()); }
  NJ_AVX2 static V ones() { return _mm256_castsi256_ps(_mm256_set1_epi32(-1)); }
  NJ_AVX2 static V within(V x, float lo, float hi) {  // ordered: NaN is outside
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lo), _CMP_GE_OQ),
                         _mm256_cmp_ps(x, _mm256_set1_ps(hi), _CMP_LE_OQ));
  }
  NJ_AVX2 static V vand(V a, V b) { return _mm256_and_ps(a, b); }
  NJ_AVX2 static int vmask(V m) { return _mm256_movemask_ps(m); }
  // wx[j * 4 + t] = w[t] of point j
  NJ_AVX2 static void transpose(const V* w, float* wx) { transpose4x8(w, wx); }
  // 4 taps of two rows (_mm256_loadu2_m128, spelled out: older GCCs lack it)
  NJ_AVX2 static V rows2(const float* lo, const float* hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
  }
  // the 4 partial sums of one point (weights wy, wz: tap t at [t * N + j])
  NJ_AVX2 static __m128 point(const float* p, int64_t s0, int64_t s1, const float* wy,
                              const float* wz, int j) {
    const V wy01 = _mm256_set_m128(_mm_broadcast_ss(wy + N + j), _mm_broadcast_ss(wy + j));
    const V wy23 =
        _mm256_set_m128(_mm_broadcast_ss(wy + 3 * N + j), _mm_broadcast_ss(wy + 2 * N + j));
    V acc[2];  // planes z even and odd: two short dependency chains instead of one long one
    for (int z = 0; z < 4; ++z) {
      const float* q = p + z * s0;
      const V r01 = rows2(q, q + s1);  // rows y, y+1 in the low, high halves
      const V r23 = rows2(q + 2 * s1, q + 3 * s1);
      const V t = _mm256_fmadd_ps(r23, wy23, _mm256_mul_ps(r01, wy01));
      const V wzz = _mm256_broadcast_ss(wz + z * N + j);
      acc[z & 1] = z < 2 ? _mm256_mul_ps(t, wzz) : _mm256_fmadd_ps(t, wzz, acc[z & 1]);
    }
    const V sum = _mm256_add_ps(acc[0], acc[1]);
    return _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  }
  // the sums of 8 points' partial sums, with the dim-2 weights
  NJ_AVX2 static void finish(const float* p[N], int64_t s0, int64_t s1, const float* wy,
                             const float* wz, const float* wx, V keep, float* out) {
    __m128 part[N];
#pragma GCC unroll 8  // part[] in registers (a spilled part made a 2 x 128-bit store to 256-bit
                      // load pair, which store forwarding cannot serve)
    for (int j = 0; j < N; ++j)
      part[j] = _mm_mul_ps(point(p[j], s0, s1, wy, wz, j), _mm_loadu_ps(wx + 4 * j));
    const V h0 =
        _mm256_hadd_ps(_mm256_set_m128(part[4], part[0]), _mm256_set_m128(part[5], part[1]));
    const V h1 =
        _mm256_hadd_ps(_mm256_set_m128(part[6], part[2]), _mm256_set_m128(part[7], part[3]));
    _mm256_storeu_ps(out, _mm256_and_ps(_mm256_hadd_ps(h0, h1), keep));
  }
};

template <>
struct CubicLanes<double> {
  static constexpr int N = 4;
  using V = __m256d;
  using VI = __m128i;
  NJ_AVX2 static VI lanes(const Geom& G) {
    return _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(static_cast<int>(G.g[2])));
  }
  template <class Row>
  NJ_AVX2 static void coords(const Row& r, int64_t l, VI lane, V* x) {
    coords4x3(r, l, lane, x);
  }
  NJ_AVX2 static V floor(V x) { return _mm256_floor_pd(x); }
  NJ_AVX2 static __m128i to_int(V f) { return _mm256_cvttpd_epi32(f); }  // NaN -> INT_MIN
  NJ_AVX2 static __m128i ivec(int64_t v) { return _mm_set1_epi32(static_cast<int>(v)); }
  NJ_AVX2 static __m128i iand(__m128i a, __m128i b) { return _mm_and_si128(a, b); }
  NJ_AVX2 static __m128i iadd(__m128i a, __m128i b) { return _mm_add_epi32(a, b); }
  NJ_AVX2 static __m128i imul(__m128i a, __m128i b) { return _mm_mullo_epi32(a, b); }
  NJ_AVX2 static __m128i igt(__m128i a, __m128i b) { return _mm_cmpgt_epi32(a, b); }
  NJ_AVX2 static int mask(__m128i m) { return _mm_movemask_ps(_mm_castsi128_ps(m)); }
  NJ_AVX2 static void store_int(int32_t* p, __m128i v) {
    _mm_store_si128(reinterpret_cast<__m128i*>(p), v);
  }
  NJ_AVX2 static void store(double* p, V v) { _mm256_store_pd(p, v); }
  NJ_AVX2 static void store_zero(double* p) { _mm256_storeu_pd(p, _mm256_setzero_pd()); }
  NJ_AVX2 static V ones() { return _mm256_castsi256_pd(_mm256_set1_epi32(-1)); }
  NJ_AVX2 static V within(V x, double lo, double hi) {
    return _mm256_and_pd(_mm256_cmp_pd(x, _mm256_set1_pd(lo), _CMP_GE_OQ),
                         _mm256_cmp_pd(x, _mm256_set1_pd(hi), _CMP_LE_OQ));
  }
  NJ_AVX2 static V vand(V a, V b) { return _mm256_and_pd(a, b); }
  NJ_AVX2 static int vmask(V m) { return _mm256_movemask_pd(m); }
  NJ_AVX2 static __m128i narrow(V m) {  // a lane mask as 4 int32 lanes
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
        _mm256_castpd_si256(m), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
  }
  NJ_AVX2 static void transpose(const V* w, double* wx) {
    const V t0 = _mm256_unpacklo_pd(w[0], w[1]), t1 = _mm256_unpackhi_pd(w[0], w[1]);
    const V t2 = _mm256_unpacklo_pd(w[2], w[3]), t3 = _mm256_unpackhi_pd(w[2], w[3]);
    _mm256_storeu_pd(wx, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(wx + 4, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(wx + 8, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(wx + 12, _mm256_permute2f128_pd(t1, t3, 0x31));
  }
  NJ_AVX2 static V point(const double* p, int64_t s0, int64_t s1, const double* wy,
                         const double* wz, int j) {
    V acc[2];  // planes z even and odd (short dependency chains)
    for (int z = 0; z < 4; ++z) {
      const double* q = p + z * s0;
      const V t01 = _mm256_fmadd_pd(_mm256_loadu_pd(q + s1), _mm256_broadcast_sd(wy + N + j),
                                    _mm256_mul_pd(_mm256_loadu_pd(q), _mm256_broadcast_sd(wy + j)));
      const V t23 = _mm256_fmadd_pd(
          _mm256_loadu_pd(q + 3 * s1), _mm256_broadcast_sd(wy + 3 * N + j),
          _mm256_mul_pd(_mm256_loadu_pd(q + 2 * s1), _mm256_broadcast_sd(wy + 2 * N + j)));
      const V wzz = _mm256_broadcast_sd(wz + z * N + j);
      const V t = _mm256_add_pd(t01, t23);
      acc[z & 1] = z < 2 ? _mm256_mul_pd(t, wzz) : _mm256_fmadd_pd(t, wzz, acc[z & 1]);
    }
    return _mm256_add_pd(acc[0], acc[1]);
  }
  NJ_AVX2 static void finish(const double* p[N], int64_t s0, int64_t s1, const double* wy,
                             const double* wz, const double* wx, V keep, double* out) {
    V part[N];
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j)
      part[j] = _mm256_mul_pd(point(p[j], s0, s1, wy, wz, j), _mm256_loadu_pd(wx + 4 * j));
    store_sums(part, keep, out);
  }
  // out[j] = the sum of part[j]'s lanes (0 where keep is clear)
  NJ_AVX2 static void store_sums(const V* part, V keep, double* out) {
    const V h01 = _mm256_hadd_pd(part[0], part[1]), h23 = _mm256_hadd_pd(part[2], part[3]);
    _mm256_storeu_pd(out, _mm256_and_pd(_mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20),
                                                      _mm256_permute2f128_pd(h01, h23, 0x31)),
                                        keep));
  }
};

// grid_pull, 3-D, order 1, float64 (the default dtype of NumPy users): Pull3dAvx2's scheme on
// 4-point blocks; per point its 8 taps as four 128-bit pair loads (two vectors) times its 8
// weights, the 4 points' sums reduced together.
template <class Op>
struct Pull3dLinearAvx2d {
  using L = CubicLanes<double>;  // 4 lanes: coordinates, integer and mask helpers, the reduction
  using V = __m256d;
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 3, 0, Op, double> rest;

  Pull3dLinearAvx2d(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    const auto lane = L::lanes(G);
    const auto minus1 = L::ivec(-1);
    decltype(L::ivec(0)) st[3];
    for (int k = 0; k < 3; ++k) st[k] = L::ivec(G.sst[k]);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const CoordRule<double> rule(G, 3);
    const MirrorFold<double> fold(G, true);
    const double* ib = op.in + pt.b * op.sB;
    double* ob = op.out + pt.b * op.C * op.P + pt.p;
    const V one = _mm256_set1_pd(1.0);
    alignas(32) int32_t idx[4];
    alignas(32) double wa[16], wb[16];  // point j: weights of taps 0..3 at wa[4 j], 4..7 at wb[4 j]
    int64_t l = 0;
    for (; l + 4 <= count; l += 4) {
      V xs[3], w[3][2];
      L::coords(r, l, lane, xs);
      V keep = L::ones();
      auto inside = minus1, base = L::ivec(0);
      for (int k = 0; k < 3; ++k) {
        if (!G.extrapolate) keep = L::vand(keep, L::within(xs[k], rule.lo, rule.hi[k]));
        const V x = fold(k, xs[k]);
        V in_k;
        const V f = last_cell(x, _mm256_set1_pd(double(G.src[k] - 1)),
                              _mm256_set1_pd(double(G.src[k] - 2)), in_k);
        const auto i = L::to_int(f);
        inside = L::iand(inside, L::iand(L::narrow(in_k), L::igt(i, minus1)));
        base = L::iadd(base, L::imul(i, st[k]));
        w[k][1] = _mm256_sub_pd(x, f);
        w[k][0] = _mm256_sub_pd(one, w[k][1]);
      }
      V wt[8];  // tap 4 a + 2 b + c, one lane per point
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
          const V ab = _mm256_mul_pd(w[0][a], w[1][b]);
          wt[4 * a + 2 * b] = _mm256_mul_pd(ab, w[2][0]);
          wt[4 * a + 2 * b + 1] = _mm256_mul_pd(ab, w[2][1]);
        }
      L::transpose(wt, wa);
      L::transpose(wt + 4, wb);
      L::store_int(idx, L::iand(base, inside));
      const int done = L::mask(inside) | (~L::vmask(keep) & 0xF);
      for (int64_t c = 0; c < op.C && L::mask(inside) == 0; ++c)  // zeros, or redone scalar
        _mm256_storeu_pd(ob + c * op.P + l, _mm256_setzero_pd());
      for (int64_t c = 0; c < op.C && L::mask(inside) != 0; ++c) {
        const double* img = ib + c * op.sC;
        V part[4];
        for (int j = 0; j < 4; ++j) {
          const double* q = img + idx[j];
          const V t0 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(q)),
                                            _mm_loadu_pd(q + s1), 1);  // taps 0..3
          const V t1 = _mm256_insertf128_pd(_mm256_castpd128_pd256(_mm_loadu_pd(q + s0)),
                                            _mm_loadu_pd(q + s0 + s1), 1);  // taps 4..7
          part[j] = _mm256_fmadd_pd(t1, _mm256_load_pd(wb + 4 * j),
                                    _mm256_mul_pd(t0, _mm256_load_pd(wa + 4 * j)));
        }
        L::store_sums(part, keep, ob + c * op.P + l);
      }
      rest.template block<4>(pt, r, l, done);
    }
    rest.tail(pt, r, l, count);
  }
};

template <typename T, class Op>
struct Pull3dCubicAvx2 {
  using L = CubicLanes<T>;
  static constexpr int N = L::N;
  const Geom& G;
  const Op& op;
  ScalarPoints<3, 3, 0, Op, T> rest;

  Pull3dCubicAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  template <class Row>
  __attribute__((target("avx2,fma"))) void row(Point pt, const Row& r, int64_t count) {
    using V = typename L::V;
    const auto lane = L::lanes(G);
    const auto minus1 = L::ivec(-1);
    decltype(L::ivec(0)) lim[3], st[3];
    for (int k = 0; k < 3; ++k) {
      lim[k] = L::ivec(G.src[k] - 3);  // interior: 0 <= i0 and i0 + 3 <= n - 1
      st[k] = L::ivec(G.sst[k]);
    }
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const CoordRule<T> rule(G, 3);  // extrapolate off: points outside read zero
    const MirrorFold<T> fold(G, true);
    const T* ib = op.in + pt.b * op.sB;
    T* ob = op.out + pt.b * op.C * op.P + pt.p;
    // as Pull3dAvx2: large source planes get the rows of a chunk's blocks prefetched (those of
    // each block's first and last points) while the chunk's weights are computed
    const bool prefetch = G.src[1] * G.src[2] * int64_t(sizeof(T)) >= kPrefetchPlaneBytes;
    constexpr int kChunk = 8;  // blocks whose weights are kept
    alignas(32) int32_t idx[kChunk][N];
    alignas(32) T wz[kChunk][4 * N], wy[kChunk][4 * N], wx[kChunk][4 * N];
    V keep[kChunk];
    int done[kChunk], any_in[kChunk];
    int64_t l = 0;
    while (l + N <= count) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, (count - l) / N));
      for (int b = 0; b < nb; ++b) {
        auto inside = minus1, base = L::ivec(0);
        V w[4], xs[3];
        L::coords(r, l + N * b, lane, xs);
        keep[b] = L::ones();
        if (!G.extrapolate)
          for (int k = 0; k < 3; ++k)
            keep[b] = L::vand(keep[b], L::within(xs[k], rule.lo, rule.hi[k]));
        for (int k = 0; k < 3; ++k) {
          const V x = fold(k, xs[k]) - T(1);  // first tap at floor(x) - 1
          const V f = L::floor(x);
          const auto i = L::to_int(f);
          inside = L::iand(inside, L::iand(L::igt(lim[k], i), L::igt(i, minus1)));
          base = L::iadd(base, L::imul(i, st[k]));
          cubic_weights<T>(V(x - f), w);
          if (k == 2) {
            L::transpose(w, wx[b]);
          } else {
            T* dst = k == 0 ? wz[b] : wy[b];
            for (int t = 0; t < 4; ++t) L::store(dst + t * N, w[t]);
          }
        }
        // lanes whose support leaves the source read from voxel 0 (every dim has >= 4
        // voxels) and are redone by the scalar path
        L::store_int(idx[b], L::iand(base, inside));
        any_in[b] = L::mask(inside);
        done[b] = any_in[b] | (~L::vmask(keep[b]) & ((1 << N) - 1));
        if (prefetch && any_in[b])
          for (const T* q : {ib + idx[b][0], ib + idx[b][N - 1]})
            for (int z = 0; z < 4; ++z)
              for (int y = 0; y < 4; ++y)
                _mm_prefetch(reinterpret_cast<const char*>(q + z * s0 + y * s1), _MM_HINT_T0);
      }
      for (int64_t c = 0; c < op.C; ++c) {
        const T* img = ib + c * op.sC;
        for (int b = 0; b < nb; ++b) {
          T* o = ob + c * op.P + l + N * b;
          if (any_in[b] == 0) {  // zeros, or redone by the scalar path
            L::store_zero(o);
            continue;
          }
          const T* p[N];
          for (int j = 0; j < N; ++j) p[j] = img + idx[b][j];
          L::finish(p, s0, s1, wy[b], wz[b], wx[b], keep[b], o);
        }
      }
      for (int b = 0; b < nb; ++b) rest.template block<N>(pt, r, l + N * b, done[b]);
      l += N * nb;
    }
    rest.tail(pt, r, l, count);
  }
};

#undef NJ_AVX2

inline bool cpu_has_avx2() {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return cpu;
}

// The order (1 or 3) of the 2-D fast paths for G, or 0 when they do not apply.
inline int fast2d_avx2_order(const Geom& G) {
  if (!cpu_has_avx2() || G.D != 2) return 0;
  const int o = G.order[1];
  if ((o != 1 && o != 3) || G.order[2] != o || G.sst[2] != 1) return 0;
  if (!tuning::get(tuning::kAvx2)) return 0;
  constexpr int64_t kMax = 0x7fffffff;
  // size >= O + 1: a masked lane reads the taps of voxel 0, which must exist
  for (int k = 1; k < 3; ++k)
    if (G.src[k] < o + 1 || G.src[k] > kMax) return 0;
  if (G.sst[1] < 0 || (G.src[1] - 1) * G.sst[1] + G.src[2] > kMax) return 0;  // int32 indices
  return 7 * G.g[2] + G.gD <= kMax ? o : 0;
}

// The order (1 or 3) of the 3-D fast paths for G (every dim of that order), or 0.
inline int fast3d_avx2_order(const Geom& G) {
  if (!cpu_has_avx2() || G.D != 3 || G.sst[2] != 1) return 0;
  const int o = G.order[0];
  if ((o != 1 && o != 3) || G.order[1] != o || G.order[2] != o) return 0;
  if (!tuning::get(tuning::kAvx2)) return 0;
  constexpr int64_t kMax = 0x7fffffff;
  int64_t span = 0;
  for (int k = 0; k < 3; ++k) {
    if (G.src[k] < o + 1 || G.src[k] > kMax || G.sst[k] < 0) return 0;
    span += (G.src[k] - 1) * G.sst[k];
  }
  return span < kMax && 7 * G.g[2] + 2 * G.gD <= kMax ? o : 0;
}

// Multi-channel 3-D pulls walk the output in tiles of `tile` rows along dim 1, every dim-0
// plane of a tile before the next tile: the source planes a tile reads stay in cache from one
// output plane to the next (in plain row order, 8 channels' planes did not fit in L2, and each
// channel cost more than the whole 1-channel pull). 0: plain row order (one channel, or 2-D).
inline int64_t row_tile(const Geom& G, int64_t elem_bytes) {
  if (G.D != 3 || G.C < 2 || G.pts[0] < 2) return 0;
  // ~256 KiB of source rows (the tile's rows and 4 more, 5 planes, every channel)
  const int64_t row_bytes = std::max<int64_t>(G.src[2], 1) * elem_bytes * 5 * G.C;
  const int64_t rows = std::max<int64_t>((int64_t(256) << 10) / row_bytes - 4, 4);
  return rows >= G.pts[1] ? 0 : rows;
}

// The rows of tiles [tb, te) (tile t: batch t / n, rows [t % n * tile, + tile) of dim 1, every
// dim-0 index), each as fn(pt, row, count) like for_rows.
template <class Coords, class Fn>
void for_row_tiles(const Geom& G, const Coords& co, int64_t tile, int64_t tb, int64_t te,
                   Fn&& fn) {
  const int64_t per_batch = (G.pts[1] + tile - 1) / tile;
  for (int64_t t = tb; t < te; ++t) {
    Point pt;
    pt.b = t / per_batch;
    const int64_t y0 = (t % per_batch) * tile, y1 = std::min(G.pts[1], y0 + tile);
    pt.i[2] = 0;
    for (int64_t z = 0; z < G.pts[0]; ++z)
      for (int64_t y = y0; y < y1; ++y) {
        pt.i[0] = z;
        pt.i[1] = y;
        pt.p = (z * G.pts[1] + y) * G.pts[2];
        fn(pt, co.row(G, pt), G.pts[2]);
      }
  }
}

// grid_pull (src: the grid pointer) or affine_pull (src: AffineCoords) through a fast path:
// float32 2-D orders 1 and 3, 3-D orders 1 and 3; float64 3-D orders 1 and 3. False when none
// applies.
template <typename T, class Op, class Src>
bool try_pull_avx2(const Geom& G, const Src& src, const Op& op) {
  constexpr bool kAffine = !std::is_pointer<Src>::value;
  Geom Gk = G;  // the geometry the checks see: affine coordinates are no grid (no strides)
  if (kAffine) {
    if (G.pts[2] > 0x7fffffff - 8) return false;  // point indices as int32 lanes
    Gk.g[2] = G.D;
    Gk.gD = 1;
  }
  const int o2 = std::is_same_v<T, float> ? fast2d_avx2_order(Gk) : 0;
  const int o3 = o2 == 0 ? fast3d_avx2_order(Gk) : 0;
  if (o2 == 0 && o3 == 0) return false;
  if (std::is_same_v<T, double> && o3 == 0) return false;
  const int64_t tile = row_tile(G, sizeof(T));
  auto kernel_rows = [&](auto&& walk) {
    auto run = [&](auto kernel) {
      walk([&](Point pt, const auto& r, int64_t count) { kernel.row(pt, r, count); });
    };
    if constexpr (std::is_same_v<T, float>) {
      if (o3 == 1)
        run(Pull3dAvx2<Op>(G, op));
      else if (o3 == 3)
        run(Pull3dCubicAvx2<float, Op>(G, op));
      else if (o2 == 1)
        run(Pull2dLinearAvx2<Op>(G, op));
      else
        run(Pull2dCubicAvx2<Op>(G, op));
    } else {
      if (o3 == 1)
        run(Pull3dLinearAvx2d<Op>(G, op));
      else
        run(Pull3dCubicAvx2<double, Op>(G, op));
    }
  };
  if (tile == 0) {
    parallel::parallel_for(0, G.B * G.P, point_cost(G, 0), [&](int64_t b, int64_t e) {
      kernel_rows([&](auto&& fn) { for_rows(G, coords_of(src), b, e, fn); });
    });
  } else {
    const int64_t per_batch = (G.pts[1] + tile - 1) / tile;  // a tile: G.pts[0] x tile rows
    const int64_t tile_cost = G.pts[0] * tile * G.pts[2] * point_cost(G, 0);
    parallel::parallel_for(0, G.B * per_batch, tile_cost, [&](int64_t b, int64_t e) {
      kernel_rows([&](auto&& fn) { for_row_tiles(G, coords_of(src), tile, b, e, fn); });
    });
  }
  return true;
}

// The points [begin, end) of grid_pull_backward (order 1, 2-D or 3-D) into op.out; false when
// the fast path does not apply (the caller then runs the generic loop).
template <class Op>
bool try_pullback_avx2(const Geom& G, const float* grid, int64_t begin, int64_t end,
                       const Op& op) {
  if (op.gs.s[2] * 7 > 0x7fffffff) return false;
  auto run = [&](auto kernel) {
    for_rows(G, coords_of(grid), begin, end,
             [&](Point pt, const auto& r, int64_t count) { kernel.row(pt, r, count); });
  };
  if (fast2d_avx2_order(G) == 1)
    run(PullBack2dAvx2<Op>(G, op));
  else if (fast3d_avx2_order(G) == 1)
    run(PullBack3dAvx2<Op>(G, op));
  else
    return false;
  return true;
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
