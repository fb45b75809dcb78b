// Pieces of error messages, shared by every library that links torch (CPU bindings, CUDA).
//
// Numbers are turned into strings here, with std::to_string, and never inserted into an
// ostream by the extension: on a GPU machine (torch 2.11+cu130 image), formatting an integer
// through the extension's ostream (TORCH_CHECK's c10::str) crashed the process inside
// libstdc++'s num_put, while strings and C strings are inserted without a locale facet.
// So every number or shape in an NJ_CHECK message goes through num() / shape_str(); on the
// stable ABI (core/torch_api.h) the pieces must be strings anyway.
#pragma once

#include <cstdint>
#include <string>

#include "core/torch_api.h"

namespace nitorch_jit {
namespace msg {

inline std::string num(int64_t v) { return std::to_string(v); }

inline std::string shape_str(api::IntRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string dev(const api::Tensor& t) { return api::device_str(t); }
inline const char* dt(api::ScalarType t) { return api::dtype_name(t); }

}  // namespace msg
}  // namespace nitorch_jit
