// grid_push and grid_pushgrad on CPU (docs/pushpull-spec.md): the adjoints of pull and grad;
// and grid_pull_backward, both gradients of pull (push and grad_dot) in one pass over the
// points. All three scatter through scatter_run. (grid_pull_backward lives here rather than in
// a file of its own: on a 2-core machine a fourth translation unit made the module's build
// ~10 s longer, this file ~3 s.)
#include <torch/library.h>

#include <tuple>

#include "pushpull/cpu/avx2/select.h"
#include "pushpull/cpu/loop.h"
#include "pushpull/cpu/ops.h"
#include "pushpull/tensor.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

constexpr int kPushFast = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3);
constexpr int kPushGradFast = (1 << 1) | (1 << 3);

template <typename T, class Add>
struct PushOp {
  const T* in;
  PointStrides is;
  T* out;  // [B, C, N] contiguous
  int64_t C, N;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* ip = in + is.at(pt);
    T* ob = out + pt.b * C * N;
    for (int64_t c = 0; c < C; ++c) {
      const T v = ip[c * is.sC];
      if (v == T(0)) continue;  // adds exactly nothing (weights are finite)
      push_point<Add>(t0, t1, t2, ob + c * N, v);
    }
  }
  void empty(const Point&) const {}
};

template <typename T, class Add>
struct PushGradOp {
  const T* in;
  PointStrides is;
  T* out;  // [B, C, N] contiguous
  int64_t C, N;
  int D;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* ip = in + is.at(pt);
    T* ob = out + pt.b * C * N;
    const int f = 3 - D;
    for (int64_t c = 0; c < C; ++c) {
      T g[3] = {T(0), T(0), T(0)};
      bool any = false;
      for (int d = 0; d < D; ++d) {
        g[f + d] = ip[c * is.sC + d * is.sD];
        any = any || (g[f + d] != T(0));
      }
      if (!any) continue;
      pushgrad_point<Add>(t0, t1, t2, ob + c * N, g[0], g[1], g[2]);
    }
  }
  void empty(const Point&) const {}
};

template <bool kGrad>
at::Tensor push_impl(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef shape,
                     at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, kGrad, kGrad ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(input, "input", grid, D);
  check_options(order, bound, D);
  check_shape(shape, D);
  at::Tensor out = zeros_output(resampled_size(input, shape), grid.options());
  if (out.numel() == 0) return out;
  std::vector<int64_t> ostride(out.strides().begin() + 2, out.strides().end());
  const Geom G = make_geom(grid, D, input.size(1), shape, ostride, order, bound, extrapolate);
  const int64_t N = G.src[0] * G.src[1] * G.src[2];
  const PointStrides is = point_strides(input, D, kGrad);
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), kGrad ? "grid_pushgrad" : "grid_push", [&] {
    const scalar_t* ip = input.const_data_ptr<scalar_t>();
    const int64_t C = G.C;
    const int Dint = G.D;
    auto make_op = [&](scalar_t* dst, auto add) {
      using Add = decltype(add);
      if constexpr (kGrad)
        return PushGradOp<scalar_t, Add>{ip, is, dst, C, N, Dint};
      else
        return PushOp<scalar_t, Add>{ip, is, dst, C, N};
    };
    scatter_run<scalar_t, kGrad ? 1 : 0, kGrad ? kPushGradFast : kPushFast>(
        G, grid.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), out.numel(), make_op);
  });
  return out;
}

// grid_pull_backward. Each point's grid coordinates and incoming gradient are read once and its
// tap lists (weights and derivatives) built once; the grid gradient of a point is written by
// the thread that owns it. Same fast paths as pushgrad (orders 1 and 3): the common backward
// orders, few instantiations.
constexpr int kPullBackFast = (1 << 1) | (1 << 3);

template <typename T, class Add>
struct PullBackOp {
  const T* gr;  // incoming gradient [B, C, *O]
  PointStrides gs;
  const T* in;  // input [B, C, *S], spatial strides those of `out`
  int64_t sB, sC;
  T* out;  // grad_input [B, C, N] contiguous
  T* gg;   // grad_grid [B, P, D] contiguous
  int64_t C, N, P;
  int D;

