// grid_pull, grid_grad and affine_pull on CPU (docs/pushpull-spec.md): the kernels, torch-free.
// A kernel library holds one of them for one dtype (NJ_KERNEL_<op>, NJ_KERNEL_T: see
// nitorch_jit/backends/compiled.py); the binding (binding.cpp) checks the arguments, makes the
// output and calls it through core/host.h.
#include "pushpull/cpu/avx2/select.h"
#include "pushpull/cpu/loop.h"

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <immintrin.h>
#endif

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

template <typename T>
struct PullOp {
  const T* in;
  int64_t sB, sC;
  T* out;  // [B, C, P] contiguous
  int64_t C, P;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* ib = in + pt.b * sB;
    T* ob = out + pt.b * C * P + pt.p;
    if (C == 1) {  // the common case, without the channel loop's hoisted addresses
      *ob = pull_point(t0, t1, t2, ib);
      return;
    }
    for (int64_t c = 0; c < C; ++c) ob[c * P] = pull_point(t0, t1, t2, ib + c * sC);
  }
  void empty(const Point& pt) const {
    T* ob = out + pt.b * C * P + pt.p;
    for (int64_t c = 0; c < C; ++c) ob[c * P] = T(0);
  }
};

template <typename T>
struct GradOp {
  const T* in;
  int64_t sB, sC;
  T* out;  // [B, C, P, D] contiguous
  int64_t C, P;
  int D;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* ib = in + pt.b * sB;
    T* ob = out + (pt.b * C * P + pt.p) * D;
    const int f = 3 - D;
    for (int64_t c = 0; c < C; ++c) {
      T g[3];
      grad_point(t0, t1, t2, ib + c * sC, g[0], g[1], g[2]);
      T* o = ob + c * P * D;
      for (int d = 0; d < D; ++d) o[d] = g[f + d];
    }
  }
  void empty(const Point& pt) const {
    T* ob = out + (pt.b * C * P + pt.p) * D;
    for (int64_t c = 0; c < C; ++c)
      for (int d = 0; d < D; ++d) ob[c * P * D + d] = T(0);
  }
};

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
// ---------------------------------------------------------------------------------------------
// Order-1 pull of float32 in D = 2, 3 with AVX2 + FMA (compiled for that target only, chosen at
// run time when the CPU has it): 8 points of a grid row at a time, coordinates, interior test,
// weights and base indices in vector registers, the 2^D taps gathered. A point whose support
// leaves the source (or that is out of range, or non-finite) is redone by the scalar fast path.
// Needs every index to fit in int32 (pull1_avx2_usable).
#define NJ_PULL1_AVX2 1

// coords8 (avx2/coords.h): coordinate d of the 8 points l..l+7 of a row, natural order.

template <int DIM>
struct Pull1Avx2 {
  const Geom& G;
  const PullOp<float>& op;
  FastPoint<float, 1, DIM, 0, PullOp<float>> scalar;
  const CoordRule<float> rule;

  Pull1Avx2(const Geom& G_, const PullOp<float>& op_)
      : G(G_), op(op_), scalar(G_, op_), rule(G_, DIM) {}

