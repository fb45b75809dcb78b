// Tensor layout helpers shared by the CPU kernels and the CUDA host code of pushpull.
#pragma once

#include <ATen/core/Tensor.h>

namespace nitorch_jit {
namespace pushpull {

// `t` [B, C, *S] itself when its D spatial dims are laid out as a contiguous [*S] (so that tap
// offsets into it also address a contiguous [B, C, *S] output), else a copy that is; zero batch
// and channel strides stay zero (no copies of broadcast data).
inline at::Tensor spatially_contiguous(const at::Tensor& t, int64_t D) {
  int64_t expect = 1;
  bool ok = true;
  for (int64_t d = D - 1; d >= 0; --d) {
    if (t.size(2 + d) != 1 && t.stride(2 + d) != expect) ok = false;
    expect *= t.size(2 + d);
  }
  if (ok) return t;
  at::Tensor base = t;
  if (t.stride(0) == 0) base = base.narrow(0, 0, 1);
  if (t.stride(1) == 0) base = base.narrow(1, 0, 1);
  return base.contiguous().expand(t.sizes());
}

}  // namespace pushpull
}  // namespace nitorch_jit
