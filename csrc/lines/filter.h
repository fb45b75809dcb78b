// Interpolating B-spline coefficients: the per-line recursive filter (host and device).
//
// Method (Unser 1993; Thevenaz, Blu & Unser 2000). The sampled centred B-spline of order n
// has a symmetric z-transform whose inverse factors into one pair of first-order recursions
// per pole z (|z| < 1). Per pole, after a gain (1-z)(1-1/z):
//   causal       c+[0] = sum_{k>=0} z^k s[-k]      (s extended by the boundary condition)
//                c+[i] = s[i] + z c+[i-1]
//   anti-causal  c[n-1] = closed form in c+ (depends on the extension)
//                c[i]   = z (c[i+1] - c+[i])
// The boundary sums are exact (one period of the extension over 1 - z^P) when the period P
// is within the decay horizon of z, truncated at the horizon otherwise. They are built once
// per (order, bound, n) on the host as (index, weight) lists: LinePlan.
//
// Anti-causal closed forms (derived from c = -z/(1-z^2) sum_j z^|i-j| s[j]):
//   dct1: c[n-1] = z/(z^2-1) (c+[n-1] + z c+[n-2])      dct2: c[n-1] = z/(z-1) c+[n-1]
//   dst1: c[n-1] = -z c+[n-1]                           dst2: c[n-1] = -z/(1+z) c+[n-1]
//   dft:  c[n-1] = -z sum_{m>=0} z^m c+[(n-1+m) mod n]
//
// Adjoint. The filter matrix is symmetric for dct2, dst1, dst2, dft. For dct1 the
// interpolation matrix is B = S W (S symmetric, W = diag(1/2, 1, ..., 1, 1/2)), so the
// adjoint of B^-1 is W B^-1 W^-1: both end samples x2, filter, both end samples x1/2.
//
// Bound codes as in docs/pushpull-spec.md; zero is filtered as dct1, replicate as dct2.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/bounds.h"
#include "core/common.h"

namespace nitorch_jit {
namespace splinc {

constexpr int kMaxPoles = 3;
constexpr int kMaxInit = 128;  // capacity of one initialisation list

struct InitList {
  int32_t len;
  int32_t idx[kMaxInit];
  double w[kMaxInit];
};

struct PolePlan {
  double z;
  InitList causal;  // c+[0]  = sum w * s[idx]
  InitList anti;    // c[n-1] = sum w * c+[idx]
};

struct LinePlan {
  int64_t n;
  int32_t npoles;
  bool dct1_adjoint;  // scale both ends by 2 before, 1/2 after
  double gain;
  PolePlan pole[kMaxPoles];
};

// Poles of the sampled centred B-spline of order `order`, largest magnitude first.
NJ_HD inline int spline_poles(int order, double* z) {
  switch (order) {
    case 2: z[0] = 2.8284271247461900976 - 3.0; return 1;  // sqrt(8) - 3
    case 3: z[0] = 1.7320508075688772935 - 2.0; return 1;  // sqrt(3) - 2
    case 4:
      z[0] = -0.36134122590022017709;
      z[1] = -0.013725429297339121360;
      return 2;
    case 5:
      z[0] = -0.43057534709997379185;
      z[1] = -0.043096288203264653823;
      return 2;
    case 6:
      z[0] = -0.48829458930304475513;
      z[1] = -0.081679271076237512598;
      z[2] = -0.0014141518083258177511;
      return 3;
    case 7:
      z[0] = -0.53528043079643816554;
      z[1] = -0.12255461519232669052;
      z[2] = -0.0091486948096082769286;
      return 3;
    default: return 0;
  }
}

// The extension used by the filter for a bound code (-1: not a bound code).
NJ_HD inline int filter_bound(int bound) {
  switch (bound) {
    case kZero: return kDCT1;
    case kReplicate: return kDCT2;
    case kDCT1: case kDCT2: case kDST1: case kDST2: case kDFT: return bound;
    default: return -1;
  }
}

namespace detail {

inline int64_t period(int64_t n, int bound) {
  switch (bound) {
    case kDCT1: return 2 * (n - 1);
    case kDST1: return 2 * (n + 1);
    case kDFT: return n;
    default: return 2 * n;  // dct2, dst2
  }
}

// Number of terms after which |z|^k is below the working precision.
inline int64_t horizon(double z, bool dbl) {
  const double eps = dbl ? 1e-17 : 1e-9;
  int64_t k = (int64_t)std::ceil(std::log(eps) / std::log(std::fabs(z))) + 1;
  return k < kMaxInit - 1 ? k : kMaxInit - 1;
}

// Accumulate into a dense scratch of length n (only the touched entries), then compress.
struct Accum {
  int32_t len = 0;
  int32_t idx[2 * kMaxInit];
  double w[2 * kMaxInit];
  void add(int64_t j, double v) {
    for (int32_t e = 0; e < len; ++e)
      if (idx[e] == j) { w[e] += v; return; }
    idx[len] = (int32_t)j;
    w[len] = v;
    ++len;
  }
  void store(InitList& out, double scale) const {
    out.len = 0;
    for (int32_t e = 0; e < len; ++e)
      if (w[e] != 0.0) {
        out.idx[out.len] = idx[e];
        out.w[out.len] = w[e] * scale;
        ++out.len;
      }
  }
};

}  // namespace detail

// Build the plan of one line of length n. Returns false when the filter is the identity
// (orders 0 and 1; n == 1 with dct1, dct2, dft). `bound` must be a valid bound code.
inline bool make_plan(int order, int bound, int64_t n, bool dbl, bool adjoint, LinePlan& p) {
  double zs[kMaxPoles];
  const int np = spline_poles(order, zs);
  bound = filter_bound(bound);
  if (np == 0 || n < 1 || (n == 1 && (bound == kDCT1 || bound == kDCT2 || bound == kDFT)))
    return false;
  p.n = n;
  p.npoles = np;
  p.dct1_adjoint = adjoint && bound == kDCT1 && n > 2;
  p.gain = 1.0;
  for (int k = 0; k < np; ++k) p.gain *= (1.0 - zs[k]) * (1.0 - 1.0 / zs[k]);
  for (int k = 0; k < np; ++k) {
    const double z = zs[k];
    PolePlan& pp = p.pole[k];
    pp.z = z;
    const int64_t K = detail::horizon(z, dbl);
    const int64_t P = detail::period(n, bound);
    // causal: c+[0] = sum_{k>=0} z^k s[-k]
    {
      detail::Accum acc;
      const bool exact = P <= K;
      double zk = 1.0;
      for (int64_t t = 0; t < (exact ? P : K); ++t) {
        int s;
        const int64_t j = fold_index(-t, n, bound, s);
        if (s) acc.add(j, s * zk);
        zk *= z;
      }
      acc.store(pp.causal, exact ? 1.0 / (1.0 - std::pow(z, (double)P)) : 1.0);
    }
    // anti-causal: c[n-1] from c+
    {
      detail::Accum acc;
      double scale = 1.0;
      switch (bound) {
        case kDCT1: {
          const double a = z / (z * z - 1.0);
          acc.add(n - 1, a);
          acc.add(n - 2, a * z);
          break;
        }
        case kDCT2: acc.add(n - 1, z / (z - 1.0)); break;
        case kDST1: acc.add(n - 1, -z); break;
        case kDST2: acc.add(n - 1, -z / (1.0 + z)); break;
        default: {  // kDFT
          const bool exact = n <= K;
          double zk = -z;
          for (int64_t m = 0; m < (exact ? n : K); ++m) {
            acc.add((n - 1 + m) % n, zk);
            zk *= z;
          }
          if (exact) scale = 1.0 / (1.0 - std::pow(z, (double)n));
        }
      }
      acc.store(pp.anti, scale);
    }
  }
  return true;
}

// Filter W interleaved lines in place: line w, sample i at x[i * ld + w] (w < W).
// CPU: a tile of W adjacent lines (ld = W). CUDA: one line per thread (W = 1, ld = stride).
template <int W, typename T>
NJ_HD inline void filter_lanes(T* x, int64_t ld, const LinePlan& p) {
  const int64_t n = p.n;
  T* last = x + (n - 1) * ld;
  if (p.dct1_adjoint)
    for (int w = 0; w < W; ++w) { x[w] *= T(2); last[w] *= T(2); }
  const T g = T(p.gain);
  for (int64_t i = 0; i < n; ++i) {
    T* r = x + i * ld;
    for (int w = 0; w < W; ++w) r[w] *= g;
  }
  for (int k = 0; k < p.npoles; ++k) {
    const PolePlan& pp = p.pole[k];
    const T z = T(pp.z);
    T acc[W];
    for (int w = 0; w < W; ++w) acc[w] = T(0);
    for (int32_t e = 0; e < pp.causal.len; ++e) {
      const T we = T(pp.causal.w[e]);
      const T* r = x + pp.causal.idx[e] * ld;
      for (int w = 0; w < W; ++w) acc[w] += we * r[w];
    }
    // The recursions carry the previous sample in acc (registers), not re-read from x: with
    // a load of the row before beside the store of this one, clang 14 could not rule out
    // their overlap (ld is a variable) and left the lanes scalar (spline_coeff 1.8-2.2x
    // gcc's time); the same operations in the same order, so the same values.
    for (int w = 0; w < W; ++w) x[w] = acc[w];
    for (int64_t i = 1; i < n; ++i) {
      T* r = x + i * ld;
      for (int w = 0; w < W; ++w) {
        acc[w] = r[w] + z * acc[w];
        r[w] = acc[w];
      }
    }
    for (int w = 0; w < W; ++w) acc[w] = T(0);
    for (int32_t e = 0; e < pp.anti.len; ++e) {
      const T we = T(pp.anti.w[e]);
      const T* r = x + pp.anti.idx[e] * ld;
      for (int w = 0; w < W; ++w) acc[w] += we * r[w];
    }
    for (int w = 0; w < W; ++w) last[w] = acc[w];
    for (int64_t i = n - 2; i >= 0; --i) {
      T* r = x + i * ld;
      for (int w = 0; w < W; ++w) {
        acc[w] = z * (acc[w] - r[w]);
        r[w] = acc[w];
      }
    }
  }
  if (p.dct1_adjoint)
    for (int w = 0; w < W; ++w) { x[w] *= T(0.5); last[w] *= T(0.5); }
}

}  // namespace splinc
}  // namespace nitorch_jit
