// The CPU kernels of module "regsolve" (docs/regsolve-spec.md): reg_matvec, reg_precond,
// reg_relax_. This file: their plan of a call; how they work, here once:
//
// The tap list is decoded and merged once per call (taps equal but for their coefficient add
// up), and tabulated: per tap, its neighbour row's offset and its folds at the ends of a row.
// reg_matvec works row by row, a row being (b, c_out, every spatial index but the last). A
// row whose taps need no folding along the non-last axes (most of them) uses offsets
// precomputed per call; a border row folds each tap's non-last axes once. The interior of the
// row, where no tap folds along the last axis, is a sum of shifted source rows held in vector
// registers (a baseline build and an AVX2 one, chosen at run time); the first and last two
// elements read through the fold tables. The voxel solves (reg_precond, reg_relax_) take L_vv
// from a table of the border classes (5 per axis); for C <= 3 a row's voxels are solved in
// vector lanes, the same arithmetic as the scalar solve (without Hessian and weights, the
// interior voxels share one factorisation, computed once per call).
// reg_relax_ evaluates a colour's rows only at that colour's elements: x (and the weights)
// are stored, during the call, with each row ordered by residue of the last index modulo the
// period, so that a colour's elements, and each tap's reads for them, are contiguous and the
// shifted sums apply. Colour by colour, every colour would stream the whole field from memory:
// the colours' tasks run instead in a dependency-respecting order (a wave along the first
// axis, and within a plane along the second, pipelined over up to 4 iterations) that reads
// each plane while it is in cache; threads take whole planes. Every voxel sees exactly the
// values of the colour by colour sweep, so the result is the same.
// NI_JIT_REGSOLVE_GENERIC=1 evaluates every point with regsolve/point.h instead, the
// per-point code the CUDA kernels share (a test of it).
//
// Torch-free (issue 31): the binding (binding.cpp) checks the arguments (regsolve/host.h,
// shared with the CUDA ops) and calls the kernel libraries (kernels.cpp: one per op and dtype,
// kernels.def) through core/host.h. Its parts, cut by concern: plan.h (the plan of a call:
// the border classes along an axis, the merged and tabulated taps with their fold tables and
// per-call row offsets (Plan, make_plan), the contiguous data of one call (Op) and the
// per-thread lists of a border row's taps (Scratch)), lanes.h (vector lanes), matvec.h
// (reg_matvec, reg_precond) and relax.h (reg_relax_).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "core/tuning.h"
#include "regsolve/taps.h"
#include "regsolve/point.h"

#if defined(_MSC_VER)
#define NJ_RS_RESTRICT __restrict
#else
#define NJ_RS_RESTRICT __restrict__
#endif

namespace nitorch_jit {
namespace regsolve {
namespace cpu {

using regsolve::Grid;
using regsolve::kMaxDim;
using regsolve::kMaxOffset;
using regsolve::Tap;
using regsolve::View;

namespace host = regsolve::host;
using host::Shape;

// ------------------------------------------------------------------------- the plan
// Border classes along an axis of size n: 0, 1 (the first two indices), 2 (interior: no tap
// folds there), 3, 4 (the last two). Every voxel of a class has the same self-coupling.
constexpr int kClasses = 5;
inline int border_class(int64_t i, int64_t n) {
  return i < kMaxOffset ? static_cast<int>(i)
                        : (i >= n - kMaxOffset ? static_cast<int>(kClasses - n + i) : kMaxOffset);
}

// Elements m in [m0, m1) of a row's M elements k = k0 + m * st have no tap folding along the
// last axis (lo <= k < hi); the others are the border ones.
struct RowSpan {
  int64_t lo = 0, hi = 0, m0 = 0, m1 = 0, M = 0;
  RowSpan() = default;
  RowSpan(int64_t N, int64_t k0, int64_t st, int64_t M_) : M(M_) {
    lo = std::min<int64_t>(kMaxOffset, N);
    hi = std::max(lo, N - kMaxOffset);
    m1 = hi <= k0 ? 0 : std::min(M, (hi - k0 + st - 1) / st);
    m0 = k0 >= lo ? 0 : std::min(m1, (lo - k0 + st - 1) / st);
  }
  // border elements: f(m, k, e), e the index of the edge tables
  template <typename F>
  void edges(int64_t k0, int64_t st, int64_t M, F&& f) const {
    for (int64_t m = 0; m < m0; ++m) f(m, k0 + m * st, k0 + m * st);
    for (int64_t m = m1; m < M; ++m) f(m, k0 + m * st, lo + k0 + m * st - hi);
  }
};

template <typename T>
struct Plan {
  // merged taps, by c_out and kind 0 first: those of c_out are [first[c], first[c + 1]), its
  // kind 0 ones [first[c], mid[c])
  std::vector<Tap<T>> taps;
  std::vector<int> first, mid;
  int max_taps = 0;              // most taps of one c_out
  std::vector<T> coef;           // per tap
  std::vector<int64_t> delta;    // per tap: offset of its neighbour row from the row, unfolded
  // The layout of a row along the last axis: element k at pos(k) = start[k % st] + k / st.
  // st = 1 is the plain layout; reg_relax_ uses its period, so that each colour's elements
  // are contiguous (and a tap's reads for them too, shifted).
  int64_t st = 1;
  std::vector<int64_t> start;    // per residue
  std::vector<int64_t> shift;    // [residue][off + 2]: pos(k + off) - pos(k) where both fit
  std::vector<RowSpan> spans;    // per residue k0: its elements k0 + m * st (m < count)
  std::vector<int64_t> inner;    // [residue][tap]: element k of an inner row reads pos(k) +
                                 // inner (from channel 0 of the row): c_in * S + delta + shift
  // per tap, the border elements e of a row along the last axis (k < lo: e = k; k >= hi:
  // e = lo + k - hi): the position of k + the last offset folded, and its sign
  std::vector<int64_t> edge_j;   // [tap][4]
  std::vector<T> edge_s;         // [tap][4]
  // the same for inner rows, all kind 0 taps of c_out merged: reads (offset from channel 0 of
  // the row, weight) [edge_first[4 c + e], edge_first[4 c + e + 1])
  std::vector<int> edge_first;
  std::vector<int64_t> edge_off;
  std::vector<T> edge_w;
  std::vector<Tap<T>> weighted;  // kind 1 and 2 (their self-coupling depends on the weights)
  std::vector<T> self;           // [class combination][C][C]: L_vv of the kind 0 taps
  std::vector<T> fact;           // the same, factorised (chol_factor): without Hessian and
                                 // weights, every voxel of a class shares it
  // then (C <= 3), per class combination of the non-last axes, the factors along a row:
  // [comb][tri(r, k)][pos(k)], the lanes' operands
  std::vector<T> frows;

