// reg_relax_ on CPU (docs/regsolve-spec.md): the kernel, torch-free (plan.h says how it
// works). A kernel library holds it for one dtype (NJ_KERNEL_reg_relax_, NJ_KERNEL_T: see
// nitorch_jit/backends/compiled.py); the binding (binding.cpp) checks the arguments, hands it x
// contiguous and apart from the other inputs, and calls it through core/host.h.
#include <algorithm>
#include <vector>

#include "core/host.h"
#include "core/parallel.h"
#include "regsolve/cpu/call.h"
#include "regsolve/cpu/matvec.h"
#include "regsolve/cpu/plan.h"
#include "regsolve/cpu/relax.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {
namespace {

#if defined(NJ_KERNEL_reg_relax_)
template <typename T>
void reg_relax_(const Call& c) {
  const Shape& s = c.s;
  const int64_t nb_iter = c.nb_iter;
  const std::vector<Tap<double>> taps(c.taps, c.taps + c.ntaps);
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

#if defined(NJ_KERNEL_reg_relax_)
NJ_KERNEL_ENTRY(regsolve_reg_relax_, nitorch_jit::regsolve::cpu::Call,
                nitorch_jit::regsolve::cpu::reg_relax_<NJ_KERNEL_T>(call))
#endif
