// grid_grad_dot and grid_hess_dot on CPU (docs/pushpull-spec.md): the grid gradients of pull
// and grad, contracted with the incoming gradient over channels (and derivative directions).
// The kernels, torch-free: see pull.cpp.
#include "pushpull/cpu/loop.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

// (fast paths: kernels.def; hess_dot, the second-order backward of grid_grad, is rarely hot:
// generic path only)

// out[b, p, d] = sum_c weight[b, c, p] * grad(input)[b, c, p, d]
template <typename T>
struct GradDotOp {
  const T* wt;
  PointStrides ws;
  const T* in;
  int64_t sB, sC;
  T* out;  // [B, P, D] contiguous
  int64_t C, P;
  int D;

  // acc[k] = sum_c weight[c] * grad(input[c])[k] at the point (internal dims k)
  template <class TP0, class TP1, class TP2>
  NJ_INLINE void contract(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2,
                          T* acc) const {
    const T* ib = in + pt.b * sB;
    const T* wp = wt + ws.at(pt);
    if (C == 1) {  // the common case, without the channel loop's hoisted addresses
      T g[3];
      grad_point(t0, t1, t2, ib, g[0], g[1], g[2]);
      const T w = *wp;
      for (int k = 0; k < 3; ++k) acc[k] = w * g[k];
      return;
    }
    acc[0] = acc[1] = acc[2] = T(0);
    for (int64_t c = 0; c < C; ++c) {
      T g[3];
      grad_point(t0, t1, t2, ib + c * sC, g[0], g[1], g[2]);
      const T w = wp[c * ws.sC];
      acc[0] += w * g[0];
      acc[1] += w * g[1];
      acc[2] += w * g[2];
    }
  }

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    T acc[3];
    contract(pt, t0, t1, t2, acc);
    T* o = out + (pt.b * P + pt.p) * D;
    const int f = 3 - D;
    for (int d = 0; d < D; ++d) o[d] = acc[f + d];
  }
  void empty(const Point& pt) const {
    T* o = out + (pt.b * P + pt.p) * D;
    for (int d = 0; d < D; ++d) o[d] = T(0);
  }
};

// out[b, p, e] = sum_c sum_d weight[b, c, p, d] * H(input)[b, c, p, d, e]
template <typename T>
struct HessDotOp {
  const T* wt;
  PointStrides ws;
  const T* in;
  int64_t sB, sC;
  T* out;  // [B, P, D] contiguous
  int64_t C, P;
  int D;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* ib = in + pt.b * sB;
    const T* wp = wt + ws.at(pt);
    const int f = 3 - D;
    T acc[3] = {T(0), T(0), T(0)};
    for (int64_t c = 0; c < C; ++c) {
      T h[6];
      hess_point(t0, t1, t2, ib + c * sC, h);
      T w[3] = {T(0), T(0), T(0)};
      for (int d = 0; d < D; ++d) w[f + d] = wp[c * ws.sC + d * ws.sD];
      // H = [[h0 h3 h4] [h3 h1 h5] [h4 h5 h2]] (symmetric)
      acc[0] += w[0] * h[0] + w[1] * h[3] + w[2] * h[4];
      acc[1] += w[0] * h[3] + w[1] * h[1] + w[2] * h[5];
      acc[2] += w[0] * h[4] + w[1] * h[5] + w[2] * h[2];
    }
    T* o = out + (pt.b * P + pt.p) * D;
    for (int d = 0; d < D; ++d) o[d] = acc[f + d];
  }
  void empty(const Point& pt) const {
    T* o = out + (pt.b * P + pt.p) * D;
    for (int d = 0; d < D; ++d) o[d] = T(0);
  }
};