  int64_t pos(int64_t k) const { return start[k % st] + k / st; }
  // the span of M elements k0 + m * st' of a row (precomputed for the plan's layout)
  RowSpan span(int64_t N, int64_t k0, int64_t st_, int64_t M) const {
    if (st_ == st && k0 < st && spans[k0].M == M) return spans[k0];
    return RowSpan(N, k0, st_, M);
  }
};

// st: the layout's period; shared: no Hessian (the factor rows, if no weighted taps either)
template <typename T>
Plan<T> make_plan(const std::vector<Tap<double>>& raw, const Shape& s, bool has_weights,
                  int64_t st = 1, bool shared = false) {
  const int D = s.D;
  const std::vector<Tap<double>> merged = host::merge_taps(raw, D, has_weights);
  Plan<T> p;
  p.st = st;
  p.start.assign(st, 0);
  for (int64_t r = 0, at = 0; r < st; ++r) {
    p.start[r] = at;
    at += r < s.N ? (s.N - r + st - 1) / st : 0;
  }
  for (int64_t r = 0; r < st; ++r)
    p.spans.emplace_back(s.N, r, st, r < s.N ? (s.N - r + st - 1) / st : 0);
  for (int64_t r = 0; r < st; ++r)
    for (int o = -kMaxOffset; o <= kMaxOffset; ++o) {
      const int64_t v = r + o, rr = ((v % st) + st) % st;
      p.shift.push_back(p.start[rr] + (v - rr) / st - p.start[r]);
    }
  p.first.assign(s.C + 1, 0);
  p.mid.assign(s.C, 0);
  std::vector<Tap<T>> plain;  // kind 0
  const int64_t lo = std::min<int64_t>(kMaxOffset, s.N), hi = std::max(lo, s.N - kMaxOffset);
  for (const auto& m : merged) {
    const Tap<T> t = host::cast_tap<T>(m);
    int64_t delta = 0;
    for (int d = 0; d < D - 1; ++d) delta += t.off[d] * s.ss[d];
    p.taps.push_back(t);
    p.coef.push_back(t.coef);
    p.delta.push_back(delta);
    p.first[t.c_out + 1]++;
    if (t.kind == 0) p.mid[t.c_out]++;
    for (int64_t e = 0; e < 4; ++e) {
      const int64_t kk = e < lo ? e : hi + e - lo;
      int sg = 0;
      int64_t j = 0;
      if (kk < s.N) j = t.off[D - 1] ? fold_index(kk + t.off[D - 1], s.N, t.bound[D - 1], sg)
                                     : (sg = 1, kk);
      p.edge_j.push_back(sg ? p.pos(j) : 0);
      p.edge_s.push_back(T(sg));
    }
    (t.kind == 0 ? plain : p.weighted).push_back(t);
  }
  for (int64_t r = 0; r < st; ++r)
    for (size_t t = 0; t < p.taps.size(); ++t)
      p.inner.push_back(p.taps[t].c_in * s.S + p.delta[t] +
                        p.shift[r * (2 * kMaxOffset + 1) + p.taps[t].off[D - 1] + kMaxOffset]);
  p.edge_first.push_back(0);
  for (int64_t c = 0; c < s.C; ++c) {
    p.max_taps = std::max(p.max_taps, p.first[c + 1]);
    p.first[c + 1] += p.first[c];
    p.mid[c] += p.first[c];
    for (int e = 0; e < 4; ++e) {
      std::map<int64_t, double> reads;
      for (int t = p.first[c]; t < p.mid[c]; ++t)
        if (p.edge_s[4 * t + e] != T(0))
          reads[p.taps[t].c_in * s.S + p.delta[t] + p.edge_j[4 * t + e]] +=
              double(p.taps[t].coef) * double(p.edge_s[4 * t + e]);
      for (const auto& r : reads) {
        if (r.second == 0.0) continue;
        p.edge_off.push_back(r.first);
        p.edge_w.push_back(static_cast<T>(r.second));
      }
      p.edge_first.push_back(static_cast<int>(p.edge_off.size()));
    }
  }
  // self-coupling of the plain taps per class combination, at one voxel of each
  int64_t ncomb = 1;
  std::vector<std::vector<int64_t>> reps(D);  // per axis: one index of each class
  for (int d = 0; d < D; ++d) {
    ncomb *= kClasses;
    const int64_t n = s.g.n[d];
    std::vector<int64_t>& r = reps[d];
    for (int64_t i = 0; i < std::min<int64_t>(n, kMaxOffset); ++i) r.push_back(i);
    if (n > 2 * kMaxOffset) r.push_back(kMaxOffset);
    for (int64_t i = std::max<int64_t>(kMaxOffset, n - kMaxOffset); i < n; ++i) r.push_back(i);
  }
  p.self.assign(ncomb * s.C * s.C, T(0));
  int64_t pick[kMaxDim] = {0, 0, 0}, i[kMaxDim];
  for (bool more = true; more;) {
    int64_t comb = 0;
    for (int d = 0; d < D; ++d) {
      i[d] = reps[d][pick[d]];
      comb = comb * kClasses + border_class(i[d], s.g.n[d]);
    }
    regsolve::add_self_block(plain.data(), static_cast<int>(plain.size()), i, s.g, View<T>(),
                             s.C, p.self.data() + comb * s.C * s.C);
    more = false;  // next combination, the last axis fastest
    for (int d = D - 1; d >= 0 && !more; --d) {
      if (++pick[d] < static_cast<int64_t>(reps[d].size())) more = true;
      else pick[d] = 0;
    }
  }
  p.fact = p.self;
  for (int64_t c = 0; c < ncomb; ++c) regsolve::chol_factor(p.fact.data() + c * s.C * s.C, s.C);
  if (shared && p.weighted.empty() && s.C <= 3) {
    const int64_t C = s.C, NT = C * (C + 1) / 2, N = s.N;
    p.frows.resize(ncomb / kClasses * NT * N);
    for (int64_t c = 0; c < ncomb / kClasses; ++c)
      for (int64_t k = 0; k < N; ++k) {
        const T* f = p.fact.data() + (c * kClasses + border_class(k, N)) * C * C;
        for (int64_t r = 0, j = 0; r < C; ++r)
          for (int64_t q = 0; q <= r; ++q, ++j) p.frows[(c * NT + j) * N + p.pos(k)] = f[r * C + q];
      }
  }
  return p;
}

// ------------------------------------------------------------------------- one call
// Contiguous data of one call: x [B, C, *S], w [B, wc, *S] or null, h [B, K, *S] or null.
template <typename T>
struct Op {
  const Plan<T>& P;
  const Shape& s;
  const T* x;
  const T* w;
  int64_t wc;
  const T* h;
  int64_t K;
  bool avx2;     // the AVX2 build of the tap sums
  bool generic;  // every point through regsolve/point.h (NI_JIT_REGSOLVE_GENERIC=1)

  View<T> view(const T* base, int64_t nc, int64_t b) const {
    View<T> v;
    if (!base) return v;
    v.p = base + b * nc * s.S;
    v.nc = nc;
    v.sc = s.S;
    for (int d = 0; d < s.D; ++d) v.s[d] = s.ss[d];
    return v;
  }
  // no tap folds along the non-last axes of this row
  bool inner_row(const int64_t* ridx) const {
    for (int d = 0; d + 1 < s.D; ++d)
      if (ridx[d] < kMaxOffset || ridx[d] >= s.g.n[d] - kMaxOffset) return false;
    return true;
  }
};

// Per-thread lists of a border row's kind 0 taps (those that do not read zero): offsets from
// channel 0 of the row, of the source of element 0 (roff) and of the element at pos(k) (offs).
template <typename T>
struct Scratch {
  std::vector<int64_t> roff, offs;
  std::vector<T> cs;    // coefficient times the row's sign
  std::vector<int> ti;  // 4 * tap index (edge tables)
  explicit Scratch(int n) : roff(n), offs(n), cs(n), ti(n) {}
};

}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit
