// The argument checks of the splinc and resize ops (docs/splinc-resize-spec.md), one copy for
// the CPU bindings (csrc/splinc/cpu/binding.cpp, csrc/resize/cpu/binding.cpp) and the CUDA host
// code (splinc/cuda/host.cuh, resize/cuda/host.cuh), so that both raise the same messages.
// Written on core/torch_api.h (the CUDA host code is classic: api:: is ATen there).
// on_device / device: whether the input is on the library's device, and that device's name.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/message.h"
#include "core/torch_api.h"
#include "lines/filter.h"

namespace nitorch_jit {
namespace lines {

inline void check_float(const api::Tensor& input, bool on_device, const char* device,
                        const char* name) {
  NJ_CHECK(on_device, name, ": expected a ", device, " tensor");
  NJ_CHECK(input.scalar_type() == api::kFloat || input.scalar_type() == api::kDouble, name,
           ": expected float32 or float64, got ", msg::dt(input.scalar_type()));
}

inline void check_splinc_args(const api::Tensor& input, api::IntRef order,
                              api::IntRef bound, api::IntRef dim, bool on_device,
                              const char* device, const char* name) {
  using msg::num;
  check_float(input, on_device, device, name);
  NJ_CHECK(order.size() == bound.size() && bound.size() == dim.size(), name,
           ": order, bound and dim must have the same length");
  for (size_t i = 0; i < dim.size(); ++i) {
    NJ_CHECK(dim[i] >= 0 && dim[i] < input.dim(), name, ": dim ", num(dim[i]),
             " out of range");
    NJ_CHECK(order[i] >= 0 && order[i] <= 7, name, ": order must be in 0..7, got ",
             num(order[i]));
    NJ_CHECK(splinc::filter_bound((int)bound[i]) >= 0, name, ": unknown bound code ",
             num(bound[i]));
  }
}

// Expanded (stride 0) dims alias memory and cannot be filtered in place.
inline void check_not_expanded(const api::Tensor& input) {
  for (int64_t k = 0; k < input.dim(); ++k)
    NJ_CHECK(input.size(k) < 2 || input.stride(k) != 0,
             "spline_coeff_nd_: input has an expanded dim (stride 0); use inplace=False");
}

inline void check_resize_args(const api::Tensor& input, api::IntRef shape,
                              const api::FloatArg& scale, const api::FloatArg& shift,
                              api::IntRef order, api::IntRef bound, bool on_device,
                              const char* device, const char* name) {
  using msg::num;
  check_float(input, on_device, device, name);
  const size_t D = shape.size();
  NJ_CHECK(D >= 1 && static_cast<int64_t>(D) <= input.dim(), name, ": got ", num(D),
           " spatial sizes for a ", num(input.dim()), "-D input");
  NJ_CHECK(scale.size() == D && shift.size() == D && order.size() == D && bound.size() == D,
           name, ": shape, scale, shift, order and bound must have the same length");
  for (size_t i = 0; i < D; ++i) {
    NJ_CHECK(shape[i] >= 1, name, ": output sizes must be >= 1, got ", num(shape[i]));
    NJ_CHECK(order[i] >= 0 && order[i] <= 7, name, ": order must be in 0..7, got ",
             num(order[i]));
    NJ_CHECK(bound[i] >= 0 && bound[i] <= 6, name, ": unknown bound code ", num(bound[i]));
    NJ_CHECK(std::isfinite(scale[i]) && std::isfinite(shift[i]), name,
             ": scale and shift must be finite");
  }
  const int64_t off = input.dim() - static_cast<int64_t>(D);
  for (int64_t k = off; k < input.dim(); ++k)
    NJ_CHECK(input.size(k) >= 1, name, ": empty spatial dim in input");
  // the tap tables (resize/tables.h) hold int32 indices
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < D; ++i)
    NJ_CHECK(shape[i] < kMax && input.size(off + i) < kMax, name,
             ": spatial sizes must be below 2^31 - 1");
}

}  // namespace lines
}  // namespace nitorch_jit
