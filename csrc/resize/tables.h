// Resizing, host side: the order of the passes and their tap tables, shared by the CPU
// (csrc/resize/cpu/binding.cpp, resample.cpp) and CUDA (csrc/resize/cuda/host.cuh) drivers so that
// both run the same passes with the same weights. No torch header: plain vectors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "resize/taps.h"
#include "lines/filter.h"

namespace nitorch_jit {
namespace resize {

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
    taps<T>(order, bound, n, scale, shift, o, ji, wi);
    for (int k = 0; k < t.K; ++k) {
      t.idx[o * t.K + k] = static_cast<int32_t>(ji[k]);
      t.w[o * t.K + k] = wi[k];
    }
  }
  return t;
}

// Adjoint: the transpose of the forward table, row j (of n) gathering from the m outputs,
// padded with zero weights to the longest row. A gather vectorises (and needs no atomics on
// a GPU); a scatter would not.
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

// One pass along spatial dim i: lines of length lin become lines of length lout; filt: the
// prefilter (forward: on the input lines, before the gather; adjoint: on the output lines,
// after it) with `plan`.
struct Step {
  int64_t i, lin, lout;
  bool filt;
  splinc::LinePlan plan;
};

// The passes of resize (adj = false) or resize_adjoint (adj = true) over D spatial dims whose
// input sizes are nin[0..D) and output sizes shape[0..D), in the order they run: shrinking
// dims first (increasing lout / lin), identity dims (no filter, same length, scale 1, shift 0,
// order <= 1) dropped. dbl: float64 data (the filter's truncation horizon).
inline std::vector<Step> plan_steps(bool adj, int64_t D, const int64_t* nin, const int64_t* shape,
                                    const double* scale, const double* shift,
                                    const int64_t* order, const int64_t* bound, bool prefilter,
                                    bool dbl) {
  std::vector<int64_t> dims(D);
  std::iota(dims.begin(), dims.end(), 0);
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) {
    return shape[a] * nin[b] < shape[b] * nin[a];
  });
  std::vector<Step> steps;
  steps.reserve(D);
  for (int64_t i : dims) {
    Step st;
    st.i = i;
    st.lin = nin[i];
    st.lout = shape[i];
    const int64_t n = adj ? st.lout : st.lin, m = adj ? st.lin : st.lout;
    st.filt = prefilter && splinc::make_plan((int)order[i], (int)bound[i], n, dbl, adj, st.plan);
    if (!st.filt && n == m && scale[i] == 1.0 && shift[i] == 0.0 && order[i] <= 1) continue;
    steps.push_back(st);
  }
  return steps;
}

// The gather table of one step: forward rows are the lout outputs; adjoint rows are the lout
// (= the forward's n) outputs of the transposed map.
template <typename T>
Table<T> step_table(bool adj, const Step& st, int order, int bound, double scale, double shift) {
  const int64_t n = adj ? st.lout : st.lin, m = adj ? st.lin : st.lout;
  Table<T> fwd = forward_table<T>(order, bound, n, m, scale, shift);
  return adj ? adjoint_table(fwd, n) : fwd;
}

}  // namespace resize
}  // namespace nitorch_jit
