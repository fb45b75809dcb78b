// The CUDA Policy of cuda_host.cuh: PyTorch's current device and stream, errors raised
// as exceptions, constants uploaded from pinned memory without a host synchronisation.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>

namespace nitorch_jit {
namespace lines_cuda {

struct CudaPolicy {
  static constexpr const char* kDevice = "CUDA";
  static bool on_device(const at::Tensor& t) { return t.is_cuda(); }
  using Guard = c10::cuda::CUDAGuard;
  static cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
  static void check(cudaError_t e) { C10_CUDA_CHECK(e); }
  // Pinned staging from PyTorch's caching host allocator: a non-blocking copy_ records an
  // event on the current stream, and the block is not reused before the copy is done. The
  // device buffer comes from the caching allocator, on the stream the kernels use.
  static at::Tensor upload(const void* bytes, size_t n, const at::Tensor& like) {
    const int64_t len = static_cast<int64_t>(n);
    at::Tensor host = at::empty({len}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    if (n) std::memcpy(host.data_ptr(), bytes, n);
    at::Tensor dev = at::empty({len}, like.options().dtype(at::kByte));
    dev.copy_(host, /*non_blocking=*/true);
    return dev;
  }
};

}  // namespace lines_cuda
}  // namespace nitorch_jit
