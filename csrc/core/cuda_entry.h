// What the plain-C entries of every CUDA kernel library share (core/host.h's nj_kernel_fn): a
// launch status turned into the error text the binding raises unchanged. No torch header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

namespace nitorch_jit {

// 0 when `rc` is cudaSuccess; else 1, with "CUDA error: <text> (<name>) launching <what>" in err.
inline int launch_error(cudaError_t rc, const char* what, char* err, int64_t err_len) {
  if (rc == cudaSuccess) return 0;
  if (err_len > 0)
    std::snprintf(err, static_cast<size_t>(err_len), "CUDA error: %s (%s) launching %s",
                  cudaGetErrorString(rc), cudaGetErrorName(rc), what);
  return 1;
}

}  // namespace nitorch_jit
