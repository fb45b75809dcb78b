// Per-point math of the pushpull kernels, shared by the CPU loops and (later) CUDA kernels.
//
// A point's support is the tensor product of one tap list per (internal) dimension. Kernels
// work on 3 internal dimensions; a D < 3 problem is padded in front with size-1 dimensions whose
// tap list is the constant {offset 0, weight 1, derivatives 0}.
//
// A tap list (Taps) holds, for one dimension and one point, the taps that read something: the
// folded index times the stride, and the weights with the bound's sign folded in. Taps whose
// sign is 0 (zero bound / dst1 outside) are dropped, so they never touch memory (a NaN stored
// at a placeholder address cannot leak in).
//
// The contractions below take static tap counts N0, N1, N2 (0 = use the runtime count t.n):
// fast paths pass N = order + 1 so the loops unroll; the generic path passes 0.
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

// Tap list of one dimension. DER: highest derivative stored (0, 1 or 2).
template <typename T, int MAXT, int DER>
struct Taps {
  int n;
  int64_t off[MAXT];
  T w[MAXT];
  T dw[DER >= 1 ? MAXT : 1];
  T ddw[DER >= 2 ? MAXT : 1];

  NJ_HD NJ_INLINE void set_constant() {  // a padded (absent) dimension
    n = 1;
    off[0] = 0;
    w[0] = T(1);
    dw[0] = T(0);
    ddw[0] = T(0);
  }
};

NJ_HD constexpr int tap_count(int N, int n) { return N > 0 ? N : n; }

// Build the tap list of order O for coordinate x on a dimension of size n (n >= 1).
template <int O, int DER, typename T, int MAXT>
NJ_HD NJ_INLINE void make_taps(T x, int64_t n, int bound, int64_t stride, Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= O + 1, "tap list too short");
  T u;
  const int64_t i0 = spline_start<O>(x, u);
  T w[O + 1], dw[O + 1], ddw[O + 1];
  SplineTaps<O, 0>::eval(u, w);
  if (DER >= 1) SplineTaps<O, 1>::eval(u, dw);
  if (DER >= 2) SplineTaps<O, 2>::eval(u, ddw);
  if (i0 >= 0 && i0 + O < n) {  // interior: no folding
    int64_t o = i0 * stride;
NJ_UNROLL
    for (int k = 0; k <= O; ++k, o += stride) {
      t.off[k] = o;
      t.w[k] = w[k];
      if (DER >= 1) t.dw[k] = dw[k];
      if (DER >= 2) t.ddw[k] = ddw[k];
    }
    t.n = O + 1;
  } else {
    int m = 0;
    for (int k = 0; k <= O; ++k) {
      int s;
      const int64_t j = fold_index(i0 + k, n, bound, s);
      if (s == 0) continue;
      t.off[m] = j * stride;
      t.w[m] = s > 0 ? w[k] : -w[k];
      if (DER >= 1) t.dw[m] = s > 0 ? dw[k] : -dw[k];
      if (DER >= 2) t.ddw[m] = s > 0 ? ddw[k] : -ddw[k];
      ++m;
    }
    t.n = m;
  }
}

// Runtime order (generic path).
template <int DER, typename T, int MAXT>
NJ_HD inline void make_taps_rt(int order, T x, int64_t n, int bound, int64_t stride,
                               Taps<T, MAXT, DER>& t) {
  static_assert(MAXT >= kMaxTaps, "tap list too short");
  switch (order) {
    case 0: make_taps<0>(x, n, bound, stride, t); break;
    case 1: make_taps<1>(x, n, bound, stride, t); break;
    case 2: make_taps<2>(x, n, bound, stride, t); break;
    case 3: make_taps<3>(x, n, bound, stride, t); break;
    case 4: make_taps<4>(x, n, bound, stride, t); break;
    case 5: make_taps<5>(x, n, bound, stride, t); break;
    case 6: make_taps<6>(x, n, bound, stride, t); break;
    default: make_taps<7>(x, n, bound, stride, t); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Gathers. `in` points at the first voxel of one channel of the source.

// sum_t W_t s_t in[j_t]
template <int N0, int N1, int N2, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE T pull_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in) {
  T acc = T(0);
NJ_UNROLL
  for (int a = 0; a < tap_count(N0, t0.n); ++a) {
    const T* p0 = in + t0.off[a];
    T acc1 = T(0);
NJ_UNROLL
    for (int b = 0; b < tap_count(N1, t1.n); ++b) {
      const T* p1 = p0 + t1.off[b];
      T acc2 = T(0);
NJ_UNROLL
      for (int c = 0; c < tap_count(N2, t2.n); ++c) acc2 += t2.w[c] * p1[t2.off[c]];
      acc1 += t1.w[b] * acc2;
    }
    acc += t0.w[a] * acc1;
  }
  return acc;
}

// g[k] = sum_t G_{t,k} s_t in[j_t] for the three internal dims k.
template <int N0, int N1, int N2, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void grad_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in, T* g) {
  T g0 = T(0), g1 = T(0), g2 = T(0);
NJ_UNROLL
  for (int a = 0; a < tap_count(N0, t0.n); ++a) {
    const T* p0 = in + t0.off[a];
    T m = T(0), m1 = T(0), m2 = T(0);  // sum over b, c of: w1 w2 v, dw1 w2 v, w1 dw2 v
NJ_UNROLL
    for (int b = 0; b < tap_count(N1, t1.n); ++b) {
      const T* p1 = p0 + t1.off[b];
      T i = T(0), i2 = T(0);  // sum over c of: w2 v, dw2 v
NJ_UNROLL
      for (int c = 0; c < tap_count(N2, t2.n); ++c) {
        const T v = p1[t2.off[c]];
        i += t2.w[c] * v;
        i2 += t2.dw[c] * v;
      }
      m += t1.w[b] * i;
      m1 += t1.dw[b] * i;
      m2 += t1.w[b] * i2;
    }
    g0 += t0.dw[a] * m;
    g1 += t0.w[a] * m1;
    g2 += t0.w[a] * m2;
  }
  g[0] = g0;
  g[1] = g1;
  g[2] = g2;
}

