// The argument checks and output sizes of the pushpull ops (docs/pushpull-spec.md), one copy for
// the CPU library (pushpull/cpu/loop.h) and the CUDA host code (pushpull/cuda/host.cuh), so that
// both raise the same messages. A Dev describes the library's device:
//   kDevice            name for messages ("CPU", "CUDA")
//   on_device(t)       is t on that device
//   kHalf              float16 / bfloat16 data (with a float32 grid) accepted
#pragma once

#include <cstdint>
#include <vector>

#include "core/bounds.h"
#include "core/message.h"
#include "core/torch_api.h"
#include "core/spline.h"

namespace nitorch_jit {
namespace pushpull {
namespace checks {

using msg::dev;
using msg::dt;
using msg::num;
using msg::shape_str;

inline bool is_half(api::ScalarType t) { return t == api::kHalf || t == api::kBFloat16; }
inline bool is_float(api::ScalarType t) { return t == api::kFloat || t == api::kDouble; }

// grid [B, *O, D], D in 1..3: returns D.
template <class Dev>
int64_t check_grid(const api::Tensor& grid) {
  NJ_CHECK(grid.defined(), "grid is undefined");
  NJ_CHECK(grid.dim() >= 3, "grid must have shape [B, *O, D] with D in 1..3, got shape ",
              shape_str(grid.sizes()));
  const int64_t D = grid.size(grid.dim() - 1);
  NJ_CHECK(D >= 1 && D <= 3, "grid.size(-1) (D) must be 1, 2 or 3, got ", num(D));
  NJ_CHECK(grid.dim() == D + 2, "grid must have D + 2 = ", num(D + 2),
              " dims [B, *O, D] (D = grid.size(-1)), got shape ", shape_str(grid.sizes()));
  NJ_CHECK(Dev::on_device(grid), "grid must be a ", Dev::kDevice, " tensor, got device ",
              dev(grid));
  NJ_CHECK(api::is_strided(grid), "grid must be a strided (dense) tensor");
  const auto t = grid.scalar_type();
  if (Dev::kHalf) {
    NJ_CHECK(is_float(t) || is_half(t),
                "grid must be float16, bfloat16, float32 or float64, got ", dt(t));
  } else {
    NJ_CHECK(is_float(t), "grid must be float32 or float64, got ", dt(t));
  }
  return D;
}

// affine [B, D, D + 1], D in 1..3, float32 / float64: returns D.
template <class Dev>
int64_t check_affine(const api::Tensor& affine) {
  NJ_CHECK(affine.defined(), "affine is undefined");
  NJ_CHECK(affine.dim() == 3 && affine.size(2) == affine.size(1) + 1 && affine.size(1) >= 1 &&
                  affine.size(1) <= 3,
              "affine must have shape [B, D, D + 1] with D in 1..3, got shape ",
              shape_str(affine.sizes()));
  NJ_CHECK(Dev::on_device(affine), "affine must be a ", Dev::kDevice, " tensor, got device ",
              dev(affine));
  NJ_CHECK(api::is_strided(affine), "affine must be a strided (dense) tensor");
  NJ_CHECK(is_float(affine.scalar_type()), "affine must be float32 or float64, got ",
              dt(affine.scalar_type()));
  return affine.size(1);
}

// A tensor [B, C, *spatial(D)] (+ a trailing D when with_d) on the device of `ref` (the grid or
// the affine matrix, named ref_name), with its dtype (or a half type with a float32 grid when
// half_ok) and its batch size.
inline void check_tensor(const api::Tensor& t, const char* name, const api::Tensor& ref, int64_t D,
                         bool with_d, const char* layout, const char* ref_name = "grid",
                         bool half_ok = false) {
  NJ_CHECK(t.defined(), name, " is undefined");
  const int64_t want = D + 2 + (with_d ? 1 : 0);
  NJ_CHECK(t.dim() == want, name, " must have ", num(want), " dims ", layout, " for D = ",
              num(D), ", got shape ", shape_str(t.sizes()));
  NJ_CHECK(t.device() == ref.device(), name, " must be on the ", ref_name, "'s device (",
              dev(ref), "), got ", dev(t));
  NJ_CHECK(api::is_strided(t), name, " must be a strided (dense) tensor");
  const auto ty = t.scalar_type(), rt = ref.scalar_type();
  if (half_ok) {
    NJ_CHECK(ty == rt || (is_half(ty) && rt == api::kFloat), name, " dtype (", dt(ty),
                ") must match ", ref_name, " dtype (", dt(rt),
                ") (float16/bfloat16 data may also come with a float32 grid)");
  } else {
    NJ_CHECK(ty == rt, name, " dtype (", dt(ty), ") must match ", ref_name, " dtype (",
                dt(rt), ")");
  }
  NJ_CHECK(t.size(0) == ref.size(0), name, " batch size (", num(t.size(0)), ") must equal ",
              ref_name, " batch size (", num(ref.size(0)), ")");
  if (with_d) {
    NJ_CHECK(t.size(t.dim() - 1) == D, name, ".size(-1) must be D = ", num(D), ", got ",
                num(t.size(t.dim() - 1)));
  }
}

// The spatial dims of t (starting at dim 2) must equal the grid's spatial dims.
inline void check_point_shape(const api::Tensor& t, const char* name, const api::Tensor& grid,
                              int64_t D) {
  for (int64_t d = 0; d < D; ++d)
    NJ_CHECK(t.size(2 + d) == grid.size(1 + d), name, " spatial shape ",
                shape_str(t.sizes().slice(2, D)), " must equal the grid spatial shape ",
                shape_str(grid.sizes().slice(1, D)));
}

// t (weight, grad) has as many channels as input.
inline void check_channels(const api::Tensor& t, const char* name, const api::Tensor& input) {
  NJ_CHECK(t.size(1) == input.size(1), name, " channels (", num(t.size(1)),
              ") must equal input channels (", num(input.size(1)), ")");
}

inline void check_options(api::IntRef order, api::IntRef bound, int64_t D) {
  NJ_CHECK(static_cast<int64_t>(order.size()) == D, "order must have D = ", num(D),
              " entries (one per spatial dim), got ", num(order.size()));
  NJ_CHECK(static_cast<int64_t>(bound.size()) == D, "bound must have D = ", num(D),
              " entries (one per spatial dim), got ", num(bound.size()));
  for (int64_t d = 0; d < D; ++d) {
    NJ_CHECK(order[d] >= 0 && order[d] <= kMaxOrder, "order[", num(d), "] must be in 0..",
                num(kMaxOrder), ", got ", num(order[d]));
    NJ_CHECK(bound[d] >= 0 && bound[d] < kNumBounds, "bound[", num(d), "] must be in 0..",
                num(kNumBounds - 1), " (replicate, dct1, dct2, dst1, dst2, dft, zero), got ",
                num(bound[d]));
  }
}

inline void check_shape(api::IntRef shape, int64_t D) {
  NJ_CHECK(static_cast<int64_t>(shape.size()) == D, "shape must have D = ", num(D),
              " entries (the output spatial size), got ", num(shape.size()));
  for (int64_t d = 0; d < D; ++d)
    NJ_CHECK(shape[d] >= 0, "shape[", num(d), "] must be >= 0, got ", num(shape[d]));
}

// The checks of affine_pull / affine_push (input `layout`, output spatial `shape`); returns D.
template <class Dev>
int64_t check_affine_resample(const api::Tensor& input, const char* layout,
                              const api::Tensor& affine, api::IntRef shape,
                              api::IntRef order, api::IntRef bound) {
  const int64_t D = check_affine<Dev>(affine);
  check_tensor(input, "input", affine, D, false, layout, "affine");
  check_options(order, bound, D);
  check_shape(shape, D);
  return D;
}

// [B, C, *O(, D)]: the output size of pull and grad (with_d) at the points of grid [B, *O, D].
inline std::vector<int64_t> point_shape(const api::Tensor& grid, int64_t B, int64_t C, int64_t D,
                                        bool with_d) {
  std::vector<int64_t> s = {B, C};
  for (int64_t d = 0; d < D; ++d) s.push_back(grid.size(1 + d));
  if (with_d) s.push_back(D);
  return s;
}

// [B, C, *shape]: the output size of the scatters (push, pushgrad) and of affine_pull.
inline std::vector<int64_t> resampled_size(const api::Tensor& input, api::IntRef shape) {
  std::vector<int64_t> s = {input.size(0), input.size(1)};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

}  // namespace checks
}  // namespace pushpull
}  // namespace nitorch_jit
