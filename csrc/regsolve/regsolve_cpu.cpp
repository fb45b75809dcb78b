// CPU kernels of module "regsolve" (docs/regsolve-spec.md): reg_matvec, reg_precond, reg_relax_.
//
// The tap list is decoded and merged once per call (taps equal but for their coefficient add
// up), and tabulated: per tap, its neighbour row's offset and its folds at the ends of a row.
// reg_matvec works row by row, a row being (b, c_out, every spatial index but the last). A
// row whose taps need no folding along the non-last axes (most of them) uses offsets
// precomputed per call; a border row folds each tap's non-last axes once. The interior of the
// row, where no tap folds along the last axis, is a sum of shifted source rows held in vector
// registers (a baseline build and an AVX2 one, chosen at run time); the first and last two
// elements read through the fold tables. The voxel solves (reg_precond, reg_relax_) take
// L_vv from a table of the border classes (5 per axis) and unroll for C <= 3. reg_relax_
// evaluates the same rows with a stride, over the voxels of one colour at a time.
// NI_JIT_REGSOLVE_GENERIC=1 evaluates every point with nitorch_jit/regsolve.h instead, the
// per-point code the CUDA kernels share (a test of it). The argument checks, the tap list's
// decoding and merging and the colour check of reg_relax_ are regsolve_host.h, shared with the
// CUDA ops.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nitorch_jit/regsolve.h"
#include "regsolve_host.h"

#if defined(_MSC_VER)
#define NJ_RS_RESTRICT __restrict
#else
#define NJ_RS_RESTRICT __restrict__
#endif

