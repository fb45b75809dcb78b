// Per-point math of the pushpull kernels, shared by the CPU loops and (later) CUDA kernels.
//
// A point's support is the tensor product of one tap list per (internal) dimension. Kernels
// work on 3 internal dimensions; a D < 3 problem is padded in front with size-1 dimensions.
// Three tap-list types share one interface (count(), off(k), w(k), dw(k), ddw(k)):
//  - UnitTaps: a padded dimension, one tap, offset 0, weight 1, derivatives 0 (all constants).
//  - LineTaps<T, N, DER>: N consecutive in-range taps, offset off0 + k * stride (the common
//    interior case of a fast path: no folding, compile-time count, lives in registers).
//  - Taps<T, MAXT, DER>: a folded list with a runtime count n <= MAXT: folded index times
//    stride, weights with the bound's sign folded in. Taps whose sign is 0 (zero bound, dst1)
//    are dropped, so they never touch memory (a NaN at a placeholder address cannot leak in).
// The contractions below are templates over the three list types; loops over a compile-time
// count unroll.
#pragma once

#include "nitorch_jit/bounds.h"
#include "nitorch_jit/common.h"
#include "nitorch_jit/spline.h"

namespace nitorch_jit {
namespace pushpull {

// Out of range tolerance when extrapolate is false (docs/pushpull-spec.md).
constexpr double kExtrapolateTol = 0.05;
// With extrapolate true, finite coordinates beyond +-kCoordLimit are clamped to it so that
// integer conversion stays defined; no bound gives a meaningful answer that far out anyway.
constexpr double kCoordLimit = 4.0e15;

template <typename T>
struct UnitTaps {
  NJ_HD static constexpr int count() { return 1; }
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
  NJ_HD static constexpr int count() { return N; }
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
  NJ_HD NJ_INLINE int count() const { return n; }
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
  for (int k = 0; k <= order; ++k) {
    int s;
    const int64_t j = fold_index(i0 + k, n, bound, s);
    if (s == 0) continue;
    t.off_[m] = j * stride;
    t.w_[m] = s > 0 ? w[k] : -w[k];
    if (DER >= 1) t.dw_[m] = s > 0 ? dw[k] : -dw[k];
    if (DER >= 2) t.ddw_[m] = s > 0 ? ddw[k] : -ddw[k];
    ++m;
  }
  t.n = m;
}

// Fill a folded tap list of order O for coordinate x on a dimension of size n (n >= 1).
template <int O, int DER, typename T, int MAXT>
NJ_HD NJ_INLINE void make_taps(T x, int64_t n, int bound, int64_t stride, Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= O + 1, "tap list too short");
  T u;
  const int64_t i0 = spline_start<O>(x, u);
  T w[O + 1], dw[O + 1], ddw[O + 1];
  SplineTaps<O, 0>::eval(u, w);
  if (DER >= 1) SplineTaps<O, 1>::eval(u, dw);
  if (DER >= 2) SplineTaps<O, 2>::eval(u, ddw);
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

// ---------------------------------------------------------------------------------------------
// Gathers. `in` points at the first voxel of one channel of the source. Every tap list holds at
// least one tap (callers skip points with an empty list), so accumulators take the first term
// by assignment: `acc = 0; acc += x` costs an add that the compiler may not remove (signed
// zeros). (The initial zeros below are dead stores that keep -Wmaybe-uninitialized quiet.)

// acc = (first ? x : acc + x); with unrolled loops `first` is a constant.
template <typename T>
NJ_HD NJ_INLINE void accum(bool first, T& acc, T x) {
  acc = first ? x : acc + x;
}

// sum_t W_t s_t in[j_t]
template <typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE T pull_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in) {
  T acc = T(0);
  NJ_UNROLL
  for (int a = 0; a < t0.count(); ++a) {
    const T* p0 = in + t0.off(a);
    T acc1 = T(0);
    NJ_UNROLL
    for (int b = 0; b < t1.count(); ++b) {
      const T* p1 = p0 + t1.off(b);
      T acc2 = T(0);
      NJ_UNROLL
      for (int c = 0; c < t2.count(); ++c) accum(c == 0, acc2, t2.w(c) * p1[t2.off(c)]);
      accum(b == 0, acc1, t1.w(b) * acc2);
    }
    accum(a == 0, acc, t0.w(a) * acc1);
  }
  return acc;
}

// g[k] = sum_t G_{t,k} s_t in[j_t] for the three internal dims k.
template <typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void grad_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in, T* g) {
  T g0 = T(0), g1 = T(0), g2 = T(0);
  NJ_UNROLL
  for (int a = 0; a < t0.count(); ++a) {
    const T* p0 = in + t0.off(a);
    T m = T(0), m1 = T(0), m2 = T(0);  // sums over b, c of: w1 w2 v, dw1 w2 v, w1 dw2 v
    NJ_UNROLL
    for (int b = 0; b < t1.count(); ++b) {
      const T* p1 = p0 + t1.off(b);
      T i = T(0), i2 = T(0);  // sums over c of: w2 v, dw2 v
      NJ_UNROLL
      for (int c = 0; c < t2.count(); ++c) {
        const T v = p1[t2.off(c)];
        accum(c == 0, i, t2.w(c) * v);
        accum(c == 0, i2, t2.dw(c) * v);
      }
      accum(b == 0, m, t1.w(b) * i);
      accum(b == 0, m1, t1.dw(b) * i);
      accum(b == 0, m2, t1.w(b) * i2);
    }
    accum(a == 0, g0, t0.dw(a) * m);
    accum(a == 0, g1, t0.w(a) * m1);
    accum(a == 0, g2, t0.w(a) * m2);
  }
  g[0] = g0;
  g[1] = g1;
  g[2] = g2;
}

// Hessian of the interpolated field: h = {H00, H11, H22, H01, H02, H12}.
template <typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void hess_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in, T* h) {
  T h00 = T(0), h11 = T(0), h22 = T(0), h01 = T(0), h02 = T(0), h12 = T(0);
  for (int a = 0; a < t0.count(); ++a) {
    const T* p0 = in + t0.off(a);
    // sums over b, c of: w1 w2 v, dw1 w2 v, ddw1 w2 v, w1 dw2 v, dw1 dw2 v, w1 ddw2 v
    T m = T(0), m1 = T(0), m11 = T(0), m2 = T(0), m12 = T(0), m22 = T(0);
    for (int b = 0; b < t1.count(); ++b) {
      const T* p1 = p0 + t1.off(b);
      T i = T(0), i2 = T(0), i22 = T(0);
      for (int c = 0; c < t2.count(); ++c) {
        const T v = p1[t2.off(c)];
        accum(c == 0, i, t2.w(c) * v);
        accum(c == 0, i2, t2.dw(c) * v);
        accum(c == 0, i22, t2.ddw(c) * v);
      }
      accum(b == 0, m, t1.w(b) * i);
      accum(b == 0, m1, t1.dw(b) * i);
      accum(b == 0, m11, t1.ddw(b) * i);
      accum(b == 0, m2, t1.w(b) * i2);
      accum(b == 0, m12, t1.dw(b) * i2);
      accum(b == 0, m22, t1.w(b) * i22);
    }
    accum(a == 0, h00, t0.ddw(a) * m);
    accum(a == 0, h01, t0.dw(a) * m1);
    accum(a == 0, h02, t0.dw(a) * m2);
    accum(a == 0, h11, t0.w(a) * m11);
    accum(a == 0, h12, t0.w(a) * m12);
    accum(a == 0, h22, t0.w(a) * m22);
  }
  h[0] = h00;
  h[1] = h11;
  h[2] = h22;
  h[3] = h01;
  h[4] = h02;
  h[5] = h12;
}

// ---------------------------------------------------------------------------------------------
// Scatters. `out` points at the first voxel of one channel of the destination. Add is a class
// with a static add(T*, T) (plain, or atomic where several threads share `out`).

// out[j_t] += W_t s_t val
template <class Add, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void push_point(const TP0& t0, const TP1& t1, const TP2& t2, T* out, T val) {
  NJ_UNROLL
  for (int a = 0; a < t0.count(); ++a) {
    T* p0 = out + t0.off(a);
    const T v0 = t0.w(a) * val;
    NJ_UNROLL
    for (int b = 0; b < t1.count(); ++b) {
      T* p1 = p0 + t1.off(b);
      const T v1 = t1.w(b) * v0;
      NJ_UNROLL
      for (int c = 0; c < t2.count(); ++c) Add::add(p1 + t2.off(c), t2.w(c) * v1);
    }
  }
}

// out[j_t] += sum_k G_{t,k} s_t g[k]
template <class Add, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void pushgrad_point(const TP0& t0, const TP1& t1, const TP2& t2, T* out, T g0,
                                    T g1, T g2) {
  NJ_UNROLL
  for (int a = 0; a < t0.count(); ++a) {
    T* p0 = out + t0.off(a);
    const T x0 = t0.dw(a) * g0;  // terms whose derivative is already taken
    const T y0 = t0.w(a);        // product of weights so far
    NJ_UNROLL
    for (int b = 0; b < t1.count(); ++b) {
      T* p1 = p0 + t1.off(b);
      const T x1 = x0 * t1.w(b) + y0 * t1.dw(b) * g1;
      const T y1 = y0 * t1.w(b) * g2;
      NJ_UNROLL
      for (int c = 0; c < t2.count(); ++c) Add::add(p1 + t2.off(c), x1 * t2.w(c) + y1 * t2.dw(c));
    }
  }
}

struct PlainAdd {
  template <typename T>
  NJ_HD NJ_INLINE static void add(T* p, T v) { *p += v; }
};

}  // namespace pushpull
}  // namespace nitorch_jit
