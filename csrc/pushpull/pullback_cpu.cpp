// grid_pull_backward on CPU (docs/pushpull-spec.md): both gradients of grid_pull in one pass
// over the points, grad_input = grid_push(grad) and grad_grid = grid_grad_dot(grad, input).
// Each point's tap lists (weights and derivatives) are built once and each tap is visited once:
// it reads input there and adds into grad_input there. The scatter uses scatter_run (private
// per-thread copies or atomics, as push); the grid gradient of a point is written by the thread
// that owns the point.
#include <torch/library.h>

#include <tuple>

#include "pushpull_cpu.h"
#include "pushpull_tensor.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

// Same fast paths as pushgrad (orders 1 and 3): the common backward orders, few instantiations.
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
      T g[3];
      pullback_point<Add>(t0, t1, t2, ib + c * sC, ob + c * N, v, g);
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
};

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
  TORCH_CHECK(grad.size(1) == input.size(1), "grad channels (", grad.size(1),
              ") must equal input channels (", input.size(1), ")");
  check_options(order, bound, D);
  at::Tensor gin = at::zeros(input.sizes(), grid.options());
  std::vector<int64_t> gsize(grid.sizes().begin(), grid.sizes().end());
  at::Tensor ggrid = at::empty(gsize, grid.options());
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

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("grid_pull_backward", &nitorch_jit::pushpull::cpu::grid_pull_backward_cpu);
}