namespace nitorch_jit {
namespace {

using regsolve::Grid;
using regsolve::kMaxDim;
using regsolve::kMaxOffset;
using regsolve::Tap;
using regsolve::View;

namespace host = regsolve::host;
using host::Shape;

// The device of the CPU ops, for the shared checks (regsolve_host.h).
struct CpuDevice {
  static constexpr const char* kDevice = "CPU";
  static bool on_device(const at::Tensor& t) { return t.device().is_cpu(); }
};

// ------------------------------------------------------------------------- the plan
// Border classes along an axis of size n: 0, 1 (the first two indices), 2 (interior: no tap
// folds there), 3, 4 (the last two). Every voxel of a class has the same self-coupling.
constexpr int kClasses = 5;
inline int border_class(int64_t i, int64_t n) {
  return i < kMaxOffset ? static_cast<int>(i)
                        : (i >= n - kMaxOffset ? static_cast<int>(kClasses - n + i) : kMaxOffset);
}

template <typename T>
struct Plan {
  // merged taps, by c_out and kind 0 first: those of c_out are [first[c], first[c + 1]), its
  // kind 0 ones [first[c], mid[c])
  std::vector<Tap<T>> taps;
  std::vector<int> first, mid;
  int max_taps = 0;              // most taps of one c_out
  std::vector<T> coef;           // per tap
  std::vector<int64_t> delta;    // per tap: offset of its neighbour row from the row, unfolded
  std::vector<int64_t> inner;    // per tap: element k of an inner row reads k + inner (from
                                 // channel 0 of the row): c_in * S + delta + last offset
  // per tap, the border elements e of a row along the last axis (k < lo: e = k; k >= hi:
  // e = lo + k - hi): k + the last offset folded, index and sign
  std::vector<int64_t> edge_j;   // [tap][4]
  std::vector<T> edge_s;         // [tap][4]
  // the same for inner rows, all kind 0 taps of c_out merged: reads (offset from channel 0 of
  // the row, weight) [edge_first[4 c + e], edge_first[4 c + e + 1])
  std::vector<int> edge_first;
  std::vector<int64_t> edge_off;
  std::vector<T> edge_w;
  std::vector<Tap<T>> weighted;  // kind 1 and 2 (their self-coupling depends on the weights)
  std::vector<T> self;           // [class combination][C][C]: L_vv of the kind 0 taps
};

template <typename T>
Plan<T> make_plan(const std::vector<Tap<double>>& raw, const Shape& s, bool has_weights) {
  const int D = s.D;
  const std::vector<Tap<double>> merged = host::merge_taps(raw, D, has_weights);
  Plan<T> p;
  p.first.assign(s.C + 1, 0);
  p.mid.assign(s.C, 0);
  std::vector<Tap<T>> plain;  // kind 0
  const int64_t lo = std::min<int64_t>(kMaxOffset, s.N), hi = std::max(lo, s.N - kMaxOffset);
  for (const auto& m : merged) {
    Tap<T> t;
    t.c_out = m.c_out;
    t.c_in = m.c_in;
    t.kind = m.kind;
    t.coef = static_cast<T>(m.coef);
    int64_t delta = 0;
    for (int d = 0; d < D; ++d) {
      t.off[d] = m.off[d];
      t.bound[d] = m.bound[d];
      if (d < D - 1) delta += t.off[d] * s.ss[d];
    }
    p.taps.push_back(t);
    p.coef.push_back(t.coef);
    p.delta.push_back(delta);
    p.inner.push_back(t.c_in * s.S + delta + t.off[D - 1]);
    p.first[t.c_out + 1]++;
    if (t.kind == 0) p.mid[t.c_out]++;
    for (int64_t e = 0; e < 4; ++e) {
      const int64_t kk = e < lo ? e : hi + e - lo;
      int sg = 0;
      int64_t j = 0;
      if (kk < s.N) j = t.off[D - 1] ? fold_index(kk + t.off[D - 1], s.N, t.bound[D - 1], sg)
                                     : (sg = 1, kk);
      p.edge_j.push_back(j);
      p.edge_s.push_back(T(sg));
    }
    (t.kind == 0 ? plain : p.weighted).push_back(t);
  }
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
  bool generic;  // every point through regsolve.h (NI_JIT_REGSOLVE_GENERIC=1)

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
// channel 0 of the row, of the source of element 0 (roff) and of element k at k + offs.
template <typename T>
struct Scratch {
  std::vector<int64_t> roff, offs;
  std::vector<T> cs;    // coefficient times the row's sign
  std::vector<int> ti;  // 4 * tap index (edge tables)
  std::vector<T> row;   // a row of partial sums (strided sums)
  Scratch(int n, int64_t len) : roff(n), offs(n), cs(n), ti(n), row(len) {}
};

// o[m] += sum_t cs[t] * base[offs[t] + m * st] (m < cnt), plain loops: the strided case
template <typename T>
void sum_taps_strided(T* o, int64_t cnt, int64_t st, const T* base, const int64_t* offs,
                      const T* cs, int n) {
  for (int t = 0; t < n; ++t) {
    const T* p = base + offs[t];
    const T c = cs[t];
    for (int64_t m = 0; m < cnt; ++m) o[m] += c * p[m * st];
  }
}

#if defined(__GNUC__)
#define NJ_RS_VECTOR 1
// The same for st == 1: chunks of U vectors of B bytes held in registers while every tap is
// added (one load per tap and element; o is read and written once). The remainder is one more
// chunk that overlaps the previous one, computed from zero, of which only the new elements are
// added (U independent sums rather than a latency-bound single one). U = 8, or 4 or 1 for
// shorter rows.
template <int B, int U, typename T>
__attribute__((always_inline)) inline void sum_chunks(T* o, int64_t cnt, const T* base,
                                                      const int64_t* offs, const T* cs, int n) {
  typedef T V __attribute__((vector_size(B)));
  typedef T VU __attribute__((vector_size(B), aligned(sizeof(T)), may_alias));  // in memory
  constexpr int64_t L = B / sizeof(T), W = U * L;
  auto at = [](const T* p) -> const VU& { return *reinterpret_cast<const VU*>(p); };
  for (int64_t m = 0; m < cnt; m += W) {
    const bool last = m + W > cnt;
    const int64_t from = last ? cnt - W : m;
    V a[U];
    for (int u = 0; u < U; ++u) a[u] = last ? V{} : at(o + m + u * L);
    for (int t = 0; t < n; ++t) {
      const T* p = base + offs[t] + from;
      const T c = cs[t];
      for (int u = 0; u < U; ++u) a[u] += c * at(p + u * L);
    }
    if (!last) {
      for (int u = 0; u < U; ++u) *reinterpret_cast<VU*>(o + m + u * L) = a[u];
      continue;
    }
    T buf[W];
    for (int u = 0; u < U; ++u) *reinterpret_cast<VU*>(buf + u * L) = a[u];
    for (int64_t q = m; q < cnt; ++q) o[q] += buf[q - from];
  }
}

template <int B, typename T>
__attribute__((always_inline)) inline void sum_taps_vec(T* o, int64_t cnt, const T* base,
                                                        const int64_t* offs, const T* cs, int n) {
  constexpr int64_t L = B / sizeof(T);
  if (cnt >= 8 * L) return sum_chunks<B, 8>(o, cnt, base, offs, cs, n);
  if (cnt >= 4 * L) return sum_chunks<B, 4>(o, cnt, base, offs, cs, n);
  if (cnt >= L) return sum_chunks<B, 1>(o, cnt, base, offs, cs, n);
  for (int t = 0; t < n; ++t)
    for (int64_t q = 0; q < cnt; ++q) o[q] += cs[t] * base[offs[t] + q];
}

#define NJ_RS_SUM_ARGS(T) T *o, int64_t cnt, const T *base, const int64_t *offs, const T *cs, int n
void sum_taps_v(NJ_RS_SUM_ARGS(float)) { sum_taps_vec<16>(o, cnt, base, offs, cs, n); }
void sum_taps_v(NJ_RS_SUM_ARGS(double)) { sum_taps_vec<16>(o, cnt, base, offs, cs, n); }
#if defined(__x86_64__)
#define NJ_RS_AVX2 1
// Compiled for AVX2 (chosen at run time when the CPU has it; NI_JIT_DISABLE_AVX2=1 disables)
__attribute__((target("avx2"))) void sum_taps_avx2(NJ_RS_SUM_ARGS(float)) {
  sum_taps_vec<32>(o, cnt, base, offs, cs, n);
}
__attribute__((target("avx2"))) void sum_taps_avx2(NJ_RS_SUM_ARGS(double)) {
  sum_taps_vec<32>(o, cnt, base, offs, cs, n);
}
#endif
#endif

bool use_avx2() {
#if defined(NJ_RS_AVX2)
  static const bool cpu = __builtin_cpu_supports("avx2");
  const char* env = std::getenv("NI_JIT_DISABLE_AVX2");
  return cpu && !(env && *env && *env != '0');
#else
  return false;
#endif
}

// o[m] += sum_t cs[t] * base[offs[t] + m * st] (m < cnt). A small stride (relax) sums the
// whole span in tmp (st times the work, but in vectors) and picks every st-th element.
template <typename T>
void sum_taps(T* o, int64_t cnt, int64_t st, const T* base, const int64_t* offs, const T* cs,
              int n, bool avx2, T* tmp) {
#if defined(NJ_RS_VECTOR)
  auto unit = [&](T* dst, int64_t len) {
#if defined(NJ_RS_AVX2)
    if (avx2) return sum_taps_avx2(dst, len, base, offs, cs, n);
#endif
    sum_taps_v(dst, len, base, offs, cs, n);
  };
  if (st == 1) return unit(o, cnt);
  if (st * static_cast<int64_t>(sizeof(T)) <= 16) {
    const int64_t span = (cnt - 1) * st + 1;
    std::fill(tmp, tmp + span, T(0));
    unit(tmp, span);
    for (int64_t m = 0; m < cnt; ++m) o[m] += tmp[m * st];
    return;
  }
#endif
  (void)avx2;
  (void)tmp;
  sum_taps_strided(o, cnt, st, base, offs, cs, n);
}

// sum of f(j), j0 <= j < j1, in four partial sums (not one latency-bound chain)
template <typename F>
inline auto dot4(int j0, int j1, F&& f) -> decltype(f(0)) {
  using T = decltype(f(0));
  T a0 = T(0), a1 = T(0), a2 = T(0), a3 = T(0);
  int j = j0;
  for (; j + 4 <= j1; j += 4) {
    a0 += f(j);
    a1 += f(j + 1);
    a2 += f(j + 2);
    a3 += f(j + 3);
  }
  for (; j < j1; ++j) a0 += f(j);
  return (a0 + a1) + (a2 + a3);
}

// o[m] = (L x + H x)[c_out] at elements k = k0 + m * st (m < M) of the row of batch b at
// non-last indices ridx, whose first element has spatial offset soff.
template <typename T, bool UNIT>
void eval_row(const Op<T>& op, int64_t b, const int64_t* ridx, int64_t soff, int c_out,
              int64_t k0, int64_t st, int64_t M, T* NJ_RS_RESTRICT o, Scratch<T>& sc) {
  const Shape& s = op.s;
  const Plan<T>& P = op.P;
  const int D = s.D;
  const int64_t S = s.S, N = s.N;
  const T* xs = op.x + b * s.C * S + soff;  // the row, channel 0 (channel c at + c * S)
  const T* xr = xs + c_out * S + k0;         // x[c_out] at element k0 (then q = m * st)
  const T* wc = op.w ? op.w + (b * op.wc + (op.wc == 1 ? 0 : c_out)) * S : nullptr;
  const T* wr = wc ? wc + soff + k0 : nullptr;  // its weights
  // interior elements m in [m0, m1), k in [lo, hi): no tap folds along the last axis
  const int64_t lo = std::min<int64_t>(kMaxOffset, N), hi = std::max(lo, N - kMaxOffset);
  const int64_t m1 = hi <= k0 ? 0 : std::min(M, (hi - k0 + st - 1) / st);
  const int64_t m0 = k0 >= lo ? 0 : std::min(m1, (lo - k0 + st - 1) / st);
  const int64_t cnt = m1 - m0;
  auto each = [&](int64_t from, int64_t to, auto&& f) {
    for (int64_t m = from; m < to; ++m) f(m, UNIT ? m : m * st);
  };
  auto edges = [&](auto&& f) {  // border elements: f(m, k, e)
    for (int64_t m = 0; m < m0; ++m) f(m, k0 + m * st, k0 + m * st);
    for (int64_t m = m1; m < M; ++m) f(m, k0 + m * st, lo + k0 + m * st - hi);
  };
  for (int64_t m = 0; m < M; ++m) o[m] = T(0);
  // the Hessian and kind 2 taps fold nowhere: every element at once
  if (op.h) {
    const T* hb = op.h + b * op.K * S + soff + k0;
    if (op.K == 1 || op.K == s.C) {
      const T* hr = hb + (op.K == 1 ? 0 : c_out) * S;
      each(0, M, [&](int64_t m, int64_t q) { o[m] += hr[q] * xr[q]; });
    } else {
      for (int64_t c = 0; c < s.C; ++c) {
        const T* hr = hb + regsolve::packed_index(c_out, c, s.C) * S;
        const T* xc = xs + c * S + k0;
        each(0, M, [&](int64_t m, int64_t q) { o[m] += hr[q] * xc[q]; });
      }
    }
  }
  const bool inner = op.inner_row(ridx);
  // the neighbour row of tap t: offset from the row and sign (the non-last axes folded)
  auto neighbour = [&](int t, int& sg) {
    sg = 1;
    if (inner) return P.delta[t];
    const Tap<T>& tap = P.taps[t];
    int64_t nrow = 0;
    for (int d = 0; d + 1 < D; ++d) {
      int sd = 1;
      nrow += s.ss[d] *
              (tap.off[d] ? fold_index(ridx[d] + tap.off[d], s.g.n[d], tap.bound[d], sd) : ridx[d]);
      sg *= sd;
    }
    return nrow - soff;
  };
  // kind 1 and 2
  for (int t = P.mid[c_out]; t < P.first[c_out + 1]; ++t) {
    const Tap<T>& tap = P.taps[t];
    const T coef = tap.coef;
    if (tap.kind == 2) {
      const T* xc = xs + tap.c_in * S + k0;
      each(0, M, [&](int64_t m, int64_t q) { o[m] += coef * wr[q] * xc[q]; });
      continue;
    }
    // kind 1: coef * omega * (x_i - s x_n), omega = (w_i + w~_n) / 2, w~_n = w_i where s = 0
    int sg;
    const int64_t nrow = neighbour(t, sg);
    if (!sg) {
      each(0, M, [&](int64_t m, int64_t q) { o[m] += coef * wr[q] * xr[q]; });
      continue;
    }
    const T half = T(0.5) * coef;
    const T* xn = xs + c_out * S + nrow;  // the neighbour row, element 0
    const T* wn = wc + soff + nrow;
    const int64_t* ej = P.edge_j.data() + 4 * t;
    const T* es = P.edge_s.data() + 4 * t;
    edges([&](int64_t m, int64_t k, int64_t e) {
      const T sgn = T(sg) * es[e], wi = wr[k - k0];
      o[m] += sgn != T(0) ? half * (wi + wn[ej[e]]) * (xr[k - k0] - sgn * xn[ej[e]])
                          : coef * wi * xr[k - k0];
    });
    const T sgn = T(sg);
    const int64_t sh = nrow + tap.off[D - 1];  // element k reads k + sh (interior)
    each(m0, m1, [&](int64_t m, int64_t q) {
      o[m] += half * (wr[q] + wr[q + sh]) * (xr[q] - sgn * xr[q + sh]);
    });
  }
  // kind 0: the interior as sums of shifted rows, then the edges
  const int f = P.first[c_out], n = P.mid[c_out] - f;
  const T* base = xs + k0 + m0 * st;  // element k0 + m0 * st, channel 0
  if (inner) {  // precomputed offsets and edge reads
    if (cnt > 0) sum_taps(o + m0, cnt, st, base, P.inner.data() + f, P.coef.data() + f, n, op.avx2,
                           sc.row.data());
    edges([&](int64_t m, int64_t, int64_t e) {
      o[m] += dot4(P.edge_first[4 * c_out + e], P.edge_first[4 * c_out + e + 1],
                   [&](int j) { return P.edge_w[j] * xs[P.edge_off[j]]; });
    });
    return;
  }
  int n0 = 0;
  for (int t = f; t < f + n; ++t) {
    int sg;
    const int64_t nrow = neighbour(t, sg);
    if (!sg) continue;
    sc.roff[n0] = P.taps[t].c_in * S + nrow;
    sc.offs[n0] = sc.roff[n0] + P.taps[t].off[D - 1];
    sc.cs[n0] = P.coef[t] * T(sg);
    sc.ti[n0++] = 4 * t;
  }
  if (cnt > 0)
    sum_taps(o + m0, cnt, st, base, sc.offs.data(), sc.cs.data(), n0, op.avx2, sc.row.data());
  edges([&](int64_t m, int64_t, int64_t e) {
    o[m] += dot4(0, n0, [&](int t) {
      const int k = sc.ti[t] + static_cast<int>(e);
      return sc.cs[t] * P.edge_s[k] * xs[sc.roff[t] + P.edge_j[k]];
    });
  });
}

// Every element through the generic per-point function (NI_JIT_REGSOLVE_GENERIC=1: a check of
// regsolve.h, which the CUDA kernels share).
template <typename T>
void eval_row_generic(const Op<T>& op, int64_t b, const int64_t* ridx, int c_out, int64_t k0,
                      int64_t st, int64_t M, T* o) {
  const Shape& s = op.s;
  const Plan<T>& P = op.P;
  int64_t i[kMaxDim];
  for (int d = 0; d + 1 < s.D; ++d) i[d] = ridx[d];
  const View<T> xv = op.view(op.x, s.C, b), wv = op.view(op.w, op.wc, b),
                hv = op.view(op.h, op.K, b);
  const int t0 = P.first[c_out], nt = P.first[c_out + 1] - t0;
  for (int64_t m = 0; m < M; ++m) {
    i[s.D - 1] = k0 + m * st;
    o[m] = regsolve::point_value(P.taps.data() + t0, nt, c_out, i, s.g, xv, wv, hv, s.C);
  }
}

bool generic_requested() {
  const char* env = std::getenv("NI_JIT_REGSOLVE_GENERIC");
  return env && *env && *env != '0';
}

// index of row rr (0 <= rr < R) along the non-last axes
inline void row_index(const Shape& s, int64_t rr, int64_t* ridx) {
  for (int d = s.D - 2; d >= 0; --d) {
    ridx[d] = rr % s.g.n[d];
    rr /= s.g.n[d];
  }
}

template <typename T>
void matvec_kernel(const Op<T>& op, T* out) {
  const Shape& s = op.s;
  const int64_t rows = s.B * s.C * s.R;
  const int64_t work = s.N * (op.P.max_taps + 1);
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / work), [&](int64_t r0, int64_t r1) {
    Scratch<T> sc(op.P.max_taps, s.N);
    int64_t ridx[kMaxDim];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t rr = r % s.R, bc = r / s.R, b = bc / s.C;
      const int c = static_cast<int>(bc % s.C);
      row_index(s, rr, ridx);
      if (op.generic)
        eval_row_generic<T>(op, b, ridx, c, 0, 1, s.N, out + r * s.N);
      else
        eval_row<T, true>(op, b, ridx, rr * s.N, c, 0, 1, s.N, out + r * s.N, sc);
    }
  });
}

