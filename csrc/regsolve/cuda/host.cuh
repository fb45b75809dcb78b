// CUDA regsolve ops, host side (docs/regsolve-spec.md): the CPU ops' checks and messages
// (regsolve/host.h, shared), the tap list merged as the CPU ops merge it, then one launch per
// op (per colour for reg_relax_), written on core/torch_api.h (the stable ABI or the classic
// headers). Templated on a Policy (lines/cuda_host.cuh:
// kDevice, on_device, Guard, stream, check, upload) so that the same code serves the CUDA
// binding (binding.cpp) and the host emulation of the kernels
// (tests/cuda/emu/regsolve_cuda_emu.cpp).
//
// The constants of a call (the merged taps, where an interior voxel's taps read, the tap
// ranges of each output channel, the interior self-coupling) go to the device in one
// non-blocking copy from pinned memory on the current stream before the first launch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/torch_api.h"
#include "lines/cuda_host.cuh"
#include "regsolve/cuda/params.cuh"
#include "regsolve/host.h"

namespace nitorch_jit {
namespace regsolve {
namespace cuda {

// Stage the constants of a call; fills the tap fields of p except the device addresses,
// returns the offsets of the five arrays in the staging buffer.
struct Staged {
  size_t taps, rel, first, mid, self;
};

template <typename T>
Staged stage_taps(const host::Inputs& in, Params& p, lines_cuda::Staging& stage) {
  const host::Shape& s = in.s;
  const int D = s.D, C = static_cast<int>(s.C);
  const std::vector<Tap<double>> merged = host::merge_taps(in.taps, D, in.w.defined());
  std::vector<Tap<T>> taps;
  std::vector<int64_t> rel;
  std::vector<int> first(C + 1, 0), mid(C, 0);
  std::vector<T> self(static_cast<size_t>(C) * C, T(0));
  for (const Tap<double>& m : merged) {
    const Tap<T> t = host::cast_tap<T>(m);
    int64_t off = 0;
    bool centred = true;
    for (int d = 0; d < D; ++d) {
      off += t.off[d] * s.ss[d];
      centred = centred && t.off[d] == 0;
    }
    taps.push_back(t);
    rel.push_back(t.c_in * s.S + off);
    first[t.c_out + 1]++;
    if (t.kind == 0) {
      mid[t.c_out]++;
      // interior voxel: a kind 0 tap couples it to itself only with every offset 0
      if (centred) self[static_cast<size_t>(t.c_out) * C + t.c_in] += t.coef;
    }
  }
  for (int c = 0; c < C; ++c) {
    first[c + 1] += first[c];
    mid[c] += first[c];
  }
  p.ntaps = static_cast<int>(taps.size());
  p.reach = host::reach(merged, D);
  Staged o;
  o.taps = stage.add(taps);
  o.rel = stage.add(rel);
  o.first = stage.add(first);
  o.mid = stage.add(mid);
  o.self = stage.add(self);
  return o;
}

constexpr int64_t kZero[kMaxDim] = {0, 0, 0}, kOne[kMaxDim] = {1, 1, 1};

template <class Policy>
struct Ops {
  // Params of a call on the contiguous x (and out / gradient), the constants uploaded.
  struct Call {
    Params p;
    lines_cuda::Staging stage;
    api::Tensor scratch;
    bool dbl = false, i32 = true;

    Call(const host::Inputs& in, const api::Tensor& x, bool solves) {
      const host::Shape& s = in.s;
      dbl = x.scalar_type() == api::kDouble;
      p.D = s.D;
      p.C = static_cast<int>(s.C);
      p.B = s.B;
      p.S = s.S;
      for (int d = 0; d < s.D; ++d) p.n[d] = s.g.n[d];
      const Staged o = dbl ? stage_taps<double>(in, p, stage) : stage_taps<float>(in, p, stage);
      stage.upload<Policy>(x);
      p.taps = stage.at<void>(o.taps);
      p.rel = stage.at<int64_t>(o.rel);
      p.first = stage.at<int>(o.first);
      p.mid = stage.at<int>(o.mid);
      p.self = stage.at<void>(o.self);
      p.x = x.const_data_ptr();
      if (in.w.defined()) {
        p.w = in.w.const_data_ptr();
        p.wc = static_cast<int>(in.w.size(1));
      }
      if (in.h.defined()) {
        p.h = in.h.const_data_ptr();
        p.K = static_cast<int>(in.h.size(1));
      }
      const size_t tsize = dbl ? sizeof(double) : sizeof(float);
      const int64_t ns = solves ? scratch_size(s.B * s.S, s.C, tsize) : 0;
      if (ns) {
        scratch = api::empty(std::vector<int64_t>{ns}, x);
        p.scratch = scratch.data_ptr();
      }
      i32 = lines_cuda::allow_i32() && lines_cuda::fits32(x.numel()) &&
            (!in.w.defined() || lines_cuda::fits32(in.w.numel())) &&
            (!in.h.defined() || lines_cuda::fits32(in.h.numel()));
    }
  };

  static api::Tensor reg_matvec(const api::Tensor& x_, const api::OptTensor& hessian,
                                const api::OptTensor& weights, api::FloatArg taps) {
    const host::Inputs in =
        host::prepare<Policy>(x_, hessian, weights, taps, "reg_matvec", "x");
    const typename Policy::Guard guard(x_.device());
    const api::Tensor x = api::contiguous(x_);
    api::Tensor out = api::empty(x.sizes(), x);
    if (out.numel() == 0) return out;
    Call call(in, x, false);
    call.p.out = out.data_ptr();
    set_boxes(call.p, kZero, kOne);
    Policy::check(matvec(call.p, call.dbl, call.i32, Policy::stream()));
    return out;
  }

  static api::Tensor reg_precond(const api::Tensor& r_, const api::OptTensor& hessian,
                                 const api::OptTensor& weights, api::FloatArg taps) {
    const host::Inputs in =
        host::prepare<Policy>(r_, hessian, weights, taps, "reg_precond", "r");
    const typename Policy::Guard guard(r_.device());
    const api::Tensor r = api::contiguous(r_);
    api::Tensor z = api::empty(r.sizes(), r);
    if (z.numel() == 0) return z;
    Call call(in, r, true);
    call.p.out = z.data_ptr();
    set_boxes(call.p, kZero, kOne);
    Policy::check(precond(call.p, call.dbl, call.i32, Policy::stream()));
    return z;
  }

  static void reg_relax_(api::Tensor& x, const api::OptTensor& hessian,
                         const api::Tensor& gradient_, const api::OptTensor& weights,
                         api::FloatArg taps, api::IntArg period, int64_t nb_iter) {
    const std::string op = "reg_relax_";
    const host::Inputs in = host::prepare<Policy>(x, hessian, weights, taps, op, "x");
    if (!host::check_relax<Policy>(in, x, gradient_, period, nb_iter, op)) return;
    const typename Policy::Guard guard(x.device());
    const host::Shape& s = in.s;
    const api::Tensor g = api::contiguous(gradient_);
    const bool copied = !x.is_contiguous();  // work on a contiguous copy, copied back
    api::Tensor xc = copied ? api::contiguous(x) : x;
    Call call(in, xc, true);
    Params& p = call.p;
    p.out = xc.data_ptr();
    p.g = g.const_data_ptr();
    int64_t per[kMaxDim] = {1, 1, 1}, col[kMaxDim] = {0, 0, 0}, ncol = 1;
    for (int d = 0; d < s.D; ++d) {
      per[d] = period[d];
      ncol *= per[d];
    }
    for (int64_t it = 0; it < nb_iter; ++it)
      for (int64_t c = 0; c < ncol; ++c) {  // colours in lexicographic order
        int64_t q = c;
        for (int d = s.D - 1; d >= 0; --d) {
          col[d] = q % per[d];
          q /= per[d];
        }
        set_boxes(p, col, per);  // the colour's voxels only
        if (p.work) Policy::check(relax(p, call.dbl, call.i32, Policy::stream()));
      }
    if (copied) api::copy_(x, xc);
  }
};

}  // namespace cuda
}  // namespace regsolve
}  // namespace nitorch_jit
