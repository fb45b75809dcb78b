// Fast paths on CPU with AVX2 + FMA (compiled for that target only, chosen at run time when the CPU
// has it), every dim of the same order: grid_pull / affine_pull of orders 1 and 3 in 2-D and 3-D
// (float32) and in 3-D (float64), and grid_push and grid_pull_backward of order 1 in 2-D and 3-D
// (float32; push.cpp). pull.cpp's older Pull1Avx2 serves sources whose last dim is strided.
//
// A block of points of a row at a time (8 floats, 4 doubles): coordinates (deinterleaved or
// plain loads, or computed from the matrix), interior test, base indices and weights in vector
// registers, one lane per point; the weights are then transposed to one vector per point. The
// taps are read point by point with plain loads of contiguous taps (pairs at order 1, runs of 4
// at order 3), never gathered: gathers are slow on some CPUs (Zen 5 here: the gather version of
// the 3-D order-1 pull was slower than the scalar code). Weights are computed once per point
// and reused by every channel. A point whose support leaves the source (out of range,
// non-finite) is redone by the scalar fast path, which applies the bound and extrapolate rules;
// with extrapolate off, points outside the field of view read zero in the vector path. With
// extrapolate on, the pulls first fold coordinates on dct1 / dct2 dims into the source
// (MirrorFold), so that only points near its border remain for the scalar path.
//
// This file chooses a path for a call and walks its rows; the paths are in pull2d.h, pull3d.h,
// push.h and pullback.h, built on lanes.h (vector primitives), coords.h (coordinates and
// blocks) and rows.h (the scaffold they share: blocks of a row, the scalar redo, the tail).
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <algorithm>
#include <type_traits>

#include "pushpull/cpu/avx2/pull2d.h"
#include "pushpull/cpu/avx2/pull3d.h"
#include "pushpull/cpu/avx2/pullback.h"
#include "pushpull/cpu/avx2/push.h"
#include "pushpull/cpu/loop.h"

#define NJ_FASTPATH_AVX2 1

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

inline bool cpu_has_avx2() {
  static const bool cpu = platform::cpu_has_avx2_fma();
  return cpu;
}

// The order (1 or 3) of the 2-D fast paths for G, or 0 when they do not apply.
inline int fast2d_avx2_order(const Geom& G) {
  if (!cpu_has_avx2() || G.D != 2) return 0;
  const int o = G.order[1];
  if ((o != 1 && o != 3) || G.order[2] != o || G.sst[2] != 1) return 0;
  if (!tuning::get(tuning::kAvx2)) return 0;
  constexpr int64_t kMax = 0x7fffffff;
  // size >= O + 1: a masked lane reads the taps of voxel 0, which must exist
  for (int k = 1; k < 3; ++k)
    if (G.src[k] < o + 1 || G.src[k] > kMax) return 0;
  if (G.sst[1] < 0 || (G.src[1] - 1) * G.sst[1] + G.src[2] > kMax) return 0;  // int32 indices
  return 7 * G.g[2] + G.gD <= kMax ? o : 0;
}

// The order (1 or 3) of the 3-D fast paths for G (every dim of that order), or 0.
inline int fast3d_avx2_order(const Geom& G) {
  if (!cpu_has_avx2() || G.D != 3 || G.sst[2] != 1) return 0;
  const int o = G.order[0];
  if ((o != 1 && o != 3) || G.order[1] != o || G.order[2] != o) return 0;
  if (!tuning::get(tuning::kAvx2)) return 0;
  constexpr int64_t kMax = 0x7fffffff;
  int64_t span = 0;
  for (int k = 0; k < 3; ++k) {
    if (G.src[k] < o + 1 || G.src[k] > kMax || G.sst[k] < 0) return 0;
    span += (G.src[k] - 1) * G.sst[k];
  }
  return span < kMax && 7 * G.g[2] + 2 * G.gD <= kMax ? o : 0;
}

// Multi-channel 3-D pulls walk the output in tiles of `tile` rows along dim 1, every dim-0
// plane of a tile before the next tile: the source planes a tile reads stay in cache from one
// output plane to the next (in plain row order, 8 channels' planes did not fit in L2, and each
// channel cost more than the whole 1-channel pull). 0: plain row order (one channel, or 2-D).
inline int64_t row_tile(const Geom& G, int64_t elem_bytes) {
  if (G.D != 3 || G.C < 2 || G.pts[0] < 2) return 0;
  // ~256 KiB of source rows (the tile's rows and 4 more, 5 planes, every channel)
  const int64_t row_bytes = std::max<int64_t>(G.src[2], 1) * elem_bytes * 5 * G.C;
  const int64_t rows = std::max<int64_t>((int64_t(256) << 10) / row_bytes - 4, 4);
  return rows >= G.pts[1] ? 0 : rows;
}

