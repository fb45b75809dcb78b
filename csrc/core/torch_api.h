// The torch a binding is written against, named once: the classic headers (ATen), or the
// LibTorch stable ABI when NJ_STABLE_ABI is defined (torch >= 2.13 here: its headers parse in a
// fraction of the time, issue 31). A binding and its checks use only what this file names, so
// one source builds either way:
//   Tensor, IntArg (an int[] argument), IntRef (sizes, strides, a view of an IntArg),
//   FloatArg (a float[] argument), OptTensor (a Tensor? argument), contiguous, clone, copy_,
//   ScalarType and kFloat..., dtype_name, device_str, is_strided, empty (like a tensor, or
//   with another dtype on its device), zeros, to (another dtype), zero_,
//   NJ_CHECK(cond, pieces...) whose message is the pieces, unchanged (numbers through
//   core/message.h's num()), NJ_LIBRARY_IMPL / NJ_IMPL for the registration block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#if defined(NJ_STABLE_ABI)

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <stdexcept>

namespace nitorch_jit {
namespace api {

using Tensor = torch::stable::Tensor;
using IntArg = std::vector<int64_t>;
using IntRef = torch::headeronly::HeaderOnlyArrayRef<int64_t>;
using FloatArg = std::vector<double>;
using OptTensor = std::optional<Tensor>;
using ScalarType = torch::headeronly::ScalarType;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kDouble = ScalarType::Double;
constexpr ScalarType kHalf = ScalarType::Half;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;

inline const char* dtype_name(ScalarType t) { return torch::headeronly::toString(t); }

inline std::string device_str(const Tensor& t) {
  const auto d = t.device();
  std::string s = t.is_cuda() ? "cuda" : t.is_cpu() ? "cpu" : "other";
  if (d.has_index()) s += ":" + std::to_string(static_cast<int>(d.index()));
  return s;
}

inline bool is_strided(const Tensor& t) {
  return t.layout() == torch::headeronly::Layout::Strided;
}

inline Tensor empty(IntRef sizes, const Tensor& like) {
  return torch::stable::empty(sizes, like.scalar_type(), std::nullopt, like.device());
}
inline Tensor empty(IntRef sizes, ScalarType dtype, const Tensor& like) {
  return torch::stable::empty(sizes, dtype, std::nullopt, like.device());
}

inline Tensor& zero_(Tensor& t) {
  torch::stable::zero_(t);
  return t;
}
inline Tensor zeros(IntRef sizes, ScalarType dtype, const Tensor& like) {
  Tensor t = api::empty(sizes, dtype, like);
  return api::zero_(t);  // qualified: ADL would find torch::stable::zero_ too
}
inline Tensor zeros(IntRef sizes, const Tensor& like) {
  return api::zeros(sizes, like.scalar_type(), like);
}
inline Tensor to(const Tensor& t, ScalarType dtype) { return torch::stable::to(t, dtype); }

inline Tensor contiguous(const Tensor& t) { return torch::stable::contiguous(t); }
inline Tensor clone(const Tensor& t) { return torch::stable::clone(t); }
inline void copy_(Tensor& dst, const Tensor& src) { torch::stable::copy_(dst, src); }

// A plain exception: torch passes its text to Python unchanged (STD_TORCH_CHECK would prefix
// the function, file and line).
template <class... Args>
[[noreturn]] void fail(const Args&... pieces) {
  std::string s;
  (s += ... += pieces);
  throw std::runtime_error(s);
}

}  // namespace api
}  // namespace nitorch_jit

#define NJ_CHECK(cond, ...) \
  do {                      \
    if (!(cond)) ::nitorch_jit::api::fail(__VA_ARGS__); \
  } while (0)
#define NJ_LIBRARY_IMPL(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)
#define NJ_IMPL(m, name, fn) m.impl(name, TORCH_BOX(fn))

#else  // classic

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace nitorch_jit {
namespace api {

using Tensor = at::Tensor;
using IntArg = at::IntArrayRef;
using IntRef = at::IntArrayRef;
using FloatArg = at::ArrayRef<double>;
using OptTensor = std::optional<at::Tensor>;
using ScalarType = at::ScalarType;
constexpr ScalarType kFloat = at::kFloat;
constexpr ScalarType kDouble = at::kDouble;
constexpr ScalarType kHalf = at::kHalf;
constexpr ScalarType kBFloat16 = at::kBFloat16;

inline const char* dtype_name(ScalarType t) { return c10::toString(t); }
inline std::string device_str(const Tensor& t) { return t.device().str(); }
inline bool is_strided(const Tensor& t) { return t.layout() == at::kStrided; }
inline Tensor empty(IntRef sizes, const Tensor& like) { return at::empty(sizes, like.options()); }
inline Tensor empty(IntRef sizes, ScalarType dtype, const Tensor& like) {
  return at::empty(sizes, like.options().dtype(dtype));
}
inline Tensor& zero_(Tensor& t) { return t.zero_(); }
inline Tensor zeros(IntRef sizes, ScalarType dtype, const Tensor& like) {
  return at::empty(sizes, like.options().dtype(dtype)).zero_();
}
inline Tensor zeros(IntRef sizes, const Tensor& like) {
  return api::zeros(sizes, like.scalar_type(), like);
}
inline Tensor to(const Tensor& t, ScalarType dtype) { return t.to(dtype); }
inline Tensor contiguous(const Tensor& t) { return t.contiguous(); }
inline Tensor clone(const Tensor& t) { return t.clone(); }
inline void copy_(Tensor& dst, const Tensor& src) { dst.copy_(src); }

}  // namespace api
}  // namespace nitorch_jit

#define NJ_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)
#define NJ_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)
#define NJ_IMPL(m, name, fn) m.impl(name, fn)

#endif
