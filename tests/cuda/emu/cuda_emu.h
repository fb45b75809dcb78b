// CUDA built-ins emulated on the host, shared by the kernel emulations of the tests
// (pushpull_cuda_emu.cpp, lines_cuda_emu.cpp): thread indices, __ldg, atomicAdd, and launches
// that run the threads of a grid one at a time. Include after <cuda_runtime_api.h> (dim3).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

// CUDA built-ins, emulated: one thread at a time.
static dim3 blockIdx, threadIdx, gridDim, blockDim;

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}

template <class F>
void nj_emulate_launch(dim3 grid, dim3 block, F&& kernel) {
  gridDim = grid;
  blockDim = block;
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x)
      for (unsigned t = 0; t < block.x; ++t) {
        blockIdx = dim3(x, y, 1);
        threadIdx = dim3(t, 0, 0);
        kernel();
      }
}

// Blocks of the tiled scatter (pushpull/cuda/tiles.cuh): its steps, separated by __syncthreads() on
// a GPU, run one after the other, each over every thread of the block (in reverse order every
// other step, so that a step that depends on the order of its threads shows); the block's
// shared window starts as NaN (all bits set: shared memory is not initialised).
static int64_t nj_phased_launches = 0;  // read by the tests (nj_emu::emu_phased_launches)

template <class N, class F>
void nj_emulate_phased_launch(dim3 grid, dim3 block, size_t shared_bytes, N&& steps, F&& step) {
  ++nj_phased_launches;
  gridDim = grid;
  blockDim = block;
  void* shared = std::malloc(shared_bytes);
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x) {
      blockIdx = dim3(x, y, 1);
      threadIdx = dim3(0, 0, 0);
      std::memset(shared, 0xff, shared_bytes);
      const int64_t n = steps();
      for (int64_t s = 0; s < n; ++s)
        for (unsigned i = 0; i < block.x; ++i) {
          threadIdx = dim3(s % 2 ? block.x - 1 - i : i, 0, 0);
          step(shared, s);
        }
    }
  std::free(shared);
}
