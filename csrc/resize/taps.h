// Separable resizing: the taps of one output sample along one dim (host and device).
//
// Along a dim, output index o samples the input (spline coefficients) at the voxel coordinate
// x = scale * o + shift, with a B-spline of order `order` and boundary condition `bound`
// (always extrapolating through the bound, as resize does). The O+1 taps are
// i0 .. i0+O (docs/pushpull-spec.md), folded into [0, n) with their sign; the sign is folded
// into the weight, so a tap that reads zero has weight 0 and index 0.
#pragma once

#include "core/bounds.h"
#include "core/common.h"
#include "core/spline.h"

namespace nitorch_jit {
namespace resize {

// Coordinate in the input of output index o (double: shared by float and double tensors).
NJ_HD NJ_INLINE double coordinate(int64_t o, double scale, double shift) {
  return scale * static_cast<double>(o) + shift;
}

// Write the order+1 (index, weight) taps of output index o; returns the number of taps.
template <typename T>
NJ_HD inline int taps(int order, int bound, int64_t n, double scale, double shift, int64_t o,
                      int64_t* idx, T* w) {
  double u;
  const int64_t i0 = spline_start(order, coordinate(o, scale, shift), u);
  double wd[kMaxTaps];
  spline_weights(order, u, wd);
  for (int k = 0; k <= order; ++k) {
    int s;
    const int64_t j = fold_index(i0 + k, n, bound, s);
    idx[k] = s ? j : 0;
    w[k] = static_cast<T>(s * wd[k]);
  }
  return order + 1;
}

}  // namespace resize
}  // namespace nitorch_jit
