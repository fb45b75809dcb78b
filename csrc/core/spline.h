// Centred cardinal B-splines of order 0..7: weights, first and second derivatives
// (docs/pushpull-spec.md, "Splines").
//
// For a coordinate x and order O the O+1 taps are i0 .. i0+O with i0 = floor(x - (O-1)/2).
// Writing u = x - (O-1)/2 - i0 in [0, 1), tap k sits at distance t_k = x - (i0+k) = u + (O-1)/2 - k,
// which always falls on the same polynomial piece of beta_O; so its weight beta_O(t_k) is a
// fixed polynomial of u:
//     w_k(u) = 1/O! * sum_{j=0}^{O-k} (-1)^j C(O+1, j) (u + O - k - j)^O
// (the truncated-power form of the B-spline). d/dx beta_O(x - i) = d/du w_k(u) since du/dx = 1.
// The per-tap polynomials below are that formula expanded (integer coefficients, Horner form,
// one scale by 1/O!), with their first and second derivatives; branch-free and non-recursive,
// so the same code runs on the host and in CUDA kernels.
#pragma once

#include "core/common.h"

namespace nitorch_jit {

constexpr int kMaxOrder = 7;
constexpr int kMaxTaps = kMaxOrder + 1;

// SplineTaps<O, DER>::eval(u, w) writes the O+1 tap values of the DER-th derivative (0, 1, 2).
template <int O, int DER>
struct SplineTaps;

template <> struct SplineTaps<0, 0> {  // order 0, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    w[0] = T(1);
  }
};
template <> struct SplineTaps<0, 1> {  // order 0, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    w[0] = T(0);
  }
};
template <> struct SplineTaps<0, 2> {  // order 0, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    w[0] = T(0);
  }
};
template <> struct SplineTaps<1, 0> {  // order 1, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    w[0] = -u + T(1);
    w[1] = u;
  }
};
template <> struct SplineTaps<1, 1> {  // order 1, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    w[0] = T(-1);
    w[1] = T(1);
  }
};
template <> struct SplineTaps<1, 2> {  // order 1, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    w[0] = T(0);
    w[1] = T(0);
  }
};
template <> struct SplineTaps<2, 0> {  // order 2, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(2);
    w[0] = ((u - T(2)) * u + T(1)) * s;
    w[1] = ((T(-2) * u + T(2)) * u + T(1)) * s;
    w[2] = (u * u) * s;
  }
};
template <> struct SplineTaps<2, 1> {  // order 2, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(2);
    w[0] = (T(2) * u - T(2)) * s;
    w[1] = (T(-4) * u + T(2)) * s;
    w[2] = (T(2) * u) * s;
  }
};
template <> struct SplineTaps<2, 2> {  // order 2, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    (void)u;
    const T s = T(1) / T(2);
    w[0] = (T(2)) * s;
    w[1] = (T(-4)) * s;
    w[2] = (T(2)) * s;
  }
};
template <> struct SplineTaps<3, 0> {  // order 3, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(6);
    w[0] = (((-u + T(3)) * u - T(3)) * u + T(1)) * s;
    w[1] = (((T(3) * u - T(6)) * u) * u + T(4)) * s;
    w[2] = (((T(-3) * u + T(3)) * u + T(3)) * u + T(1)) * s;
    w[3] = ((u * u) * u) * s;
  }
};
template <> struct SplineTaps<3, 1> {  // order 3, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(6);
    w[0] = ((T(-3) * u + T(6)) * u - T(3)) * s;
    w[1] = ((T(9) * u - T(12)) * u) * s;
    w[2] = ((T(-9) * u + T(6)) * u + T(3)) * s;
    w[3] = ((T(3) * u) * u) * s;
  }
};
template <> struct SplineTaps<3, 2> {  // order 3, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(6);
    w[0] = (T(-6) * u + T(6)) * s;
    w[1] = (T(18) * u - T(12)) * s;
    w[2] = (T(-18) * u + T(6)) * s;
    w[3] = (T(6) * u) * s;
  }
};
template <> struct SplineTaps<4, 0> {  // order 4, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(24);
    w[0] = ((((u - T(4)) * u + T(6)) * u - T(4)) * u + T(1)) * s;
    w[1] = ((((T(-4) * u + T(12)) * u - T(6)) * u - T(12)) * u + T(11)) * s;
    w[2] = ((((T(6) * u - T(12)) * u - T(6)) * u + T(12)) * u + T(11)) * s;
    w[3] = ((((T(-4) * u + T(4)) * u + T(6)) * u + T(4)) * u + T(1)) * s;
    w[4] = (((u * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<4, 1> {  // order 4, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(24);
    w[0] = (((T(4) * u - T(12)) * u + T(12)) * u - T(4)) * s;
    w[1] = (((T(-16) * u + T(36)) * u - T(12)) * u - T(12)) * s;
    w[2] = (((T(24) * u - T(36)) * u - T(12)) * u + T(12)) * s;
    w[3] = (((T(-16) * u + T(12)) * u + T(12)) * u + T(4)) * s;
    w[4] = (((T(4) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<4, 2> {  // order 4, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(24);
    w[0] = ((T(12) * u - T(24)) * u + T(12)) * s;
    w[1] = ((T(-48) * u + T(72)) * u - T(12)) * s;
    w[2] = ((T(72) * u - T(72)) * u - T(12)) * s;
    w[3] = ((T(-48) * u + T(24)) * u + T(12)) * s;
    w[4] = ((T(12) * u) * u) * s;
  }
};
template <> struct SplineTaps<5, 0> {  // order 5, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(120);
    w[0] = (((((-u + T(5)) * u - T(10)) * u + T(10)) * u - T(5)) * u + T(1)) * s;
    w[1] = (((((T(5) * u - T(20)) * u + T(20)) * u + T(20)) * u - T(50)) * u + T(26)) * s;
    w[2] = (((((T(-10) * u + T(30)) * u) * u - T(60)) * u) * u + T(66)) * s;
    w[3] = (((((T(10) * u - T(20)) * u - T(20)) * u + T(20)) * u + T(50)) * u + T(26)) * s;
    w[4] = (((((T(-5) * u + T(5)) * u + T(10)) * u + T(10)) * u + T(5)) * u + T(1)) * s;
    w[5] = ((((u * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<5, 1> {  // order 5, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(120);
    w[0] = ((((T(-5) * u + T(20)) * u - T(30)) * u + T(20)) * u - T(5)) * s;
    w[1] = ((((T(25) * u - T(80)) * u + T(60)) * u + T(40)) * u - T(50)) * s;
    w[2] = ((((T(-50) * u + T(120)) * u) * u - T(120)) * u) * s;
    w[3] = ((((T(50) * u - T(80)) * u - T(60)) * u + T(40)) * u + T(50)) * s;
    w[4] = ((((T(-25) * u + T(20)) * u + T(30)) * u + T(20)) * u + T(5)) * s;
    w[5] = ((((T(5) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<5, 2> {  // order 5, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(120);
    w[0] = (((T(-20) * u + T(60)) * u - T(60)) * u + T(20)) * s;
    w[1] = (((T(100) * u - T(240)) * u + T(120)) * u + T(40)) * s;
    w[2] = (((T(-200) * u + T(360)) * u) * u - T(120)) * s;
    w[3] = (((T(200) * u - T(240)) * u - T(120)) * u + T(40)) * s;
    w[4] = (((T(-100) * u + T(60)) * u + T(60)) * u + T(20)) * s;
    w[5] = (((T(20) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<6, 0> {  // order 6, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(720);
    w[0] = ((((((u - T(6)) * u + T(15)) * u - T(20)) * u + T(15)) * u - T(6)) * u + T(1)) * s;
    w[1] = ((((((T(-6) * u + T(30)) * u - T(45)) * u - T(20)) * u + T(135)) * u - T(150)) * u + T(57)) * s;
    w[2] = ((((((T(15) * u - T(60)) * u + T(30)) * u + T(160)) * u - T(150)) * u - T(240)) * u + T(302)) * s;
    w[3] = ((((((T(-20) * u + T(60)) * u + T(30)) * u - T(160)) * u - T(150)) * u + T(240)) * u + T(302)) * s;
    w[4] = ((((((T(15) * u - T(30)) * u - T(45)) * u + T(20)) * u + T(135)) * u + T(150)) * u + T(57)) * s;
    w[5] = ((((((T(-6) * u + T(6)) * u + T(15)) * u + T(20)) * u + T(15)) * u + T(6)) * u + T(1)) * s;
    w[6] = (((((u * u) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<6, 1> {  // order 6, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(720);
    w[0] = (((((T(6) * u - T(30)) * u + T(60)) * u - T(60)) * u + T(30)) * u - T(6)) * s;
    w[1] = (((((T(-36) * u + T(150)) * u - T(180)) * u - T(60)) * u + T(270)) * u - T(150)) * s;
    w[2] = (((((T(90) * u - T(300)) * u + T(120)) * u + T(480)) * u - T(300)) * u - T(240)) * s;
    w[3] = (((((T(-120) * u + T(300)) * u + T(120)) * u - T(480)) * u - T(300)) * u + T(240)) * s;
    w[4] = (((((T(90) * u - T(150)) * u - T(180)) * u + T(60)) * u + T(270)) * u + T(150)) * s;
    w[5] = (((((T(-36) * u + T(30)) * u + T(60)) * u + T(60)) * u + T(30)) * u + T(6)) * s;
    w[6] = (((((T(6) * u) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<6, 2> {  // order 6, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(720);
    w[0] = ((((T(30) * u - T(120)) * u + T(180)) * u - T(120)) * u + T(30)) * s;
    w[1] = ((((T(-180) * u + T(600)) * u - T(540)) * u - T(120)) * u + T(270)) * s;
    w[2] = ((((T(450) * u - T(1200)) * u + T(360)) * u + T(960)) * u - T(300)) * s;
    w[3] = ((((T(-600) * u + T(1200)) * u + T(360)) * u - T(960)) * u - T(300)) * s;
    w[4] = ((((T(450) * u - T(600)) * u - T(540)) * u + T(120)) * u + T(270)) * s;
    w[5] = ((((T(-180) * u + T(120)) * u + T(180)) * u + T(120)) * u + T(30)) * s;
    w[6] = ((((T(30) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<7, 0> {  // order 7, weights
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(5040);
    w[0] = (((((((-u + T(7)) * u - T(21)) * u + T(35)) * u - T(35)) * u + T(21)) * u - T(7)) * u + T(1)) * s;
    w[1] = (((((((T(7) * u - T(42)) * u + T(84)) * u) * u - T(280)) * u + T(504)) * u - T(392)) * u + T(120)) * s;
    w[2] = (((((((T(-21) * u + T(105)) * u - T(105)) * u - T(315)) * u + T(665)) * u + T(315)) * u - T(1715)) * u + T(1191)) * s;
    w[3] = (((((((T(35) * u - T(140)) * u) * u + T(560)) * u) * u - T(1680)) * u) * u + T(2416)) * s;
    w[4] = (((((((T(-35) * u + T(105)) * u + T(105)) * u - T(315)) * u - T(665)) * u + T(315)) * u + T(1715)) * u + T(1191)) * s;
    w[5] = (((((((T(21) * u - T(42)) * u - T(84)) * u) * u + T(280)) * u + T(504)) * u + T(392)) * u + T(120)) * s;
    w[6] = (((((((T(-7) * u + T(7)) * u + T(21)) * u + T(35)) * u + T(35)) * u + T(21)) * u + T(7)) * u + T(1)) * s;
    w[7] = ((((((u * u) * u) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<7, 1> {  // order 7, first derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(5040);
    w[0] = ((((((T(-7) * u + T(42)) * u - T(105)) * u + T(140)) * u - T(105)) * u + T(42)) * u - T(7)) * s;
    w[1] = ((((((T(49) * u - T(252)) * u + T(420)) * u) * u - T(840)) * u + T(1008)) * u - T(392)) * s;
    w[2] = ((((((T(-147) * u + T(630)) * u - T(525)) * u - T(1260)) * u + T(1995)) * u + T(630)) * u - T(1715)) * s;
    w[3] = ((((((T(245) * u - T(840)) * u) * u + T(2240)) * u) * u - T(3360)) * u) * s;
    w[4] = ((((((T(-245) * u + T(630)) * u + T(525)) * u - T(1260)) * u - T(1995)) * u + T(630)) * u + T(1715)) * s;
    w[5] = ((((((T(147) * u - T(252)) * u - T(420)) * u) * u + T(840)) * u + T(1008)) * u + T(392)) * s;
    w[6] = ((((((T(-49) * u + T(42)) * u + T(105)) * u + T(140)) * u + T(105)) * u + T(42)) * u + T(7)) * s;
    w[7] = ((((((T(7) * u) * u) * u) * u) * u) * u) * s;
  }
};
template <> struct SplineTaps<7, 2> {  // order 7, second derivatives
  template <typename T> NJ_HD NJ_INLINE static void eval(T u, T* w) {
    const T s = T(1) / T(5040);
    w[0] = (((((T(-42) * u + T(210)) * u - T(420)) * u + T(420)) * u - T(210)) * u + T(42)) * s;
    w[1] = (((((T(294) * u - T(1260)) * u + T(1680)) * u) * u - T(1680)) * u + T(1008)) * s;
    w[2] = (((((T(-882) * u + T(3150)) * u - T(2100)) * u - T(3780)) * u + T(3990)) * u + T(630)) * s;
    w[3] = (((((T(1470) * u - T(4200)) * u) * u + T(6720)) * u) * u - T(3360)) * s;
    w[4] = (((((T(-1470) * u + T(3150)) * u + T(2100)) * u - T(3780)) * u - T(3990)) * u + T(630)) * s;
    w[5] = (((((T(882) * u - T(1260)) * u - T(1680)) * u) * u + T(1680)) * u + T(1008)) * s;
    w[6] = (((((T(-294) * u + T(210)) * u + T(420)) * u + T(420)) * u + T(210)) * u + T(42)) * s;
    w[7] = (((((T(42) * u) * u) * u) * u) * u) * s;
  }
};

// First tap of order O at coordinate x (|x| < 2^62); writes u = x - (O-1)/2 - i0 in [0, 1).
template <int O, typename T>
NJ_HD NJ_INLINE int64_t spline_start(T x, T& u) {
  const T xs = (O & 1) ? x - T((O - 1) / 2) : x - T(O - 1) * T(0.5);
  return floor_split(xs, u);
}

// Runtime-order versions: write order+1 values into w (w must hold kMaxTaps).
template <int DER, typename T>
NJ_HD inline void spline_taps(int order, T u, T* w) {
  switch (order) {
    case 0: SplineTaps<0, DER>::eval(u, w); break;
    case 1: SplineTaps<1, DER>::eval(u, w); break;
    case 2: SplineTaps<2, DER>::eval(u, w); break;
    case 3: SplineTaps<3, DER>::eval(u, w); break;
    case 4: SplineTaps<4, DER>::eval(u, w); break;
    case 5: SplineTaps<5, DER>::eval(u, w); break;
    case 6: SplineTaps<6, DER>::eval(u, w); break;
    default: SplineTaps<7, DER>::eval(u, w); break;
  }
}

template <typename T>
NJ_HD NJ_INLINE void spline_weights(int order, T u, T* w) { spline_taps<0>(order, u, w); }
template <typename T>
NJ_HD NJ_INLINE void spline_dweights(int order, T u, T* w) { spline_taps<1>(order, u, w); }
template <typename T>
NJ_HD NJ_INLINE void spline_ddweights(int order, T u, T* w) { spline_taps<2>(order, u, w); }

template <typename T>
NJ_HD inline int64_t spline_start(int order, T x, T& u) {
  const T xs = x - T(order - 1) * T(0.5);
  return floor_split(xs, u);
}

// Single-point evaluation: the DER-th derivative of beta_order at t (0 outside the support).
// Convenience for code that needs one weight at a time (e.g. resize); the pushpull kernels
// use the batched per-tap form above.
template <int DER, typename T>
NJ_HD inline T bspline_eval(int order, T t) {
  // t = u + (order-1)/2 - k  =>  u - k = v
  const T v = t - T(order - 1) * T(0.5);
  if (!(v > T(-order - 1) && v < T(1))) return T(0);  // outside the support, or NaN
  T u;
  const int64_t k = -floor_split(v, u);
  if (k < 0 || k > order) return T(0);
  T w[kMaxTaps];
  spline_taps<DER>(order, u, w);
  return w[k];
}
template <typename T>
NJ_HD inline T bspline(int order, T t) { return bspline_eval<0>(order, t); }
template <typename T>
NJ_HD inline T bspline_d(int order, T t) { return bspline_eval<1>(order, t); }
template <typename T>
NJ_HD inline T bspline_dd(int order, T t) { return bspline_eval<2>(order, t); }

}  // namespace nitorch_jit
