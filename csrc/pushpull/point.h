// Per-point math of the pushpull kernels, shared by the CPU loops and the CUDA kernels.
//
// A point's support is the tensor product of one tap list per (internal) dimension. Kernels
// work on 3 internal dimensions; a D < 3 problem is padded in front with size-1 dimensions.
// Three tap-list types share one interface (count(), off(k), w(k), dw(k), ddw(k), ok(k), and
// kFixed: the count is a compile-time constant); CUDA adds a fourth (FTaps,
// pushpull/cuda/kernels.cuh):
//  - UnitTaps: a padded dimension, one tap, offset 0, weight 1, derivatives 0 (all constants).
//  - LineTaps<T, N, DER>: N consecutive in-range taps, offset off0 + k * stride (the common
//    interior case of a fast path: no folding, compile-time count, lives in registers).
//  - Taps<T, MAXT, DER>: a folded list with a runtime count n <= MAXT: folded index times
//    stride, weights with the bound's sign folded in. Taps whose sign is 0 (zero bound, dst1)
//    are dropped, so they never touch memory (a NaN at a placeholder address cannot leak in).
// The contractions below are templates over the list types; loops over a compile-time count
// unroll.
#pragma once

#include "core/bounds.h"
#include "core/common.h"
#include "core/spline.h"

#include <cmath>

