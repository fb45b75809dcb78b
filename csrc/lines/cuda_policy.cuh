// The CUDA Policy of cuda_host.cuh: PyTorch's current device and stream, errors raised
// as exceptions, constants uploaded from pinned memory without a host synchronisation
// (core/torch_api_cuda.h: the stable ABI or the classic c10/cuda headers).
#pragma once

#include "core/torch_api.h"
#include "core/torch_api_cuda.h"

namespace nitorch_jit {
namespace lines_cuda {

struct CudaPolicy {
  static constexpr const char* kDevice = "CUDA";
  static bool on_device(const api::Tensor& t) { return t.is_cuda(); }
  using Guard = api::CudaGuard;
  static cudaStream_t stream() { return api::cuda_stream(); }
  static void check(cudaError_t e) { api::check_cuda(e); }
  static api::Tensor upload(const void* bytes, size_t n, const api::Tensor& like) {
    return api::upload(bytes, n, like);
  }
};

}  // namespace lines_cuda
}  // namespace nitorch_jit
