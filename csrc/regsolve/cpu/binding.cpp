// The CPU ops of module "regsolve" (docs/regsolve-spec.md) as torch sees them: the binding
// (issue 31). It checks the arguments (regsolve/host.h, shared with CUDA), makes the outputs
// (core/host_output.h), fills a Call (call.h) and runs the kernel of the op and dtype from its
// torch-free kernel library (kernels.cpp), found by name (core/binding.h). The only
// translation unit of the module that includes torch headers: a torch upgrade rebuilds it
// alone. Written on core/torch_api.h: built on the LibTorch stable ABI where torch has what it
// needs (NJ_STABLE_ABI), else on the classic headers, from this one source.
#include <atomic>
#include <cstdint>
#include <string>

#include "core/binding.h"
#include "core/host_output.h"
#include "core/message.h"
#include "core/torch_api.h"
#include "core/tuning.h"
#include "regsolve/cpu/call.h"
#include "regsolve/host.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {
namespace {

using host::Inputs;

// The device of the CPU ops, for the shared checks (regsolve/host.h).
struct CpuDevice {
  static constexpr const char* kDevice = "CPU";
  static bool on_device(const api::Tensor& t) { return t.is_cpu(); }
};

Inputs prepare(const api::Tensor& x, const api::OptTensor& hessian, const api::OptTensor& weights,
               const api::FloatArg& taps, const std::string& op, const char* xname) {
  return host::prepare<CpuDevice>(x, hessian, weights, taps, op, xname);
}

// The Call of the checked inputs, on the contiguous field x.
Call make_call(const Inputs& in, const api::Tensor& x) {
  Call c{};
  c.s = in.s;
  c.taps = in.taps.data();
  c.ntaps = static_cast<int64_t>(in.taps.size());
  c.x = x.const_data_ptr();
  if (in.w.defined()) {
    c.w = in.w.const_data_ptr();
    c.wc = in.w.size(1);
  }
  if (in.h.defined()) {
    c.h = in.h.const_data_ptr();
    c.K = in.h.size(1);
  }
  return c;
}

// Run kernel `op` for the call's dtype (every regsolve kernel is generic: variant "any");
// `slots` caches the op's entries, float32 and float64.
void run_kernel(const char* op, std::atomic<nj_kernel_fn>* slots, api::ScalarType dtype,
                const Call& call) {
  const bool f64 = dtype == api::kDouble;
  binding::run_kernel(slots[f64 ? 1 : 0], "regsolve", op, f64, "any", &call);
}

#define NJ_RUN(op, dtype, call)                     \
  do {                                              \
    static std::atomic<nj_kernel_fn> slots_[2] = {}; \
    run_kernel(#op, slots_, dtype, call);           \
  } while (0)

// Whether the contiguous tensors a and b share memory (reg_relax_ changes x in place).
bool overlap(const api::Tensor& a, const api::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  const char* pa = static_cast<const char*>(a.const_data_ptr());
  const char* pb = static_cast<const char*>(b.const_data_ptr());
  const int64_t na = a.numel() * static_cast<int64_t>(a.element_size());
  const int64_t nb = b.numel() * static_cast<int64_t>(b.element_size());
  return pa < pb + nb && pb < pa + na;
}

// ---- the ops, in the order of nitorch_jit/backends/schemas.py

api::Tensor reg_matvec(const api::Tensor& x_, const api::OptTensor& hessian,
                       const api::OptTensor& weights, api::FloatArg taps) {
  const Inputs in = prepare(x_, hessian, weights, taps, "reg_matvec", "x");
  const api::Tensor x = api::contiguous(x_);
  api::Tensor out = empty_output(x.sizes(), x);
  if (out.numel() == 0) return out;
  Call c = make_call(in, x);
  c.out = out.data_ptr();
  NJ_RUN(reg_matvec, x.scalar_type(), c);
  return out;
}

api::Tensor reg_precond(const api::Tensor& r_, const api::OptTensor& hessian,
                        const api::OptTensor& weights, api::FloatArg taps) {
  const Inputs in = prepare(r_, hessian, weights, taps, "reg_precond", "r");
  const api::Tensor r = api::contiguous(r_);
  api::Tensor z = empty_output(r.sizes(), r);
  if (z.numel() == 0) return z;
  Call c = make_call(in, r);
  c.out = z.data_ptr();
  NJ_RUN(reg_precond, r.scalar_type(), c);
  return z;
}

void reg_relax_(api::Tensor& x, const api::OptTensor& hessian, const api::Tensor& gradient_,
                const api::OptTensor& weights, api::FloatArg taps, api::IntArg period,
                int64_t nb_iter) {
  const std::string op = "reg_relax_";
  Inputs in = prepare(x, hessian, weights, taps, op, "x");
  const host::Shape& s = in.s;
  if (!host::check_relax<CpuDevice>(in, x, gradient_, period, nb_iter, op)) return;
  const bool copied = !x.is_contiguous();
  api::Tensor xc = copied ? api::contiguous(x) : x;  // work on a copy, copied back
  // the inputs that share x's memory are read before the sweeps change it (x is also
  // reordered in place during the call)
  auto own = [&](const api::Tensor& t) { return overlap(t, xc) ? api::clone(t) : t; };
  const api::Tensor g = own(api::contiguous(gradient_));
  in.h = own(in.h);
  in.w = own(in.w);
  Call c = make_call(in, xc);
  c.out = xc.data_ptr();
  c.g = g.const_data_ptr();
  for (int d = 0; d < s.D; ++d) c.period[d] = period[d];
  c.nb_iter = nb_iter;
  NJ_RUN(reg_relax_, x.scalar_type(), c);
  if (copied) api::copy_(x, xc);
}

}  // namespace
}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()        // the process's knobs, read by every kernel library (core/host.h)
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  using namespace nitorch_jit::regsolve::cpu;
  NJ_IMPL(m, "reg_matvec", &reg_matvec);
  NJ_IMPL(m, "reg_precond", &reg_precond);
  NJ_IMPL(m, "reg_relax_", &reg_relax_);
}