namespace nitorch_jit {
namespace pushpull {

// Out of range tolerance when extrapolate is false (docs/pushpull-spec.md).
constexpr double kExtrapolateTol = 0.05;
// With extrapolate true, finite coordinates beyond +-kCoordLimit are clamped to it so that
// integer conversion stays defined; no bound gives a meaningful answer that far out anyway.
constexpr double kCoordLimit = 4.0e15;

// |v| and isfinite(v) in host and device code
NJ_HD NJ_INLINE float abs_of(float v) {
#ifdef __CUDA_ARCH__
  return fabsf(v);
#else
  return std::abs(v);
#endif
}
NJ_HD NJ_INLINE double abs_of(double v) {
#ifdef __CUDA_ARCH__
  return fabs(v);
#else
  return std::abs(v);
#endif
}
template <typename T>
NJ_HD NJ_INLINE bool is_finite(T v) {
#ifdef __CUDA_ARCH__
  return isfinite(v);
#else
  return std::isfinite(v);
#endif
}

// The range rules of coordinate v on a dim (docs/pushpull-spec.md), with lo = -kExtrapolateTol,
// hi() = (size - 1) + kExtrapolateTol and lim = kCoordLimit in T: extrapolate false, v must lie
// in [lo, hi()] (false for NaN); true, a finite v beyond +-lim is clamped to it and a non-finite
// one fails. False: the point contributes nothing. hi is called only where needed (the CUDA
// kernels compute it from the size, the CPU loops look it up).
template <typename T, class Hi>
NJ_HD NJ_INLINE bool apply_coord_rule(bool extrapolate, T lo, const Hi& hi, T lim, T& v) {
  if (!extrapolate) return v >= lo && v <= hi();
  if (!(abs_of(v) <= lim)) {
    if (!is_finite(v)) return false;
    v = v > T(0) ? lim : -lim;
  }
  return true;
}

template <typename T>
struct UnitTaps {
  static constexpr bool kFixed = true;
  NJ_HD static constexpr int count() { return 1; }
  NJ_HD static constexpr bool ok(int) { return true; }
  NJ_HD static constexpr int64_t off(int) { return 0; }
  NJ_HD static constexpr T w(int) { return T(1); }
  NJ_HD static constexpr T dw(int) { return T(0); }
  NJ_HD static constexpr T ddw(int) { return T(0); }
};

template <typename T, int N, int DER>
struct LineTaps {
  int64_t off0, stride;
  T w_[N];
  T dw_[DER >= 1 ? N : 1];
  T ddw_[DER >= 2 ? N : 1];
  static constexpr bool kFixed = true;
  NJ_HD static constexpr int count() { return N; }
  NJ_HD static constexpr bool ok(int) { return true; }
  NJ_HD NJ_INLINE int64_t off(int k) const { return off0 + k * stride; }
  NJ_HD NJ_INLINE T w(int k) const { return w_[k]; }
  NJ_HD NJ_INLINE T dw(int k) const { return dw_[k]; }
  NJ_HD NJ_INLINE T ddw(int k) const { return ddw_[k]; }
};

template <typename T, int MAXT, int DER>
struct Taps {
  int n;
  int64_t off_[MAXT];
  T w_[MAXT];
  T dw_[DER >= 1 ? MAXT : 1];
  T ddw_[DER >= 2 ? MAXT : 1];
  static constexpr bool kFixed = false;
  NJ_HD NJ_INLINE int count() const { return n; }
  NJ_HD static constexpr bool ok(int) { return true; }  // dropped taps are not in the list
  NJ_HD NJ_INLINE int64_t off(int k) const { return off_[k]; }
  NJ_HD NJ_INLINE T w(int k) const { return w_[k]; }
  NJ_HD NJ_INLINE T dw(int k) const { return dw_[k]; }
  NJ_HD NJ_INLINE T ddw(int k) const { return ddw_[k]; }
  NJ_HD NJ_INLINE void set_unit() {  // a padded dimension (generic path)
    n = 1;
    off_[0] = 0;
    w_[0] = T(1);
    dw_[0] = T(0);
    ddw_[0] = T(0);
  }
};

// Interior test for taps i0 .. i0+O on a dimension of size n.
template <int O>
NJ_HD NJ_INLINE bool taps_inside(int64_t i0, int64_t n) {
  return i0 >= 0 && i0 + O < n;
}

// Fill a LineTaps (interior) from the first tap and the fractional position.
template <int O, int DER, typename T>
NJ_HD NJ_INLINE void line_taps(int64_t i0, T u, int64_t stride, LineTaps<T, O + 1, DER>& t) {
  t.off0 = i0 * stride;
  t.stride = stride;
  SplineTaps<O, 0>::eval(u, t.w_);
  if (DER >= 1) SplineTaps<O, 1>::eval(u, t.dw_);
  if (DER >= 2) SplineTaps<O, 2>::eval(u, t.ddw_);
}

// Appends tap i (weights *w, *dw, *ddw) folded onto [0, n) to t at position m, unless its bound
// sign is 0 (the tap reads zero: dropped).
template <int DER, typename T, int MAXT>
NJ_HD NJ_INLINE void append_folded(int64_t i, const T* w, const T* dw, const T* ddw, int64_t n,
                                   int bound, int64_t stride, Taps<T, MAXT, DER>& t, int& m) {
  int s;
  const int64_t j = fold_index(i, n, bound, s);
  if (s == 0) return;
  t.off_[m] = j * stride;
  t.w_[m] = s > 0 ? *w : -*w;
  if (DER >= 1) t.dw_[m] = s > 0 ? *dw : -*dw;
  if (DER >= 2) t.ddw_[m] = s > 0 ? *ddw : -*ddw;
  ++m;
}

// Fold the taps i0 .. i0+order (weights w, dw, ddw as written by SplineTaps) into a tap list.
template <int DER, typename T, int MAXT>
NJ_HD inline void fold_taps(int64_t i0, int order, const T* w, const T* dw, const T* ddw,
                            int64_t n, int bound, int64_t stride, Taps<T, MAXT, DER>& t) {
  if (i0 >= 0 && i0 + order < n) {  // inside: no folding
    int64_t o = i0 * stride;
    for (int k = 0; k <= order; ++k, o += stride) {
      t.off_[k] = o;
      t.w_[k] = w[k];
      if (DER >= 1) t.dw_[k] = dw[k];
      if (DER >= 2) t.ddw_[k] = ddw[k];
    }
    t.n = order + 1;
    return;
  }
  int m = 0;
  for (int k = 0; k <= order; ++k)
    append_folded(i0 + k, w + k, dw + k, ddw + k, n, bound, stride, t, m);
  t.n = m;
}

// The spline taps of order O at x: first index i0, weights w (and derivatives dw, ddw).
template <int O, int DER, typename T>
NJ_HD NJ_INLINE int64_t spline_taps_at(T x, T* w, T* dw, T* ddw) {
  T u;
  const int64_t i0 = spline_start<O>(x, u);
  SplineTaps<O, 0>::eval(u, w);
  if (DER >= 1) SplineTaps<O, 1>::eval(u, dw);
  if (DER >= 2) SplineTaps<O, 2>::eval(u, ddw);
  return i0;
}

// A fixed-length folded list: the O+1 taps of a border point, each folded onto the source, in
// the order of the interior's LineTaps; a tap whose bound sign is 0 stays in the list with
// ok(k) false (weight 0, offset 0: never read or written). The CPU vector paths' border points
// take it: the contractions then unroll as for interior points (a runtime-count Taps list made
// a border point cost several interior ones). The CUDA fast kernels hold every point's taps in
// it (FTaps: offsets in I, 32 bits where they fit).
template <typename T, int N, int DER, typename I = int64_t>
struct FoldedLineTaps {
  I off_[N];
  T w_[N];
  T dw_[DER >= 1 ? N : 1];
  T ddw_[DER >= 2 ? N : 1];
  unsigned valid;  // bit k: tap k reads the source
  static constexpr bool kFixed = true;
  NJ_HD static constexpr int count() { return N; }
  NJ_HD NJ_INLINE bool ok(int k) const { return (valid >> k) & 1u; }
  NJ_HD NJ_INLINE I off(int k) const { return off_[k]; }
  NJ_HD NJ_INLINE T w(int k) const { return w_[k]; }
  NJ_HD NJ_INLINE T dw(int k) const { return dw_[k]; }
  NJ_HD NJ_INLINE T ddw(int k) const { return ddw_[k]; }
};

// Fill a FoldedLineTaps of order O for coordinate x on a dimension of size n; false when no tap
// reads the source (the point reads zero).
template <int O, int DER, typename T>
NJ_HD NJ_INLINE bool folded_line_taps(T x, int64_t n, int bound, int64_t stride,
                                      FoldedLineTaps<T, O + 1, DER>& t) {
  T w[O + 1], dw[O + 1], ddw[O + 1];
  const int64_t i0 = spline_taps_at<O, DER>(x, w, dw, ddw);
  t.valid = 0;
  for (int k = 0; k <= O; ++k) {
    int s;
    const int64_t j = fold_index(i0 + k, n, bound, s);
    const T sign = static_cast<T>(s);
    t.off_[k] = s != 0 ? j * stride : 0;
    t.w_[k] = sign * w[k];
    if (DER >= 1) t.dw_[k] = sign * dw[k];
    if (DER >= 2) t.ddw_[k] = sign * ddw[k];
    t.valid |= (s != 0 ? 1u : 0u) << k;
  }
  return t.valid != 0;
}

// Fill a folded tap list of order O for coordinate x on a dimension of size n (n >= 1).
template <int O, int DER, typename T, int MAXT>
NJ_HD NJ_INLINE void make_taps(T x, int64_t n, int bound, int64_t stride, Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= O + 1, "tap list too short");
  T w[O + 1], dw[O + 1], ddw[O + 1];
  const int64_t i0 = spline_taps_at<O, DER>(x, w, dw, ddw);
  fold_taps(i0, O, w, dw, ddw, n, bound, stride, t);
}

// Runtime order (generic path).
template <int DER, typename T, int MAXT>
NJ_HD inline void make_taps_rt(int order, T x, int64_t n, int bound, int64_t stride,
                               Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= kMaxTaps, "tap list too short");
  T u;
  const int64_t i0 = spline_start(order, x, u);
  T w[kMaxTaps], dw[kMaxTaps], ddw[kMaxTaps];
  spline_taps<0>(order, u, w);
  if (DER >= 1) spline_taps<1>(order, u, dw);
  if (DER >= 2) spline_taps<2>(order, u, ddw);
  fold_taps(i0, order, w, dw, ddw, n, bound, stride, t);
}