// The voxel solves of a row, at elements k = k0 + m * st (m < M): with v the right-hand side
// minus the residual's part (if any), v <- (H_v + L_vv)^-1 v, written to out (or added to).
// rhs and out point at channel 0, element k0 of the row (element m at [c * S + m * st]);
// res [C][M]. NC: the channel count when it is a small constant (unrolled), else 0.
template <typename T, int NC>
void solve_row(const Op<T>& op, int64_t b, int64_t* i, int64_t soff, int64_t k0, int64_t st,
               int64_t M, const T* rhs, const T* res, T* out, bool add, T* work) {
  const Shape& s = op.s;
  const Plan<T>& P = op.P;
  const int64_t C = NC ? NC : s.C, S = s.S, K = op.K;
  const int D = s.D;
  int64_t comb = 0;  // border classes of the non-last indices
  for (int d = 0; d + 1 < D; ++d) comb = comb * kClasses + border_class(i[d], s.g.n[d]);
  const T* self = P.self.data() + comb * kClasses * C * C;
  const T* hb = op.h ? op.h + b * K * S + soff + k0 : nullptr;
  const View<T> wv = op.view(op.w, op.wc, b);
  T a_fixed[NC ? NC * NC : 1], v_fixed[NC ? NC : 1];
  T* A = NC ? a_fixed : work;
  T* v = NC ? v_fixed : work + C * C;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t k = k0 + m * st, q = m * st;
    if (op.generic) {  // regsolve.h alone
      i[D - 1] = k;
      std::fill(A, A + C * C, T(0));
      regsolve::add_hess_block(op.view(op.h, K, b), C, soff + k, A);
      regsolve::add_self_block(P.taps.data(), static_cast<int>(P.taps.size()), i, s.g, wv, C, A);
      for (int64_t c = 0; c < C; ++c) v[c] = rhs[c * S + q] - (res ? res[c * M + m] : T(0));
      regsolve::chol_solve(A, C, v);
      for (int64_t c = 0; c < C; ++c) out[c * S + q] = add ? out[c * S + q] + v[c] : v[c];
      continue;
    }
    const T* a0 = self + border_class(k, s.N) * C * C;
    for (int64_t j = 0; j < C * C; ++j) A[j] = a0[j];
    if (hb) {
      if (K == 1) {
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hb[q];
      } else if (K == C) {
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hb[c * S + q];
      } else {  // the diagonal, then the upper triangle row by row into the lower one (read
                // by the solve)
        const T* hq = hb + q;
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hq[c * S];
        for (int64_t r = 0, j = C; r < C; ++r)
          for (int64_t c = r + 1; c < C; ++c, ++j) A[c * C + r] += hq[j * S];
      }
    }
    if (!P.weighted.empty()) {
      i[D - 1] = k;
      regsolve::add_self_block(P.weighted.data(), static_cast<int>(P.weighted.size()), i, s.g,
                               wv, C, A);
    }
    for (int64_t c = 0; c < C; ++c) v[c] = rhs[c * S + q] - (res ? res[c * M + m] : T(0));
    regsolve::chol_solve(A, C, v);
    for (int64_t c = 0; c < C; ++c) out[c * S + q] = add ? out[c * S + q] + v[c] : v[c];
  }
}

