// The 2-D grid_pull / affine_pull fast paths of float32, orders 1 and 3 (select.h chooses them).
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <algorithm>

#include "pushpull/cpu/avx2/coords.h"
#include "pushpull/cpu/avx2/rows.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// grid_pull, 2-D, order 1: as Pull3dAvx2 (below) in 2-D: per block the 4 weights of each point,
// kept for a chunk of blocks; per channel and point its 4 taps as two 64-bit loads, two points
// per vector, and the block's products summed together. No gathers.
template <class Op>
struct Pull2dLinearAvx2 : Avx2Path<1, 2, 0, Op> {
  using Base = Avx2Path<1, 2, 0, Op>;
  using Base::Base, Base::G, Base::op;
  static constexpr int kChunk = 32;  // blocks whose weights are kept (4 KiB)

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<1> coords(G, true);
    const int64_t s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    const __m256 one = _mm256_set1_ps(1.f);
    alignas(32) float wts[kChunk][32];  // block k: point j's 4 weights at 4 j
    alignas(32) int32_t idx[kChunk][8];
    auto prepare = [&](int k, int64_t l) NJ_AVX2_LAMBDA {
      Block2d blk;
      coords.load(r, l, blk);
      const __m256 w10 = _mm256_sub_ps(one, blk.u1), w20 = _mm256_sub_ps(one, blk.u2);
      const __m256 w[4] = {_mm256_mul_ps(w10, w20), _mm256_mul_ps(w10, blk.u2),
                           _mm256_mul_ps(blk.u1, w20), _mm256_mul_ps(blk.u1, blk.u2)};
      transpose4x8(w, wts[k]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx[k]), blk.base);
      return blk.in_mask;
    };
    auto emit = [&](int64_t l, int nb) NJ_AVX2_LAMBDA {
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
    };
    this->template blocks<8, kChunk>(pt, r, count, prepare, emit);
  }
};

// grid_pull, 2-D, order 3: per block the cubic weights in vector lanes; per channel the 4 taps
// of each of the 4 source rows as two pair gathers, contracted without FMAs, in the scalar
// path's order: this path rounds exactly as the scalar one (a test holds it to that), but for
// mirror-folded points (their weights are those of 1 - u, in reverse order).
template <class Op>
struct Pull2dCubicAvx2 : Avx2Path<3, 2, 0, Op> {
  using Base = Avx2Path<3, 2, 0, Op>;
  using Base::Base, Base::G, Base::op;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
    const Coords2d<3> coords(G, true);
    const int64_t s1 = G.sst[1];
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    this->template blocks<8, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
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
      return blk.in_mask;
    }, NoEmit());
  }
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
