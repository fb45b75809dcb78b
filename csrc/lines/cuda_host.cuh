// Host side of the CUDA line kernels (splinc, resize): message helpers, the upload of the
// per-call constants (filter plans, tap tables), the filter along one dim, written on
// core/torch_api.h (the stable ABI or the classic headers). Templated on a
// Policy (as csrc/pushpull/cuda/host.cuh) so that the same code serves the CUDA
// libraries (cuda_policy.cuh) and the host emulation of the kernels in the tests
// (tests/cuda/emu/lines_cuda_emu.cpp). A Policy provides:
//   kDevice                          device name for messages ("CUDA")
//   on_device(t)                     is t on that device
//   Guard(device)                    device guard
//   stream()                         the stream to launch on (PyTorch's current one)
//   check(cudaError_t)               throw on error
//   upload(bytes, n, like)           a uint8 tensor on like's device holding bytes[0..n)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/torch_api.h"
#include "core/tuning.h"
#include "lines/cuda.h"
#include "lines/filter.h"

namespace nitorch_jit {
namespace lines_cuda {

// Tests force 64-bit offsets with the cuda_index32 knob (as the pushpull kernels).
inline bool allow_i32() { return tuning::get(tuning::kCudaIndex32) != 0; }

inline bool fits32(int64_t numel) { return numel < std::numeric_limits<int32_t>::max(); }

// [outer, size(d), inner] of a contiguous tensor.
inline void outer_inner(const api::Tensor& t, int64_t d, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= t.size(k);
  for (int64_t k = d + 1; k < t.dim(); ++k) inner *= t.size(k);
}

// The constants of one call (plans, tables) gathered in one host buffer and sent to the device
// in one copy. add() returns the offset of its bytes, 16-byte aligned.
class Staging {
 public:
  size_t add(const void* data, size_t bytes) {
    const size_t off = (buf_.size() + 15) / 16 * 16;
    buf_.resize(off + bytes);
    if (bytes) std::memcpy(buf_.data() + off, data, bytes);
    return off;
  }
  template <typename T>
  size_t add(const std::vector<T>& v) {
    return add(v.data(), v.size() * sizeof(T));
  }
  // Copy to like's device; device addresses are base + offset.
  template <class Policy>
  void upload(const api::Tensor& like) {
    dev_ = Policy::upload(buf_.data(), buf_.size(), like);
    base_ = static_cast<const uint8_t*>(dev_.const_data_ptr());
  }
  template <typename T>
  const T* at(size_t off) const {
    return reinterpret_cast<const T*>(base_ + off);
  }

 private:
  std::vector<uint8_t> buf_;
  api::Tensor dev_;  // keeps the device copy alive until the call's launches are queued
  const uint8_t* base_ = nullptr;
};

// Filter the contiguous tensor x in place along dim d with a plan at device address `plan`.
template <class Policy>
void filter_dim(const api::Tensor& x, int64_t d, const splinc::LinePlan* plan) {
  int64_t outer, inner;
  outer_inner(x, d, outer, inner);
  Policy::check(filter(x.data_ptr(), x.scalar_type() == api::kDouble, outer, x.size(d), inner,
                       plan, Policy::stream()));
}

}  // namespace lines_cuda
}  // namespace nitorch_jit