template <typename T>
void solve_row_any(const Op<T>& op, int64_t b, int64_t* i, int64_t soff, int64_t k0, int64_t st,
                   int64_t M, const T* rhs, const T* res, T* out, bool add, T* work) {
  switch (op.s.C) {
    case 1: return solve_row<T, 1>(op, b, i, soff, k0, st, M, rhs, res, out, add, work);
    case 2: return solve_row<T, 2>(op, b, i, soff, k0, st, M, rhs, res, out, add, work);
    case 3: return solve_row<T, 3>(op, b, i, soff, k0, st, M, rhs, res, out, add, work);
    default: return solve_row<T, 0>(op, b, i, soff, k0, st, M, rhs, res, out, add, work);
  }
}

template <typename T>
void precond_kernel(const Op<T>& op, const T* r, T* z) {
  const Shape& s = op.s;
  const int64_t C = s.C, N = s.N, S = s.S;
  at::parallel_for(0, s.B * s.R, std::max<int64_t>(1, 4096 / (N * C)), [&](int64_t r0, int64_t r1) {
    std::vector<T> work(C * C + C);
    int64_t i[kMaxDim];
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t b = row / s.R, rr = row % s.R, o = b * C * S + rr * N;
      row_index(s, rr, i);
      solve_row_any<T>(op, b, i, rr * N, 0, 1, N, r + o, nullptr, z + o, false, work.data());
    }
  });
}

