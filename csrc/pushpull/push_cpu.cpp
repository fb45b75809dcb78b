// grid_push and grid_pushgrad on CPU (docs/pushpull-spec.md): the adjoints of pull and grad.
#include <torch/library.h>

#include "pushpull_cpu.h"

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

void check_shape(at::IntArrayRef shape, int64_t D) {
  TORCH_CHECK(static_cast<int64_t>(shape.size()) == D, "shape must have D = ", D,
              " entries (the output spatial size), got ", shape.size());
  for (int64_t d = 0; d < D; ++d)
    TORCH_CHECK(shape[d] >= 0, "shape[", d, "] must be >= 0, got ", shape[d]);
}

template <bool kGrad>
at::Tensor push_impl(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef shape,
                     at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, kGrad, kGrad ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(input, "input", grid, D);
  check_options(order, bound, D);
  check_shape(shape, D);
  std::vector<int64_t> osize = {input.size(0), input.size(1)};
  for (int64_t d = 0; d < D; ++d) osize.push_back(shape[d]);
  at::Tensor out = at::zeros(osize, grid.options());
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

at::Tensor grid_push_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef shape,
                         at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate) {
  return push_impl<false>(input, grid, shape, order, bound, extrapolate);
}

at::Tensor grid_pushgrad_cpu(const at::Tensor& input, const at::Tensor& grid,
                             at::IntArrayRef shape, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate) {
  return push_impl<true>(input, grid, shape, order, bound, extrapolate);
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("grid_push", &nitorch_jit::pushpull::cpu::grid_push_cpu);
  m.impl("grid_pushgrad", &nitorch_jit::pushpull::cpu::grid_pushgrad_cpu);
}
