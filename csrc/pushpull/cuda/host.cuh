// CUDA pushpull ops, host side (docs/pushpull-spec.md): argument checks, geometry, outputs and
// dispatch, written on core/torch_api.h (the stable ABI or the classic headers). Templated on a
// Policy (device test, device guard, kernel launch) so that the same code serves the CUDA
// binding (binding.cpp: the kernels in libraries of their own, found by name) and the host
// emulation of the kernels that the tests run without a GPU (tests/cuda/emu/pushpull_cuda_emu.cpp).
//
// Dtypes: float32, float64, and float16 / bfloat16 data (computed in float32) whose grid is
// either the same half type or float32. Outputs: pull/grad/push/pushgrad in the data's dtype,
// grad_dot/hess_dot in the grid's dtype.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/bounds.h"
#include "core/message.h"
#include "pushpull/checks.h"
#include "core/spline.h"
#include "core/torch_api.h"
#include "core/tuning.h"
#include "pushpull/cuda/params.cuh"
#include "pushpull/tensor.h"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {

// --------------------------------------------------------------------------------------------
// Checks: pushpull/checks.h, shared with the CPU kernels (here the half dtypes are accepted:
// the Policy's kHalf).

using checks::check_affine;  // check_grid<Policy> / check_affine<Policy>: the Policy is the Dev
using checks::check_grid;
using checks::check_channels;
using checks::check_options;
using checks::check_point_shape;
using checks::check_shape;
using checks::is_half;
using checks::point_shape;
using checks::resampled_size;
using msg::dev;
using msg::dt;
using msg::num;
using msg::shape_str;

// A tensor [B, C, *spatial(D)] (+ a trailing D when with_d) on the grid's device, whose dtype
// is the grid's (or a half type when the grid is float32).
inline void check_tensor(const api::Tensor& t, const char* name, const api::Tensor& grid, int64_t D,
                         bool with_d, const char* layout) {
  checks::check_tensor(t, name, grid, D, with_d, layout, "grid", /*half_ok=*/true);
}

// --------------------------------------------------------------------------------------------
// Geometry.

inline Dtype dtype_of(const api::Tensor& t) {
  switch (t.scalar_type()) {
    case api::kHalf: return kHalf;
    case api::kBFloat16: return kBFloat16;
    case api::kFloat: return kFloat;
    default: return kDouble;
  }
}

// Offsets of a strided tensor fit in int32 (with room for one past the end).
inline bool fits32(const api::Tensor& t) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 1;
  if (t.numel() == 0) return true;
  int64_t span = 0;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span < kMax && t.numel() < kMax;
}

// Does offset(point p) == p * flat for the strides `st` over the point shape `pts`?
inline bool flat_stride(const int64_t* st, const int64_t* pts, int64_t& flat) {
  int64_t expect = -1;
  flat = 0;
  for (int k = 2; k >= 0; --k) {
    if (pts[k] == 1) continue;
    if (expect < 0) {
      flat = st[k];
      expect = st[k] * pts[k];
    } else {
      if (st[k] != expect) return false;
      expect *= pts[k];
    }
  }
  return true;
}

// Grid, options and batch (pushpull/geometry.h).
inline Params make_params(const api::Tensor& grid, const api::Tensor& data, int64_t D,
                          api::IntRef order, api::IntRef bound, bool extrapolate) {
  Params p;
  set_points(p, grid.size(0), grid.sizes().slice(1, D), D, order, bound, extrapolate);
  set_grid_strides(p, grid.strides());
  p.grid = grid.const_data_ptr();
  p.grid_f32 = is_half(data.scalar_type()) && grid.scalar_type() == api::kFloat;
  return p;
}

// The image the taps index, for gathers: data with sizes [B, C, *S], batch and channel strides
// sB, sC (its own, or 0 where it is read broadcast).
inline void set_gather_source(Params& p, const api::Tensor& data, api::IntRef sizes, int64_t sB,
                              int64_t sC) {
  p.C = sizes[1];
  p.src_ptr = data.const_data_ptr();
  p.sB = sB;
  p.sC = sC;
  set_source(p, sizes.slice(2), data.strides().slice(2));
}

