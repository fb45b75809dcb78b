// The host-side tap handling of module "regsolve" (docs/regsolve-spec.md) that the kernels
// need too: the shape of a call, and the merging of the tap list. Torch-free: the CPU kernel
// libraries (regsolve/cpu/plan.h) build their plan from it; the argument checks
// (regsolve/host.h, the binding's and CUDA's) include it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "regsolve/point.h"

// Hidden where torch loads the library: the CPU binding and the CUDA library both define these;
// each must call its own. (A kernel library is loaded on its own, ctypes' RTLD_LOCAL, and its
// kernels hold these types: hidden there, they would be narrower than the kernels'.)
#if defined(__GNUC__) && !defined(NJ_KERNEL_LIB)
#pragma GCC visibility push(hidden)
#endif

namespace nitorch_jit {
namespace regsolve {
namespace host {

// The sizes of a call's field x [B, C, *S] (a plain struct: it travels in the CPU kernels'
// Call, regsolve/cpu/call.h).
struct Shape {
  int D = 1;
  int64_t B = 0, C = 0;
  Grid g;
  int64_t S = 1;  // voxels per channel
  int64_t N = 1;  // last spatial size (row length)
  int64_t R = 1;  // rows per channel
  int64_t ss[kMaxDim] = {0, 0, 0};  // spatial strides of a contiguous tensor
};

// The shape of a field of sizes [B, C, *S] (D = number of spatial dims).
inline Shape make_shape(int64_t B, int64_t C, const int64_t* spatial, int D) {
  Shape s;
  s.D = D;
  s.B = B;
  s.C = C;
  s.g.D = s.D;
  for (int d = s.D - 1; d >= 0; --d) {
    s.g.n[d] = spatial[d];
    s.ss[d] = s.S;
    s.S *= s.g.n[d];
  }
  s.N = s.g.n[s.D - 1];
  s.R = s.N ? s.S / s.N : 0;
  return s;
}

// A merged tap in the compute type of a call.
template <typename T>
inline Tap<T> cast_tap(const Tap<double>& m) {
  Tap<T> t;
  t.c_out = m.c_out;
  t.c_in = m.c_in;
  t.kind = m.kind;
  t.coef = static_cast<T>(m.coef);
  for (int d = 0; d < kMaxDim; ++d) {
    t.off[d] = m.off[d];
    t.bound[d] = m.bound[d];
  }
  return t;
}

// The taps merged: those equal but for their coefficient add up (in double), those whose sum
// is 0 are dropped, the bound of an axis with offset 0 is set to 0 (it never folds). Without
// weights, kind 1 and 2 taps become kind 0 ones (omega = w = 1). Sorted by c_out, then kind 0
// before the others, then c_in, kind, offsets and bounds: the taps of one output channel are
// contiguous, its kind 0 ones first.
inline std::vector<Tap<double>> merge_taps(const std::vector<Tap<double>>& raw, int D,
                                           bool has_weights) {
  // key: c_out, kind != 0, c_in, kind, offsets, bounds (ignored where the offset is 0)
  using Key = std::array<int, 4 + 2 * kMaxDim>;
  std::map<Key, double> merged;
  auto add = [&](const Tap<double>& t, int kind, double coef, bool centre) {
    Key k{};
    k[0] = t.c_out;
    k[1] = kind != 0;
    k[2] = t.c_in;
    k[3] = kind;
    for (int d = 0; d < D; ++d) {
      const int off = centre ? 0 : t.off[d];
      k[4 + d] = off;
      k[4 + kMaxDim + d] = off ? t.bound[d] : 0;
    }
    merged[k] += coef;
  };
  for (const auto& t : raw) {
    if (t.kind == 0 || has_weights) {
      add(t, t.kind, t.coef, false);
    } else if (t.kind == 1) {  // no weights: omega = 1, i.e. coef * (x_i - s * x_n)
      add(t, 0, t.coef, true);
      add(t, 0, -t.coef, false);
    } else {
      add(t, 0, t.coef, true);
    }
  }
  std::vector<Tap<double>> out;
  for (const auto& kv : merged) {
    if (kv.second == 0.0) continue;
    const Key& k = kv.first;
    Tap<double> t;
    t.c_out = k[0];
    t.c_in = k[2];
    t.kind = k[3];
    t.coef = kv.second;
    for (int d = 0; d < D; ++d) {
      t.off[d] = k[4 + d];
      t.bound[d] = k[4 + kMaxDim + d];
    }
    out.push_back(t);
  }
  return out;
}

// The largest |offset| of a tap list.
inline int reach(const std::vector<Tap<double>>& taps, int D) {
  int r = 0;
  for (const auto& t : taps)
    for (int d = 0; d < D; ++d) r = std::max(r, t.off[d] < 0 ? -t.off[d] : t.off[d]);
  return r;
}

}  // namespace host
}  // namespace regsolve
}  // namespace nitorch_jit

#if defined(__GNUC__) && !defined(NJ_KERNEL_LIB)
#pragma GCC visibility pop
#endif
