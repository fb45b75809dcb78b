// CPU kernels of module "resize": separable spline resizing and its adjoint.
//
// resize:          out = R_{D-1} ... R_0 (A_{D-1} ... A_0) in   (A: spline prefilter, optional)
// resize_adjoint:  out = A_0^T ... A_{D-1}^T R_0^T ... R_{D-1}^T in
// over the last D = len(shape) dims. R_d samples dim d at x = scale[d] * o + shift[d] with a
// B-spline (order[d], bound[d]; always extrapolating through the bound); its taps per output
// index are tabulated once per call (nitorch_jit/resize.h). Each dim is one pass over tiles of
// W adjacent lines (nitorch_jit/lines_cpu.h): load, prefilter in the tile (fused), resample
// (gather, or scatter for the adjoint), store. No dense sampling grid is built.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "nitorch_jit/lines_cpu.h"
#include "nitorch_jit/resize.h"
#include "nitorch_jit/splinc.h"

namespace nitorch_jit {
namespace {

using splinc::LinePlan;

// A gather table: out[r] = sum_k w[r*K + k] * in[idx[r*K + k]] for each of `rows` rows.
template <typename T>
struct Table {
  int64_t rows = 0;
  int K = 0;
  std::vector<int32_t> idx;
  std::vector<T> w;
};

// Forward: row o (of m) holds the order+1 taps of output o over an input of length n.
template <typename T>
Table<T> forward_table(int order, int bound, int64_t n, int64_t m, double scale, double shift) {
  Table<T> t;
  t.rows = m;
  t.K = order + 1;
  t.idx.resize(m * t.K);
  t.w.resize(m * t.K);
  int64_t ji[kMaxTaps];
  T wi[kMaxTaps];
  for (int64_t o = 0; o < m; ++o) {
    resize::taps<T>(order, bound, n, scale, shift, o, ji, wi);
    for (int k = 0; k < t.K; ++k) {
      t.idx[o * t.K + k] = static_cast<int32_t>(ji[k]);
      t.w[o * t.K + k] = wi[k];
    }
  }
  return t;
}

// Adjoint: the transpose of the forward table, row j (of n) gathering from the m outputs,
// padded with zero weights to the longest row. A gather vectorises; a scatter would not.
template <typename T>
Table<T> adjoint_table(const Table<T>& f, int64_t n) {
  std::vector<int32_t> count(n, 0);
  for (int64_t e = 0; e < f.rows * f.K; ++e)
    if (f.w[e] != T(0)) ++count[f.idx[e]];
  Table<T> t;
  t.rows = n;
  t.K = std::max<int>(1, *std::max_element(count.begin(), count.end()));
  t.idx.assign(n * t.K, 0);
  t.w.assign(n * t.K, T(0));
  std::fill(count.begin(), count.end(), 0);
  for (int64_t o = 0; o < f.rows; ++o)
    for (int k = 0; k < f.K; ++k) {
      const T wk = f.w[o * f.K + k];
      if (wk == T(0)) continue;
      const int64_t j = f.idx[o * f.K + k];
      const int64_t e = j * t.K + count[j]++;
      t.idx[e] = static_cast<int32_t>(o);
      t.w[e] = wk;
    }
  return t;
}

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

// One pass along d: src (length lin along d) -> dst (length lout = tab.rows along d).
// Forward: prefilter the loaded lines (plan), then gather. Adjoint: gather (transposed
// table), then the adjoint prefilter on the result.
template <typename T, bool ADJ, int K>
void pass_k(const at::Tensor& src, const at::Tensor& dst, int64_t d, const Table<T>& tab,
            const LinePlan* plan) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t lin = src.size(d), lout = dst.size(d);
  const lines::Tiling tl(src, dst, d, W);
  const T* sp = src.const_data_ptr<T>();
  T* dp = dst.data_ptr<T>();
  at::parallel_for(0, tl.ntiles, lines::grain(std::max(lin, lout) * tab.K, W),
                   [&](int64_t begin, int64_t end) {
    std::vector<T> buf_in(lin * W), buf_out(lout * W);
    T* bi = buf_in.data();
    T* bo = buf_out.data();
    for (int64_t t = begin; t < end; ++t) {
      int64_t so, dof;
      int nl;
      tl.tile(t, W, so, dof, nl);
      lines::load<W>(sp + so, lin, tl.sN, tl.sL, nl, bi);
      if (!ADJ && plan) splinc::filter_lanes<W, T>(bi, W, *plan);
      gather_tile<T, K>(tab, bi, bo);
      if (ADJ && plan) splinc::filter_lanes<W, T>(bo, W, *plan);
      lines::store<W>(dp + dof, lout, tl.dN, tl.dL, nl, bo);
    }
  });
}

template <typename T, bool ADJ>
void pass(const at::Tensor& src, const at::Tensor& dst, int64_t d, const Table<T>& tab,
          const LinePlan* plan) {
  switch (tab.K) {
    case 1: pass_k<T, ADJ, 1>(src, dst, d, tab, plan); break;
    case 2: pass_k<T, ADJ, 2>(src, dst, d, tab, plan); break;
    case 3: pass_k<T, ADJ, 3>(src, dst, d, tab, plan); break;
    case 4: pass_k<T, ADJ, 4>(src, dst, d, tab, plan); break;
    case 5: pass_k<T, ADJ, 5>(src, dst, d, tab, plan); break;
    case 6: pass_k<T, ADJ, 6>(src, dst, d, tab, plan); break;
    case 7: pass_k<T, ADJ, 7>(src, dst, d, tab, plan); break;
    case 8: pass_k<T, ADJ, 8>(src, dst, d, tab, plan); break;
    default: pass_k<T, ADJ, 0>(src, dst, d, tab, plan); break;  // runtime K
  }
}

void check_args(const at::Tensor& input, at::IntArrayRef shape, at::ArrayRef<double> scale,
                at::ArrayRef<double> shift, at::IntArrayRef order, at::IntArrayRef bound,
                const char* name) {
  TORCH_CHECK(input.device().is_cpu(), name, ": expected a CPU tensor");
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble, name,
              ": expected float32 or float64, got ", input.scalar_type());
  const size_t D = shape.size();
  TORCH_CHECK(D >= 1 && static_cast<int64_t>(D) <= input.dim(), name, ": got ", D,
              " spatial sizes for a ", input.dim(), "-D input");
  TORCH_CHECK(scale.size() == D && shift.size() == D && order.size() == D && bound.size() == D,
              name, ": shape, scale, shift, order and bound must have the same length");
  for (size_t i = 0; i < D; ++i) {
    TORCH_CHECK(shape[i] >= 1, name, ": output sizes must be >= 1, got ", shape[i]);
    TORCH_CHECK(order[i] >= 0 && order[i] <= 7, name, ": order must be in 0..7, got ", order[i]);
    TORCH_CHECK(bound[i] >= 0 && bound[i] <= 6, name, ": unknown bound code ", bound[i]);
    TORCH_CHECK(std::isfinite(scale[i]) && std::isfinite(shift[i]), name,
                ": scale and shift must be finite");
  }
  for (int64_t k = input.dim() - static_cast<int64_t>(D); k < input.dim(); ++k)
    TORCH_CHECK(input.size(k) >= 1, name, ": empty spatial dim in input");
}