  template <class Row>
  NJ_TARGET_AVX2_FMA void row(Point pt, const Row& gp, int64_t count) {
    constexpr int first = 3 - DIM;
    const int64_t g2 = G.g[2];
    const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(static_cast<int>(g2)));
    const __m256i minus1 = _mm256_set1_epi32(-1);
    const __m256 one = _mm256_set1_ps(1.f);
    __m256i last[3], stride[3];
    for (int k = first; k < 3; ++k) {
      last[k] = _mm256_set1_epi32(static_cast<int>(G.src[k] - 1));  // interior: 0 <= i < n-1
      stride[k] = _mm256_set1_epi32(static_cast<int>(G.sst[k]));
    }
    const float* ib = op.in + pt.b * op.sB;
    float* ob = op.out + pt.b * op.C * op.P + pt.p;
    int64_t l = 0;
    for (; l + 8 <= count; l += 8) {
      __m256 w0[3], w1[3];
      __m256i base = _mm256_setzero_si256();
      __m256i inside = _mm256_set1_epi32(-1);
      for (int k = first; k < 3; ++k) {
        const __m256 x = coords8(gp, k - first, l, lane);
        const __m256 fl = _mm256_floor_ps(x);
        const __m256i i = _mm256_cvttps_epi32(fl);  // NaN, huge -> INT_MIN: not inside
        inside = _mm256_and_si256(
            inside, _mm256_and_si256(_mm256_cmpgt_epi32(last[k], i), _mm256_cmpgt_epi32(i, minus1)));
        w1[k] = _mm256_sub_ps(x, fl);
        w0[k] = _mm256_sub_ps(one, w1[k]);
        base = _mm256_add_epi32(base, _mm256_mullo_epi32(i, stride[k]));
      }
      // lanes whose support leaves the source read voxel 0 here (a safe address) and are
      // redone by the scalar path below
      const int in_mask = _mm256_movemask_ps(_mm256_castsi256_ps(inside));
      base = _mm256_and_si256(base, inside);
      for (int64_t c = 0; c < op.C; ++c) {
        const float* img = ib + c * op.sC;
        const int64_t s1 = G.sst[1], s2 = G.sst[2];
        __m256 acc;
        if constexpr (DIM == 3) {
          const __m256 a0 = plane(img, base, s1, s2, w0, w1);
          const __m256 a1 = plane(img + G.sst[0], base, s1, s2, w0, w1);
          acc = _mm256_fmadd_ps(w1[0], a1, _mm256_mul_ps(w0[0], a0));
        } else {
          acc = plane(img, base, s1, s2, w0, w1);
        }
        _mm256_storeu_ps(ob + c * op.P + l, acc);
      }
      if (in_mask != 0xFF) {
        // The scalar path may call SSE (non-VEX) code: clear the upper halves first, else
        // every SSE instruction there pays for the dirty AVX state.
        _mm256_zeroupper();
        for (int j = 0; j < 8; ++j)
          if (!((in_mask >> j) & 1)) point(pt, gp, l + j);
      }
    }
    _mm256_zeroupper();
    for (; l < count; ++l) point(pt, gp, l);
  }

  // bilinear in dims 1, 2 from p (one offset along dim 0)
  NJ_TARGET_AVX2_FMA __attribute__((always_inline)) static inline __m256 plane(
      const float* p, __m256i base, int64_t s1, int64_t s2, const __m256* w0, const __m256* w1) {
    const __m256 v00 = _mm256_i32gather_ps(p, base, 4);
    const __m256 v01 = _mm256_i32gather_ps(p + s2, base, 4);
    const __m256 v10 = _mm256_i32gather_ps(p + s1, base, 4);
    const __m256 v11 = _mm256_i32gather_ps(p + s1 + s2, base, 4);
    const __m256 a0 = _mm256_fmadd_ps(w1[2], v01, _mm256_mul_ps(w0[2], v00));
    const __m256 a1 = _mm256_fmadd_ps(w1[2], v11, _mm256_mul_ps(w0[2], v10));
    return _mm256_fmadd_ps(w1[1], a1, _mm256_mul_ps(w0[1], a0));
  }

  // point j of the row, scalar (out of line: keeps the vector loop's registers free)
  template <class Row>
  __attribute__((noinline)) void point(Point pt, const Row& gp, int64_t j) {
    pt.p += j;
    pt.i[2] += j;
    float x[3] = {0.f, 0.f, 0.f};
    const bool ok = rule.load(gp, j, x);
    scalar(pt, x, ok);
  }
};

