// The CPU ops of module "splinc" (docs/splinc-resize-spec.md) as torch sees them: the binding
// (issue 31). It checks the arguments (lines/checks.h, shared with CUDA), plans the filter of
// each dim (lines/filter.h), makes the output (core/host_output.h), fills a Call (call.h) and
// runs the kernel of the dtype from its torch-free kernel library (coeff.cpp), found by name
// (core/binding.h). The only translation unit of the module that includes torch headers;
// written on core/torch_api.h (the stable ABI or the classic headers, from this one source).
#include <atomic>
#include <vector>

#include "core/binding.h"
#include "core/host_output.h"
#include "core/torch_api.h"
#include "core/tuning.h"
#include "lines/checks.h"
#include "lines/filter.h"
#include "splinc/cpu/call.h"

namespace nitorch_jit {
namespace splinc {
namespace cpu {
namespace {

// The dims of `dim` whose filter is no identity, with their filters, in the order of `dim`
// (none for an empty input).
std::vector<Step> plan_steps(const api::Tensor& input, api::IntRef order, api::IntRef bound,
                             api::IntRef dim, bool adjoint) {
  std::vector<Step> steps;
  if (input.numel() == 0) return steps;
  const bool dbl = input.scalar_type() == api::kDouble;
  const int64_t D = input.dim();
  for (size_t i = 0; i < dim.size(); ++i) {
    Step st;
    st.dim = dim[i] < 0 ? dim[i] + D : dim[i];
    if (make_plan((int)order[i], (int)bound[i], input.size(st.dim), dbl, adjoint, st.plan))
      steps.push_back(st);
  }
  return steps;
}

// Filter src into dst (same sizes; dst may be src) with the kernel of their dtype.
void run_kernel(const api::Tensor& src, const api::Tensor& dst, const std::vector<Step>& steps) {
  static std::atomic<nj_kernel_fn> slots[2] = {};
  const bool f64 = src.scalar_type() == api::kDouble;
  const std::vector<int64_t> size(src.sizes().begin(), src.sizes().end());
  const std::vector<int64_t> src_stride(src.strides().begin(), src.strides().end());
  const std::vector<int64_t> dst_stride(dst.strides().begin(), dst.strides().end());
  Call c{};
  c.src = src.const_data_ptr();
  c.dst = dst.data_ptr();
  c.ndim = src.dim();
  c.size = size.data();
  c.src_stride = src_stride.data();
  c.dst_stride = dst_stride.data();
  c.steps = steps.data();
  c.nsteps = static_cast<int64_t>(steps.size());
  binding::run_kernel(slots[f64 ? 1 : 0], "splinc", "spline_coeff", f64, "any", &c);
}

api::Tensor spline_coeff_nd(const api::Tensor& input, api::IntArg order, api::IntArg bound,
                            api::IntArg dim, bool adjoint) {
  lines::check_splinc_args(input, order, bound, dim, input.is_cpu(), "CPU", "spline_coeff_nd");
  api::Tensor out = empty_output(input.sizes(), input);
  const std::vector<Step> steps = plan_steps(input, order, bound, dim, adjoint);
  if (steps.empty())
    api::copy_(out, input);
  else
    run_kernel(input, out, steps);
  return out;
}

void spline_coeff_nd_(const api::Tensor& input, api::IntArg order, api::IntArg bound,
                      api::IntArg dim, bool adjoint) {
  lines::check_splinc_args(input, order, bound, dim, input.is_cpu(), "CPU", "spline_coeff_nd_");
  lines::check_not_expanded(input);
  const std::vector<Step> steps = plan_steps(input, order, bound, dim, adjoint);
  if (!steps.empty()) run_kernel(input, input, steps);
}

}  // namespace
}  // namespace cpu
}  // namespace splinc
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()       // the process's knobs, read by the kernel libraries (core/host.h)
NJ_DEFINE_BINDING_EXPORTS()  // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  using namespace nitorch_jit::splinc::cpu;
  NJ_IMPL(m, "spline_coeff_nd", &spline_coeff_nd);
  NJ_IMPL(m, "spline_coeff_nd_", &spline_coeff_nd_);
}
