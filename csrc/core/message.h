// Pieces of error messages, shared by every library (CPU and CUDA) of nitorch_jit.
//
// Numbers are turned into strings here, with std::to_string, and never inserted into an
// ostream by the extension: on a GPU machine (torch 2.11+cu130 image), formatting an integer
// through the extension's ostream (TORCH_CHECK's c10::str) crashed the process inside
// libstdc++'s num_put, while strings and C strings are inserted without a locale facet.
// So every number or shape in a TORCH_CHECK message goes through num() / shape_str().
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

namespace nitorch_jit {
namespace msg {

inline std::string num(int64_t v) { return std::to_string(v); }

inline std::string shape_str(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string dev(const at::Tensor& t) { return t.device().str(); }
inline const char* dt(at::ScalarType t) { return c10::toString(t); }

}  // namespace msg
}  // namespace nitorch_jit
