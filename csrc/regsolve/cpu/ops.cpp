// CPU kernels of module "regsolve" (docs/regsolve-spec.md): reg_matvec, reg_precond, reg_relax_.
//
// The tap list is decoded and merged once per call (taps equal but for their coefficient add
// up), and tabulated: per tap, its neighbour row's offset and its folds at the ends of a row.
// reg_matvec works row by row, a row being (b, c_out, every spatial index but the last). A
// row whose taps need no folding along the non-last axes (most of them) uses offsets
// precomputed per call; a border row folds each tap's non-last axes once. The interior of the
// row, where no tap folds along the last axis, is a sum of shifted source rows held in vector
// registers (a baseline build and an AVX2 one, chosen at run time); the first and last two
// elements read through the fold tables. The voxel solves (reg_precond, reg_relax_) take L_vv
// from a table of the border classes (5 per axis); for C <= 3 a row's voxels are solved in
// vector lanes, the same arithmetic as the scalar solve (without Hessian and weights, the
// interior voxels share one factorisation, computed once per call).
// reg_relax_ evaluates a colour's rows only at that colour's elements: x (and the weights)
// are stored, during the call, with each row ordered by residue of the last index modulo the
// period, so that a colour's elements, and each tap's reads for them, are contiguous and the
// shifted sums apply. Colour by colour, every colour would stream the whole field from memory:
// the colours' tasks run instead in a dependency-respecting order (a wave along the first
// axis, and within a plane along the second, pipelined over up to 4 iterations) that reads
// each plane while it is in cache; threads take whole planes. Every voxel sees exactly the
// values of the colour by colour sweep, so the result is the same.
// NI_JIT_REGSOLVE_GENERIC=1 evaluates every point with regsolve/point.h instead, the
// per-point code the CUDA kernels share (a test of it). The argument checks, the tap list's
// decoding and merging and the colour check of reg_relax_ are regsolve/host.h, shared with the
// CUDA ops.
//
// One translation unit: plan.h (the plan of a call), lanes.h (vector lanes), matvec.h
// (reg_matvec, reg_precond) and relax.h (reg_relax_) are its parts, cut by concern; this file
// holds the ops on tensors and the registration (a second unit would parse the torch headers
// again for little).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/host_output.h"
#include "core/parallel.h"
#include "core/tuning.h"
#include "regsolve/cpu/matvec.h"
#include "regsolve/cpu/plan.h"
#include "regsolve/cpu/relax.h"
#include "regsolve/host.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {
namespace {

// ------------------------------------------------------------------------- the ops
using host::Inputs;

Inputs prepare(const at::Tensor& x, const std::optional<at::Tensor>& hessian,
               const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps,
               const std::string& op, const char* xname) {
  return host::prepare<CpuDevice>(x, hessian, weights, taps, op, xname);
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

template <typename T>
Op<T> make_op(const Plan<T>& P, const Inputs& in, const at::Tensor& x) {
  return Op<T>{P, in.s, x.const_data_ptr<T>(), ptr<T>(in.w), in.w.defined() ? in.w.size(1) : 0,
               ptr<T>(in.h), in.h.defined() ? in.h.size(1) : 0, use_avx2(), generic_requested()};
}

at::Tensor reg_matvec(const at::Tensor& x_, const std::optional<at::Tensor>& hessian,
                      const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps) {
  const Inputs in = prepare(x_, hessian, weights, taps, "reg_matvec", "x");
  const at::Tensor x = x_.contiguous();
  at::Tensor out = empty_output(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reg_matvec", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, in.s, in.w.defined());
    matvec_kernel<scalar_t>(make_op<scalar_t>(P, in, x), out.data_ptr<scalar_t>());
  });
  return out;
}

at::Tensor reg_precond(const at::Tensor& r_, const std::optional<at::Tensor>& hessian,
                       const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps) {
  const Inputs in = prepare(r_, hessian, weights, taps, "reg_precond", "r");
  const at::Tensor r = r_.contiguous();
  at::Tensor z = empty_output(r.sizes(), r.options());
  if (z.numel() == 0) return z;
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "reg_precond", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, in.s, in.w.defined(), 1, !in.h.defined());
    precond_kernel<scalar_t>(make_op<scalar_t>(P, in, r), r.const_data_ptr<scalar_t>(),
                             z.data_ptr<scalar_t>());
  });
  return z;
}

void reg_relax_(at::Tensor& x, const std::optional<at::Tensor>& hessian,
                const at::Tensor& gradient_, const std::optional<at::Tensor>& weights,
                at::ArrayRef<double> taps, at::IntArrayRef period, int64_t nb_iter) {
  const std::string op = "reg_relax_";
  Inputs in = prepare(x, hessian, weights, taps, op, "x");
  const Shape& s = in.s;
  if (!host::check_relax<CpuDevice>(in, x, gradient_, period, nb_iter, op)) return;
  at::Tensor xc = x.is_contiguous() ? x : x.contiguous();  // work on a copy, copied back
  // the inputs that share x's memory are read before the sweeps change it (x is also
  // reordered in place during the call)
  auto own = [&](const at::Tensor& t) { return t.defined() && t.is_alias_of(x) ? t.clone() : t; };
  const at::Tensor g = own(gradient_.contiguous());
  in.h = own(in.h);
  in.w = own(in.w);
  int64_t per[kMaxDim] = {1, 1, 1}, ncol = 1;
  for (int d = 0; d < s.D; ++d) {
    per[d] = period[d];
    ncol *= per[d];
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reg_relax_", [&] {
    using T = scalar_t;
    const bool generic = generic_requested();
    // the layout of the rows of L x: by residue of the last index (generic: plain)
    const int64_t st = generic ? 1 : per[s.D - 1];
    const Plan<T> P = make_plan<T>(in.taps, s, in.w.defined(), st, !in.h.defined());
    const Op<T> o = make_op<T>(P, in, xc);
    // x in that layout in place (no new buffer: fresh pages cost more than the copies), the
    // weights in a copy
    at::Tensor ww = in.w;
    if (st > 1 && in.w.defined()) {
      ww = in.w.clone();
      relayout<T>(P, ww.data_ptr<T>(), ww.numel() / s.N, s.N, true);
    }
    if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, true);
    Op<T> lx = o;
    lx.w = ptr<T>(ww);
    lx.h = nullptr;
    lx.K = 0;
    const Relax<T> R{lx, o, xc.data_ptr<T>(), g.const_data_ptr<T>(), per};
    auto sweeps = [&] {
      if (s.D >= 2) {  // iterations in groups of at most 4, each group one pipelined wave
        const int64_t G = std::min<int64_t>(nb_iter, 4);
        for (int64_t it = 0; it + G <= nb_iter; it += G) relax_waves<T>(R, G);
        if (nb_iter % G) relax_waves<T>(R, nb_iter % G);
        return;
      }
      for (int64_t it = 0; it < nb_iter; ++it)  // a row per batch: colour by colour
        for (int64_t c = 0; c < ncol; ++c)
          parallel::parallel_for(0, s.B, s.S * s.C * (o.P.max_taps + s.C + 1),
                                 [&](int64_t b0, int64_t b1) {
            RelaxScratch<T> rs(o, R.count(0));
            int64_t i[kMaxDim] = {0, 0, 0};
            for (int64_t b = b0; b < b1; ++b) relax_row(R, b, i, c, rs);
          });
    };
    try {
      sweeps();
    } catch (...) {  // x back in its layout
      if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, false);
      throw;
    }
    if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, false);
  });
  if (!xc.is_same(x)) x.copy_(xc);
}

}  // namespace
}  // namespace cpu
}  // namespace regsolve

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("reg_matvec", &regsolve::cpu::reg_matvec);
  m.impl("reg_precond", &regsolve::cpu::reg_precond);
  m.impl("reg_relax_", &regsolve::cpu::reg_relax_);
}

}  // namespace nitorch_jit
