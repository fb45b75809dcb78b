// Fast paths on CPU, float32, AVX2 + FMA (compiled for that target only, chosen at run time when
// the CPU has it), every dim of the same order: grid_pull of orders 1 and 3 in 2-D and order 1
// in 3-D (pull_cpu.cpp; its older Pull1Avx2 now serves only sources whose last dim is strided)
// and grid_pull_backward of order 1 in 2-D and 3-D (push_cpu.cpp).
//
// Eight points of a grid row at a time: coordinates, interior test, weights and base indices in
// vector registers; the taps of a source row are read two at a time (one 64-bit gather lane per
// point reads the adjacent pair i, i+1, half the gather work of one lane per tap); weights are
// computed once per point and reused across channels. A point whose support leaves the source
// (or that is out of range, or non-finite) is redone by the scalar fast path, which applies
// the bound and extrapolate rules.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include <type_traits>
#include <vector>

#include "pushpull_cpu.h"

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
// into an FMA in FMA-enabled code unless told not to; the scalar path has no FMA).
NJ_AVX2 __m256 mul_nf(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  asm("" : "+x"(p));
  return p;
}

// Cubic B-spline weights of the taps i0 .. i0+3 at fractional position u: spline.h's
// SplineTaps<3, 0> operation by operation (no FMA), so that the vector path rounds as the scalar
// one does (affine_pull, which has no 2-D order-3 vector path, equals grid_pull bit for bit).
NJ_AVX2 void cubic_weights(__m256 u, __m256* w) {
  const __m256 s = _mm256_set1_ps(1.f / 6.f);
  const __m256 one = _mm256_set1_ps(1.f), three = _mm256_set1_ps(3.f);
  const __m256 six = _mm256_set1_ps(6.f), four = _mm256_set1_ps(4.f);
  const __m256 mu = _mm256_sub_ps(_mm256_setzero_ps(), u);
  // w0 = (((-u + 3) u - 3) u + 1) s
  __m256 t = mul_nf(_mm256_add_ps(mu, three), u);
  w[0] = _mm256_mul_ps(_mm256_add_ps(mul_nf(_mm256_sub_ps(t, three), u), one), s);
  // w1 = (((3 u - 6) u) u + 4) s
  t = mul_nf(mul_nf(_mm256_sub_ps(mul_nf(three, u), six), u), u);
  w[1] = _mm256_mul_ps(_mm256_add_ps(t, four), s);
  // w2 = (((-3 u + 3) u + 3) u + 1) s
  t = mul_nf(_mm256_add_ps(mul_nf(_mm256_set1_ps(-3.f), u), three), u);
  w[2] = _mm256_mul_ps(_mm256_add_ps(mul_nf(_mm256_add_ps(t, three), u), one), s);
  // w3 = ((u u) u) s
  w[3] = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(u, u), u), s);
}

// Taps k and k+1 of one source row for 8 points (natural order): row + base[lane] + {0, 1}.
NJ_AVX2 void tap_pairs(const float* row, __m128i blo, __m128i bhi, __m256& t0, __m256& t1) {
  const double* r = reinterpret_cast<const double*>(row);
  const __m256 lo = _mm256_castpd_ps(_mm256_i32gather_pd(r, blo, 4));
  const __m256 hi = _mm256_castpd_ps(_mm256_i32gather_pd(r, bhi, 4));
  t0 = _mm256_shuffle_ps(lo, hi, 0x88);
  t1 = _mm256_shuffle_ps(lo, hi, 0xDD);
}

// The points a vector block cannot take go through the scalar fast path one by one (it applies
// the bound and extrapolate rules). Out of line: keeps the vector loops' registers free.
template <int O, int DIM, int DER, class Op>
struct ScalarPoints {
  const Geom& G;
  FastPoint<float, O, DIM, DER, Op> scalar;
  const CoordRule<float> rule;

  ScalarPoints(const Geom& G_, const Op& op) : G(G_), scalar(G_, op), rule(G_, DIM) {}

