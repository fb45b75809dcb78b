// One call of a CPU resize kernel, as the binding (resize/cpu/binding.cpp) hands it to a
// torch-free kernel library (resample.cpp, core/host.h): raw pointers, sizes, strides, the
// options and the passes, checked and planned already. Both sides include this one definition.
#pragma once

#include <cstdint>

#include "resize/tables.h"

namespace nitorch_jit {
namespace resize {
namespace cpu {

struct Call {
  const void* src;            // the input [..., *n]
  int64_t ndim;
  const int64_t* src_size;    // [ndim]
  const int64_t* src_stride;  // [ndim]
  void* out;                  // the output [..., *shape], contiguous
  int64_t D;                  // the spatial dims: the last D
  const double* scale;        // [D]
  const double* shift;        // [D]
  const int64_t* order;       // [D]
  const int64_t* bound;       // [D]
  const Step* steps;          // the passes, in the order they run (tables.h: plan_steps)
  int64_t nsteps;             // at least 1
};

}  // namespace cpu
}  // namespace resize
}  // namespace nitorch_jit
