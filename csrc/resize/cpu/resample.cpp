// The CPU kernels of module "resize": separable spline resizing and its adjoint, torch-free. A
// kernel library holds one of them for one dtype (NJ_KERNEL_resize / NJ_KERNEL_resize_adjoint,
// NJ_KERNEL_T: see nitorch_jit/backends/compiled.py); the binding (binding.cpp) checks the
// arguments, plans the passes, makes the output and calls it through core/host.h.
//
// resize:          out = R_{D-1} ... R_0 (A_{D-1} ... A_0) in   (A: spline prefilter, optional)
// resize_adjoint:  out = A_0^T ... A_{D-1}^T R_0^T ... R_{D-1}^T in
// over the last D = len(shape) dims. R_d samples dim d at x = scale[d] * o + shift[d] with a
// B-spline (order[d], bound[d]; always extrapolating through the bound); its taps per output
// index are tabulated once per call (resize/taps.h). Each dim is one pass over tiles of
// W adjacent lines (lines/cpu.h): load, prefilter in the tile (fused), resample
// (gather, or scatter for the adjoint), store. No dense sampling grid is built; the
// intermediates between passes are temporaries of the host (core/host.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/host.h"
#include "lines/cpu.h"
#include "lines/filter.h"
#include "resize/cpu/call.h"
#include "resize/tables.h"