// One colour of a Gauss-Seidel sweep: every voxel i with i_d = col_d (mod per_d), at once.
template <typename T>
void relax_colour(const Op<T>& op, T* x, const T* g, const int64_t* col, const int64_t* per) {
  const Shape& s = op.s;
  const int D = s.D;
  const int64_t C = s.C, S = s.S;
  int64_t cnt[kMaxDim], rows = s.B;  // voxels of the colour along each axis
  for (int d = 0; d < D; ++d) {
    cnt[d] = col[d] < s.g.n[d] ? (s.g.n[d] - col[d] + per[d] - 1) / per[d] : 0;
    if (d + 1 < D) rows *= cnt[d];
  }
  const int64_t M = cnt[D - 1], k0 = col[D - 1], st = per[D - 1];
  if (rows == 0 || M == 0) return;
  const int64_t work = M * C * (op.P.max_taps + C + 1);
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / work), [&](int64_t r0, int64_t r1) {
    Scratch<T> sc(op.P.max_taps, s.N);
    std::vector<T> res(C * M), wk(C * C + C);
    int64_t i[kMaxDim];
    for (int64_t row = r0; row < r1; ++row) {
      int64_t q = row, soff = 0;
      for (int d = D - 2; d >= 0; --d) {
        i[d] = col[d] + (q % cnt[d]) * per[d];
        q /= cnt[d];
        soff += i[d] * s.ss[d];
      }
      const int64_t b = q, o = b * C * S + soff + k0;
      // residuals first: no tap couples two voxels of a colour, so the updates cannot race
      for (int c = 0; c < C; ++c) {
        T* rc = res.data() + c * M;
        if (op.generic)
          eval_row_generic<T>(op, b, i, c, k0, st, M, rc);
        else if (st == 1)
          eval_row<T, true>(op, b, i, soff, c, k0, 1, M, rc, sc);
        else
          eval_row<T, false>(op, b, i, soff, c, k0, st, M, rc, sc);
      }
      solve_row_any<T>(op, b, i, soff, k0, st, M, g + o, res.data(), x + o, true, wk.data());
    }
  });
}

// ------------------------------------------------------------------------- the ops
using host::Inputs;

Inputs prepare(const at::Tensor& x, const std::optional<at::Tensor>& hessian,
               const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps,
               const std::string& op, const char* xname) {
  return host::prepare<CpuDevice>(x, hessian, weights, taps, op, xname);
}

template <typename T>
const T* ptr(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

template <typename T>
Op<T> make_op(const Plan<T>& P, const Inputs& in, const at::Tensor& x) {
  return Op<T>{P, in.s, x.const_data_ptr<T>(), ptr<T>(in.w), in.w.defined() ? in.w.size(1) : 0,
               ptr<T>(in.h), in.h.defined() ? in.h.size(1) : 0, use_avx2(), generic_requested()};
}

at::Tensor reg_matvec(const at::Tensor& x_, const std::optional<at::Tensor>& hessian,
                      const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps) {
  const Inputs in = prepare(x_, hessian, weights, taps, "reg_matvec", "x");
  const at::Tensor x = x_.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reg_matvec", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, in.s, in.w.defined());
    matvec_kernel<scalar_t>(make_op<scalar_t>(P, in, x), out.data_ptr<scalar_t>());
  });
  return out;
}

at::Tensor reg_precond(const at::Tensor& r_, const std::optional<at::Tensor>& hessian,
                       const std::optional<at::Tensor>& weights, at::ArrayRef<double> taps) {
  const Inputs in = prepare(r_, hessian, weights, taps, "reg_precond", "r");
  const at::Tensor r = r_.contiguous();
  at::Tensor z = at::empty(r.sizes(), r.options());
  if (z.numel() == 0) return z;
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "reg_precond", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, in.s, in.w.defined());
    precond_kernel<scalar_t>(make_op<scalar_t>(P, in, r), r.const_data_ptr<scalar_t>(),
                             z.data_ptr<scalar_t>());
  });
  return z;
}