// The matrix gradient of affine_pull, reduced per row of points (a row: the points along the
// innermost dim, all handled by one thread, rows_run): part[row, d] = (sum_i2 g_d, sum_i2 g_d i2)
// with g = grad_dot at the point; the rows are then combined with their outer indices.
template <typename T>
struct AffineDotOp {
  GradDotOp<T> dot;
  T* part;         // [B * pts0 * pts1, D, 2], zeroed
  int64_t n0, n1;  // pts[0], pts[1]

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    T g[3];
    dot.contract(pt, t0, t1, t2, g);
    const int D = dot.D, f = 3 - D;
    T* o = part + ((pt.b * n0 + pt.i[0]) * n1 + pt.i[1]) * (2 * D);
    const T i2 = static_cast<T>(pt.i[2]);
    for (int d = 0; d < D; ++d) {
      o[2 * d] += g[f + d];
      o[2 * d + 1] += g[f + d] * i2;
    }
  }
  void empty(const Point&) const {}
};

// ---- the kernels

template <typename T>
void grid_grad_dot(const Call& c) {
  const Geom& G = c.G;
  GradDotOp<T> op{in_ptr<T>(c.pts), c.ps, in_ptr<T>(c.src), c.sB, c.sC, out_ptr<T>(c.out),
                  G.C, G.P, G.D};
  gather_run<T, 1, kFast_grid_grad_dot>(G, in_ptr<T>(c.grid), op);
}

template <typename T>
void grid_hess_dot(const Call& c) {
  const Geom& G = c.G;
  HessDotOp<T> op{in_ptr<T>(c.pts), c.ps, in_ptr<T>(c.src), c.sB, c.sC, out_ptr<T>(c.out),
                  G.C, G.P, G.D};
  gather_run<T, 2, kFast_grid_hess_dot>(G, in_ptr<T>(c.grid), op);
}

// d<weight, affine_pull(input, affine)> / d affine: [B, D, D + 1] (out, strides out_stride), a
// sum over the output voxels i of grad_dot(weight, input)(i) (x) (i, 1), without a grid.
template <typename T>
void affine_grad_dot(const Call& c) {
  const Geom& G = c.G;
  const int64_t D = G.D;
  const int64_t n0 = G.pts[0], n1 = G.pts[1], rows = G.B * n0 * n1;
  host::Temporary<T> part(rows * D * 2);
  std::memset(static_cast<void*>(part.get()), 0, sizeof(T) * rows * D * 2);
  GradDotOp<T> dot{in_ptr<T>(c.pts), c.ps, in_ptr<T>(c.src), c.sB, c.sC, nullptr, G.C, G.P, G.D};
  AffineDotOp<T> op{dot, part.get(), n0, n1};
  rows_run<T, 1, kFast_affine_grad_dot>(G, affine_coords<T>(c), op);
  // combine the rows (in float64): column j < D - 1 weighs a row by its outer index i_j
  const T* pp = part.get();
  T* out = out_ptr<T>(c.out);
  const int f = G.first();
  for (int64_t b = 0; b < G.B; ++b) {
    double acc[3][4] = {{0}};
    for (int64_t i0 = 0; i0 < n0; ++i0)
      for (int64_t i1 = 0; i1 < n1; ++i1) {
        const T* r = pp + ((b * n0 + i0) * n1 + i1) * (2 * D);
        const int64_t idx[3] = {i0, i1, 0};
        for (int64_t d = 0; d < D; ++d) {
          const double s = r[2 * d], si = r[2 * d + 1];
          for (int64_t j = 0; j + 1 < D; ++j) acc[d][j] += s * static_cast<double>(idx[f + j]);
          acc[d][D - 1] += si;
          acc[d][D] += s;
        }
      }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j <= D; ++j)
        out[b * c.out_stride[0] + d * c.out_stride[1] + j * c.out_stride[2]] =
            static_cast<T>(acc[d][j]);
  }
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_grid_grad_dot)
NJ_KERNEL_ENTRY(pushpull_grid_grad_dot, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_grad_dot<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_grid_hess_dot)
NJ_KERNEL_ENTRY(pushpull_grid_hess_dot, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_hess_dot<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_affine_grad_dot)
NJ_KERNEL_ENTRY(pushpull_affine_grad_dot, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::affine_grad_dot<NJ_KERNEL_T>(call))
#endif