namespace nitorch_jit {
namespace resize {
namespace cpu {

using lines::Layout;
using splinc::LinePlan;

// bout[r][w] = sum_k w[r, k] * bin[idx[r, k]][w]: accumulate in the output row (this form
// vectorises across the W lanes; a local accumulator array does not, with gcc 12).
template <typename T, int K>
void gather_tile(const Table<T>& tab, const T* NJ_RESTRICT bin, T* NJ_RESTRICT bout) {
  constexpr int W = lines::Lanes<T>::W;
  const int32_t* NJ_RESTRICT ix = tab.idx.data();
  const T* NJ_RESTRICT wt = tab.w.data();
  const int k_rt = tab.K;
  const int nk = K > 0 ? K : k_rt;
  for (int64_t o = 0; o < tab.rows; ++o) {
    T* NJ_RESTRICT q = bout + o * W;
    {
      const T wk = wt[o * nk];
      const T* NJ_RESTRICT r = bin + static_cast<int64_t>(ix[o * nk]) * W;
      for (int w = 0; w < W; ++w) q[w] = wk * r[w];
    }
    for (int k = 1; k < nk; ++k) {
      const T wk = wt[o * nk + k];
      const T* NJ_RESTRICT r = bin + static_cast<int64_t>(ix[o * nk + k]) * W;
      for (int w = 0; w < W; ++w) q[w] += wk * r[w];
    }
  }
}

// One 2-D block: nlane lines, of length lin in src and lout (= tab.rows) in dst; element
// (i, l) at s[i * sN + l * sL] / d[i * dN + l * dL]. Forward: prefilter the loaded lines
// (plan), then gather. Adjoint: gather (transposed table), then the adjoint prefilter.
// bi / bo: buffers of lin * W and lout * W.
template <typename T, int K>
void block_k(bool ADJ, const T* s, int64_t sN, int64_t sL, T* d, int64_t dN, int64_t dL,
             int64_t nlane, int64_t lin, const Table<T>& tab, const LinePlan* plan, T* bi,
             T* bo) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t lout = tab.rows;
  for (int64_t l0 = 0; l0 < nlane; l0 += W) {
    const int nl = static_cast<int>(std::min<int64_t>(W, nlane - l0));
    lines::load<W>(s + l0 * sL, lin, sN, sL, nl, bi);
    if (!ADJ && plan) splinc::filter_lanes<W, T>(bi, W, *plan);
    gather_tile<T, K>(tab, bi, bo);
    if (ADJ && plan) splinc::filter_lanes<W, T>(bo, W, *plan);
    lines::store<W>(d + l0 * dL, lout, dN, dL, nl, bo);
  }
}

// Specialised for the common orders 1-3 (K = 2-4 forward); any other K at run time.
template <typename T, bool ADJ>
void block(const T* s, int64_t sN, int64_t sL, T* d, int64_t dN, int64_t dL, int64_t nlane,
           int64_t lin, const Table<T>& tab, const LinePlan* plan, T* bi, T* bo) {
  switch (tab.K) {
    case 2: block_k<T, 2>(ADJ, s, sN, sL, d, dN, dL, nlane, lin, tab, plan, bi, bo); break;
    case 3: block_k<T, 3>(ADJ, s, sN, sL, d, dN, dL, nlane, lin, tab, plan, bi, bo); break;
    case 4: block_k<T, 4>(ADJ, s, sN, sL, d, dN, dL, nlane, lin, tab, plan, bi, bo); break;
    default: block_k<T, 0>(ADJ, s, sN, sL, d, dN, dL, nlane, lin, tab, plan, bi, bo);
  }
}

// One pass along d over whole tensors, parallel over tiles of W lines.
template <typename T, bool ADJ>
void pass(const T* sp, const Layout& src, T* dp, const Layout& dst, int64_t d,
          const Table<T>& tab, const LinePlan* plan) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t lin = src.size[d], lout = dst.size[d];
  const lines::Tiling tl(src, dst, d, W);
  using Bufs = std::pair<std::vector<T>, std::vector<T>>;
  lines::parallel_chunks(
      tl.ntiles, std::max(lin, lout) * tab.K * W,  // a multiply-add per tap and lane
      [&] { return Bufs(std::vector<T>(lin * W), std::vector<T>(lout * W)); },
      [&](int64_t begin, int64_t end, Bufs& bufs) {
        for (int64_t t = begin; t < end; ++t) {
          int64_t so, dof;
          int nl;
          tl.tile(t, W, so, dof, nl);
          block<T, ADJ>(sp + so, tl.sN, tl.sL, dp + dof, tl.dN, tl.dL, nl, lin, tab, plan,
                        bufs.first.data(), bufs.second.data());
        }
      });
}

// Two passes fused, along dims p then q, slab by slab: a slab is one index of every other
// dim; its intermediate [lout_p][lin_q] lives in a per-thread buffer (cache), so the
// intermediate tensor is never allocated nor written to memory.
template <typename T, bool ADJ>
void fused_pass(const T* sp, const Layout& src, T* dp, const Layout& dst, int64_t p, int64_t q,
                const Table<T>& tab_p, const LinePlan* plan_p, const Table<T>& tab_q,
                const LinePlan* plan_q) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t lin_p = src.size[p], lout_p = dst.size[p];
  const int64_t lin_q = src.size[q], lout_q = dst.size[q];
  std::vector<int64_t> osize, os, od;
  for (int64_t k = 0; k < src.dim(); ++k) {
    if (k == p || k == q) continue;
    osize.push_back(src.size[k]);
    os.push_back(src.stride[k]);
    od.push_back(dst.stride[k]);
  }
  int64_t nslab = 1;
  for (auto v : osize) nslab *= v;
  const int64_t sp_ = src.stride[p], sq_ = src.stride[q], dp_ = dst.stride[p], dq_ = dst.stride[q];
  const int64_t lmax = std::max({lin_p, lout_p, lin_q, lout_q});
  struct Bufs {
    std::vector<T> mid, bi, bo;
  };
  // a slab's multiply-adds: both passes, every tap
  const int64_t slab_work = lout_p * (lin_q * tab_p.K + lout_q * tab_q.K);
  lines::parallel_chunks(
      nslab, slab_work,
      [&] { return Bufs{std::vector<T>(lout_p * lin_q), std::vector<T>(lmax * W),
                        std::vector<T>(lmax * W)}; },
      [&](int64_t begin, int64_t end, Bufs& b) {
        for (int64_t t = begin; t < end; ++t) {
          int64_t o = t, so = 0, dof = 0;
          for (int64_t k = static_cast<int64_t>(osize.size()) - 1; k >= 0; --k) {
            const int64_t i = o % osize[k];
            o /= osize[k];
            so += i * os[k];
            dof += i * od[k];
          }
          // along p: src slab -> mid [lout_p][lin_q] (lanes along q, contiguous in mid)
          block<T, ADJ>(sp + so, sp_, sq_, b.mid.data(), lin_q, 1, lin_q, lin_p, tab_p, plan_p,
                        b.bi.data(), b.bo.data());
          // along q: mid -> dst slab (lanes along p)
          block<T, ADJ>(b.mid.data(), 1, lin_q, dp + dof, dq_, dp_, lout_p, lin_q, tab_q,
                        plan_q, b.bi.data(), b.bo.data());
        }
      });
}