// The same tap lists as make_taps / make_taps_rt, built the device's way (CUDA generic path):
// one unrolled fold per order, every tap folded (no interior branch), so each order's weights
// and indices stay in registers.
template <int O, int DER, typename T, int MAXT>
NJ_HD NJ_INLINE void make_taps_unrolled(T x, int64_t n, int bound, int64_t stride,
                                        Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= O + 1, "tap list too short");
  T w[O + 1], dw[O + 1], ddw[O + 1];
  const int64_t i0 = spline_taps_at<O, DER>(x, w, dw, ddw);
  int m = 0;
  NJ_UNROLL
  for (int k = 0; k <= O; ++k)
    append_folded(i0 + k, w + k, dw + k, ddw + k, n, bound, stride, t, m);
  t.n = m;
}

template <int DER, typename T, int MAXT>
NJ_HD inline void make_taps_unrolled_rt(int order, T x, int64_t n, int bound, int64_t stride,
                                        Taps<T, MAXT, DER>& t) {
  switch (order) {
    case 0: make_taps_unrolled<0>(x, n, bound, stride, t); break;
    case 1: make_taps_unrolled<1>(x, n, bound, stride, t); break;
    case 2: make_taps_unrolled<2>(x, n, bound, stride, t); break;
    case 3: make_taps_unrolled<3>(x, n, bound, stride, t); break;
    case 4: make_taps_unrolled<4>(x, n, bound, stride, t); break;
    case 5: make_taps_unrolled<5>(x, n, bound, stride, t); break;
    case 6: make_taps_unrolled<6>(x, n, bound, stride, t); break;
    default: make_taps_unrolled<7>(x, n, bound, stride, t); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Contractions over the tensor product of three tap lists, shared by the CPU point loops and the
// CUDA kernels. What differs between the two is memory access only, given as policies:
//  - Load::load(p): a source value in the computation type (CPU: *p; CUDA: a read-only __ldg
//    load, half -> float);
//  - Add::add(p, v): *p += v (CPU: plain, or atomic where threads share `out`; CUDA: atomicAdd).
// A tap list may mark taps that must not touch memory (ok(k) false: CUDA's fixed-length lists
// at the border); they count as reading zero and are never written. Loops over a compile-time
// count unroll (NJ_UNROLL: on the device, runtime counts stay rolled, which keeps the register
// use of border points and the generic path low). Every tap list holds at least one tap
// (callers skip points with an empty list), so accumulators take the first term by assignment
// (accum): `acc = 0; acc += x` costs an add that the compiler may not remove (signed zeros). The
// initial zeros are never read: host compilers get them (dead stores that keep
// -Wmaybe-uninitialized quiet), nvcc does not (they cost instructions in rolled loops).

#ifdef __CUDA_ARCH__
#define NJ_HOST_ZERO_INIT
#else
#define NJ_HOST_ZERO_INIT = 0
#endif

struct PlainLoad {
  template <typename T>
  NJ_HD NJ_INLINE static T load(const T* p) { return *p; }
};

struct PlainAdd {
  template <typename T>
  NJ_HD NJ_INLINE static void add(T* p, T v) { *p += v; }
};

// acc = (first ? x : acc + x); with unrolled loops `first` is a constant.
template <typename T>
NJ_HD NJ_INLINE void accum(bool first, T& acc, T x) {
  acc = first ? x : acc + x;
}

// for (k = 0; k < t.count(); ++k) f(k): unrolled when the count is a compile-time constant
// (TP::kFixed), never unrolled otherwise (on the device: keeps the register use of the border
// points and the generic path low). The loop bodies are lambdas, as in the CUDA kernels before
// this code was shared: nvcc then folds the constant tap index into every use (a nest of plain
// loops gave the order-3 CUDA pull 24 fewer registers, and spills).
template <class TP, class F>
NJ_HD NJ_INLINE void for_taps(const TP& t, F&& f) {
  if constexpr (TP::kFixed) {
    NJ_UNROLL
    for (int k = 0; k < t.count(); ++k) f(k);
  } else {
    NJ_NO_UNROLL
    for (int k = 0; k < t.count(); ++k) f(k);
  }
}

// sum_t W_t s_t in[j_t]
template <class Load = PlainLoad, class TP0, class TP1, class TP2, typename S>
NJ_HD NJ_INLINE auto pull_point(const TP0& t0, const TP1& t1, const TP2& t2, const S* in)
    -> decltype(Load::load(in)) {
  using A = decltype(Load::load(in));
  A acc NJ_HOST_ZERO_INIT;
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    A acc1 NJ_HOST_ZERO_INIT;
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      const S* p = in + (t0.off(a) + t1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      A acc2 NJ_HOST_ZERO_INIT;
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        const A v = ab && t2.ok(c) ? Load::load(p + t2.off(c)) : A(0);
        accum(c == 0, acc2, t2.w(c) * v);
      });
      accum(b == 0, acc1, t1.w(b) * acc2);
    });
    accum(a == 0, acc, t0.w(a) * acc1);
  });
  return acc;
}

