// grid_pull and grid_grad on CPU (docs/pushpull-spec.md).
#include <torch/library.h>

#include "pushpull_cpu.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

// Fast paths: every dim of order 0, 1 or 3.
constexpr int kPullFast = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3);
constexpr int kGradFast = (1 << 1) | (1 << 2) | (1 << 3);

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
      grad_point(t0, t1, t2, ib + c * sC, g);
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

std::vector<int64_t> out_shape(const at::Tensor& input, const at::Tensor& grid, int64_t D,
                               bool with_d) {
  std::vector<int64_t> s = {input.size(0), input.size(1)};
  for (int64_t d = 0; d < D; ++d) s.push_back(grid.size(1 + d));
  if (with_d) s.push_back(D);
  return s;
}

at::Tensor grid_pull_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef order,
                         at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_options(order, bound, D);
  const Geom G = make_geom(grid, D, input.size(1), input.sizes().slice(2), input.strides().slice(2),
                           order, bound, extrapolate);
  at::Tensor out = at::empty(out_shape(input, grid, D, false), grid.options());
  if (out.numel() == 0) return out;
  if (G.empty_source()) return out.zero_();
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), "grid_pull", [&] {
    PullOp<scalar_t> op{input.const_data_ptr<scalar_t>(), input.stride(0), input.stride(1),
                        out.data_ptr<scalar_t>(), G.C, G.P};
    gather_run<scalar_t, 0, kPullFast>(G, grid.const_data_ptr<scalar_t>(), op);
  });
  return out;
}

at::Tensor grid_grad_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef order,
                         at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_options(order, bound, D);
  const Geom G = make_geom(grid, D, input.size(1), input.sizes().slice(2), input.strides().slice(2),
                           order, bound, extrapolate);
  at::Tensor out = at::empty(out_shape(input, grid, D, true), grid.options());
  if (out.numel() == 0) return out;
  if (G.empty_source()) return out.zero_();
  AT_DISPATCH_FLOATING_TYPES(grid.scalar_type(), "grid_grad", [&] {
    GradOp<scalar_t> op{input.const_data_ptr<scalar_t>(), input.stride(0), input.stride(1),
                        out.data_ptr<scalar_t>(), G.C, G.P, G.D};
    gather_run<scalar_t, 1, kGradFast>(G, grid.const_data_ptr<scalar_t>(), op);
  });
  return out;
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("grid_pull", &nitorch_jit::pushpull::cpu::grid_pull_cpu);
  m.impl("grid_grad", &nitorch_jit::pushpull::cpu::grid_grad_cpu);
}
