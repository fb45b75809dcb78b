// Which kernel library serves a CPU pushpull call (issue 31): one library per op, dtype and
// variant, the variant being the fast path the call takes ("o1d3": every dim of order 1 in 3-D)
// or the generic path ("any"). The binding picks the library with variant_of(); a kernel
// library is compiled for one variant (NJ_KERNEL_ORDER, NJ_KERNEL_DIM) and instantiates only
// that one. The ops and their fast paths are listed once, in kernels.def.
#pragma once

#include <cstdint>
#include <string>

#include "pushpull/geometry.h"

#if defined(NJ_KERNEL_ORDER) && !defined(NJ_KERNEL_DIM)
#define NJ_KERNEL_DIM 0  // the generic path ("any") has no dim of its own
#endif

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// kOpFast_<op>: the fast-path mask of each op; kFloat64Fast: float64's restriction
#define NJ_KERNEL_OP(op, unit, mask) constexpr int kFast_##op = mask;
#define NJ_FLOAT64_FAST(mask) constexpr int kFloat64Fast = mask;
#include "pushpull/cpu/kernels.def"
#undef NJ_KERNEL_OP
#undef NJ_FLOAT64_FAST

constexpr int dtype_mask(int mask, bool f64) { return f64 ? (mask & kFloat64Fast) : mask; }

// A variant: order >= 0 and dim 2 or 3 for a fast path, order -1 for the generic path.
struct Variant {
  int order, dim;
  bool operator==(const Variant& o) const { return order == o.order && dim == o.dim; }
  // 0 (generic), 1..8 (orders 0..3 x dims 2, 3): a slot index
  int index() const { return order < 0 ? 0 : 1 + order * 2 + (dim - 2); }
  std::string name() const {
    return order < 0 ? "any" : "o" + std::to_string(order) + "d" + std::to_string(dim);
  }
};
constexpr int kNumVariants = 9;

// The variant of a call: a fast path when every dim has the same order, that order's bit is in
// `mask` and D is 2 or 3 (1-D problems are small: they take the generic path).
inline Variant variant_of(const Geometry& G, int mask) {
  const int o = G.order[G.first()];
  bool iso = true;
  for (int k = G.first(); k < 3; ++k) iso = iso && (G.order[k] == o);
  if (iso && (G.D == 2 || G.D == 3) && o >= 0 && o <= 3 && ((mask >> o) & 1)) return {o, G.D};
  return {-1, 0};
}

// Whether this kernel library instantiates variant (order, dim): every variant when it is not
// a one-variant kernel library.
constexpr bool variant_has(int order, int dim) {
#if defined(NJ_KERNEL_ORDER)
  return NJ_KERNEL_ORDER == order && (order < 0 || NJ_KERNEL_DIM == dim);
#else
  (void)order, (void)dim;
  return true;
#endif
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
