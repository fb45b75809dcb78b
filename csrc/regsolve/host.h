// The argument checks of module "regsolve" (docs/regsolve-spec.md), shared by the CPU binding
// (regsolve/cpu/binding.cpp) and the CUDA ops (regsolve/cuda/host.cuh, also run by the host
// emulation of the tests): their messages, the decoding and validation of the tap list, and
// reg_relax_'s check that no tap couples two voxels of one colour. Written on core/torch_api.h
// (the CPU binding builds on either torch; the CUDA host code is classic). The merging of the
// taps, which the kernels need too, is regsolve/taps.h (torch-free). The checks are templated
// on a Device that provides
//   kDevice         its name in messages ("CPU", "CUDA")
//   on_device(t)    is the tensor t on that device
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/torch_api.h"
#include "regsolve/point.h"
#include "regsolve/taps.h"

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
template <class Dev>
Shape check_main(const api::Tensor& x, const std::string& op, const char* arg) {
  NJ_CHECK(Dev::on_device(x), op + ": " + arg + " must be a " + Dev::kDevice + " tensor");
  NJ_CHECK(x.scalar_type() == api::kFloat || x.scalar_type() == api::kDouble,
              op + ": " + arg + " must be float32 or float64");
  NJ_CHECK(x.dim() >= 3 && x.dim() <= 5, op + ": " + arg +
              " must have shape [B, C, *S] with 1 to 3 spatial dims, got " + num(x.dim()) +
              " dims");
  int64_t spatial[kMaxDim] = {1, 1, 1};
  for (int64_t d = 0; d + 2 < x.dim(); ++d) spatial[d] = x.size(2 + d);
  return make_shape(x.size(0), x.size(1), spatial, static_cast<int>(x.dim() - 2));
}

// A tensor that goes with x: same device, dtype, batch and spatial sizes; returns its channels.
template <class Dev>
int64_t check_aux(const api::Tensor& t, const api::Tensor& x, const std::string& op,
                  const char* arg) {
  const std::string where = op + ": " + arg;
  NJ_CHECK(Dev::on_device(t), where + " must be a " + Dev::kDevice + " tensor");
  NJ_CHECK(t.device() == x.device(), where + " must be on the device of the field");
  NJ_CHECK(t.scalar_type() == x.scalar_type(), where + " must have the dtype of the field");
  bool ok = t.dim() == x.dim() && t.size(0) == x.size(0);
  for (int64_t k = 2; ok && k < x.dim(); ++k) ok = t.size(k) == x.size(k);
  NJ_CHECK(ok, where + " must have the batch size and spatial shape of the field ([B, *, *S])");
  return t.size(1);
}

template <class Dev>
void check_hessian(const api::Tensor& h, const api::Tensor& x, const Shape& s,
                   const std::string& op) {
  const int64_t K = check_aux<Dev>(h, x, op, "hessian");
  NJ_CHECK(K == 1 || K == s.C || K == packed_sym_size(s.C),
              op + ": hessian: " + num(K) + " values per voxel fit no packing for " + num(s.C) +
              " channels; expected 1 (scalar), " + num(s.C) + " (diagonal) or " +
              num(packed_sym_size(s.C)) + " (symmetric)");
}

template <class Dev>
void check_weights(const api::Tensor& w, const api::Tensor& x, const Shape& s,
                   const std::string& op) {
  const int64_t K = check_aux<Dev>(w, x, op, "weights");
  NJ_CHECK(K == 1 || K == s.C, op + ": weights must have 1 or " + num(s.C) +
              " channels, got " + num(K));
}

inline bool is_int_in(double v, double lo, double hi) {
  return std::isfinite(v) && v == std::floor(v) && v >= lo && v <= hi;
}