  // point j of the row starting at pt, gp
  __attribute__((noinline)) void point(Point pt, const float* gp, int64_t j) {
    pt.p += j;
    pt.i[2] += j;
    float x[3] = {0.f, 0.f, 0.f};
    const bool ok = rule.load(GridRow<float>{gp, G.g[2], G.gD}, j, x);
    scalar(pt, x, ok);
  }
  // the points of block l..l+7 whose in_mask bit is clear
  __attribute__((target("avx2,fma"))) void block(const Point& pt, const float* gp, int64_t l,
                                                   int in_mask) {
    if (in_mask == 0xFF) return;
    // The scalar path may call SSE (non-VEX) code: clear the upper halves first.
    _mm256_zeroupper();
    for (int j = 0; j < 8; ++j)
      if (!((in_mask >> j) & 1)) point(pt, gp, l + j);
  }
  // the points l..count-1 (a row's tail)
  __attribute__((target("avx2,fma"))) void tail(const Point& pt, const float* gp, int64_t l,
                                                  int64_t count) {
    _mm256_zeroupper();
    for (; l < count; ++l) point(pt, gp, l);
  }
};

// One 8-point block of a grid row, what every 2-D fast path needs: base indices (S order, 0 for
// lanes outside), which lanes are interior (natural order) and the fractional positions.
struct Block2d {
  __m128i blo, bhi;  // base index i1 * s1 + i2 of the lanes S 0..3 and S 4..7
  int in_mask;       // bit j: point j of the block has its whole support inside the source
  __m256 u1, u2;     // fractional positions along internal dims 1 and 2 (natural order)
};

// Reads the coordinates of 8 consecutive points of a grid row (internal dims 1, 2) for order O.
template <int O>
struct Coords2d {
  int64_t g2, gD;
  bool packed;  // a contiguous [.., 2] grid: plain loads
  __m256i lane, lim1, lim2, s1;
  __m256 shift;

  __attribute__((target("avx2,fma"))) explicit Coords2d(const Geom& G)
      : g2(G.g[2]), gD(G.gD), packed(G.gD == 1 && G.g[2] == 2) {
    lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7),
                              _mm256_set1_epi32(static_cast<int>(g2)));
    shift = _mm256_set1_ps(static_cast<float>((O - 1) / 2));  // first tap offset
    // interior: 0 <= i0 and i0 + O <= n - 1
    lim1 = _mm256_set1_epi32(static_cast<int>(G.src[1] - O));
    lim2 = _mm256_set1_epi32(static_cast<int>(G.src[2] - O));
    s1 = _mm256_set1_epi32(static_cast<int>(G.sst[1]));
  }

  __attribute__((target("avx2,fma"), always_inline)) inline void load(const float* g,
                                                                      Block2d& blk) const {
    __m256 x1, x2;
    if (packed) {
      const __m256 a = _mm256_loadu_ps(g), b = _mm256_loadu_ps(g + 8);
      x1 = _mm256_shuffle_ps(a, b, 0x88);
      x2 = _mm256_shuffle_ps(a, b, 0xDD);
    } else {
      x1 = _mm256_i32gather_ps(g, lane, 4);
      x2 = _mm256_i32gather_ps(g + gD, lane, 4);
    }
    x1 = _mm256_sub_ps(x1, shift);
    x2 = _mm256_sub_ps(x2, shift);
    const __m256 f1 = _mm256_floor_ps(x1), f2 = _mm256_floor_ps(x2);
    const __m256i i1 = _mm256_cvttps_epi32(f1), i2 = _mm256_cvttps_epi32(f2);  // NaN -> INT_MIN
    const __m256i minus1 = _mm256_set1_epi32(-1);
    const __m256i inside = _mm256_and_si256(
        _mm256_and_si256(_mm256_cmpgt_epi32(lim1, i1), _mm256_cmpgt_epi32(i1, minus1)),
        _mm256_and_si256(_mm256_cmpgt_epi32(lim2, i2), _mm256_cmpgt_epi32(i2, minus1)));
    // lanes whose support leaves the source read voxel 0 (a safe address: every dim has
    // >= O + 1 voxels) and are redone by the scalar path
    const __m256i base =
        _mm256_and_si256(_mm256_add_epi32(_mm256_mullo_epi32(i1, s1), i2), inside);
    blk.blo = _mm256_castsi256_si128(base);
    blk.bhi = _mm256_extracti128_si256(base, 1);
    blk.in_mask = _mm256_movemask_ps(nat_ps(_mm256_castsi256_ps(inside)));
    blk.u1 = nat_ps(_mm256_sub_ps(x1, f1));
    blk.u2 = nat_ps(_mm256_sub_ps(x2, f2));
  }
};

