// The source tensor of a gather-scatter pass, as the binding hands it to a kernel.
#pragma once

#include <cstdint>

#include "core/torch_api.h"

namespace nitorch_jit {
namespace pushpull {

// `t` [B, C, *S] itself when its D spatial dims are laid out as a contiguous [*S] (so that tap
// offsets into it also address a contiguous [B, C, *S] output), else a copy that is. Zero batch
// and channel strides stay zero (no copies of broadcast data): the copy holds one batch or
// channel there, and the caller reads the batch and channel strides from `sB`, `sC`.
struct SpatiallyContiguous {
  api::Tensor data;
  int64_t sB, sC;
};

inline SpatiallyContiguous spatially_contiguous(const api::Tensor& t, int64_t D) {
  int64_t expect = 1;
  bool ok = true;
  for (int64_t d = D - 1; d >= 0; --d) {
    if (t.size(2 + d) != 1 && t.stride(2 + d) != expect) ok = false;
    expect *= t.size(2 + d);
  }
  if (ok) return {t, t.stride(0), t.stride(1)};
#if defined(NJ_STABLE_ABI)
  api::Tensor base = t;
  if (t.stride(0) == 0) base = torch::stable::narrow(base, 0, 0, 1);
  if (t.stride(1) == 0) base = torch::stable::narrow(base, 1, 0, 1);
  base = torch::stable::contiguous(base);
#else
  api::Tensor base = t;
  if (t.stride(0) == 0) base = base.narrow(0, 0, 1);
  if (t.stride(1) == 0) base = base.narrow(1, 0, 1);
  base = base.contiguous();
#endif
  return {base, t.stride(0) == 0 ? 0 : base.stride(0), t.stride(1) == 0 ? 0 : base.stride(1)};
}

}  // namespace pushpull
}  // namespace nitorch_jit