// Decodes and validates the flat tap list.
inline std::vector<Tap<double>> parse_taps(const api::FloatArg& flat, const Shape& s,
                                           const std::string& op) {
  const int D = s.D;
  const int64_t len = tap_length(D);
  const int64_t n = static_cast<int64_t>(flat.size());
  NJ_CHECK(n % len == 0, op + ": taps: expected a multiple of 4 + 2D = " + num(len) +
              " numbers for " + num(D) + " spatial dims, got " + num(n));
  std::vector<Tap<double>> taps;
  for (int64_t t = 0; t < n / len; ++t) {
    const double* v = flat.data() + t * len;
    auto which = [&] { return op + ": taps: tap " + num(t) + ": "; };  // built on failure only
    NJ_CHECK(is_int_in(v[0], 0, s.C - 1) && is_int_in(v[1], 0, s.C - 1),
                which() + "channel indices must be integers in [0, " + num(s.C) + ")");
    NJ_CHECK(is_int_in(v[2], 0, 2), which() + "kind must be 0, 1 or 2");
    NJ_CHECK(std::isfinite(v[3]), which() + "coefficient must be finite");
    for (int d = 0; d < D; ++d) {
      NJ_CHECK(is_int_in(v[4 + d], -kMaxOffset, kMaxOffset),
                  which() + "offsets must be integers in [-2, 2]");
      NJ_CHECK(is_int_in(v[4 + D + d], 0, kNumBounds - 1),
                  which() + "bound codes must be integers in [0, 6]");
    }
    const Tap<double> tap = decode_tap<double>(v, D);
    bool centred = true;
    for (int d = 0; d < D; ++d) centred = centred && tap.off[d] == 0;
    NJ_CHECK(tap.kind != 1 || tap.c_in == tap.c_out,
                which() + "kind 1 (weighted difference) needs c_in == c_out");
    NJ_CHECK(tap.kind != 2 || centred, which() + "kind 2 (weighted identity) needs offsets 0");
    taps.push_back(tap);
  }
  return taps;
}

// A colour is updated in parallel, which is exact (and race-free) only if no tap couples two
// voxels of one colour: refuse periods that let one. Per axis, whether the tap can land on
// the same colour (any index), and whether it can do so on another voxel; the axes combine.
inline void check_colours(const std::vector<Tap<double>>& taps, const Shape& s,
                          api::IntRef period, const std::string& op) {
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
    NJ_CHECK(!(same && moved), op + ": period: tap " + num(static_cast<int64_t>(t)) +
                " couples two voxels of one colour; the periods must exceed the taps' reach "
                "(and avoid wrapped neighbours with dft)");
  }
}

// The checked arguments of one call.
struct Inputs {
  Shape s;
  std::vector<Tap<double>> taps;
  api::Tensor h, w;  // contiguous, or undefined
};

template <class Dev>
Inputs prepare(const api::Tensor& x, const api::OptTensor& hessian,
               const api::OptTensor& weights, const api::FloatArg& taps,
               const std::string& op, const char* xname) {
  Inputs in;
  in.s = check_main<Dev>(x, op, xname);
  if (hessian.has_value() && hessian->defined()) {
    check_hessian<Dev>(*hessian, x, in.s, op);
    in.h = api::contiguous(*hessian);
  }
  if (weights.has_value() && weights->defined()) {
    check_weights<Dev>(*weights, x, in.s, op);
    in.w = api::contiguous(*weights);
  }
  in.taps = parse_taps(taps, in.s, op);
  return in;
}

// The remaining checks of reg_relax_ (after prepare): false when there is nothing to do.
template <class Dev>
bool check_relax(const Inputs& in, const api::Tensor& x, const api::Tensor& gradient,
                 api::IntRef period, int64_t nb_iter, const std::string& op) {
  const Shape& s = in.s;
  NJ_CHECK(check_aux<Dev>(gradient, x, op, "gradient") == s.C,
              op + ": gradient must have the shape of x");
  NJ_CHECK(static_cast<int64_t>(period.size()) == s.D,
              op + ": period must have one value per spatial dim (" + num(s.D) + "), got " +
              num(static_cast<int64_t>(period.size())));
  for (int64_t p : period) NJ_CHECK(p >= 1, op + ": period values must be >= 1");
  NJ_CHECK(nb_iter >= 0, op + ": nb_iter must be >= 0, got " + num(nb_iter));
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