template <int O, class Op>
struct Pull2dAvx2 {
  static_assert(O == 1 || O == 3, "orders 1 and 3");
  const Geom& G;
  const Op& op;
  ScalarPoints<O, 2, 0, Op> rest;

  Pull2dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  __attribute__((target("avx2,fma"))) void row(Point pt, const float* gp, int64_t count) {
    const Coords2d<O> coords(G);
    const int64_t s1l = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      Block2d blk;
      coords.load(gp + l * G.g[2], blk);
      __m256 w1[O + 1], w2[O + 1];
      if constexpr (O == 1) {
        const __m256 one = _mm256_set1_ps(1.f);
        w1[0] = _mm256_sub_ps(one, blk.u1);
        w1[1] = blk.u1;
        w2[0] = _mm256_sub_ps(one, blk.u2);
        w2[1] = blk.u2;
      } else {
        cubic_weights(blk.u1, w1);
        cubic_weights(blk.u2, w2);
      }
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        __m256 acc = _mm256_setzero_ps();
        for (int r = 0; r <= O; ++r) {
          const float* src_row = img + r * s1l;
          __m256 t[O + 1];
          tap_pairs(src_row, blk.blo, blk.bhi, t[0], t[1]);
          if constexpr (O == 3) tap_pairs(src_row + 2, blk.blo, blk.bhi, t[2], t[3]);
          // order 1 as pull_cpu.cpp's Pull1Avx2 (FMAs), order 3 as the scalar path (none):
          // the paths affine_pull takes, which must round as grid_pull does
          __m256 v = mul_nf(w2[0], t[0]);
          for (int k = 1; k <= O; ++k)
            v = O == 1 ? _mm256_fmadd_ps(w2[k], t[k], v) : _mm256_add_ps(v, mul_nf(w2[k], t[k]));
          if (r == 0)
            acc = mul_nf(w1[0], v);
          else
            acc = O == 1 ? _mm256_fmadd_ps(w1[r], v, acc) : _mm256_add_ps(acc, mul_nf(w1[r], v));
        }
        _mm256_storeu_ps(ob + c * op.P + l, acc);
      }
      rest.block(pt, gp, l, blk.in_mask);
    }
    rest.tail(pt, gp, l, count);
  }
};

// grid_pull_backward, order 1: per block, the weights once; per channel, the 4 taps of each
// point (two pair gathers), the grid gradient contracted with the incoming gradient in vector
// registers, and the 4 scatter adds of each interior point in scalar code (points of one block
// may share voxels), in the order of the scalar path (point by point, so the same sums up to
// rounding). Op is PullBackOp (push_cpu.cpp) adding plainly into op.out.
template <class Op>
struct PullBack2dAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 2, 1, Op> rest;

  PullBack2dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  __attribute__((target("avx2,fma"))) void row(Point pt, const float* gp, int64_t count) {
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
      coords.load(gp + l * G.g[2], blk);
      const __m256 w10 = _mm256_sub_ps(one, blk.u1), w11 = blk.u1;
      const __m256 w20 = _mm256_sub_ps(one, blk.u2), w21 = blk.u2;
      alignas(32) int32_t idx[8];  // base indices, natural order
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx),
                         _mm256_castps_si256(nat_ps(_mm256_castsi256_ps(
                             _mm256_set_m128i(blk.bhi, blk.blo)))));
      __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
      for (int64_t c = 0; c < op.C; ++c) {
        const float* vp = vrow + c * op.gs.sC + l * vstep;
        const __m256 v = vstep == 1 ? _mm256_loadu_ps(vp) : _mm256_i32gather_ps(vp, vlane, 4);
        const float* img = ib + c * op.sC;
        __m256 t00, t01, t10, t11;
        tap_pairs(img, blk.blo, blk.bhi, t00, t01);
        tap_pairs(img + s1, blk.blo, blk.bhi, t10, t11);
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
      rest.block(pt, gp, l, blk.in_mask);
    }
    rest.tail(pt, gp, l, count);
  }
};
// 3-D, order 1: coordinates of 8 consecutive points (gathered, lanes in S order), the base
// index i0 * s0 + i1 * s1 + i2 (S order, 0 outside), interior lanes and fractions (natural).
struct Block3d {
  __m128i blo, bhi;
  int in_mask;
  __m256 u[3];
};

