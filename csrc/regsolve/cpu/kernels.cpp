// The regsolve kernels on CPU (docs/regsolve-spec.md), torch-free: reg_matvec, reg_precond and
// reg_relax_ (plan.h says how they work; matvec.h and relax.h hold their parts). A kernel
// library holds, for one dtype (NJ_KERNEL_T), the ops its defines name (NJ_KERNEL_<op>): one op,
// and the ops kernels.def says its library also holds (NJ_KERNEL_WITH: reg_precond's and
// reg_relax_'s hold reg_matvec, which every call of theirs runs too; one library parses and
// instantiates the shared code once). See nitorch_jit/backends/compiled.py. The binding
// (binding.cpp) checks the arguments, makes the output and calls them through core/host.h.
#include <algorithm>
#include <vector>

#include "core/host.h"
#include "core/parallel.h"
#include "regsolve/cpu/call.h"
#include "regsolve/cpu/matvec.h"
#include "regsolve/cpu/plan.h"
#if defined(NJ_KERNEL_reg_relax_)
#include "regsolve/cpu/relax.h"  // <thread> and the waves: parsed only where relax is built
#endif

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

#if defined(NJ_KERNEL_reg_relax_)
template <typename T>
void reg_relax_(const Call& c) {
  const Shape& s = c.s;
  const int64_t nb_iter = c.nb_iter;
  const std::vector<Tap<double>> taps = taps_of(c);
  int64_t per[kMaxDim] = {1, 1, 1}, ncol = 1;
  for (int d = 0; d < s.D; ++d) {
    per[d] = c.period[d];
    ncol *= per[d];
  }
  T* x = static_cast<T*>(c.out);
  const T* w = static_cast<const T*>(c.w);
  const T* h = static_cast<const T*>(c.h);
  const int64_t numel = s.B * s.C * s.S;
  const bool generic = generic_requested();
  // the layout of the rows of L x: by residue of the last index (generic: plain)
  const int64_t st = generic ? 1 : per[s.D - 1];
  const Plan<T> P = make_plan<T>(taps, s, w != nullptr, st, h == nullptr);
  const Op<T> o{P, s, x, w, c.wc, h, c.K, use_avx2(), generic};
  // x in that layout in place (no new buffer: fresh pages cost more than the copies), the
  // weights in a copy
  const int64_t wnumel = w ? s.B * c.wc * s.S : 0;
  nitorch_jit::host::Temporary<T> wcopy(st > 1 && w ? wnumel : 0);
  const T* ww = w;
  if (st > 1 && w) {
    T* dst = wcopy.get();
    parallel::parallel_for(0, wnumel / s.N, s.N, [&](int64_t r0, int64_t r1) {
      std::copy(w + r0 * s.N, w + r1 * s.N, dst + r0 * s.N);
    });
    relayout<T>(P, dst, wnumel / s.N, s.N, true);
    ww = dst;
  }
  if (st > 1) relayout<T>(P, x, numel / s.N, s.N, true);
  Op<T> lx = o;
  lx.w = ww;
  lx.h = nullptr;
  lx.K = 0;
  const Relax<T> R{lx, o, x, static_cast<const T*>(c.g), per};
  auto sweeps = [&] {
    if (s.D >= 2) {  // iterations in groups of at most 4, each group one pipelined wave
      const int64_t G = std::min<int64_t>(nb_iter, 4);
      for (int64_t it = 0; it + G <= nb_iter; it += G) relax_waves<T>(R, G);
      if (nb_iter % G) relax_waves<T>(R, nb_iter % G);
      return;
    }
    for (int64_t it = 0; it < nb_iter; ++it)  // a row per batch: colour by colour
      for (int64_t col = 0; col < ncol; ++col)
        parallel::parallel_for(0, s.B, s.S * s.C * (o.P.max_taps + s.C + 1),
                               [&](int64_t b0, int64_t b1) {
          RelaxScratch<T> rs(o, R.count(0));
          int64_t i[kMaxDim] = {0, 0, 0};
          for (int64_t b = b0; b < b1; ++b) relax_row(R, b, i, col, rs);
        });
  };
  try {
    sweeps();
  } catch (...) {  // x back in its layout
    if (st > 1) relayout<T>(P, x, numel / s.N, s.N, false);
    throw;
  }
  if (st > 1) relayout<T>(P, x, numel / s.N, s.N, false);
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
#if defined(NJ_KERNEL_reg_relax_)
NJ_KERNEL_ENTRY(regsolve_reg_relax_, nitorch_jit::regsolve::cpu::Call,
                nitorch_jit::regsolve::cpu::reg_relax_<NJ_KERNEL_T>(call))
#endif