// Shared driver. Forward: in [..., *n] -> [..., *shape]. Adjoint: in [..., *m] -> [..., *shape]
// with (scale, shift) those of the forward map from shape to m.
template <bool ADJ>
at::Tensor run(const at::Tensor& input, at::IntArrayRef shape, at::ArrayRef<double> scale,
               at::ArrayRef<double> shift, at::IntArrayRef order, at::IntArrayRef bound,
               bool prefilter) {
  const char* name = ADJ ? "resize_adjoint" : "resize";
  check_args(input, shape, scale, shift, order, bound, name);
  const int64_t D = static_cast<int64_t>(shape.size());
  const int64_t off = input.dim() - D;
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
  // shrink first: dims in increasing order of (output length / input length)
  std::vector<int64_t> dims(D);
  std::iota(dims.begin(), dims.end(), 0);
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) {
    return shape[a] * sizes[off + b] < shape[b] * sizes[off + a];
  });
  const bool dbl = input.scalar_type() == at::kDouble;
  at::Tensor cur = input;
  bool fresh = false;  // cur is a tensor we allocated
  bool empty = input.numel() == 0;
  for (int64_t i : dims) {
    const int64_t lin = sizes[off + i], lout = shape[i];
    const int64_t n = ADJ ? lout : lin, m = ADJ ? lin : lout;
    LinePlan plan;
    const bool filt = prefilter && splinc::make_plan((int)order[i], (int)bound[i], n, dbl, ADJ, plan);
    if (!filt && n == m && scale[i] == 1.0 && shift[i] == 0.0 && order[i] <= 1) continue;
    sizes[off + i] = lout;
    at::Tensor next = at::empty(sizes, input.options());
    if (!empty && next.numel() > 0) {
      AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "resize", [&] {
        const Table<scalar_t> fwd =
            forward_table<scalar_t>((int)order[i], (int)bound[i], n, m, scale[i], shift[i]);
        pass<scalar_t, ADJ>(cur, next, off + i, ADJ ? adjoint_table(fwd, n) : fwd,
                            filt ? &plan : nullptr);
      });
    }
    cur = next;
    fresh = true;
  }
  if (!fresh) return input.clone(at::MemoryFormat::Contiguous);
  return cur;
}

at::Tensor resize_fwd(const at::Tensor& input, at::IntArrayRef shape, at::ArrayRef<double> scale,
                  at::ArrayRef<double> shift, at::IntArrayRef order, at::IntArrayRef bound,
                  bool prefilter) {
  return run<false>(input, shape, scale, shift, order, bound, prefilter);
}

at::Tensor resize_adj(const at::Tensor& input, at::IntArrayRef shape,
                          at::ArrayRef<double> scale, at::ArrayRef<double> shift,
                          at::IntArrayRef order, at::IntArrayRef bound, bool prefilter) {
  return run<true>(input, shape, scale, shift, order, bound, prefilter);
}

}  // namespace

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("resize", &resize_fwd);
  m.impl("resize_adjoint", &resize_adj);
}

}  // namespace nitorch_jit
