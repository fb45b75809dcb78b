// CUDA pushpull kernels: what the binding (binding.cpp) passes to the kernel files (pull.cu,
// grad.cu, push.cu, pushgrad.cu, graddot.cu, hessdot.cu, pullback.cu). Kept free of torch
// headers: each kernel file is a torch-free kernel library of its own (one op, one dtype).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pushpull/geometry.h"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {

// kPullBack: grid_pull_backward, push into `out` and grad_dot into `out2` in one pass
enum OpKind : int {
  kPull = 0,
  kGrad = 1,
  kPush = 2,
  kPushGrad = 3,
  kGradDot = 4,
  kHessDot = 5,
  kPullBack = 6,
  // affine_pull, affine_push, affine_grad_dot: coordinates from the matrix `mat`, no grid
  kAffinePull = 7,
  kAffinePush = 8,
  kAffineDot = 9
};
enum Dtype : int { kHalf = 0, kBFloat16 = 1, kFloat = 2, kDouble = 3 };

// Everything a kernel needs, sizes and strides in elements: the geometry (pushpull/geometry.h,
// shared with the CPU kernels), the pointers and the per-point tensor's strides.
struct Params : Geometry {
  // source: the image the taps index (input of gathers; the output buffer of scatters)
  const void* src_ptr = nullptr;
  int64_t sB = 0, sC = 0;  // batch / channel strides (gathers)
  // grid [B, *O, D]
  const void* grid = nullptr;
  bool grid_f32 = false;  // half/bfloat16 data with a float32 grid
  // per-point tensor [B, C, *O(, D)]: the values pushed (push, pushgrad), the weight (dots)
  const void* pin = nullptr;
  int64_t pB = 0, pC = 0, ps[3] = {0, 0, 0}, pD = 0;
  // flat: every per-point tensor (grid, pin) addresses point p of a batch at p * stride
  bool flat = false;
  // push, pull_backward: use the block-tiled scatter where there is one (tiles.cuh)
  bool tile = false;
  int64_t gP = 0, pP = 0;
  // contiguous output: pull [B, C, P], grad [B, C, P, D], scatters [B, C, *src] in the
  // accumulation type (float for half data), dots [B, P, D] in the grid's dtype; pullback:
  // out as a scatter (grad_input), out2 as a dot (grad_grid)
  void* out = nullptr;
  void* out2 = nullptr;
  // affine ops: contiguous [B, D, D+1] matrix in the computation type (mB = 0: shared)
  const void* mat = nullptr;
  int64_t mB = 0;
};

// One launch, as the CUDA binding hands it to a kernel library's entry (launch.cuh).
struct KernelCall {
  const Params* params;
  int dtype;  // a Dtype
  int i32;    // 32-bit offsets
  void* stream;  // the cudaStream_t to launch on
};

// Launch one op on `stream` with 32-bit (i32) or 64-bit offsets; returns the launch status.
// Defined in the kernel files (one per op), for every Dtype.
template <int OP>
cudaError_t launch(const Params& p, Dtype dtype, bool i32, cudaStream_t stream);

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit
