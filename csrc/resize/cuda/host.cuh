// CUDA resize ops, host side (docs/splinc-resize-spec.md): the CPU ops' checks and messages,
// the same passes in the same order with the same tap tables (resize/tables.h),
// then one launch per step, written on core/torch_api.h (the stable ABI or the classic
// headers). Templated on a Policy (lines/cuda_host.cuh) so that
// the same code serves the CUDA binding (binding.cpp) and the host emulation of the kernels
// (tests/cuda/emu/lines_cuda_emu.cpp).
//
// Each step along dim d works on contiguous [outer, len, inner] views:
//   forward:  prefilter the current tensor along d in place (a private contiguous copy of the
//             input the first time), then gather into the next tensor;
//   adjoint:  gather through the transposed table, then the adjoint prefilter in place.
// Every table and plan of the call goes to the device in one copy before the first launch.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "core/torch_api.h"
#include "lines/checks.h"
#include "lines/cuda_host.cuh"
#include "resize/tables.h"

namespace nitorch_jit {
namespace resize {
namespace cuda {

// Device addresses of one step's constants (offsets into the call's Staging).
struct StepConsts {
  size_t idx, w, plan;
  int K;
};

template <typename T>
StepConsts stage_step(bool adj, const Step& st, api::IntRef order, api::IntRef bound,
                      const api::FloatArg& scale, const api::FloatArg& shift,
                      lines_cuda::Staging& stage) {
  const Table<T> tab =
      step_table<T>(adj, st, (int)order[st.i], (int)bound[st.i], scale[st.i], shift[st.i]);
  StepConsts c;
  c.K = tab.K;
  c.idx = stage.add(tab.idx);
  c.w = stage.add(tab.w);
  c.plan = st.filt ? stage.add(&st.plan, sizeof(splinc::LinePlan)) : 0;
  return c;
}

// A contiguous copy of t (its own memory).
inline api::Tensor contiguous_copy(const api::Tensor& t) {
  api::Tensor out = api::empty(t.sizes(), t);
  api::copy_(out, t);
  return out;
}

// One gather along dim d: src [outer, lin, inner] -> dst [outer, lout, inner], contiguous.
template <class Policy>
void gather_dim(const api::Tensor& src, const api::Tensor& dst, int64_t d, const int32_t* idx,
                const void* w, int K) {
  int64_t outer, inner;
  lines_cuda::outer_inner(dst, d, outer, inner);
  const bool i32 =
      lines_cuda::fits32(src.numel()) && lines_cuda::fits32(dst.numel()) && lines_cuda::allow_i32();
  Policy::check(lines_cuda::gather(src.const_data_ptr(), dst.data_ptr(),
                                   src.scalar_type() == api::kDouble, outer, src.size(d),
                                   dst.size(d), inner, idx, w, K, i32, Policy::stream()));
}

// resize (ADJ false) and resize_adjoint (ADJ true); see resize/cpu/binding.cpp, resample.cpp.
template <class Policy, bool ADJ>
api::Tensor run(const api::Tensor& input, api::IntRef shape, const api::FloatArg& scale,
                const api::FloatArg& shift, api::IntRef order, api::IntRef bound,
                bool prefilter) {
  lines::check_resize_args(input, shape, scale, shift, order, bound, Policy::on_device(input),
                           Policy::kDevice, ADJ ? "resize_adjoint" : "resize");
  const typename Policy::Guard guard(input.device());
  const int64_t D = static_cast<int64_t>(shape.size());
  const int64_t off = input.dim() - D;
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
  const bool dbl = input.scalar_type() == api::kDouble;
  const std::vector<Step> steps =
      plan_steps(ADJ, D, sizes.data() + off, shape.data(), scale.data(), shift.data(),
                 order.data(), bound.data(), prefilter, dbl);
  if (steps.empty()) return contiguous_copy(input);
  if (input.numel() == 0) {  // empty batch: nothing to compute
    for (int64_t i = 0; i < D; ++i) sizes[off + i] = shape[i];
    return api::empty(sizes, input);
  }
  lines_cuda::Staging stage;
  std::vector<StepConsts> consts;
  consts.reserve(steps.size());
  for (const Step& st : steps)
    consts.push_back(dbl ? stage_step<double>(ADJ, st, order, bound, scale, shift, stage)
                         : stage_step<float>(ADJ, st, order, bound, scale, shift, stage));
  stage.upload<Policy>(input);
  // may cur be filtered in place? (contiguous() returns the input itself when it is)
  bool owned = !input.is_contiguous();
  api::Tensor cur = api::contiguous(input);
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& st = steps[s];
    const StepConsts& c = consts[s];
    const int64_t d = off + st.i;
    const splinc::LinePlan* plan = stage.at<splinc::LinePlan>(c.plan);
    if (!ADJ && st.filt) {
      if (!owned) cur = contiguous_copy(cur);
      owned = true;
      lines_cuda::filter_dim<Policy>(cur, d, plan);
    }
    sizes[d] = st.lout;
    api::Tensor next = api::empty(sizes, input);
    gather_dim<Policy>(cur, next, d, stage.at<int32_t>(c.idx), stage.at<uint8_t>(c.w), c.K);
    if (ADJ && st.filt) lines_cuda::filter_dim<Policy>(next, d, plan);
    cur = next;
    owned = true;
  }
  return cur;
}

template <class Policy>
struct Ops {
  static api::Tensor resize(const api::Tensor& input, api::IntArg shape, api::FloatArg scale,
                            api::FloatArg shift, api::IntArg order, api::IntArg bound,
                            bool prefilter) {
    return run<Policy, false>(input, shape, scale, shift, order, bound, prefilter);
  }
  static api::Tensor resize_adjoint(const api::Tensor& input, api::IntArg shape,
                                    api::FloatArg scale, api::FloatArg shift, api::IntArg order,
                                    api::IntArg bound, bool prefilter) {
    return run<Policy, true>(input, shape, scale, shift, order, bound, prefilter);
  }
};

}  // namespace cuda
}  // namespace resize
}  // namespace nitorch_jit
