// One call of a CPU pushpull kernel, as the binding (pushpull/cpu/binding.cpp) hands it to a
// torch-free kernel library (core/host.h): raw pointers, sizes and strides, checked already.
// A POD with a fixed layout; both sides include this one definition.
#pragma once

#include <cstdint>

#include "pushpull/geometry.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// Strides of a per-point tensor [B, C, *O(, D)] (push input, dot weight, pull backward's
// incoming gradient), internal dim order (geometry.h).
struct PointStrides {
  int64_t sB, sC, s[3], sD;
  template <class Point>  // loop.h's Point: batch and spatial multi-index
  inline int64_t at(const Point& pt) const {
    return pt.b * sB + pt.i[0] * s[0] + pt.i[1] * s[1] + pt.i[2] * s[2];
  }
};

struct Call {
  Geometry G;
  const void* grid;                     // grid [B, *O, D] (its strides in G), or null: affine
  const void* mat;                      // affine [B, D, D + 1] (voxel to voxel)
  int64_t mB, mR, mC;                   // its strides
  const void* src;                      // the image the taps read (spatial strides in G)
  int64_t sB, sC;                       // its batch and channel strides
  const void* pts;                      // the per-point input (push, dot weight, pull backward)
  PointStrides ps;                      // its strides
  void* out;                            // the output (a scatter's: [B, C, *S] contiguous)
  int64_t out_numel;
  void* out2;                           // grid_pull_backward: grad_grid [B, *O, D] contiguous
  int64_t out_stride[3];                // affine_grad_dot: the strides of out [B, D, D + 1]
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
