// One call of a CPU regsolve kernel, as the binding (regsolve/cpu/binding.cpp) hands it to a
// torch-free kernel library (core/host.h): the checked arguments as raw pointers and sizes.
// A POD with a fixed layout; both sides include this one definition.
#pragma once

#include <cstdint>

#include "regsolve/point.h"
#include "regsolve/taps.h"

// As regsolve/taps.h, whose Shape it holds: hidden in the binding.
#if defined(__GNUC__) && !defined(NJ_KERNEL_LIB)
#pragma GCC visibility push(hidden)
#endif

namespace nitorch_jit {
namespace regsolve {
namespace cpu {

struct Call {
  host::Shape s;             // of the field x [B, C, *S]
  const Tap<double>* taps;   // the tap list, decoded and validated (not merged)
  int64_t ntaps;
  const void* x;             // reg_matvec: x, reg_precond: r [B, C, *S] contiguous
  const void* w;             // weights [B, wc, *S] contiguous, or null
  int64_t wc;
  const void* h;             // hessian [B, K, *S] contiguous, or null
  int64_t K;
  void* out;                 // reg_matvec, reg_precond: the output [B, C, *S] contiguous;
                             // reg_relax_: x itself (contiguous), relaxed in place
  const void* g;             // reg_relax_: the gradient [B, C, *S] contiguous, apart from x
  int64_t period[kMaxDim];   // reg_relax_: the colours' period per spatial dim (checked)
  int64_t nb_iter;           // reg_relax_: sweeps (>= 1)
};

}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit

#if defined(__GNUC__) && !defined(NJ_KERNEL_LIB)
#pragma GCC visibility pop
#endif
