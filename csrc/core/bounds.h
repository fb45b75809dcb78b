// Boundary conditions: bound codes and index folding (docs/pushpull-spec.md, "Bound codes").
//
// A tap index i on a dimension of size n folds to a stored index j in [0, n) and a sign
// s in {-1, 0, +1}: the value at i is s * data[j]. s == 0 means the tap reads zero (and a
// scatter adds nothing); j is then 0, a safe address.
#pragma once

#include "core/common.h"

namespace nitorch_jit {

enum BoundCode : int {
  kReplicate = 0,
  kDCT1 = 1,
  kDCT2 = 2,
  kDST1 = 3,
  kDST2 = 4,
  kDFT = 5,
  kZero = 6,
};
constexpr int kNumBounds = 7;

// non-negative remainder of i modulo p (p > 0)
NJ_HD NJ_INLINE int64_t pos_mod(int64_t i, int64_t p) {
  const int64_t m = i % p;
  return m < 0 ? m + p : m;
}

// Fold tap index i onto [0, n) (n >= 1) for the given bound; writes the sign, returns j.
NJ_HD inline int64_t fold_index(int64_t i, int64_t n, int bound, int& sign) {
  sign = 1;
  if (i >= 0 && i < n) return i;  // every bound is the identity inside
  switch (bound) {
    case kReplicate:
      return i < 0 ? 0 : n - 1;
    case kDCT1: {
      if (n == 1) return 0;
      const int64_t p = 2 * (n - 1);
      const int64_t m = pos_mod(i, p);
      return m < n ? m : p - m;
    }
    case kDCT2: {
      const int64_t m = pos_mod(i, 2 * n);
      return m < n ? m : 2 * n - 1 - m;
    }
    case kDST1: {
      const int64_t m = pos_mod(i, 2 * (n + 1));
      if (m == n || m == 2 * n + 1) {
        sign = 0;
        return 0;
      }
      if (m < n) return m;
      sign = -1;
      return 2 * n - m;
    }
    case kDST2: {
      const int64_t m = pos_mod(i, 2 * n);
      if (m < n) return m;
      sign = -1;
      return 2 * n - 1 - m;
    }
    case kDFT:
      return pos_mod(i, n);
    default:  // kZero
      sign = 0;
      return 0;
  }
}

// The mirror bounds make the interpolated function itself even and periodic: dct2 extends the
// coefficients as c[-1-k] = c[k] with period 2n, dct1 as c[-k] = c[k] with period 2(n - 1); as
// the B-spline is even, f(x) = sum_k c[k] beta(x - k) of any order then satisfies
// f(2 c0 - x) = f(x) and f(x + 2 h) = f(x), with c0 = -1/2, h = n (dct2) or c0 = 0, h = n - 1
// (dct1). A coordinate may thus be folded onto [c0, c0 + h] before its taps are formed (the CPU
// fast paths do, pushpull/cpu/avx2/coords.h). False for the other bounds and for dct1 of size 1.
NJ_HD inline bool mirror_fold(int bound, int64_t n, double& c0, int64_t& h) {
  if (bound == kDCT2 && n >= 1) {
    c0 = -0.5;
    h = n;
    return true;
  }
  if (bound == kDCT1 && n >= 2) {
    c0 = 0.0;
    h = n - 1;
    return true;
  }
  return false;
}

// Linear interpolation with dct2 is moreover flat within 1/2 of the mirror points (both taps
// read the same coefficient there): f = c[0] on [-1, 0] and c[n-1] on [n-1, n]. The half-width
// of that flat part, which a folded coordinate may be clamped by (0: none).
NJ_HD inline double mirror_flat(int bound, int order) {
  return bound == kDCT2 && order == 1 ? 0.5 : 0.0;
}

}  // namespace nitorch_jit