struct Coords3d {
  int64_t gD;
  __m256i lane, lim[3], st[3];

  __attribute__((target("avx2,fma"))) explicit Coords3d(const Geom& G) : gD(G.gD) {
    lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7),
                              _mm256_set1_epi32(static_cast<int>(G.g[2])));
    for (int k = 0; k < 3; ++k) {
      lim[k] = _mm256_set1_epi32(static_cast<int>(G.src[k] - 1));
      st[k] = _mm256_set1_epi32(static_cast<int>(G.sst[k]));
    }
  }

  __attribute__((target("avx2,fma"), always_inline)) inline void load(const float* g,
                                                                      Block3d& blk) const {
    const __m256i minus1 = _mm256_set1_epi32(-1);
    __m256i inside = minus1, base = _mm256_setzero_si256();
    for (int k = 0; k < 3; ++k) {
      const __m256 x = _mm256_i32gather_ps(g + k * gD, lane, 4);
      const __m256 f = _mm256_floor_ps(x);
      const __m256i i = _mm256_cvttps_epi32(f);  // NaN, huge -> INT_MIN: not inside
      inside = _mm256_and_si256(
          inside, _mm256_and_si256(_mm256_cmpgt_epi32(lim[k], i), _mm256_cmpgt_epi32(i, minus1)));
      base = _mm256_add_epi32(base, _mm256_mullo_epi32(i, st[k]));
      blk.u[k] = nat_ps(_mm256_sub_ps(x, f));
    }
    base = _mm256_and_si256(base, inside);
    blk.blo = _mm256_castsi256_si128(base);
    blk.bhi = _mm256_extracti128_si256(base, 1);
    blk.in_mask = _mm256_movemask_ps(nat_ps(_mm256_castsi256_ps(inside)));
  }
};

// grid_pull_backward, 3-D, order 1: as PullBack2dAvx2 with 8 taps (four pair gathers per
// channel) and 8 scalar scatter adds per interior point.
template <class Op>
struct PullBack3dAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 3, 1, Op> rest;

  PullBack3dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  __attribute__((target("avx2,fma"))) void row(Point pt, const float* gp, int64_t count) {
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
      coords.load(gp + l * G.g[2], blk);
      __m256 w[3][2];
      for (int k = 0; k < 3; ++k) {
        w[k][0] = _mm256_sub_ps(one, blk.u[k]);
        w[k][1] = blk.u[k];
      }
      __m256 w01[2][2];  // w0[a] * w1[b]
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) w01[a][b] = _mm256_mul_ps(w[0][a], w[1][b]);
      alignas(32) int32_t idx[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx),
                         _mm256_castps_si256(nat_ps(_mm256_castsi256_ps(
                             _mm256_set_m128i(blk.bhi, blk.blo)))));
      __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t c = 0; c < op.C; ++c) {
        const float* vp = vrow + c * op.gs.sC + l * vstep;
        const __m256 v = vstep == 1 ? _mm256_loadu_ps(vp) : _mm256_i32gather_ps(vp, vlane, 4);
        const float* img = ib + c * op.sC;
        __m256 r[2][2], e[2][2];  // along dim 2: value w2 . t and difference t1 - t0
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            __m256 t0, t1;
            tap_pairs(img + a * s0 + b * s1, blk.blo, blk.bhi, t0, t1);
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
      rest.block(pt, gp, l, blk.in_mask);
    }
    rest.tail(pt, gp, l, count);
  }
};
// grid_pull, 3-D, order 1: four pair gathers per channel (half the gather work of one lane per
// tap), weights once per block for every channel.
template <class Op>
struct Pull3dAvx2 {
  const Geom& G;
  const Op& op;
  ScalarPoints<1, 3, 0, Op> rest;

