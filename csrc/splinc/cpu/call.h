// One call of the CPU splinc kernel, as the binding (splinc/cpu/binding.cpp) hands it to the
// torch-free kernel library (coeff.cpp, core/host.h): raw pointers, sizes, strides and the
// filters of the dims to filter, checked and planned already. Both sides include this one
// definition.
#pragma once

#include <cstdint>

#include "lines/filter.h"

namespace nitorch_jit {
namespace splinc {
namespace cpu {

// A dim to filter (its filter is no identity) and its filter.
struct Step {
  int64_t dim;
  LinePlan plan;
};

struct Call {
  const void* src;            // the input
  void* dst;                  // the output: same sizes; may be src itself (in place)
  int64_t ndim;
  const int64_t* size;        // [ndim], of both
  const int64_t* src_stride;  // [ndim]
  const int64_t* dst_stride;  // [ndim]
  const Step* steps;          // the dims to filter, in the order of the op's `dim`
  int64_t nsteps;             // at least 1
};

}  // namespace cpu
}  // namespace splinc
}  // namespace nitorch_jit
