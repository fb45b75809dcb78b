// The grid_pull_backward fast paths of float32, order 1, 2-D and 3-D (select.h chooses them;
// push.cpp's PullBackOp calls them).
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include "pushpull/cpu/avx2/push.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// grid_pull_backward, order 1: per block, the weights once; per channel, the 4 taps of each
// point (two 64-bit loads, then a transpose to one vector per tap), the grid gradient
// contracted with the incoming gradient in vector registers, and the 4 scatter adds of each
// interior point in scalar code (points of one block may share voxels): push.h's
// scatter_bilinear8, in the scalar path's order. Op is PullBackOp (pushpull/cpu/push.cpp)
// adding plainly into op.out.
template <class Op>
struct PullBack2dAvx2 : Avx2Path<1, 2, 1, Op> {
  using Base = Avx2Path<1, 2, 1, Op>;
  using Base::Base, Base::G, Base::op;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<1> coords(G);
    const int64_t s1 = G.sst[1];
    const int64_t vstep = op.gs.s[2];  // incoming gradient: stride along the row
    const __m256i vlane = value_lanes(vstep);
    const float* vrow = op.gr + op.gs.at(pt);
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.N;
    float* gg = op.gg + (pt.b * op.P + pt.p) * 2;
    this->template blocks<8, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
      Block2d blk;
      coords.load(r, l, blk);
      __m256 w[2][2];
      linear_weights(blk, w);
      const __m256 w10 = w[0][0], w11 = w[0][1], w20 = w[1][0], w21 = w[1][1];
      alignas(32) int32_t idx[8];  // base indices, natural order
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
      for (int64_t c = 0; c < op.C; ++c) {
        const __m256 v = block_values(vrow + c * op.gs.sC + l * vstep, vstep, vlane);
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
        scatter_bilinear8(ob + c * op.N, idx, s1, w, v, blk.in_mask);
      }
      // grid gradient [.., 2] interleaved: (acc1[j], acc2[j]) for j = 0..7
      const __m256 lo = _mm256_unpacklo_ps(acc1, acc2), hi = _mm256_unpackhi_ps(acc1, acc2);
      _mm256_storeu_ps(gg + 2 * l, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(gg + 2 * l + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      return blk.in_mask;
    }, NoEmit());
  }
};

// grid_pull_backward, 3-D, order 1: as PullBack2dAvx2 with 8 taps (four 64-bit loads per point
// and channel, then a transpose) and 8 scalar scatter adds per interior point
// (scatter_trilinear8).
template <class Op>
struct PullBack3dAvx2 : Avx2Path<1, 3, 1, Op> {
  using Base = Avx2Path<1, 3, 1, Op>;
  using Base::Base, Base::G, Base::op;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords3d coords(G);
    const int64_t s0 = G.sst[0], s1 = G.sst[1];
    const int64_t vstep = op.gs.s[2];
    const __m256i vlane = value_lanes(vstep);
    const float* vrow = op.gr + op.gs.at(pt);
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.N;
    float* gg = op.gg + (pt.b * op.P + pt.p) * 3;
    this->template blocks<8, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
      Block3d blk;
      coords.load(r, l, blk);
      __m256 w[3][2];
      linear_weights(blk, w);
      alignas(32) int32_t idx[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx), blk.base);
      __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t c = 0; c < op.C; ++c) {
        const __m256 v = block_values(vrow + c * op.gs.sC + l * vstep, vstep, vlane);
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
        scatter_trilinear8(ob + c * op.N, idx, s0, s1, w, v, blk.in_mask);
      }
      alignas(32) float ga[3][8];
      for (int k = 0; k < 3; ++k) _mm256_store_ps(ga[k], acc[k]);
      float* go = gg + 3 * l;
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 3; ++k) go[3 * j + k] = ga[k][j];
      return blk.in_mask;
    }, NoEmit());
  }
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