// Hessian of the interpolated field: h = {H00, H11, H22, H01, H02, H12}.
template <int N0, int N1, int N2, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void hess_point(const TP0& t0, const TP1& t1, const TP2& t2, const T* in, T* h) {
  T h00 = T(0), h11 = T(0), h22 = T(0), h01 = T(0), h02 = T(0), h12 = T(0);
  for (int a = 0; a < tap_count(N0, t0.n); ++a) {
    const T* p0 = in + t0.off[a];
    // sums over b, c of: w1 w2 v, dw1 w2 v, ddw1 w2 v, w1 dw2 v, dw1 dw2 v, w1 ddw2 v
    T m = T(0), m1 = T(0), m11 = T(0), m2 = T(0), m12 = T(0), m22 = T(0);
    for (int b = 0; b < tap_count(N1, t1.n); ++b) {
      const T* p1 = p0 + t1.off[b];
      T i = T(0), i2 = T(0), i22 = T(0);
      for (int c = 0; c < tap_count(N2, t2.n); ++c) {
        const T v = p1[t2.off[c]];
        i += t2.w[c] * v;
        i2 += t2.dw[c] * v;
        i22 += t2.ddw[c] * v;
      }
      m += t1.w[b] * i;
      m1 += t1.dw[b] * i;
      m11 += t1.ddw[b] * i;
      m2 += t1.w[b] * i2;
      m12 += t1.dw[b] * i2;
      m22 += t1.w[b] * i22;
    }
    h00 += t0.ddw[a] * m;
    h01 += t0.dw[a] * m1;
    h02 += t0.dw[a] * m2;
    h11 += t0.w[a] * m11;
    h12 += t0.w[a] * m12;
    h22 += t0.w[a] * m22;
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
template <int N0, int N1, int N2, class Add, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void push_point(const TP0& t0, const TP1& t1, const TP2& t2, T* out, T val) {
NJ_UNROLL
  for (int a = 0; a < tap_count(N0, t0.n); ++a) {
    T* p0 = out + t0.off[a];
    const T v0 = t0.w[a] * val;
NJ_UNROLL
    for (int b = 0; b < tap_count(N1, t1.n); ++b) {
      T* p1 = p0 + t1.off[b];
      const T v1 = t1.w[b] * v0;
NJ_UNROLL
      for (int c = 0; c < tap_count(N2, t2.n); ++c) Add::add(p1 + t2.off[c], t2.w[c] * v1);
    }
  }
}

// out[j_t] += sum_k G_{t,k} s_t g[k]
template <int N0, int N1, int N2, class Add, typename T, class TP0, class TP1, class TP2>
NJ_HD NJ_INLINE void pushgrad_point(const TP0& t0, const TP1& t1, const TP2& t2, T* out,
                                    T g0, T g1, T g2) {
  for (int a = 0; a < tap_count(N0, t0.n); ++a) {
    T* p0 = out + t0.off[a];
    const T x0 = t0.dw[a] * g0;  // terms whose derivative is already taken
    const T y0 = t0.w[a];        // product of weights so far
    for (int b = 0; b < tap_count(N1, t1.n); ++b) {
      T* p1 = p0 + t1.off[b];
      const T x1 = x0 * t1.w[b] + y0 * t1.dw[b] * g1;
      const T y1 = y0 * t1.w[b] * g2;
      for (int c = 0; c < tap_count(N2, t2.n); ++c)
        Add::add(p1 + t2.off[c], x1 * t2.w[c] + y1 * t2.dw[c]);
    }
  }
}

struct PlainAdd {
  template <typename T>
  NJ_HD NJ_INLINE static void add(T* p, T v) { *p += v; }
};

}  // namespace pushpull
}  // namespace nitorch_jit
