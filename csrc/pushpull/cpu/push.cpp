// grid_push and grid_pushgrad on CPU (docs/pushpull-spec.md): the adjoints of pull and grad;
// and grid_pull_backward, both gradients of pull (push and grad_dot) in one pass over the
// points. All three scatter through scatter_run. (grid_pull_backward lives here rather than in
// a file of its own: on a 2-core machine a fourth translation unit made the module's build
// ~10 s longer, this file ~3 s.) The kernels, torch-free: see pull.cpp.
#include "pushpull/cpu/avx2/select.h"
#include "pushpull/cpu/loop.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

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
  // order 1, float32, 2-D or 3-D: the vector path of avx2/push.h (scatter_run asks first)
  bool fast_range(const Geom& G, const T* grid, int64_t begin, int64_t end) const {
#ifdef NJ_FASTPATH_AVX2
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Add, PlainAdd>)
      return try_scatter_avx2<Push2dAvx2, Push3dAvx2>(G, grid, begin, end, is.s[2], *this);
#endif
    return false;
  }
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

// grid_push (kGrad false) and grid_pushgrad, with the op's fast paths MASK; the output is
// zeroed by the binding.
template <typename T, bool kGrad, int MASK, class Src>
void push_run(const Call& c, const Src& src) {
  const Geom& G = c.G;
  const int64_t N = G.src[0] * G.src[1] * G.src[2];
  const T* ip = in_ptr<T>(c.pts);
  const PointStrides is = c.ps;
  const int64_t C = G.C;
  const int Dint = G.D;
  auto make_op = [&](T* dst, auto add) {
    using Add = decltype(add);
    if constexpr (kGrad)
      return PushGradOp<T, Add>{ip, is, dst, C, N, Dint};
    else
      return PushOp<T, Add>{ip, is, dst, C, N};
  };
  scatter_run<T, kGrad ? 1 : 0, MASK>(G, src, out_ptr<T>(c.out), c.out_numel, make_op);
}

// grid_pull_backward. Each point's grid coordinates and incoming gradient are read once and its
// tap lists (weights and derivatives) built once; the grid gradient of a point is written by
// the thread that owns it. Same fast paths as pushgrad (orders 1 and 3): the common backward
// orders, few instantiations.

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
      return try_scatter_avx2<PullBack2dAvx2, PullBack3dAvx2>(G, grid, begin, end, gs.s[2],
                                                               *this);
#endif
    return false;
  }
};

// ---- the kernels

template <typename T>
void grid_push(const Call& c) {
  push_run<T, false, kFast_grid_push>(c, in_ptr<T>(c.grid));
}

template <typename T>
void grid_pushgrad(const Call& c) {
  push_run<T, true, kFast_grid_pushgrad>(c, in_ptr<T>(c.grid));
}

// affine_push: the adjoint of affine_pull. The point-wise input [B, C, *O] holds one value per
// output voxel of the pull; they are splatted at affine[b] @ (i, 1) into [B, C, *shape].
template <typename T>
void affine_push(const Call& c) {
  push_run<T, false, kFast_affine_push>(c, affine_coords<T>(c));
}

// grid_pull_backward: grad_input (out, zeroed, [B, C, *S] contiguous) and grad_grid (out2).
template <typename T>
void grid_pull_backward(const Call& c) {
  const Geom& G = c.G;
  const int64_t N = G.src[0] * G.src[1] * G.src[2];
  const T* gp = in_ptr<T>(c.pts);
  const T* ip = in_ptr<T>(c.src);
  T* ggp = out_ptr<T>(c.out2);
  const PointStrides gs = c.ps;
  const int64_t sB = c.sB, sC = c.sC, C = G.C, P = G.P;
  const int Dint = G.D;
  auto make_op = [&](T* dst, auto add) {
    return PullBackOp<T, decltype(add)>{gp, gs, ip, sB, sC, dst, ggp, C, N, P, Dint};
  };
  scatter_run<T, 1, kFast_grid_pull_backward>(G, in_ptr<T>(c.grid), out_ptr<T>(c.out), c.out_numel,
                                   make_op);
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_grid_push)
NJ_KERNEL_ENTRY(pushpull_grid_push, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_push<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_grid_pushgrad)
NJ_KERNEL_ENTRY(pushpull_grid_pushgrad, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_pushgrad<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_affine_push)
NJ_KERNEL_ENTRY(pushpull_affine_push, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::affine_push<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_grid_pull_backward)
NJ_KERNEL_ENTRY(pushpull_grid_pull_backward, nitorch_jit::pushpull::cpu::Call,
                nitorch_jit::pushpull::cpu::grid_pull_backward<NJ_KERNEL_T>(call))
#endif
