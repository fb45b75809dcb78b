// Host-side logic of module "regsolve" (docs/regsolve-spec.md) shared by the CPU ops
// (regsolve/cpu/ops.cpp) and the CUDA ops (regsolve/cuda/host.cuh, also run by the host emulation
// of the tests): the argument checks and their messages, the decoding, validation and merging
// of the tap list, and reg_relax_'s check that no tap couples two voxels of one colour.
// Torch-light (ATen/core/Tensor.h only). The checks are templated on a Device that provides
//   kDevice         its name in messages ("CPU", "CUDA")
//   on_device(t)    is the tensor t on that device
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/message.h"
#include "regsolve/point.h"

// Hidden: the CPU and CUDA libraries both define these; each must call its own.
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

namespace nitorch_jit {
namespace regsolve {
namespace host {

// Numbers in messages go through core/message.h (never an ostream).
using msg::num;

// ------------------------------------------------------------------------- arguments
struct Shape {
  int D = 1;
  int64_t B = 0, C = 0;
  Grid g;
  int64_t S = 1;  // voxels per channel
  int64_t N = 1;  // last spatial size (row length)
  int64_t R = 1;  // rows per channel
  int64_t ss[kMaxDim] = {0, 0, 0};  // spatial strides of a contiguous tensor
};

template <class Dev>
Shape check_main(const at::Tensor& x, const std::string& op, const char* arg) {
  TORCH_CHECK(Dev::on_device(x), op + ": " + arg + " must be a " + Dev::kDevice + " tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              op + ": " + arg + " must be float32 or float64");
  TORCH_CHECK(x.dim() >= 3 && x.dim() <= 5, op + ": " + arg +
              " must have shape [B, C, *S] with 1 to 3 spatial dims, got " + num(x.dim()) +
              " dims");
  Shape s;
  s.D = static_cast<int>(x.dim() - 2);
  s.B = x.size(0);
  s.C = x.size(1);
  s.g.D = s.D;
  for (int d = s.D - 1; d >= 0; --d) {
    s.g.n[d] = x.size(2 + d);
    s.ss[d] = s.S;
    s.S *= s.g.n[d];
  }
  s.N = s.g.n[s.D - 1];
  s.R = s.N ? s.S / s.N : 0;
  return s;
}

// A tensor that goes with x: same device, dtype, batch and spatial sizes; returns its channels.
template <class Dev>
int64_t check_aux(const at::Tensor& t, const at::Tensor& x, const std::string& op,
                  const char* arg) {
  const std::string where = op + ": " + arg;
  TORCH_CHECK(Dev::on_device(t), where + " must be a " + Dev::kDevice + " tensor");
  TORCH_CHECK(t.device() == x.device(), where + " must be on the device of the field");
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), where + " must have the dtype of the field");
  bool ok = t.dim() == x.dim() && t.size(0) == x.size(0);
  for (int64_t k = 2; ok && k < x.dim(); ++k) ok = t.size(k) == x.size(k);
  TORCH_CHECK(ok, where + " must have the batch size and spatial shape of the field ([B, *, *S])");
  return t.size(1);
}

template <class Dev>
void check_hessian(const at::Tensor& h, const at::Tensor& x, const Shape& s,
                   const std::string& op) {
  const int64_t K = check_aux<Dev>(h, x, op, "hessian");
  TORCH_CHECK(K == 1 || K == s.C || K == packed_sym_size(s.C),
              op + ": hessian: " + num(K) + " values per voxel fit no packing for " + num(s.C) +
              " channels; expected 1 (scalar), " + num(s.C) + " (diagonal) or " +
              num(packed_sym_size(s.C)) + " (symmetric)");
}

template <class Dev>
void check_weights(const at::Tensor& w, const at::Tensor& x, const Shape& s,
                   const std::string& op) {
  const int64_t K = check_aux<Dev>(w, x, op, "weights");
  TORCH_CHECK(K == 1 || K == s.C, op + ": weights must have 1 or " + num(s.C) +
              " channels, got " + num(K));
}

inline bool is_int_in(double v, double lo, double hi) {
  return std::isfinite(v) && v == std::floor(v) && v >= lo && v <= hi;
}

// Decodes and validates the flat tap list.
inline std::vector<Tap<double>> parse_taps(at::ArrayRef<double> flat, const Shape& s,
                                           const std::string& op) {
  const int D = s.D;
  const int64_t len = tap_length(D);
  const int64_t n = static_cast<int64_t>(flat.size());
  TORCH_CHECK(n % len == 0, op + ": taps: expected a multiple of 4 + 2D = " + num(len) +
              " numbers for " + num(D) + " spatial dims, got " + num(n));
  std::vector<Tap<double>> taps;
  for (int64_t t = 0; t < n / len; ++t) {
    const double* v = flat.data() + t * len;
    auto which = [&] { return op + ": taps: tap " + num(t) + ": "; };  // built on failure only
    TORCH_CHECK(is_int_in(v[0], 0, s.C - 1) && is_int_in(v[1], 0, s.C - 1),
                which() + "channel indices must be integers in [0, " + num(s.C) + ")");
    TORCH_CHECK(is_int_in(v[2], 0, 2), which() + "kind must be 0, 1 or 2");
    TORCH_CHECK(std::isfinite(v[3]), which() + "coefficient must be finite");
    for (int d = 0; d < D; ++d) {
      TORCH_CHECK(is_int_in(v[4 + d], -kMaxOffset, kMaxOffset),
                  which() + "offsets must be integers in [-2, 2]");
      TORCH_CHECK(is_int_in(v[4 + D + d], 0, kNumBounds - 1),
                  which() + "bound codes must be integers in [0, 6]");
    }
    const Tap<double> tap = decode_tap<double>(v, D);
    bool centred = true;
    for (int d = 0; d < D; ++d) centred = centred && tap.off[d] == 0;
    TORCH_CHECK(tap.kind != 1 || tap.c_in == tap.c_out,
                which() + "kind 1 (weighted difference) needs c_in == c_out");
    TORCH_CHECK(tap.kind != 2 || centred, which() + "kind 2 (weighted identity) needs offsets 0");
    taps.push_back(tap);
  }
  return taps;
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

// A colour is updated in parallel, which is exact (and race-free) only if no tap couples two
// voxels of one colour: refuse periods that let one. Per axis, whether the tap can land on
// the same colour (any index), and whether it can do so on another voxel; the axes combine.
inline void check_colours(const std::vector<Tap<double>>& taps, const Shape& s,
                          at::IntArrayRef period, const std::string& op) {
  for (size_t t = 0; t < taps.size(); ++t) {
    const Tap<double>& tap = taps[t];
    if (tap.kind == 2 || tap.coef == 0.0) continue;
    bool same = true, moved = false;
    for (int d = 0; d < s.D && same; ++d) {
      if (tap.off[d] == 0) continue;  // same index: same colour, not moved
      bool any = false;
      for (int64_t i = 0; i < s.g.n[d]; ++i) {
        int sg;
        const int64_t j = fold_index(i + tap.off[d], s.g.n[d], tap.bound[d], sg);
        if (sg && (j - i) % period[d] == 0) {
          any = true;
          moved = moved || j != i;
        }
      }
      same = any;
    }
    TORCH_CHECK(!(same && moved), op + ": period: tap " + num(static_cast<int64_t>(t)) +
                " couples two voxels of one colour; the periods must exceed the taps' reach "
                "(and avoid wrapped neighbours with dft)");
  }
}

// The checked arguments of one call.
struct Inputs {
  Shape s;
  std::vector<Tap<double>> taps;
  at::Tensor h, w;  // contiguous, or undefined
};

template <class Dev>
Inputs prepare(const at::Tensor& x, const std::optional<at::Tensor>& hessian,
               const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps,
               const std::string& op, const char* xname) {
  Inputs in;
  in.s = check_main<Dev>(x, op, xname);
  if (hessian.has_value() && hessian->defined()) {
    check_hessian<Dev>(*hessian, x, in.s, op);
    in.h = hessian->contiguous();
  }
  if (weights.has_value() && weights->defined()) {
    check_weights<Dev>(*weights, x, in.s, op);
    in.w = weights->contiguous();
  }
  in.taps = parse_taps(taps, in.s, op);
  return in;
}

// The remaining checks of reg_relax_ (after prepare): false when there is nothing to do.
template <class Dev>
bool check_relax(const Inputs& in, const at::Tensor& x, const at::Tensor& gradient,
                 at::IntArrayRef period, int64_t nb_iter, const std::string& op) {
  const Shape& s = in.s;
  TORCH_CHECK(check_aux<Dev>(gradient, x, op, "gradient") == s.C,
              op + ": gradient must have the shape of x");
  TORCH_CHECK(static_cast<int64_t>(period.size()) == s.D,
              op + ": period must have one value per spatial dim (" + num(s.D) + "), got " +
              num(static_cast<int64_t>(period.size())));
  for (int64_t p : period) TORCH_CHECK(p >= 1, op + ": period values must be >= 1");
  TORCH_CHECK(nb_iter >= 0, op + ": nb_iter must be >= 0, got " + num(nb_iter));
  if (x.numel() == 0 || nb_iter == 0) return false;
  check_colours(in.taps, s, period, op);
  return true;
}

}  // namespace host
}  // namespace regsolve
}  // namespace nitorch_jit

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
