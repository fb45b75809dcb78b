// grid_grad_dot and grid_hess_dot on CPU (docs/pushpull-spec.md): the grid gradients of pull
// and grad, contracted with the incoming gradient over channels (and derivative directions).
#include <torch/library.h>

#include "pushpull/cpu/loop.h"
#include "pushpull/cpu/ops.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

constexpr int kGradDotFast = (1 << 1) | (1 << 2) | (1 << 3);
// hess_dot (second-order backward of grid_grad) is rarely hot: generic path only (build time)
constexpr int kHessDotFast = 0;

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

template <bool kHess>
at::Tensor dot_impl(const at::Tensor& weight, const at::Tensor& input, const at::Tensor& grid,
                    at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  const Geom G = gather_geom(input, grid, order, bound, extrapolate);
  const int64_t D = G.D;
  check_tensor(weight, "weight", grid, D, kHess, kHess ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(weight, "weight", grid, D);
  check_channels(weight, "weight", input);
  at::Tensor out = empty_output(grid.sizes(), grid.options());  // [B, *O, D]
  if (out.numel() == 0) return out;
  if (G.empty_source() || G.C == 0) return out.zero_();
  const PointStrides ws = point_strides(weight, D, kHess);
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), kHess ? "grid_hess_dot" : "grid_grad_dot", [&] {
    const scalar_t* gp = grid.const_data_ptr<scalar_t>();
    if constexpr (kHess) {
      HessDotOp<scalar_t> op{weight.const_data_ptr<scalar_t>(), ws,
                             input.const_data_ptr<scalar_t>(), input.stride(0), input.stride(1),
                             out.data_ptr<scalar_t>(), G.C, G.P, G.D};
      gather_run<scalar_t, 2, kHessDotFast>(G, gp, op);
    } else {
      GradDotOp<scalar_t> op{weight.const_data_ptr<scalar_t>(), ws,
                             input.const_data_ptr<scalar_t>(), input.stride(0), input.stride(1),
                             out.data_ptr<scalar_t>(), G.C, G.P, G.D};
      gather_run<scalar_t, 1, kGradDotFast>(G, gp, op);
    }
  });
  return out;
}

}  // namespace

// ---- the ops (ops.h; registered in pull.cpp)

// d<weight, affine_pull(input, affine)> / d affine: [B, D, D + 1], a sum over the output
// voxels i of grad_dot(weight, input)(i) (x) (i, 1), without a grid.
at::Tensor affine_grad_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                               const at::Tensor& affine, at::IntArrayRef order,
                               at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_affine(affine);
  check_tensor(input, "input", affine, D, false, "[B, C, *S]", "affine");
  check_tensor(weight, "weight", affine, D, false, "[B, C, *O]", "affine");
  check_channels(weight, "weight", input);
  check_options(order, bound, D);
  at::Tensor out = at::zeros({affine.size(0), D, D + 1}, affine.options());
  const Geom G = make_points_geom(input.size(0), weight.sizes().slice(2), D, input.size(1),
                                  input.sizes().slice(2), input.strides().slice(2), order, bound,
                                  extrapolate);
  if (out.numel() == 0 || G.P == 0 || G.empty_source() || G.C == 0) return out;
  const int64_t n0 = G.pts[0], n1 = G.pts[1], rows = G.B * n0 * n1;
  at::Tensor part = at::zeros({rows, D, 2}, affine.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "affine_grad_dot", [&] {
    GradDotOp<scalar_t> dot{weight.const_data_ptr<scalar_t>(), point_strides(weight, D, false),
                            input.const_data_ptr<scalar_t>(), input.stride(0), input.stride(1),
                            nullptr, G.C, G.P, G.D};
    AffineDotOp<scalar_t> op{dot, part.data_ptr<scalar_t>(), n0, n1};
    rows_run<scalar_t, 1, kGradDotFast>(G, affine_coords<scalar_t>(affine), op);
    // combine the rows (in float64): column j < D - 1 weighs a row by its outer index i_j
    const scalar_t* pp = part.const_data_ptr<scalar_t>();
    scalar_t* op_ = out.data_ptr<scalar_t>();
    const int f = G.first();
    for (int64_t b = 0; b < G.B; ++b) {
      double acc[3][4] = {{0}};
      for (int64_t i0 = 0; i0 < n0; ++i0)
        for (int64_t i1 = 0; i1 < n1; ++i1) {
          const scalar_t* r = pp + ((b * n0 + i0) * n1 + i1) * (2 * D);
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
          op_[b * out.stride(0) + d * out.stride(1) + j * out.stride(2)] =
              static_cast<scalar_t>(acc[d][j]);
    }
  });
  return out;
}

at::Tensor grid_grad_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                             const at::Tensor& grid, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate) {
  return dot_impl<false>(weight, input, grid, order, bound, extrapolate);
}

at::Tensor grid_hess_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                             const at::Tensor& grid, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate) {
  return dot_impl<true>(weight, input, grid, order, bound, extrapolate);
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
