// The grid_push fast paths of float32, order 1, 2-D and 3-D (select.h chooses them; push.cpp's
// PushOp calls them), and the scatter of a block of points that they share with
// grid_pull_backward's (pullback.h).
//
// The scatter adds in the scalar path's order (push_point_to in pushpull/point.h): point by
// point, the taps of a point in (a, b, c) order, each product grouped as there,
// ((v * w0[a]) * w1[b]) * w2[c], and a zero value adds nothing. A block whose 8 points are all
// interior therefore gives the scalar path's sums bit for bit; the points the scalar path redoes
// (border, out of range) come after the block's interior points, so only their rounding order
// differs.
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include "pushpull/cpu/avx2/coords.h"
#include "pushpull/cpu/avx2/rows.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// The lanes of v that add something: nonzero, or NaN (the scalar path skips v == 0 only).
NJ_TARGET_AVX2_FMA inline int nonzero_lanes(__m256 v) {
  return _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ));
}

// out[idx[j] + tap] += v[j] * (tap's weight) for the lanes j in mask: 2-D, order 1, weights
// w[k][t] of internal dim 1 + k (k = 0, 1), taps 0, 1, s1, s1 + 1.
NJ_TARGET_AVX2_FMA inline void scatter_bilinear8(float* out, const int32_t* idx, int64_t s1,
                                                 const __m256 (&w)[2][2], __m256 v, int mask) {
  mask &= nonzero_lanes(v);
  if (mask == 0) return;
  alignas(32) float pw[4][8];  // tap 2 b + c, one column per point
  for (int b = 0; b < 2; ++b) {
    const __m256 vb = _mm256_mul_ps(w[0][b], v);
    for (int c = 0; c < 2; ++c) _mm256_store_ps(pw[2 * b + c], _mm256_mul_ps(w[1][c], vb));
  }
  for (int j = 0; j < 8; ++j) {
    if (!((mask >> j) & 1)) continue;
    float* o = out + idx[j];
    o[0] += pw[0][j];
    o[1] += pw[1][j];
    o[s1] += pw[2][j];
    o[s1 + 1] += pw[3][j];
  }
}

// The same in 3-D: weights w[k][t] of internal dim k, taps 4 a + 2 b + c at
// a s0 + b s1 + c.
NJ_TARGET_AVX2_FMA inline void scatter_trilinear8(float* out, const int32_t* idx, int64_t s0,
                                                  int64_t s1, const __m256 (&w)[3][2], __m256 v,
                                                  int mask) {
  mask &= nonzero_lanes(v);
  if (mask == 0) return;
  alignas(32) float pw[8][8];  // tap 4 a + 2 b + c, one column per point
  for (int a = 0; a < 2; ++a) {
    const __m256 va = _mm256_mul_ps(w[0][a], v);
    for (int b = 0; b < 2; ++b) {
      const __m256 vab = _mm256_mul_ps(w[1][b], va);
      for (int c = 0; c < 2; ++c)
        _mm256_store_ps(pw[4 * a + 2 * b + c], _mm256_mul_ps(w[2][c], vab));
    }
  }
  for (int j = 0; j < 8; ++j) {
    if (!((mask >> j) & 1)) continue;
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

// The order-1 weights of a block, (1 - u, u) per internal dim: w[k] for dim 1 + k in 2-D, dim k
// in 3-D (the layout scatter_bilinear8 / scatter_trilinear8 take).
NJ_TARGET_AVX2_FMA inline void linear_weights(const Block2d& blk, __m256 (&w)[2][2]) {
  const __m256 one = _mm256_set1_ps(1.f);
  w[0][0] = _mm256_sub_ps(one, blk.u1);
  w[0][1] = blk.u1;
  w[1][0] = _mm256_sub_ps(one, blk.u2);
  w[1][1] = blk.u2;
}
NJ_TARGET_AVX2_FMA inline void linear_weights(const Block3d& blk, __m256 (&w)[3][2]) {
  const __m256 one = _mm256_set1_ps(1.f);
  for (int k = 0; k < 3; ++k) {
    w[k][0] = _mm256_sub_ps(one, blk.u[k]);
    w[k][1] = blk.u[k];
  }
}

// The 8 values of a block of one channel: plain loads where the row is contiguous, else
// gathered at lane * vstep (select.h checks that 7 * vstep fits 32 bits).
NJ_TARGET_AVX2_FMA inline __m256 block_values(const float* p, int64_t vstep, __m256i vlane) {
  return vstep == 1 ? _mm256_loadu_ps(p) : _mm256_i32gather_ps(p, vlane, 4);
}

// The lane offsets of block_values.
NJ_TARGET_AVX2_FMA inline __m256i value_lanes(int64_t vstep) {
  return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                            _mm256_set1_epi32(static_cast<int>(vstep)));
}

// grid_push, 2-D, order 1: per block, the coordinates and weights once; per channel, the 8
// values and the scatter of the block's interior points. Op is PushOp (pushpull/cpu/push.cpp)
// adding plainly into op.out.
template <class Op>
struct Push2dAvx2 : Avx2Path<1, 2, 0, Op> {
  using Base = Avx2Path<1, 2, 0, Op>;
  using Base::Base, Base::G, Base::op;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<1> coords(G);
    const int64_t s1 = G.sst[1];
    const int64_t vstep = op.is.s[2];
    const __m256i vlane = value_lanes(vstep);
    const float* vrow = op.in + op.is.at(pt);
    float* ob = op.out + pt.b * op.C * op.N;
    this->template blocks<8, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
      Block2d blk;
      coords.load(r, l, blk);
      __m256 w[2][2];
      linear_weights(blk, w);
      alignas(32) int32_t idx[8];  // base indices, natural order
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      for (int64_t c = 0; c < op.C; ++c) {
        const __m256 v = block_values(vrow + c * op.is.sC + l * vstep, vstep, vlane);
        scatter_bilinear8(ob + c * op.N, idx, s1, w, v, blk.in_mask);
      }
      return blk.in_mask;
    }, NoEmit());
  }
};

// grid_push, 3-D, order 1: as Push2dAvx2 with 8 taps.
template <class Op>
struct Push3dAvx2 : Avx2Path<1, 3, 0, Op> {
  using Base = Avx2Path<1, 3, 0, Op>;
  using Base::Base, Base::G, Base::op;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords3d coords(G);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const int64_t vstep = op.is.s[2];
    const __m256i vlane = value_lanes(vstep);
    const float* vrow = op.in + op.is.at(pt);
    float* ob = op.out + pt.b * op.C * op.N;
    this->template blocks<8, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
      Block3d blk;
      coords.load(r, l, blk);
      __m256 w[3][2];
      linear_weights(blk, w);
      alignas(32) int32_t idx[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      for (int64_t c = 0; c < op.C; ++c) {
        const __m256 v = block_values(vrow + c * op.is.sC + l * vstep, vstep, vlane);
        scatter_trilinear8(ob + c * op.N, idx, s0, s1, w, v, blk.in_mask);
      }
      return blk.in_mask;
    }, NoEmit());
  }
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
