// The CPU ops of module "resize" (docs/splinc-resize-spec.md) as torch sees them: the binding
// (issue 31). It checks the arguments (lines/checks.h, shared with CUDA), plans the passes
// (resize/tables.h, shared with CUDA), makes the output (core/host_output.h), fills a Call
// (call.h) and runs the kernel of the op and dtype from its torch-free kernel library
// (resample.cpp), found by name (core/binding.h). The only translation unit of the module that
// includes torch headers; written on core/torch_api.h (the stable ABI or the classic headers,
// from this one source).
#include <atomic>
#include <vector>

#include "core/binding.h"
#include "core/host_output.h"
#include "core/torch_api.h"
#include "core/tuning.h"
#include "lines/checks.h"
#include "resize/cpu/call.h"
#include "resize/tables.h"

namespace nitorch_jit {
namespace resize {
namespace cpu {
namespace {

// resize (ADJ false): input [..., *n] -> [..., *shape]. resize_adjoint (ADJ true): input
// [..., *m] -> [..., *shape], with (scale, shift) those of the forward map from shape to m.
template <bool ADJ>
api::Tensor run(const api::Tensor& input, api::IntArg shape, api::FloatArg scale,
                api::FloatArg shift, api::IntArg order, api::IntArg bound, bool prefilter) {
  lines::check_resize_args(input, shape, scale, shift, order, bound, input.is_cpu(), "CPU",
                           ADJ ? "resize_adjoint" : "resize");
  const int64_t D = static_cast<int64_t>(shape.size());
  const int64_t off = input.dim() - D;
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
  const std::vector<int64_t> strides(input.strides().begin(), input.strides().end());
  const bool dbl = input.scalar_type() == api::kDouble;
  const std::vector<Step> steps =
      plan_steps(ADJ, D, sizes.data() + off, shape.data(), scale.data(), shift.data(),
                 order.data(), bound.data(), prefilter, dbl);
  if (steps.empty()) {  // every dim is the identity: a contiguous copy
    api::Tensor out = empty_output(input.sizes(), input);
    api::copy_(out, input);
    return out;
  }
  std::vector<int64_t> out_sizes = sizes;
  for (int64_t i = 0; i < D; ++i) out_sizes[off + i] = shape[i];
  api::Tensor out = empty_output(out_sizes, input);
  if (out.numel() == 0) return out;
  static std::atomic<nj_kernel_fn> slots[2] = {};
  Call c{};
  c.src = input.const_data_ptr();
  c.ndim = input.dim();
  c.src_size = sizes.data();
  c.src_stride = strides.data();
  c.out = out.data_ptr();
  c.D = D;
  c.scale = scale.data();
  c.shift = shift.data();
  c.order = order.data();
  c.bound = bound.data();
  c.steps = steps.data();
  c.nsteps = static_cast<int64_t>(steps.size());
  binding::run_kernel(slots[dbl ? 1 : 0], "resize", ADJ ? "resize_adjoint" : "resize", dbl, "any",
                      &c);
  return out;
}

api::Tensor resize_fwd(const api::Tensor& input, api::IntArg shape, api::FloatArg scale,
                       api::FloatArg shift, api::IntArg order, api::IntArg bound,
                       bool prefilter) {
  return run<false>(input, shape, scale, shift, order, bound, prefilter);
}

api::Tensor resize_adj(const api::Tensor& input, api::IntArg shape, api::FloatArg scale,
                       api::FloatArg shift, api::IntArg order, api::IntArg bound,
                       bool prefilter) {
  return run<true>(input, shape, scale, shift, order, bound, prefilter);
}

}  // namespace
}  // namespace cpu
}  // namespace resize
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()       // the process's knobs, read by the kernel libraries (core/host.h)
NJ_DEFINE_BINDING_EXPORTS()  // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  using namespace nitorch_jit::resize::cpu;
  NJ_IMPL(m, "resize", &resize_fwd);
  NJ_IMPL(m, "resize_adjoint", &resize_adj);
}
