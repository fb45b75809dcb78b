// reg_matvec and reg_precond on CPU (docs/regsolve-spec.md): the kernels, torch-free (plan.h
// says how they work). A kernel library holds one of them for one dtype (NJ_KERNEL_<op>,
// NJ_KERNEL_T: see nitorch_jit/backends/compiled.py); the binding (binding.cpp) checks the
// arguments, makes the output and calls it through core/host.h.
#include <vector>

#include "core/host.h"
#include "regsolve/cpu/call.h"
#include "regsolve/cpu/matvec.h"
#include "regsolve/cpu/plan.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {
namespace {

template <typename T>
Op<T> make_op(const Plan<T>& P, const Call& c, const T* x) {
  return Op<T>{P, c.s, x, static_cast<const T*>(c.w), c.wc, static_cast<const T*>(c.h), c.K,
               use_avx2(), generic_requested()};
}

std::vector<Tap<double>> taps_of(const Call& c) {
  return std::vector<Tap<double>>(c.taps, c.taps + c.ntaps);
}

#if defined(NJ_KERNEL_reg_matvec)
template <typename T>
void reg_matvec(const Call& c) {
  const Plan<T> P = make_plan<T>(taps_of(c), c.s, c.w != nullptr);
  matvec_kernel<T>(make_op<T>(P, c, static_cast<const T*>(c.x)), static_cast<T*>(c.out));
}
#endif

#if defined(NJ_KERNEL_reg_precond)
template <typename T>
void reg_precond(const Call& c) {
  const Plan<T> P = make_plan<T>(taps_of(c), c.s, c.w != nullptr, 1, c.h == nullptr);
  const T* r = static_cast<const T*>(c.x);
  precond_kernel<T>(make_op<T>(P, c, r), r, static_cast<T*>(c.out));
}
#endif

}  // namespace
}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_reg_matvec)
NJ_KERNEL_ENTRY(regsolve_reg_matvec, nitorch_jit::regsolve::cpu::Call,
                nitorch_jit::regsolve::cpu::reg_matvec<NJ_KERNEL_T>(call))
#endif
#if defined(NJ_KERNEL_reg_precond)
NJ_KERNEL_ENTRY(regsolve_reg_precond, nitorch_jit::regsolve::cpu::Call,
                nitorch_jit::regsolve::cpu::reg_precond<NJ_KERNEL_T>(call))
#endif