// The rows of tiles [tb, te) (tile t: batch t / n, rows [t % n * tile, + tile) of dim 1, every
// dim-0 index), each as fn(pt, row, count) like for_rows.
template <class Coords, class Fn>
void for_row_tiles(const Geom& G, const Coords& co, int64_t tile, int64_t tb, int64_t te,
                   Fn&& fn) {
  const int64_t per_batch = (G.pts[1] + tile - 1) / tile;
  for (int64_t t = tb; t < te; ++t) {
    Point pt;
    pt.b = t / per_batch;
    const int64_t y0 = (t % per_batch) * tile, y1 = std::min(G.pts[1], y0 + tile);
    pt.i[2] = 0;
    for (int64_t z = 0; z < G.pts[0]; ++z)
      for (int64_t y = y0; y < y1; ++y) {
        pt.i[0] = z;
        pt.i[1] = y;
        pt.p = (z * G.pts[1] + y) * G.pts[2];
        fn(pt, co.row(G, pt), G.pts[2]);
      }
  }
}

// grid_pull (src: the grid pointer) or affine_pull (src: AffineCoords) through a fast path:
// float32 2-D orders 1 and 3, 3-D orders 1 and 3; float64 3-D orders 1 and 3. False when none
// applies.
template <typename T, class Op, class Src>
bool try_pull_avx2(const Geom& G, const Src& src, const Op& op) {
  constexpr bool kAffine = !std::is_pointer<Src>::value;
  Geom Gk = G;  // the geometry the checks see: affine coordinates are no grid (no strides)
  if (kAffine) {
    if (G.pts[2] > 0x7fffffff - 8) return false;  // point indices as int32 lanes
    Gk.g[2] = G.D;
    Gk.gD = 1;
  }
  const int o2 = std::is_same_v<T, float> ? fast2d_avx2_order(Gk) : 0;
  const int o3 = o2 == 0 ? fast3d_avx2_order(Gk) : 0;
  if (o2 == 0 && o3 == 0) return false;
  if (std::is_same_v<T, double> && o3 == 0) return false;
  // a one-variant kernel library holds the vector path of its own variant only (variants.h)
  if (!(o2 ? variant_has(o2, 2) : variant_has(o3, 3))) return false;
  const int64_t tile = row_tile(G, sizeof(T));
  auto kernel_rows = [&](auto&& walk) {
    auto run = [&](auto kernel) {
      walk([&](Point pt, const auto& r, int64_t count) { kernel.row(pt, r, count); });
    };
    if constexpr (std::is_same_v<T, float>) {
      if (o3 == 1) {
        if constexpr (variant_has(1, 3)) run(Pull3dAvx2<Op>(G, op));
      } else if (o3 == 3) {
        if constexpr (variant_has(3, 3)) run(Pull3dCubicAvx2<float, Op>(G, op));
      } else if (o2 == 1) {
        if constexpr (variant_has(1, 2)) run(Pull2dLinearAvx2<Op>(G, op));
      } else {
        if constexpr (variant_has(3, 2)) run(Pull2dCubicAvx2<Op>(G, op));
      }
    } else {
      if (o3 == 1) {
        if constexpr (variant_has(1, 3)) run(Pull3dLinearAvx2d<Op>(G, op));
      } else {
        if constexpr (variant_has(3, 3)) run(Pull3dCubicAvx2<double, Op>(G, op));
      }
    }
  };
  if (tile == 0) {
    parallel::parallel_for(0, G.B * G.P, point_cost(G, 0), [&](int64_t b, int64_t e) {
      kernel_rows([&](auto&& fn) { for_rows(G, coords_of(src), b, e, fn); });
    });
  } else {
    const int64_t per_batch = (G.pts[1] + tile - 1) / tile;  // a tile: G.pts[0] x tile rows
    const int64_t tile_cost = G.pts[0] * tile * G.pts[2] * point_cost(G, 0);
    parallel::parallel_for(0, G.B * per_batch, tile_cost, [&](int64_t b, int64_t e) {
      kernel_rows([&](auto&& fn) { for_row_tiles(G, coords_of(src), tile, b, e, fn); });
    });
  }
  return true;
}

// The points [begin, end) of a scatter of order 1, 2-D or 3-D, into op.out through the vector
// paths Path2d / Path3d: grid_push (Push2dAvx2, Push3dAvx2) or grid_pull_backward (PullBack2dAvx2,
// PullBack3dAvx2); vstep is the stride of the op's per-point values along a row. False when the
// fast path does not apply (the caller then runs the generic loop).
template <template <class> class Path2d, template <class> class Path3d, class Op>
bool try_scatter_avx2(const Geom& G, const float* grid, int64_t begin, int64_t end,
                      int64_t vstep, const Op& op) {
  if (vstep < 0 || vstep * 7 > 0x7fffffff) return false;  // gathered values: int32 offsets
  auto run = [&](auto kernel) {
    for_rows(G, coords_of(grid), begin, end,
             [&](Point pt, const auto& r, int64_t count) { kernel.row(pt, r, count); });
  };
  if (fast2d_avx2_order(G) == 1 && variant_has(1, 2)) {
    if constexpr (variant_has(1, 2)) run(Path2d<Op>(G, op));
  } else if (fast3d_avx2_order(G) == 1 && variant_has(1, 3)) {
    if constexpr (variant_has(1, 3)) run(Path3d<Op>(G, op));
  } else {
    return false;
  }
  return true;
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