// The image the taps index, for gathers: input [B, C, *S].
inline void set_gather_source(Params& p, const api::Tensor& input) {
  set_gather_source(p, input, input.sizes(), input.stride(0), input.stride(1));
}

// The image the taps index, for scatters: a contiguous [B, C, *shape] buffer.
inline void set_scatter_source(Params& p, api::IntRef shape) {
  int64_t stride[3];
  int64_t s = 1;
  for (int d = p.D - 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape[d];
  }
  set_source(p, shape, stride);
}

// The per-point tensor [B, C, *O(, D)] (pushed values, dot weights).
inline void set_point_tensor(Params& p, const api::Tensor& t, bool with_d) {
  p.C = t.size(1);
  p.pin = t.const_data_ptr();
  p.pB = t.stride(0);
  p.pC = t.stride(1);
  p.pD = with_d ? t.stride(-1) : 0;
  const int f = 3 - p.D;
  for (int d = 0; d < p.D; ++d) p.ps[f + d] = t.stride(2 + d);
}

inline void set_flat(Params& p) {
  int64_t gp = 0, pp = 0;
  p.flat = flat_stride(p.g, p.pts, gp) && (p.pin == nullptr || flat_stride(p.ps, p.pts, pp));
  p.gP = gp;
  p.pP = pp;
}

// The tiled scatter (tiles.cuh) pays where points move by a few voxels from their own
// voxel, so it is asked for where the grid has one point per source voxel (O == S) in 2-D and
// 3-D; the cuda_tiles knob (NI_JIT_CUDA_TILES=0) turns it off (benchmarks, tests).
inline bool want_tiles(const Params& p) {
  if (p.D < 2) return false;
  for (int k = 0; k < 3; ++k)
    if (p.pts[k] != p.src[k]) return false;
  return tuning::get(tuning::kCudaTiles) != 0;
}

// Tests force 64-bit offsets with the cuda_index32 knob off (NI_JIT_CUDA_INDEX=64).
inline bool allow_i32() { return tuning::get(tuning::kCudaIndex32) != 0; }

template <class Policy, int OP>
void run(Params& p, const api::Tensor& data, bool i32) {
  if (p.B == 0 || p.P == 0) return;
  NJ_CHECK((p.P + 255) / 256 <= std::numeric_limits<int32_t>::max(),
           "too many grid points per batch (", num(p.P), ") for one CUDA launch");
  set_flat(p);
  Policy::template run_kernel<OP>(p, dtype_of(data), i32 && allow_i32());
}

inline bool empty_source(const api::Tensor& input, int64_t D) {
  for (int64_t d = 0; d < D; ++d)
    if (input.size(2 + d) == 0) return true;
  return false;
}

// --------------------------------------------------------------------------------------------
// Ops.

