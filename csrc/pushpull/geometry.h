// The geometry of a pushpull call, one definition for the CPU loops (pushpull/cpu/loop.h: Geom) and
// the CUDA host code (pushpull/cuda/params.cuh: Params adds the pointers and per-point strides).
// Spatial dims are padded in front to 3 internal dims: internal dim k = 3 - D + d holds spatial
// dim d; padded dims have size 1 and stride 0. Torch-free (the CUDA kernel files include it):
// the fill functions take any indexable list of sizes (at::IntArrayRef on both sides).
#pragma once

#include <cstdint>

namespace nitorch_jit {
namespace pushpull {

struct Geometry {
  int D = 0;
  int64_t B = 0, C = 0;
  int64_t src[3] = {1, 1, 1};  // source (sampled / scattered-into) spatial size
  int64_t sst[3] = {0, 0, 0};  // source spatial strides (of the tensor the taps index)
  int64_t pts[3] = {1, 1, 1};  // grid (points) spatial size
  int64_t P = 1;               // prod(pts)
  int order[3] = {0, 0, 0};
  int bound[3] = {0, 0, 0};
  bool extrapolate = false;
  int64_t gB = 0, g[3] = {0, 0, 0}, gD = 0;  // grid strides

  int first() const { return 3 - D; }
  int64_t taps() const {
    int64_t t = 1;
    for (int k = first(); k < 3; ++k) t *= order[k] + 1;
    return t;
  }
  bool empty_source() const { return src[0] == 0 || src[1] == 0 || src[2] == 0; }
};

// B batches of points of spatial shape pts (D dims), and the per-dim options.
template <class Sizes, class Ints>
void set_points(Geometry& G, int64_t B, const Sizes& pts, int64_t D, const Ints& order,
                const Ints& bound, bool extrapolate) {
  G.D = static_cast<int>(D);
  G.B = B;
  G.extrapolate = extrapolate;
  const int f = G.first();
  for (int64_t d = 0; d < D; ++d) {
    const int k = f + static_cast<int>(d);
    G.pts[k] = pts[d];
    G.order[k] = static_cast<int>(order[d]);
    G.bound[k] = static_cast<int>(bound[d]);
  }
  G.P = G.pts[0] * G.pts[1] * G.pts[2];
}

// The spatial sizes and strides of the tensor the taps index (after set_points).
template <class Sizes, class Strides>
void set_source(Geometry& G, const Sizes& size, const Strides& stride) {
  for (int d = 0; d < G.D; ++d) {
    G.src[G.first() + d] = size[d];
    G.sst[G.first() + d] = stride[d];
  }
}

// The strides of a grid [B, *O, D] (after set_points).
template <class Strides>
void set_grid_strides(Geometry& G, const Strides& stride) {
  G.gB = stride[0];
  G.gD = stride[G.D + 1];
  for (int d = 0; d < G.D; ++d) G.g[G.first() + d] = stride[1 + d];
}

}  // namespace pushpull
}  // namespace nitorch_jit
