// What every CUDA kernel library shares: its one dtype, and its plain-C entry's error (the
// nj_kernel_fn of core/host.h: a launch status turned into the text the binding raises
// unchanged). No torch header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

namespace nitorch_jit {

// A CUDA kernel library holds one kernel for one dtype (-DNJ_KERNEL_DTYPE: 0 float16,
// 1 bfloat16, 2 float32, 3 float64), so nvcc compiles only that one; the host emulation of the
// tests holds every dtype.
constexpr bool builds_dtype(int dtype) {
#if defined(NJ_KERNEL_DTYPE)
  return dtype == NJ_KERNEL_DTYPE;
#else
  return dtype >= 0;
#endif
}

// 0 when `rc` is cudaSuccess; else 1, with "CUDA error: <text> (<name>) launching <what>" in err.
inline int launch_error(cudaError_t rc, const char* what, char* err, int64_t err_len) {
  if (rc == cudaSuccess) return 0;
  if (err_len > 0)
    std::snprintf(err, static_cast<size_t>(err_len), "CUDA error: %s (%s) launching %s",
                  cudaGetErrorString(rc), cudaGetErrorName(rc), what);
  return 1;
}

}  // namespace nitorch_jit