// g_k = sum_t G_{t,k} s_t in[j_t] for the three internal dims k.
template <class Load = PlainLoad, class TP0, class TP1, class TP2, typename S, typename A>
NJ_HD NJ_INLINE void grad_point(const TP0& t0, const TP1& t1, const TP2& t2, const S* in, A& g0,
                                A& g1, A& g2) {
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    // sums over b, c of: w1 w2 v, dw1 w2 v, w1 dw2 v
    A m NJ_HOST_ZERO_INIT, m1 NJ_HOST_ZERO_INIT, m2 NJ_HOST_ZERO_INIT;
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      const S* p = in + (t0.off(a) + t1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      A i NJ_HOST_ZERO_INIT, i2 NJ_HOST_ZERO_INIT;  // sums over c of: w2 v, dw2 v
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        const A v = ab && t2.ok(c) ? Load::load(p + t2.off(c)) : A(0);
        accum(c == 0, i, t2.w(c) * v);
        accum(c == 0, i2, t2.dw(c) * v);
      });
      accum(b == 0, m, t1.w(b) * i);
      accum(b == 0, m1, t1.dw(b) * i);
      accum(b == 0, m2, t1.w(b) * i2);
    });
    accum(a == 0, g0, t0.dw(a) * m);
    accum(a == 0, g1, t0.w(a) * m1);
    accum(a == 0, g2, t0.w(a) * m2);
  });
}

