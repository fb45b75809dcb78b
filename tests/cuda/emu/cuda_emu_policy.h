// The launch policy of the host emulations of the CUDA kernels (tests/cuda/emu/*_cuda_emu.cpp):
// the "device" is the host, launches run on no stream and uploads are plain CPU buffers.
// Include after cuda_emu.h and the torch headers.
#pragma once

#include <cstring>

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

namespace nj_emu {

struct EmuPolicy {
  static constexpr const char* kDevice = "CPU (CUDA emulation)";
  static bool on_device(const at::Tensor& t) { return t.is_cpu(); }
  struct Guard {
    explicit Guard(c10::Device) {}
  };
  static cudaStream_t stream() { return nullptr; }
  static void check(cudaError_t e) { TORCH_CHECK(e == cudaSuccess, "emulated launch failed"); }
  // the emulated device is the host: a plain CPU buffer
  static at::Tensor upload(const void* bytes, size_t n, const at::Tensor& like) {
    at::Tensor t = at::empty({static_cast<int64_t>(n)}, like.options().dtype(at::kByte));
    if (n) std::memcpy(t.data_ptr(), bytes, n);
    return t;
  }
};

}  // namespace nj_emu
