// The CPU kernel of module "splinc": interpolating B-spline coefficients, torch-free. A kernel
// library holds it for one dtype (NJ_KERNEL_spline_coeff, NJ_KERNEL_T: see
// nitorch_jit/backends/compiled.py); the binding (binding.cpp) checks the arguments, plans the
// filters, makes the output and calls it through core/host.h.
//
// Filtering along one dim: tiles of W adjacent lines (lines/cpu.h) are copied
// into a small buffer [n][W], filtered with the recursions vectorised across the W lanes
// (lines/filter.h), and written back; lines::parallel_chunks distributes the tiles.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "lines/cpu.h"
#include "lines/filter.h"
#include "splinc/cpu/call.h"

namespace nitorch_jit {
namespace splinc {
namespace cpu {

using lines::Layout;

// The cost of filtering a tile of W lines of n (core/parallel.h's units): copy in and out, and per
// pole a causal and an anti-causal recursion (a multiply-add each) on every element.
inline int64_t tile_cost(int64_t n, int W, const LinePlan& plan) {
  return n * W * (2 + 2 * static_cast<int64_t>(plan.npoles));
}

// Filter sp (layout src) along dim d into dp (layout dst: same sizes, any strides; dp may alias
// sp exactly).
template <typename T>
void filter_dim(const T* sp, const Layout& src, T* dp, const Layout& dst, int64_t d,
                const LinePlan& plan) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t n = src.size[d];
  const lines::Tiling tl(src, dst, d, W);
  lines::parallel_chunks(
      tl.ntiles, tile_cost(n, W, plan), [&] { return std::vector<T>(n * W, T(0)); },
      [&](int64_t begin, int64_t end, std::vector<T>& buf) {
        T* b = buf.data();
        for (int64_t t = begin; t < end; ++t) {
          int64_t so, dof;
          int nl;
          tl.tile(t, W, so, dof, nl);
          lines::load<W>(sp + so, n, tl.sN, tl.sL, nl, b);
          filter_lanes<W, T>(b, W, plan);
          lines::store<W>(dp + dof, n, tl.dN, tl.dL, nl, b);
        }
      });
}

// The two innermost dims of contiguous arrays, plane by plane: each plane is filtered along
// both while it is in cache, one pass over memory instead of two (a 256 x 256 x 176 float32
// prefilter: 15 -> ~11 ms). Planes of 16 KiB to 1 MiB; false (nothing done) otherwise.
template <typename T>
bool filter_planes(const T* sp, const Layout& src, T* dp, const Layout& dst,
                   const LinePlan& last, const LinePlan& second) {
  const int64_t D = src.dim(), n1 = src.size[D - 2], n2 = src.size[D - 1];
  const int64_t bytes = n1 * n2 * static_cast<int64_t>(sizeof(T));
  if (!src.is_contiguous() || !dst.is_contiguous() || bytes < (16 << 10) || bytes > (1 << 20))
    return false;
  const int64_t nplanes = src.numel() / (n1 * n2);
  if (nplanes < 2) return false;
  const Layout plane({n1, n2}, {n2, 1});
  const int64_t plane_cost = tile_cost(n1, 1, second) * n2 + tile_cost(n2, 1, last) * n1;
  parallel::parallel_for(0, nplanes, plane_cost, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {  // inside the parallel region: filter_dim runs inline
      const T* s = sp + p * n1 * n2;
      T* d = dp + p * n1 * n2;
      filter_dim<T>(s, plane, d, plane, 1, last);
      filter_dim<T>(d, plane, d, plane, 0, second);
    }
  });
  return true;
}

// Filter the call's source along each of its steps' dims into its destination.
template <typename T>
void spline_coeff(const Call& c) {
  const Layout src(c.size, c.src_stride, c.ndim), dst(c.size, c.dst_stride, c.ndim);
  const T* sp = static_cast<const T*>(c.src);
  T* dp = static_cast<T*>(c.dst);
  const int64_t D = c.ndim;
  std::vector<const Step*> steps;
  for (int64_t i = 0; i < c.nsteps; ++i) steps.push_back(c.steps + i);
  bool done = false;
  auto find = [&](int64_t d) {
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i]->dim == d) return static_cast<int64_t>(i);
    return int64_t(-1);
  };
  const int64_t a = D >= 3 ? find(D - 1) : -1, b = D >= 3 ? find(D - 2) : -1;
  if (a >= 0 && b >= 0 && filter_planes<T>(sp, src, dp, dst, steps[a]->plan, steps[b]->plan)) {
    steps.erase(steps.begin() + std::max(a, b));
    steps.erase(steps.begin() + std::min(a, b));
    done = true;
  }
  for (const Step* st : steps) {
    if (done)
      filter_dim<T>(dp, dst, dp, dst, st->dim, st->plan);
    else
      filter_dim<T>(sp, src, dp, dst, st->dim, st->plan);
    done = true;
  }
}

}  // namespace cpu
}  // namespace splinc
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_spline_coeff)
NJ_KERNEL_ENTRY(splinc_spline_coeff, nitorch_jit::splinc::cpu::Call,
                nitorch_jit::splinc::cpu::spline_coeff<NJ_KERNEL_T>(call))
#endif
