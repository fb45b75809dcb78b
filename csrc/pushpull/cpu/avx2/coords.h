// Coordinates of the AVX2 fast paths (select.h): a row's coordinates in lanes (from a grid row or
// from the affine matrix), the last-cell rule of the order-1 pulls, the mirror fold of extrapolated
// coordinates, and the 8-point blocks of the 2-D and 3-D paths (base indices, interior lanes,
// fractional positions).
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <type_traits>

#include "pushpull/cpu/avx2/lanes.h"
#include "pushpull/cpu/loop.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

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

// The mirror fold (core/bounds.h, mirror_fold) of extrapolated coordinates, lane by lane (T: float
// or double): a pull's lane outside [c0, c0 + h] on a dct1 / dct2 dim moves to the point of that
// range with the same value, so that the vector path takes most of the points outside the source
// instead of the much slower scalar path. The fold is exact: x - c0 is checked to be exact, q p is
// an integer below 2^23, t - q p is exact (Sterbenz) even when the rounded quotient q is one off
// (the abs and min then still give the fold), and r + c0 is exact. Lanes with x - c0 inexact, |x -
// c0| >= 2^22 or NaN keep their coordinate. Linear dct2 is then clamped off its flat parts
// (core/bounds.h, mirror_flat), which the vector path could not take. Not for gradients with
// respect to the grid: they would need the fold's sign.
// The 256-bit vector of T, named by a specialisation: as a template argument (conditional_t)
// __m256 would lose its attributes (may_alias, alignment; gcc warns -Wignored-attributes)
template <typename T>
struct Ymm;
template <>
struct Ymm<float> {
  using type = __m256;
};
template <>
struct Ymm<double> {
  using type = __m256d;
};

template <typename T>
struct MirrorFold {
  using V = typename Ymm<T>::type;
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

  NJ_TARGET_AVX2_FMA __attribute__((always_inline)) inline V operator()(int k, V x) const {
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

  NJ_TARGET_AVX2_FMA explicit Coords2d(const Geom& G, bool pull = false)
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
  NJ_TARGET_AVX2_FMA __attribute__((always_inline)) inline void load(const Row& r, int64_t l,
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

  NJ_TARGET_AVX2_FMA explicit Coords3d(const Geom& G, bool pull_ = false)
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
  NJ_TARGET_AVX2_FMA __attribute__((always_inline)) inline void load(const Row& r, int64_t l,
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

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