template <class Policy, bool kIsGrad>
api::Tensor gather_impl(const api::Tensor& input, const api::Tensor& grid, api::IntRef order,
                        api::IntRef bound, bool extrapolate) {
  const int64_t D = check_grid<Policy>(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_options(order, bound, D);
  const typename Policy::Guard guard(grid.device());
  api::Tensor out = api::empty(point_shape(grid, input.size(0), input.size(1), D, kIsGrad), input);
  if (out.numel() == 0) return out;
  if (empty_source(input, D)) return api::zero_(out);
  Params p = make_params(grid, input, D, order, bound, extrapolate);
  set_gather_source(p, input);
  p.out = out.data_ptr();
  const bool i32 = fits32(input) && fits32(grid) && fits32(out);
  run<Policy, kIsGrad ? kGrad : kPull>(p, input, i32);
  return out;
}

template <class Policy, bool kIsGrad>
api::Tensor scatter_impl(const api::Tensor& input, const api::Tensor& grid, api::IntRef shape,
                         api::IntRef order, api::IntRef bound, bool extrapolate) {
  const int64_t D = check_grid<Policy>(grid);
  check_tensor(input, "input", grid, D, kIsGrad, kIsGrad ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(input, "input", grid, D);
  check_options(order, bound, D);
  check_shape(shape, D);
  const typename Policy::Guard guard(grid.device());
  // half data: atomics add into a float32 buffer, cast at the end
  const bool half = is_half(input.scalar_type());
  api::Tensor buf =
      api::zeros(resampled_size(input, shape), half ? api::kFloat : input.scalar_type(), input);
  if (buf.numel() > 0) {
    Params p = make_params(grid, input, D, order, bound, extrapolate);
    set_scatter_source(p, shape);
    set_point_tensor(p, input, kIsGrad);
    p.tile = !kIsGrad && want_tiles(p);
    p.out = buf.data_ptr();
    const bool i32 = fits32(input) && fits32(grid) && fits32(buf);
    run<Policy, kIsGrad ? kPushGrad : kPush>(p, input, i32);
  }
  return half ? api::to(buf, input.scalar_type()) : buf;
}

template <class Policy, bool kIsHess>
api::Tensor dot_impl(const api::Tensor& weight, const api::Tensor& input, const api::Tensor& grid,
                     api::IntRef order, api::IntRef bound, bool extrapolate) {
  const int64_t D = check_grid<Policy>(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_tensor(weight, "weight", grid, D, kIsHess, kIsHess ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(weight, "weight", grid, D);
  check_channels(weight, "weight", input);
  NJ_CHECK(weight.scalar_type() == input.scalar_type(), "weight dtype (",
           dt(weight.scalar_type()), ") must equal input dtype (", dt(input.scalar_type()), ")");
  check_options(order, bound, D);
  const typename Policy::Guard guard(grid.device());
  api::Tensor out = api::empty(grid.sizes(), grid);  // [B, *O, D]
  if (out.numel() == 0) return out;
  if (empty_source(input, D) || input.size(1) == 0) return api::zero_(out);
  Params p = make_params(grid, input, D, order, bound, extrapolate);
  set_gather_source(p, input);
  set_point_tensor(p, weight, kIsHess);
  p.out = out.data_ptr();
  const bool i32 = fits32(input) && fits32(weight) && fits32(grid) && fits32(out);
  run<Policy, kIsHess ? kHessDot : kGradDot>(p, input, i32);
  return out;
}

// Both gradients of pull in one pass: (push of grad into input's shape, grad_dot(grad, input)).
template <class Policy>
std::tuple<api::Tensor, api::Tensor> pullback_impl(const api::Tensor& grad,
                                                   const api::Tensor& input,
                                                   const api::Tensor& grid, api::IntRef order,
                                                   api::IntRef bound, bool extrapolate) {
  const int64_t D = check_grid<Policy>(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_tensor(grad, "grad", grid, D, false, "[B, C, *O]");
  check_point_shape(grad, "grad", grid, D);
  check_channels(grad, "grad", input);
  NJ_CHECK(grad.scalar_type() == input.scalar_type(), "grad dtype (", dt(grad.scalar_type()),
           ") must equal input dtype (", dt(input.scalar_type()), ")");
  check_options(order, bound, D);
  const typename Policy::Guard guard(grid.device());
  // half data: atomics add into a float32 buffer, cast at the end
  const bool half = is_half(input.scalar_type());
  api::Tensor buf = api::zeros(input.sizes(), half ? api::kFloat : input.scalar_type(), input);
  api::Tensor ggrid = api::empty(grid.sizes(), grid);
  if (ggrid.numel() > 0 && buf.numel() == 0) api::zero_(ggrid);  // no channel or empty source
  if (ggrid.numel() > 0 && buf.numel() > 0) {
    // the taps' offsets address both the input and the contiguous buffer; the source is read
    // with input's sizes (a broadcast batch or channel has stride 0: src.sB, src.sC)
    const SpatiallyContiguous src = spatially_contiguous(input, D);
    Params p = make_params(grid, input, D, order, bound, extrapolate);
    set_gather_source(p, src.data, input.sizes(), src.sB, src.sC);
    set_point_tensor(p, grad, false);
    p.tile = want_tiles(p);
    p.out = buf.data_ptr();
    p.out2 = ggrid.data_ptr();
    const bool i32 = fits32(src.data) && fits32(grad) && fits32(grid) && fits32(buf) &&
                     fits32(ggrid);
    run<Policy, kPullBack>(p, input, i32);
  }
  return {half ? api::to(buf, input.scalar_type()) : buf, ggrid};
}

// --------------------------------------------------------------------------------------------
// Affine ops: the points are the voxels of a shape, their coordinates affine[b] @ (i, 1)
// computed in the kernels (load_affine_point). float32 / float64 only.

// t [B, C, *spatial(D)] on affine's device, with its dtype and batch size
inline void check_affine_tensor(const api::Tensor& t, const char* name, const api::Tensor& affine,
                                int64_t D, const char* layout) {
  checks::check_tensor(t, name, affine, D, false, layout, "affine");
}

// Points: the voxels of `pts`; mat: a contiguous [B, D, D+1] matrix.
inline Params make_affine_params(const api::Tensor& mat, api::IntRef pts, int64_t D,
                                 api::IntRef order, api::IntRef bound, bool extrapolate) {
  Params p;
  set_points(p, mat.size(0), pts, D, order, bound, extrapolate);
  p.mat = mat.const_data_ptr();
  p.mB = mat.stride(0);
  return p;
}

template <class Policy>
api::Tensor affine_pull_impl(const api::Tensor& input, const api::Tensor& affine,
                             api::IntRef shape, api::IntRef order, api::IntRef bound,
                             bool extrapolate) {
  const int64_t D =
      checks::check_affine_resample<Policy>(input, "[B, C, *S]", affine, shape, order, bound);
  const typename Policy::Guard guard(affine.device());
  api::Tensor out = api::empty(resampled_size(input, shape), input);
  if (out.numel() == 0) return out;
  if (empty_source(input, D)) return api::zero_(out);
  const api::Tensor mat = api::contiguous(affine);
  Params p = make_affine_params(mat, shape, D, order, bound, extrapolate);
  set_gather_source(p, input);
  p.out = out.data_ptr();
  run<Policy, kAffinePull>(p, input, fits32(input) && fits32(out));
  return out;
}

template <class Policy>
api::Tensor affine_push_impl(const api::Tensor& input, const api::Tensor& affine,
                             api::IntRef shape, api::IntRef order, api::IntRef bound,
                             bool extrapolate) {
  const int64_t D =
      checks::check_affine_resample<Policy>(input, "[B, C, *O]", affine, shape, order, bound);
  const typename Policy::Guard guard(affine.device());
  api::Tensor out = api::zeros(resampled_size(input, shape), input);
  if (out.numel() == 0 || input.numel() == 0) return out;
  const api::Tensor mat = api::contiguous(affine);
  Params p = make_affine_params(mat, input.sizes().slice(2), D, order, bound, extrapolate);
  set_scatter_source(p, shape);
  set_point_tensor(p, input, false);
  p.out = out.data_ptr();
  run<Policy, kAffinePush>(p, input, fits32(input) && fits32(out));
  return out;
}

template <class Policy>
api::Tensor affine_dot_impl(const api::Tensor& weight, const api::Tensor& input,
                            const api::Tensor& affine, api::IntRef order, api::IntRef bound,
                            bool extrapolate) {
  const int64_t D = check_affine<Policy>(affine);
  check_affine_tensor(input, "input", affine, D, "[B, C, *S]");
  check_affine_tensor(weight, "weight", affine, D, "[B, C, *O]");
  check_channels(weight, "weight", input);
  check_options(order, bound, D);
  const typename Policy::Guard guard(affine.device());
  api::Tensor out = api::zeros(std::vector<int64_t>{affine.size(0), D, D + 1}, input);
  if (out.numel() == 0 || weight.numel() == 0 || input.numel() == 0) return out;
  const api::Tensor mat = api::contiguous(affine);
  Params p = make_affine_params(mat, weight.sizes().slice(2), D, order, bound, extrapolate);
  set_gather_source(p, input);
  set_point_tensor(p, weight, false);
  p.out = out.data_ptr();
  run<Policy, kAffineDot>(p, input, fits32(input) && fits32(weight));
  return out;
}

// The ops for one Policy: on_device(t), kDevice (for messages), Guard (device guard),
// run_kernel<OP>(params, dtype, i32) (launches the kernel, throws on error).
template <class Policy>
struct Ops {
  static api::Tensor grid_pull(const api::Tensor& input, const api::Tensor& grid,
                               api::IntArg order, api::IntArg bound, bool extrapolate) {
    return gather_impl<Policy, false>(input, grid, order, bound, extrapolate);
  }

  static api::Tensor grid_grad(const api::Tensor& input, const api::Tensor& grid,
                               api::IntArg order, api::IntArg bound, bool extrapolate) {
    return gather_impl<Policy, true>(input, grid, order, bound, extrapolate);
  }

  static api::Tensor grid_push(const api::Tensor& input, const api::Tensor& grid,
                               api::IntArg shape, api::IntArg order, api::IntArg bound,
                               bool extrapolate) {
    return scatter_impl<Policy, false>(input, grid, shape, order, bound, extrapolate);
  }

  static api::Tensor grid_pushgrad(const api::Tensor& input, const api::Tensor& grid,
                                   api::IntArg shape, api::IntArg order,
                                   api::IntArg bound, bool extrapolate) {
    return scatter_impl<Policy, true>(input, grid, shape, order, bound, extrapolate);
  }

  static api::Tensor grid_grad_dot(const api::Tensor& weight, const api::Tensor& input,
                                   const api::Tensor& grid, api::IntArg order,
                                   api::IntArg bound, bool extrapolate) {
    return dot_impl<Policy, false>(weight, input, grid, order, bound, extrapolate);
  }

  static api::Tensor grid_hess_dot(const api::Tensor& weight, const api::Tensor& input,
                                   const api::Tensor& grid, api::IntArg order,
                                   api::IntArg bound, bool extrapolate) {
    return dot_impl<Policy, true>(weight, input, grid, order, bound, extrapolate);
  }

  static std::tuple<api::Tensor, api::Tensor> grid_pull_backward(
      const api::Tensor& grad, const api::Tensor& input, const api::Tensor& grid,
      api::IntArg order, api::IntArg bound, bool extrapolate) {
    return pullback_impl<Policy>(grad, input, grid, order, bound, extrapolate);
  }

  static api::Tensor affine_pull(const api::Tensor& input, const api::Tensor& affine,
                                 api::IntArg shape, api::IntArg order,
                                 api::IntArg bound, bool extrapolate) {
    return affine_pull_impl<Policy>(input, affine, shape, order, bound, extrapolate);
  }

  static api::Tensor affine_push(const api::Tensor& input, const api::Tensor& affine,
                                 api::IntArg shape, api::IntArg order,
                                 api::IntArg bound, bool extrapolate) {
    return affine_push_impl<Policy>(input, affine, shape, order, bound, extrapolate);
  }

  static api::Tensor affine_grad_dot(const api::Tensor& weight, const api::Tensor& input,
                                     const api::Tensor& affine, api::IntArg order,
                                     api::IntArg bound, bool extrapolate) {
    return affine_dot_impl<Policy>(weight, input, affine, order, bound, extrapolate);
  }
};

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit

