// The 3-D grid_pull / affine_pull fast paths, orders 1 and 3, float32 and float64 (select.h chooses
// them), and CubicLanes, the lane traits of the float64 and order-3 paths.
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <algorithm>

#include "pushpull/cpu/avx2/coords.h"
#include "pushpull/cpu/avx2/rows.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// grid_pull, 3-D, order 1: per 8-point block the 8 trilinear weights of each point, computed
// with one lane per point and transposed to one vector per point; per point and channel its 8
// taps as four 64-bit loads times its weights, and the block's 8 products summed together (a
// horizontal-add tree). Plain loads, no gathers (on Zen the pair gathers this replaced were 1.5x
// slower). Channels are the outer loop over a chunk of blocks whose weights are kept: one channel
// at a time reads 4 source rows as streams (all channels at once: 4 C streams, more than the
// hardware prefetchers follow; 8 channels then cost 10x one).
constexpr int64_t kPrefetchPlaneBytes = int64_t(128) << 10;

template <class Op>
struct Pull3dAvx2 : Avx2Path<1, 3, 0, Op> {
  using Base = Avx2Path<1, 3, 0, Op>;
  using Base::Base, Base::G, Base::op;
  static constexpr int kChunk = 16;  // blocks whose weights are kept (16 KiB)

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
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
    int any_in[kChunk];
    auto prepare = [&](int k, int64_t l) NJ_AVX2_LAMBDA {
      Block3d blk;
      coords.load(r, l, blk);
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
      if (prefetch)
        for (int j = 0; j < 8; ++j) {
          const float* q = ib + idx[k][j];
          for (const float* row : {q, q + s1, q + s0, q + s0 + s1})
            _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
        }
      return blk.done;
    };
    auto emit = [&](int64_t l, int nb) NJ_AVX2_LAMBDA {
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
    };
    this->template blocks<8, kChunk>(pt, r, count, prepare, emit);
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
struct Pull3dLinearAvx2d : Avx2Path<1, 3, 0, Op, double> {
  using Base = Avx2Path<1, 3, 0, Op, double>;
  using Base::Base, Base::G, Base::op;
  using L = CubicLanes<double>;  // 4 lanes: coordinates, integer and mask helpers, the reduction
  using V = __m256d;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
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
    this->template blocks<4, 1>(pt, r, count, [&](int, int64_t l) NJ_AVX2_LAMBDA {
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
      return done;
    }, NoEmit());
  }
};

template <typename T, class Op>
struct Pull3dCubicAvx2 : Avx2Path<3, 3, 0, Op, T> {
  using Base = Avx2Path<3, 3, 0, Op, T>;
  using Base::Base, Base::G, Base::op;
  using L = CubicLanes<T>;
  static constexpr int N = L::N;

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& r, int64_t count) {
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
    int any_in[kChunk];
    auto prepare = [&](int b, int64_t l) NJ_AVX2_LAMBDA {
      auto inside = minus1, base = L::ivec(0);
      V w[4], xs[3];
      L::coords(r, l, lane, xs);
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
      if (prefetch && any_in[b])
        for (const T* q : {ib + idx[b][0], ib + idx[b][N - 1]})
          for (int z = 0; z < 4; ++z)
            for (int y = 0; y < 4; ++y)
              _mm_prefetch(reinterpret_cast<const char*>(q + z * s0 + y * s1), _MM_HINT_T0);
      return any_in[b] | (~L::vmask(keep[b]) & ((1 << N) - 1));
    };
    auto emit = [&](int64_t l, int nb) NJ_AVX2_LAMBDA {
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
    };
    this->template blocks<N, kChunk>(pt, r, count, prepare, emit);
  }
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