// The driver of both ops. Forward: in [..., *n] -> out [..., *shape]. Adjoint: in [..., *m] ->
// out [..., *shape] with (scale, shift) those of the forward map from shape to m. The passes
// but the last write temporaries (two at most alive: the one read and the one written).
template <typename T, bool ADJ>
void run(const Call& c) {
  const int64_t D = c.D;
  const int64_t ndim = c.ndim;
  const int64_t off = ndim - D;
  std::vector<int64_t> sizes(c.src_size, c.src_size + ndim);
  const std::vector<Step> steps(c.steps, c.steps + c.nsteps);
  // fuse the last two passes when there are enough slabs and a slab fits in cache
  bool fuse = false;
  if (steps.size() >= 2) {
    const Step& a = steps[steps.size() - 2];
    const Step& b = steps.back();
    std::vector<int64_t> before = sizes;  // sizes entering the fused pass
    for (size_t k = 0; k + 2 < steps.size(); ++k) before[off + steps[k].i] = steps[k].lout;
    int64_t nslab = 1;
    for (int64_t k = 0; k < ndim; ++k)
      if (k != off + a.i && k != off + b.i) nslab *= before[k];
    const int64_t slab_bytes = a.lout * b.lin * static_cast<int64_t>(sizeof(T));
    fuse = nslab >= 4 * host::num_threads() && slab_bytes <= (int64_t(4) << 20);
  }
  auto table = [&](const Step& st) {
    return step_table<T>(ADJ, st, (int)c.order[st.i], (int)c.bound[st.i], c.scale[st.i],
                         c.shift[st.i]);
  };
  T* const out = static_cast<T*>(c.out);
  std::unique_ptr<host::Temporary<T>> held[2];  // the intermediates, used in turn
  int turn = 0;
  // where the pass that makes `layout` writes: the output, or a fresh temporary
  auto destination = [&](bool last, const Layout& layout) -> T* {
    if (last) return out;
    held[turn].reset();  // the one before the array read now
    held[turn].reset(new host::Temporary<T>(layout.numel()));
    T* p = held[turn]->get();
    turn ^= 1;
    return p;
  };
  const T* cur = static_cast<const T*>(c.src);
  Layout cur_layout(c.src_size, c.src_stride, ndim);
  const size_t nsingle = steps.size() - (fuse ? 2 : 0);
  for (size_t k = 0; k < nsingle; ++k) {
    const Step& st = steps[k];
    sizes[off + st.i] = st.lout;
    const Layout next_layout = Layout::contiguous(sizes);
    T* next = destination(!fuse && k + 1 == nsingle, next_layout);
    pass<T, ADJ>(cur, cur_layout, next, next_layout, off + st.i, table(st),
                 st.filt ? &st.plan : nullptr);
    cur = next;
    cur_layout = next_layout;
  }
  if (fuse) {
    const Step& a = steps[nsingle];
    const Step& b = steps[nsingle + 1];
    sizes[off + a.i] = a.lout;
    sizes[off + b.i] = b.lout;
    fused_pass<T, ADJ>(cur, cur_layout, out, Layout::contiguous(sizes), off + a.i, off + b.i,
                       table(a), a.filt ? &a.plan : nullptr, table(b),
                       b.filt ? &b.plan : nullptr);
  }
}

}  // namespace cpu
}  // namespace resize
}  // namespace nitorch_jit

#if defined(NJ_KERNEL_resize)
NJ_KERNEL_ENTRY(resize_resize, nitorch_jit::resize::cpu::Call,
                (nitorch_jit::resize::cpu::run<NJ_KERNEL_T, false>(call)))
#endif
#if defined(NJ_KERNEL_resize_adjoint)
NJ_KERNEL_ENTRY(resize_resize_adjoint, nitorch_jit::resize::cpu::Call,
                (nitorch_jit::resize::cpu::run<NJ_KERNEL_T, true>(call)))
#endif