  template <class TP0, class TP1, class TP2>
  NJ_INLINE void apply(const Point& pt, const TP0& t0, const TP1& t1, const TP2& t2) const {
    const T* gp = gr + gs.at(pt);
    const T* ib = in + pt.b * sB;
    T* ob = out + pt.b * C * N;
    T acc[3] = {T(0), T(0), T(0)};
    for (int64_t c = 0; c < C; ++c) {
      const T v = gp[c * gs.sC];
      // adds nothing to grad_input, and v * (finite gradient) adds nothing to grad_grid
      if (v == T(0)) continue;
      // two walks over the same taps: measured faster here than one walk that reads and adds
      // at each tap (128^3, order 3: 84 vs 103 ms, order 1: 23.5 vs 25.7 ms on 2 threads)
      T g[3];
      grad_point(t0, t1, t2, ib + c * sC, g[0], g[1], g[2]);
      push_point<Add>(t0, t1, t2, ob + c * N, v);
      acc[0] += v * g[0];
      acc[1] += v * g[1];
      acc[2] += v * g[2];
    }
    T* o = gg + (pt.b * P + pt.p) * D;
    const int f = 3 - D;
    for (int d = 0; d < D; ++d) o[d] = acc[f + d];
  }
  void empty(const Point& pt) const {
    T* o = gg + (pt.b * P + pt.p) * D;
    for (int d = 0; d < D; ++d) o[d] = T(0);
  }
  // order 1, float32, 2-D or 3-D: the vector path of avx2/pullback.h (scatter_run asks first)
  bool fast_range(const Geom& G, const T* grid, int64_t begin, int64_t end) const {
#ifdef NJ_FASTPATH_AVX2
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Add, PlainAdd>)
      return try_pullback_avx2(G, grid, begin, end, *this);
#endif
    return false;
  }
};

}  // namespace

// ---- the ops (ops.h; registered in pull.cpp)

at::Tensor grid_push_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef shape,
                         at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  return push_impl<false>(input, grid, shape, order, bound, extrapolate);
}

at::Tensor grid_pushgrad_cpu(const at::Tensor& input, const at::Tensor& grid,
                             at::IntArrayRef shape, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate) {
  return push_impl<true>(input, grid, shape, order, bound, extrapolate);
}

// affine_push: the adjoint of affine_pull. input [B, C, *O] holds one value per output voxel of
// the pull; they are splatted at affine[b] @ (i, 1) into [B, C, *shape].
at::Tensor affine_push_cpu(const at::Tensor& input, const at::Tensor& affine, at::IntArrayRef shape,
                           at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_affine_resample(input, "[B, C, *O]", affine, shape, order, bound);
  at::Tensor out = zeros_output(resampled_size(input, shape), input.options());
  if (out.numel() == 0) return out;
  std::vector<int64_t> ostride(out.strides().begin() + 2, out.strides().end());
  const Geom G = make_points_geom(input.size(0), input.sizes().slice(2), D, input.size(1), shape,
                                  ostride, order, bound, extrapolate);
  const int64_t N = G.src[0] * G.src[1] * G.src[2];
  const PointStrides is = point_strides(input, D, false);
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "affine_push", [&] {
    const scalar_t* ip = input.const_data_ptr<scalar_t>();
    const int64_t C = G.C;
    auto make_op = [&](scalar_t* dst, auto add) {
      return PushOp<scalar_t, decltype(add)>{ip, is, dst, C, N};
    };
    scatter_run<scalar_t, 0, kPushFast>(G, affine_coords<scalar_t>(affine),
                                        out.data_ptr<scalar_t>(), out.numel(), make_op);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> grid_pull_backward_cpu(const at::Tensor& grad,
                                                          const at::Tensor& input,
                                                          const at::Tensor& grid,
                                                          at::IntArrayRef order,
                                                          at::IntArrayRef bound,
                                                          bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_tensor(grad, "grad", grid, D, false, "[B, C, *O]");
  check_point_shape(grad, "grad", grid, D);
  check_channels(grad, "grad", input);
  check_options(order, bound, D);
  at::Tensor gin = zeros_output(input.sizes(), grid.options());
  std::vector<int64_t> gsize(grid.sizes().begin(), grid.sizes().end());
  at::Tensor ggrid = empty_output(gsize, grid.options());
  if (ggrid.numel() == 0) return {gin, ggrid};
  if (gin.numel() == 0) return {gin, ggrid.zero_()};  // no channel or an empty source
  const at::Tensor src = spatially_contiguous(input, D);
  const Geom G = make_geom(grid, D, src.size(1), src.sizes().slice(2), src.strides().slice(2),
                           order, bound, extrapolate);
  const int64_t N = G.src[0] * G.src[1] * G.src[2];
  const PointStrides gs = point_strides(grad, D, false);
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), "grid_pull_backward", [&] {
    const scalar_t* gp = grad.const_data_ptr<scalar_t>();
    const scalar_t* ip = src.const_data_ptr<scalar_t>();
    scalar_t* ggp = ggrid.data_ptr<scalar_t>();
    const int64_t sB = src.stride(0), sC = src.stride(1), C = G.C, P = G.P;
    const int Dint = G.D;
    auto make_op = [&](scalar_t* dst, auto add) {
      return PullBackOp<scalar_t, decltype(add)>{gp, gs, ip, sB, sC, dst, ggp, C, N, P, Dint};
    };
    scatter_run<scalar_t, 1, kPullBackFast>(G, grid.const_data_ptr<scalar_t>(),
                                           gin.data_ptr<scalar_t>(), gin.numel(), make_op);
  });
  return {gin, ggrid};
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
