// CUDA kernels that work line by line along one dim (splinc, resize): the launchers the host
// code calls. No torch header. A kernel library (csrc/<module>/cuda/kernels.cu, which includes
// cuda.cuh) defines them; a module's CUDA binding defines them as calls into those libraries
// (cuda_binding.h).
//
// Every tensor is contiguous and seen as [outer, len, inner]: line (o, i) starts at
// (o * len) * inner + i and has stride inner. Threads are numbered with i fastest, so the
// threads of a warp read adjacent addresses (coalesced) whenever inner > 1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "lines/filter.h"

// Hidden: the splinc and resize libraries both define these; each must call its own.
#if defined(__GNUC__)
#define NJ_LINES_API __attribute__((visibility("hidden")))
#else
#define NJ_LINES_API
#endif

namespace nitorch_jit {
namespace lines_cuda {

// Filter every line of x [outer, n, inner] in place with the plan (in device memory; its n
// is the n given here). dbl: float64, else float32.
NJ_LINES_API cudaError_t filter(void* x, bool dbl, int64_t outer, int64_t n, int64_t inner,
                                const splinc::LinePlan* plan, cudaStream_t stream);

// out[o, j, i] = sum_k w[j*K + k] * in[o, idx[j*K + k], i] for in [outer, lin, inner] and out
// [outer, lout, inner]; idx (int32) and w (the data's type) in device memory. i32: every
// offset of in and out fits in int32 (faster index arithmetic).
NJ_LINES_API cudaError_t gather(const void* in, void* out, bool dbl, int64_t outer, int64_t lin,
                                int64_t lout, int64_t inner, const int32_t* idx, const void* w,
                                int K, bool i32, cudaStream_t stream);

// What a CUDA binding hands to the entry of a kernel library (cuda.cuh's NJ_LINES_EXPORT).
struct FilterCall {
  void* x;
  int64_t outer, n, inner;
  const splinc::LinePlan* plan;
  void* stream;  // the cudaStream_t to launch on
  int dbl;
};
struct GatherCall {
  const void* in;
  void* out;
  int64_t outer, lin, lout, inner;
  const int32_t* idx;
  const void* w;
  int K, dbl, i32;
  void* stream;  // the cudaStream_t to launch on
};

}  // namespace lines_cuda
}  // namespace nitorch_jit