void reg_relax_(at::Tensor& x, const std::optional<at::Tensor>& hessian,
                const at::Tensor& gradient_, const std::optional<at::Tensor>& weights,
                at::ArrayRef<double> taps, at::IntArrayRef period, int64_t nb_iter) {
  const std::string op = "reg_relax_";
  const Inputs in = prepare(x, hessian, weights, taps, op, "x");
  const Shape& s = in.s;
  if (!host::check_relax<CpuDevice>(in, x, gradient_, period, nb_iter, op)) return;
  const at::Tensor g = gradient_.contiguous();
  at::Tensor xc = x.is_contiguous() ? x : x.contiguous();  // work on a copy, copied back
  int64_t per[kMaxDim] = {1, 1, 1}, ncol = 1;
  for (int d = 0; d < s.D; ++d) {
    per[d] = period[d];
    ncol *= per[d];
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reg_relax_", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, s, in.w.defined());
    const Op<scalar_t> o = make_op<scalar_t>(P, in, xc);
    scalar_t* xp = xc.data_ptr<scalar_t>();
    for (int64_t it = 0; it < nb_iter; ++it)
      for (int64_t c = 0; c < ncol; ++c) {  // colours in lexicographic order
        int64_t col[kMaxDim], q = c;
        for (int d = s.D - 1; d >= 0; --d) {
          col[d] = q % per[d];
          q /= per[d];
        }
        relax_colour<scalar_t>(o, xp, g.const_data_ptr<scalar_t>(), col, per);
      }
  });
  if (!xc.is_same(x)) x.copy_(xc);
}

}  // namespace

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("reg_matvec", &reg_matvec);
  m.impl("reg_precond", &reg_precond);
  m.impl("reg_relax_", &reg_relax_);
}

}  // namespace nitorch_jit
