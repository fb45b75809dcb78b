// The CUDA half of core/torch_api.h, for the CUDA bindings only (the CPU bindings never parse
// it): the current device and stream, CUDA errors, and the upload of a call's constants, on
// the LibTorch stable ABI (NJ_STABLE_ABI) or the classic c10/cuda headers, from one source.
//   CudaGuard(device)              sets the device of a tensor current, restores it at exit
//   cuda_stream()                  PyTorch's current stream on the current device
//   check_cuda(err)                raises "CUDA error: <text>" unless err is cudaSuccess
//   upload(bytes, n, like)         a uint8 tensor on like's device holding bytes[0..n)
// CUDA runtime calls go through cuda_runtime_api.h alone (the toolkit may lack cuBLAS and
// cuSPARSE headers: never ATen/cuda/CUDAContext.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/torch_api.h"

#if defined(NJ_STABLE_ABI)
#include <torch/csrc/stable/accelerator.h>
#else
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace nitorch_jit {
namespace api {

#if defined(NJ_STABLE_ABI)

// torch's accelerator guard (CUDA in a CUDA torch), on the tensor's device index.
class CudaGuard {
 public:
  explicit CudaGuard(const torch::stable::Device& device) : guard_(device.index()) {}

 private:
  torch::stable::accelerator::DeviceGuard guard_;
};

// The stream handle's native handle is the cudaStream_t (torch >= 2.13).
inline cudaStream_t cuda_stream() {
  namespace acc = torch::stable::accelerator;
  return static_cast<cudaStream_t>(acc::getCurrentStream(acc::getCurrentDeviceIndex())
                                       .nativeHandle());
}

inline void check_cuda(cudaError_t e) {
  if (e != cudaSuccess) fail("CUDA error: ", cudaGetErrorString(e));
}

// Staged in pinned memory (pin_memory=true: PyTorch's caching host allocator, as the classic
// path), copied with non_blocking=true on the current stream: aten::copy_ records an event for
// the pinned block, which is not reused before the copy is done, so the host never waits.
// The device buffer comes from the caching allocator, on the stream the kernels use.
inline Tensor upload(const void* bytes, size_t n, const Tensor& like) {
  const std::vector<int64_t> len{static_cast<int64_t>(n)};
  Tensor host = torch::stable::empty(len, ScalarType::Byte, std::nullopt,
                                     torch::stable::Device(torch::headeronly::DeviceType::CPU),
                                     /*pin_memory=*/true);
  if (n) std::memcpy(host.data_ptr(), bytes, n);
  Tensor dev = torch::stable::empty(len, ScalarType::Byte, std::nullopt, like.device());
  torch::stable::copy_(dev, host, /*non_blocking=*/true);
  return dev;
}

#else  // classic

using CudaGuard = c10::cuda::CUDAGuard;

inline cudaStream_t cuda_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

inline void check_cuda(cudaError_t e) { C10_CUDA_CHECK(e); }

// Pinned staging from PyTorch's caching host allocator: a non-blocking copy_ records an event
// on the current stream, and the block is not reused before the copy is done. The device buffer
// comes from the caching allocator, on the stream the kernels use.
inline Tensor upload(const void* bytes, size_t n, const Tensor& like) {
  const int64_t len = static_cast<int64_t>(n);
  at::Tensor host = at::empty({len}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  if (n) std::memcpy(host.data_ptr(), bytes, n);
  at::Tensor dev = at::empty({len}, like.options().dtype(at::kByte));
  dev.copy_(host, /*non_blocking=*/true);
  return dev;
}

#endif

}  // namespace api
}  // namespace nitorch_jit