// Hessian of the interpolated field: h = {H00, H11, H22, H01, H02, H12}.
template <class Load = PlainLoad, class TP0, class TP1, class TP2, typename S, typename A>
NJ_HD NJ_INLINE void hess_point(const TP0& t0, const TP1& t1, const TP2& t2, const S* in, A* h) {
  A h00 NJ_HOST_ZERO_INIT, h11 NJ_HOST_ZERO_INIT, h22 NJ_HOST_ZERO_INIT;
  A h01 NJ_HOST_ZERO_INIT, h02 NJ_HOST_ZERO_INIT, h12 NJ_HOST_ZERO_INIT;
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    // sums over b, c of: w1 w2 v, dw1 w2 v, ddw1 w2 v, w1 dw2 v, dw1 dw2 v, w1 ddw2 v
    A m NJ_HOST_ZERO_INIT, m1 NJ_HOST_ZERO_INIT, m11 NJ_HOST_ZERO_INIT;
    A m2 NJ_HOST_ZERO_INIT, m12 NJ_HOST_ZERO_INIT, m22 NJ_HOST_ZERO_INIT;
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      const S* p = in + (t0.off(a) + t1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      A i NJ_HOST_ZERO_INIT, i2 NJ_HOST_ZERO_INIT, i22 NJ_HOST_ZERO_INIT;
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        const A v = ab && t2.ok(c) ? Load::load(p + t2.off(c)) : A(0);
        accum(c == 0, i, t2.w(c) * v);
        accum(c == 0, i2, t2.dw(c) * v);
        accum(c == 0, i22, t2.ddw(c) * v);
      });
      accum(b == 0, m, t1.w(b) * i);
      accum(b == 0, m1, t1.dw(b) * i);
      accum(b == 0, m11, t1.ddw(b) * i);
      accum(b == 0, m2, t1.w(b) * i2);
      accum(b == 0, m12, t1.dw(b) * i2);
      accum(b == 0, m22, t1.w(b) * i22);
    });
    accum(a == 0, h00, t0.ddw(a) * m);
    accum(a == 0, h01, t0.dw(a) * m1);
    accum(a == 0, h02, t0.dw(a) * m2);
    accum(a == 0, h11, t0.w(a) * m11);
    accum(a == 0, h12, t0.w(a) * m12);
    accum(a == 0, h22, t0.w(a) * m22);
  });
  h[0] = h00;
  h[1] = h11;
  h[2] = h22;
  h[3] = h01;
  h[4] = h02;
  h[5] = h12;
}

// out[j_t] += W_t s_t val. The write lists w0, w1, w2 give the offsets into out: the tap lists'
// own (push_point), or a block's shared window in CUDA's tiled scatter (pushpull/cuda/tiles.cuh).
template <class Add, class TP0, class TP1, class TP2, class W0, class W1, class W2, typename A>
NJ_HD NJ_INLINE void push_point_to(const TP0& t0, const TP1& t1, const TP2& t2, const W0& w0,
                                   const W1& w1, const W2& w2, A* out, A val) {
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    const A v0 = t0.w(a) * val;
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      A* p = out + (w0.off(a) + w1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      const A v1 = t1.w(b) * v0;
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        if (ab && t2.ok(c)) Add::add(p + w2.off(c), t2.w(c) * v1);
      });
    });
  });
}

template <class Add, class TP0, class TP1, class TP2, typename A>
NJ_HD NJ_INLINE void push_point(const TP0& t0, const TP1& t1, const TP2& t2, A* out, A val) {
  push_point_to<Add>(t0, t1, t2, t0, t1, t2, out, val);
}

// out[j_t] += sum_k G_{t,k} s_t g_k
template <class Add, class TP0, class TP1, class TP2, typename A>
NJ_HD NJ_INLINE void pushgrad_point(const TP0& t0, const TP1& t1, const TP2& t2, A* out, A g0,
                                    A g1, A g2) {
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    const A x0 = t0.dw(a) * g0;  // terms whose derivative is already taken
    const A y0 = t0.w(a);        // product of weights so far
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      A* p = out + (t0.off(a) + t1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      const A x1 = x0 * t1.w(b) + y0 * t1.dw(b) * g1;
      const A y1 = y0 * t1.w(b) * g2;
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        if (ab && t2.ok(c)) Add::add(p + t2.off(c), x1 * t2.w(c) + y1 * t2.dw(c));
      });
    });
  });
}

// pull_backward of one channel in one walk over the taps: g = grad(in) as grad_point, and
// out[j_t] += W_t s_t val as push_point_to (write lists w0, w1, w2). (The CPU kernels walk
// twice, grad_point then push_point: measured faster there, cpu/loop.h.)
template <class Load, class Add, class TP0, class TP1, class TP2, class W0, class W1, class W2,
          typename S, typename A>
NJ_HD NJ_INLINE void pullback_point(const TP0& t0, const TP1& t1, const TP2& t2, const W0& w0,
                                    const W1& w1, const W2& w2, const S* in, A* out, A val, A& g0,
                                    A& g1, A& g2) {
  for_taps(t0, [&](int a) NJ_LAMBDA_INLINE {
    A m NJ_HOST_ZERO_INIT, m1 NJ_HOST_ZERO_INIT, m2 NJ_HOST_ZERO_INIT;
    const A v0 = t0.w(a) * val;
    for_taps(t1, [&](int b) NJ_LAMBDA_INLINE {
      const S* p = in + (t0.off(a) + t1.off(b));
      A* q = out + (w0.off(a) + w1.off(b));
      const bool ab = t0.ok(a) && t1.ok(b);
      const A v1 = t1.w(b) * v0;
      A i NJ_HOST_ZERO_INIT, i2 NJ_HOST_ZERO_INIT;
      for_taps(t2, [&](int c) NJ_LAMBDA_INLINE {
        const bool ok = ab && t2.ok(c);
        const A v = ok ? Load::load(p + t2.off(c)) : A(0);
        accum(c == 0, i, t2.w(c) * v);
        accum(c == 0, i2, t2.dw(c) * v);
        if (ok) Add::add(q + w2.off(c), t2.w(c) * v1);
      });
      accum(b == 0, m, t1.w(b) * i);
      accum(b == 0, m1, t1.dw(b) * i);
      accum(b == 0, m2, t1.w(b) * i2);
    });
    accum(a == 0, g0, t0.dw(a) * m);
    accum(a == 0, g1, t0.w(a) * m1);
    accum(a == 0, g2, t0.w(a) * m2);
  });
}

}  // namespace pushpull
}  // namespace nitorch_jit