  Pull3dAvx2(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  __attribute__((target("avx2,fma"))) void row(Point pt, const float* gp, int64_t count) {
    const Coords3d coords(G);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    const __m256 one = _mm256_set1_ps(1.f);
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      Block3d blk;
      coords.load(gp + l * G.g[2], blk);
      __m256 w[3][2];
      for (int k = 0; k < 3; ++k) {
        w[k][0] = _mm256_sub_ps(one, blk.u[k]);
        w[k][1] = blk.u[k];
      }
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        __m256 q[2];
        for (int a = 0; a < 2; ++a) {
          __m256 r[2];
          for (int b = 0; b < 2; ++b) {
            __m256 t0, t1;
            tap_pairs(img + a * s0 + b * s1, blk.blo, blk.bhi, t0, t1);
            r[b] = _mm256_fmadd_ps(w[2][1], t1, _mm256_mul_ps(w[2][0], t0));
          }
          q[a] = _mm256_fmadd_ps(w[1][1], r[1], _mm256_mul_ps(w[1][0], r[0]));
        }
        _mm256_storeu_ps(ob + c * op.P + l,
                         _mm256_fmadd_ps(w[0][1], q[1], _mm256_mul_ps(w[0][0], q[0])));
      }
      rest.block(pt, gp, l, blk.in_mask);
    }
    rest.tail(pt, gp, l, count);
  }
};

#undef NJ_AVX2

// The order (1 or 3) of the 2-D fast paths for G, or 0 when they do not apply.
inline int fast2d_avx2_order(const Geom& G) {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!cpu || G.D != 2) return 0;
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

// Whether the 3-D order-1 fast path applies to G (as fast2d_avx2_order).
inline bool fast3d_avx2_order1(const Geom& G) {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!cpu || G.D != 3 || G.sst[2] != 1) return false;
  for (int k = 0; k < 3; ++k)
    if (G.order[k] != 1) return false;
  if (!tuning::get(tuning::kAvx2)) return false;
  constexpr int64_t kMax = 0x7fffffff;
  int64_t span = 0;
  for (int k = 0; k < 3; ++k) {
    if (G.src[k] < 2 || G.src[k] > kMax || G.sst[k] < 0) return false;
    span += (G.src[k] - 1) * G.sst[k];
  }
  return span < kMax && 7 * G.g[2] + 2 * G.gD <= kMax;
}

// grid_pull (src: the grid pointer) or affine_pull (src: AffineCoords) through the 2-D
// (orders 1, 3) or 3-D (order 1) fast path; false when neither applies. Affine coordinates are
// written one output row at a time into a small per-thread buffer laid out as a contiguous grid
// row ([count, D]), which the kernels read like a grid: the same numbers as affine_grid's, so
// affine_pull still equals grid_pull on the materialised grid bit for bit.
template <class Op, class Src>
bool try_pull_avx2(const Geom& G, const Src& src, const Op& op) {
  constexpr bool kAffine = !std::is_pointer<Src>::value;
  Geom Gk = G;  // the geometry the kernels see
  if (kAffine) {
    Gk.g[2] = G.D;
    Gk.gD = 1;
  }
  const int o = fast2d_avx2_order(Gk);
  const bool three = o == 0 && fast3d_avx2_order1(Gk);
  if (o == 0 && !three) return false;
  at::parallel_for(0, G.B * G.P, grain_size(G), [&](int64_t b, int64_t e) {
    std::vector<float> buf;
    auto run = [&](auto kernel) {
      for_rows(G, coords_of(src), b, e, [&](Point pt, const auto& r, int64_t count) {
        if constexpr (kAffine) {
          buf.resize(static_cast<size_t>(count * G.D));
          for (int64_t l = 0; l < count; ++l)
            for (int d = 0; d < G.D; ++d) buf[l * G.D + d] = r.coord(d, l);
          kernel.row(pt, buf.data(), count);
        } else {
          kernel.row(pt, r.gp, count);
        }
      });
    };
    if (three)
      run(Pull3dAvx2<Op>(Gk, op));
    else if (o == 1)
      run(Pull2dAvx2<1, Op>(Gk, op));
    else
      run(Pull2dAvx2<3, Op>(Gk, op));
  });
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
             [&](Point pt, const auto& r, int64_t count) { kernel.row(pt, r.gp, count); });
  };
  if (fast2d_avx2_order(G) == 1)
    run(PullBack2dAvx2<Op>(G, op));
  else if (fast3d_avx2_order1(G))
    run(PullBack3dAvx2<Op>(G, op));
  else
    return false;
  return true;
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