bool pull1_avx2_usable(const Geom& G) {
  static const bool cpu = platform::cpu_has_avx2_fma();
  if (!cpu || (G.D != 2 && G.D != 3)) return false;
  for (int k = G.first(); k < 3; ++k)
    if (G.order[k] != 1) return false;
  if (!tuning::get(tuning::kAvx2)) return false;
  constexpr int64_t kMax = 0x7fffffff;
  int64_t span = 0;  // largest element index of one channel
  for (int k = G.first(); k < 3; ++k) {
    // size >= 2: a masked lane reads the taps of voxel 0, which must exist
    if (G.src[k] < 2 || G.src[k] > kMax) return false;
    span += (G.src[k] - 1) * G.sst[k];
  }
  return span <= kMax && 7 * G.g[2] + 2 * G.gD <= kMax;
}

template <class Coords>
void pull1_avx2_run(const Geom& G, const Coords& co, const PullOp<float>& op) {
  const int64_t n = G.B * G.P;
  parallel::parallel_for(0, n, point_cost(G, 0), [&](int64_t b, int64_t e) {
    auto run = [&](auto kernel) {
      for_rows(G, co, b, e, [&](Point pt, const auto& gp, int64_t count) {
        kernel.row(pt, gp, count);
      });
    };
    if (G.D == 3) {
      if constexpr (variant_has(1, 3)) run(Pull1Avx2<3>(G, op));
    } else {
      if constexpr (variant_has(1, 2)) run(Pull1Avx2<2>(G, op));
    }
  });
}
#endif  // AVX2 path

// src: a grid pointer or a coordinate source (loop.h)
template <typename T, class Src>
bool try_pull1_avx2(const Geom& G, const Src& src, const PullOp<T>& op) {
#ifdef NJ_PULL1_AVX2
  if constexpr (std::is_same<T, float>::value && (variant_has(1, 2) || variant_has(1, 3))) {
    if (!pull1_avx2_usable(G) || !variant_has(1, G.D)) return false;
    pull1_avx2_run(G, coords_of(src), op);
    return true;
  }
#endif
  (void)G, (void)src, (void)op;
  return false;
}

// ---- the kernels (the binding has checked the call, made the output and handled the empty
// cases: no point, an empty source)

template <typename T>
void grid_pull(const Call& c) {
  const Geom& G = c.G;
  const T* grid = in_ptr<T>(c.grid);
  PullOp<T> op{in_ptr<T>(c.src), c.sB, c.sC, out_ptr<T>(c.out), G.C, G.P};
#ifdef NJ_FASTPATH_AVX2
  if (try_pull_avx2<T>(G, grid, op)) return;
#endif
  if (try_pull1_avx2(G, grid, op)) return;
  gather_run<T, 0, kFast_grid_pull>(G, grid, op);
}

template <typename T>
void grid_grad(const Call& c) {
  const Geom& G = c.G;
  GradOp<T> op{in_ptr<T>(c.src), c.sB, c.sC, out_ptr<T>(c.out), G.C, G.P, G.D};
  gather_run<T, 1, kFast_grid_grad>(G, in_ptr<T>(c.grid), op);
}

// affine_pull: the points are the voxels of the output, their coordinates affine[b] @ (i, 1).
template <typename T>
void affine_pull(const Call& c) {
  const Geom& G = c.G;
  PullOp<T> op{in_ptr<T>(c.src), c.sB, c.sC, out_ptr<T>(c.out), G.C, G.P};
  const AffineCoords<T> co = affine_coords<T>(c);
#ifdef NJ_FASTPATH_AVX2
  if (try_pull_avx2<T>(G, co, op)) return;
#endif
  if (try_pull1_avx2(G, co, op)) return;
  gather_run<T, 0, kFast_affine_pull>(G, co, op);
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_grid_pull)
NJ_KERNEL_ENTRY(pushpull_grid_pull, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_pull<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_grid_grad)
NJ_KERNEL_ENTRY(pushpull_grid_grad, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_grad<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_affine_pull)
NJ_KERNEL_ENTRY(pushpull_affine_pull, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::affine_pull<NJ_KERNEL_T>(call))
#endif
