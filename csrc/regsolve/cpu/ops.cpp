// CPU kernels of module "regsolve" (docs/regsolve-spec.md): reg_matvec, reg_precond, reg_relax_.
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
// NI_JIT_REGSOLVE_GENERIC=1 evaluates every point with nitorch_jit/regsolve.h instead, the
// per-point code the CUDA kernels share (a test of it). The argument checks, the tap list's
// decoding and merging and the colour check of reg_relax_ are regsolve_host.h, shared with the
// CUDA ops.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/host_output.h"
#include "core/parallel.h"
#include "regsolve/point.h"
#include "core/tuning.h"
#include "regsolve/host.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

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
// channel 0 of the row, of the source of element 0 (roff) and of the element at pos(k) (offs).
template <typename T>
struct Scratch {
  std::vector<int64_t> roff, offs;
  std::vector<T> cs;    // coefficient times the row's sign
  std::vector<int> ti;  // 4 * tap index (edge tables)
  explicit Scratch(int n) : roff(n), offs(n), cs(n), ti(n) {}
};

#if defined(__GNUC__)
#define NJ_RS_VECTOR 1
#define NJ_RS_INLINE __attribute__((always_inline)) inline
// Vectors of B bytes: V in registers, VU for unaligned memory.
template <int B, typename T>
struct Vec {
  typedef T V __attribute__((vector_size(B)));
  typedef T VU __attribute__((vector_size(B), aligned(sizeof(T)), may_alias));
  static constexpr int L = B / sizeof(T);
  // by reference: a vector returned by value changes the ABI where AVX is not enabled
  static NJ_RS_INLINE const VU& load(const T* p) { return *reinterpret_cast<const VU*>(p); }
  static NJ_RS_INLINE void store(T* p, const V& v) { *reinterpret_cast<VU*>(p) = v; }
};

// o[m] += sum_t cs[t] * base[offs[t] + m] (m < cnt): chunks of U vectors held in registers
// while every tap is added (one load per tap and element; o is read and written once; U
// independent sums rather than a latency-bound single one). The last chunk is moved back to
// end at cnt (cnt >= U L): computed from zero, only its elements past the previous chunks are
// added.
template <int B, int U, typename T>
NJ_RS_INLINE void sum_chunks(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs,
                             int n) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int64_t L = W::L, UL = U * L;
  for (int64_t m = 0; m < cnt; m += UL) {
    const bool last = m + UL > cnt;
    const int64_t from = last ? cnt - UL : m;
    V a[U];
    for (int u = 0; u < U; ++u) a[u] = last ? V{} : W::load(o + m + u * L);
    for (int t = 0; t < n; ++t) {
      const T* p = base + offs[t] + from;
      const T c = cs[t];
      for (int u = 0; u < U; ++u) a[u] += c * W::load(p + u * L);
    }
    if (!last) {
      for (int u = 0; u < U; ++u) W::store(o + m + u * L, a[u]);
      continue;
    }
    T buf[UL];
    for (int u = 0; u < U; ++u) W::store(buf + u * L, a[u]);
    for (int64_t q = m; q < cnt; ++q) o[q] += buf[q - from];
  }
}

// The same for L <= cnt < 8 L (short rows: relax's colours) in one chunk of ceil(cnt / L)
// vectors, the last one moved back to end at cnt where it would pass it.
template <int B, int U, typename T>
NJ_RS_INLINE void sum_short(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs,
                            int n) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int64_t L = W::L, want = (U - 1) * L;
  const int64_t last = cnt - L;  // <= want
  V a[U];
  for (int u = 0; u + 1 < U; ++u) a[u] = W::load(o + u * L);
  a[U - 1] = V{};
  for (int t = 0; t < n; ++t) {
    const T* p = base + offs[t];
    const T c = cs[t];
    for (int u = 0; u + 1 < U; ++u) a[u] += c * W::load(p + u * L);
    a[U - 1] += c * W::load(p + last);
  }
  for (int u = 0; u + 1 < U; ++u) W::store(o + u * L, a[u]);
  T buf[L];
  W::store(buf, a[U - 1]);
  for (int64_t q = want; q < cnt; ++q) o[q] += buf[q - last];
}

template <int B, typename T>
NJ_RS_INLINE void sum_taps_vec(T* o, int64_t cnt, const T* base, const int64_t* offs,
                               const T* cs, int n) {
  constexpr int64_t L = Vec<B, T>::L;
  if (cnt >= 8 * L) return sum_chunks<B, 8>(o, cnt, base, offs, cs, n);
  switch ((cnt + L - 1) / L) {
    case 0:
    case 1:
      break;
#define NJ_RS_SHORT(U) \
  case U:              \
    return sum_short<B, U>(o, cnt, base, offs, cs, n);
    NJ_RS_SHORT(2)
    NJ_RS_SHORT(3)
    NJ_RS_SHORT(4)
    NJ_RS_SHORT(5)
    NJ_RS_SHORT(6)
    NJ_RS_SHORT(7)
    NJ_RS_SHORT(8)
#undef NJ_RS_SHORT
  }
  if (cnt >= L) return sum_chunks<B, 1>(o, cnt, base, offs, cs, n);
  for (int t = 0; t < n; ++t)
    for (int64_t q = 0; q < cnt; ++q) o[q] += cs[t] * base[offs[t] + q];
}

// Lane-wise sqrt (the lanes passed are > 0). By pointer: a vector argument of a function
// compiled for AVX would change the ABI; not always_inline: the AVX2 one inlines into the
// AVX2 builds only.
template <int B, typename T>
struct VecSqrt {
  static inline void run(typename Vec<B, T>::V* v) {
    for (int l = 0; l < Vec<B, T>::L; ++l) (*v)[l] = std::sqrt((*v)[l]);
  }
};
#if defined(__x86_64__)
template <>
struct VecSqrt<16, float> {
  static inline void run(Vec<16, float>::V* v) { *v = (Vec<16, float>::V)_mm_sqrt_ps((__m128)*v); }
};
template <>
struct VecSqrt<16, double> {
  static inline void run(Vec<16, double>::V* v) {
    *v = (Vec<16, double>::V)_mm_sqrt_pd((__m128d)*v);
  }
};
template <>
struct VecSqrt<32, float> {
  __attribute__((target("avx2"))) static inline void run(Vec<32, float>::V* v) {
    *v = (Vec<32, float>::V)_mm256_sqrt_ps((__m256)*v);
  }
};
template <>
struct VecSqrt<32, double> {
  __attribute__((target("avx2"))) static inline void run(Vec<32, double>::V* v) {
    *v = (Vec<32, double>::V)_mm256_sqrt_pd((__m256d)*v);
  }
};
#endif

// Lower triangle of a C x C block, packed: (r, k), k <= r.
constexpr int tri(int r, int k) { return r * (r + 1) / 2 + k; }

// regsolve::chol_factor (FACT) and chol_subst on L voxels at once, one per lane: the same
// operations in the same order, the branches as selects. a: the lower triangle (tri), z the
// right-hand side, overwritten by the solution.
template <int B, int NC, bool FACT, typename T>
NJ_RS_INLINE void chol_lanes(typename Vec<B, T>::V* a, typename Vec<B, T>::V* z) {
  typedef typename Vec<B, T>::V V;
  const V zero = V{}, one = zero + T(1);
  if (FACT) {
    for (int j = 0; j < NC; ++j) {
      V d = a[tri(j, j)];
      for (int k = 0; k < j; ++k) d -= a[tri(j, k)] * a[tri(j, k)];
      const auto ok = d > zero;  // also NaN
      V root = ok ? d : one;
      VecSqrt<B, T>::run(&root);
      const V inv = ok ? one / root : zero;
      a[tri(j, j)] = inv;
      for (int r = j + 1; r < NC; ++r) {
        V v = a[tri(r, j)];
        for (int k = 0; k < j; ++k) v -= a[tri(r, k)] * a[tri(j, k)];
        a[tri(r, j)] = ok ? v * inv : zero;
      }
    }
  }
  for (int r = 0; r < NC; ++r) {
    const V inv = a[tri(r, r)];
    V v = z[r];
    for (int k = 0; k < r; ++k) v -= a[tri(r, k)] * z[k];
    z[r] = inv != zero ? v * inv : zero;
  }
  for (int r = NC - 1; r >= 0; --r) {
    const V inv = a[tri(r, r)];
    V v = z[r];
    for (int k = r + 1; k < NC; ++k) v -= a[tri(k, r)] * z[k];
    z[r] = inv != zero ? v * inv : zero;
  }
}

// The voxel solves of elements [m0, m1) of a row, in lanes: vo[c * ldo + m] <- A_m^-1
// vi[c * ldi + m] (vo and vi apart), with A_m's lower triangle a[tri(r, k)][m] (FACT:
// factorised here), or else its factor. A last partial vector is moved back to end at m1 (its
// first elements solved twice, the same way), or with fewer than L elements padded with
// zeros (solution 0).
template <int B, int NC, bool FACT, typename T>
NJ_RS_INLINE void solve_lanes(const T* const* a, const T* vi, int64_t ldi, T* vo, int64_t ldo,
                              int64_t m0, int64_t m1) {
  using W = Vec<B, T>;
  typedef typename W::V V;
  constexpr int L = W::L, NT = NC * (NC + 1) / 2;
  for (int64_t m = m0; m < m1; m += L) {
    V A[NT], Z[NC];
    if (m + L > m1 && m1 - m0 >= L) m = m1 - L;
    const int64_t n = std::min<int64_t>(L, m1 - m);
    if (n == L) {
      for (int j = 0; j < NT; ++j) A[j] = W::load(a[j] + m);
      for (int c = 0; c < NC; ++c) Z[c] = W::load(vi + c * ldi + m);
    } else {
      for (int c = 0; c < NC; ++c) Z[c] = V{};
      for (int64_t l = 0; l < n; ++l)
        for (int c = 0; c < NC; ++c) Z[c][l] = vi[c * ldi + m + l];
      for (int j = 0; j < NT; ++j) {
        A[j] = V{};
        for (int64_t l = 0; l < n; ++l) A[j][l] = a[j][m + l];
      }
    }
    chol_lanes<B, NC, FACT, T>(A, Z);
    if (n == L) {
      for (int c = 0; c < NC; ++c) W::store(vo + c * ldo + m, Z[c]);
    } else {
      for (int64_t l = 0; l < n; ++l)
        for (int c = 0; c < NC; ++c) vo[c * ldo + m + l] = Z[c][l];
    }
  }
}

#define NJ_RS_SUM_ARGS(T) T *o, int64_t cnt, const T *base, const int64_t *offs, const T *cs, int n
#define NJ_RS_SUM_PASS o, cnt, base, offs, cs, n
#define NJ_RS_SOLVE_ARGS(T)                                                             \
  const T *const *a, const T *vi, int64_t ldi, T *vo, int64_t ldo, int64_t m0, int64_t m1, \
      int nc, bool fact
#define NJ_RS_SOLVE_PASS a, vi, ldi, vo, ldo, m0, m1

// every channel count 1..3, with and without the factorisation
template <int B, typename T>
NJ_RS_INLINE void solve_lanes_any(NJ_RS_SOLVE_ARGS(T)) {
  switch (nc * 2 + fact) {
    case 2: return solve_lanes<B, 1, false>(NJ_RS_SOLVE_PASS);
    case 3: return solve_lanes<B, 1, true>(NJ_RS_SOLVE_PASS);
    case 4: return solve_lanes<B, 2, false>(NJ_RS_SOLVE_PASS);
    case 5: return solve_lanes<B, 2, true>(NJ_RS_SOLVE_PASS);
    case 6: return solve_lanes<B, 3, false>(NJ_RS_SOLVE_PASS);
    default: return solve_lanes<B, 3, true>(NJ_RS_SOLVE_PASS);
  }
}

void sum_taps_v(NJ_RS_SUM_ARGS(float)) { sum_taps_vec<16>(NJ_RS_SUM_PASS); }
void sum_taps_v(NJ_RS_SUM_ARGS(double)) { sum_taps_vec<16>(NJ_RS_SUM_PASS); }
void solve_lanes_v(NJ_RS_SOLVE_ARGS(float)) { solve_lanes_any<16>(NJ_RS_SOLVE_PASS, nc, fact); }
void solve_lanes_v(NJ_RS_SOLVE_ARGS(double)) { solve_lanes_any<16>(NJ_RS_SOLVE_PASS, nc, fact); }
#if defined(__x86_64__)
#define NJ_RS_AVX2 1
// Compiled for AVX2 (chosen at run time when the CPU has it; NI_JIT_DISABLE_AVX2=1 disables)
__attribute__((target("avx2"))) void sum_taps_avx2(NJ_RS_SUM_ARGS(float)) {
  sum_taps_vec<32>(NJ_RS_SUM_PASS);
}
__attribute__((target("avx2"))) void sum_taps_avx2(NJ_RS_SUM_ARGS(double)) {
  sum_taps_vec<32>(NJ_RS_SUM_PASS);
}
__attribute__((target("avx2"))) void solve_lanes_avx2(NJ_RS_SOLVE_ARGS(float)) {
  solve_lanes_any<32>(NJ_RS_SOLVE_PASS, nc, fact);
}
__attribute__((target("avx2"))) void solve_lanes_avx2(NJ_RS_SOLVE_ARGS(double)) {
  solve_lanes_any<32>(NJ_RS_SOLVE_PASS, nc, fact);
}
#endif
#endif

bool use_avx2() {
#if defined(NJ_RS_AVX2)
  static const bool cpu = __builtin_cpu_supports("avx2");
  return cpu && tuning::get(tuning::kAvx2);
#else
  return false;
#endif
}

// o[m] += sum_t cs[t] * base[offs[t] + m] (m < cnt)
template <typename T>
void sum_taps(T* o, int64_t cnt, const T* base, const int64_t* offs, const T* cs, int n,
              bool avx2) {
#if defined(NJ_RS_AVX2)
  if (avx2) return sum_taps_avx2(o, cnt, base, offs, cs, n);
#endif
  (void)avx2;
#if defined(NJ_RS_VECTOR)
  sum_taps_v(o, cnt, base, offs, cs, n);
#else
  for (int t = 0; t < n; ++t)
    for (int64_t q = 0; q < cnt; ++q) o[q] += cs[t] * base[offs[t] + q];
#endif
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

// o[m] = (L x + H x)[c_out] at the elements k = k0 + m * st (m < M; k0 < st = P.st) of the row
// of batch b at non-last indices ridx, whose first element has spatial offset soff; x, w and h
// are stored in the plan's layout (element k at pos(k), i.e. element m at start[k0] + m).
template <typename T>
void eval_row(const Op<T>& op, int64_t b, const int64_t* ridx, int64_t soff, int c_out,
              int64_t k0, int64_t M, T* NJ_RS_RESTRICT o, Scratch<T>& sc) {
  const Shape& s = op.s;
  const Plan<T>& P = op.P;
  const int D = s.D;
  const int64_t S = s.S, st = P.st, p0 = P.start[k0];
  const int64_t* shift = P.shift.data() + k0 * (2 * kMaxOffset + 1) + kMaxOffset;
  const T* xs = op.x + b * s.C * S + soff;  // the row, channel 0 (channel c at + c * S)
  const T* xr = xs + c_out * S + p0;         // x[c_out] at element m = 0
  const T* wc = op.w ? op.w + (b * op.wc + (op.wc == 1 ? 0 : c_out)) * S : nullptr;
  const T* wr = wc ? wc + soff + p0 : nullptr;  // its weights
  const RowSpan sp = P.span(s.N, k0, st, M);
  const int64_t m0 = sp.m0, m1 = sp.m1, cnt = m1 - m0;
  auto edges = [&](auto&& f) { sp.edges(k0, st, M, f); };
  for (int64_t m = 0; m < M; ++m) o[m] = T(0);
  // the Hessian and kind 2 taps fold nowhere: every element at once
  if (op.h) {
    const T* hb = op.h + b * op.K * S + soff + p0;
    if (op.K == 1 || op.K == s.C) {
      const T* hr = hb + (op.K == 1 ? 0 : c_out) * S;
      for (int64_t m = 0; m < M; ++m) o[m] += hr[m] * xr[m];
    } else {
      for (int64_t c = 0; c < s.C; ++c) {
        const T* hr = hb + regsolve::packed_index(c_out, c, s.C) * S;
        const T* xc = xs + c * S + p0;
        for (int64_t m = 0; m < M; ++m) o[m] += hr[m] * xc[m];
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
      const T* xc = xs + tap.c_in * S + p0;
      for (int64_t m = 0; m < M; ++m) o[m] += coef * wr[m] * xc[m];
      continue;
    }
    // kind 1: coef * omega * (x_i - s x_n), omega = (w_i + w~_n) / 2, w~_n = w_i where s = 0
    int sg;
    const int64_t nrow = neighbour(t, sg);
    if (!sg) {
      for (int64_t m = 0; m < M; ++m) o[m] += coef * wr[m] * xr[m];
      continue;
    }
    const T half = T(0.5) * coef;
    const T* xn = xs + c_out * S + nrow;  // the neighbour row, position 0
    const T* wn = wc + soff + nrow;
    const int64_t* ej = P.edge_j.data() + 4 * t;
    const T* es = P.edge_s.data() + 4 * t;
    edges([&](int64_t m, int64_t, int64_t e) {
      const T sgn = T(sg) * es[e], wi = wr[m];
      o[m] += sgn != T(0) ? half * (wi + wn[ej[e]]) * (xr[m] - sgn * xn[ej[e]])
                          : coef * wi * xr[m];
    });
    const T sgn = T(sg);
    const int64_t sh = nrow + shift[tap.off[D - 1]];  // element m reads m + sh (interior)
    for (int64_t m = m0; m < m1; ++m)
      o[m] += half * (wr[m] + wr[m + sh]) * (xr[m] - sgn * xr[m + sh]);
  }
  // kind 0: the interior as sums of shifted rows, then the edges
  const int f = P.first[c_out], n = P.mid[c_out] - f;
  const T* base = xs + p0 + m0;  // element m0, channel 0
  if (inner) {  // precomputed offsets and edge reads
    if (cnt > 0)
      sum_taps(o + m0, cnt, base, P.inner.data() + k0 * P.taps.size() + f, P.coef.data() + f, n,
               op.avx2);
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
    sc.offs[n0] = sc.roff[n0] + shift[P.taps[t].off[D - 1]];
    sc.cs[n0] = P.coef[t] * T(sg);
    sc.ti[n0++] = 4 * t;
  }
  if (cnt > 0) sum_taps(o + m0, cnt, base, sc.offs.data(), sc.cs.data(), n0, op.avx2);
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

bool generic_requested() { return tuning::get(tuning::kRegsolveGeneric) != 0; }

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
  const int64_t work = s.N * (op.P.max_taps + 1);  // a row: every tap of every element
  parallel::parallel_for(0, rows, work, [&](int64_t r0, int64_t r1) {
    Scratch<T> sc(op.P.max_taps);
    int64_t ridx[kMaxDim];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t rr = r % s.R, bc = r / s.R, b = bc / s.C;
      const int c = static_cast<int>(bc % s.C);
      row_index(s, rr, ridx);
      if (op.generic)
        eval_row_generic<T>(op, b, ridx, c, 0, 1, s.N, out + r * s.N);
      else
        eval_row<T>(op, b, ridx, rr * s.N, c, 0, s.N, out + r * s.N, sc);
    }
  });
}

// The voxel solves of a row at elements k = k0 + m * st (m < M): vo[c * ldo + m] <- (H_v +
// L_vv)^-1 vi[c * ldi + m] (vo and vi apart). H value j of element m at hm[j * hcs + m] (hm null:
// no Hessian); the weights in the plain layout. work: C * C + C, and for the lanes, C (C + 1)
// / 2 rows of M. NC: the channel count when it is a small constant (unrolled, in vector
// lanes), else 0.
template <typename T, int NC>
void solve_row(const Op<T>& op, int64_t b, int64_t* i, int64_t soff, int64_t k0, int64_t st,
               int64_t M, const T* hm, int64_t hcs, const T* vi, int64_t ldi, T* vo,
               int64_t ldo, T* work) {
  const Shape& s = op.s;
  const Plan<T>& P = op.P;
  const int64_t C = NC ? NC : s.C, K = op.K;
  const int D = s.D;
  int64_t comb = 0;  // border classes of the non-last indices
  for (int d = 0; d + 1 < D; ++d) comb = comb * kClasses + border_class(i[d], s.g.n[d]);
  const T* self = P.self.data() + comb * kClasses * C * C;
  const T* hb = op.h ? hm : nullptr;
  const View<T> wv = op.view(op.w, op.wc, b);
  T* A = work;
  T* z = work + C * C;
  // A = H_v + L_vv at element m (row-major, the lower triangle read by the solves)
  auto block = [&](int64_t m) {
    const int64_t k = k0 + m * st;
    const T* a0 = self + border_class(k, s.N) * C * C;
    for (int64_t j = 0; j < C * C; ++j) A[j] = a0[j];
    if (hb) {
      if (K == 1) {
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hb[m];
      } else if (K == C) {
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hb[c * hcs + m];
      } else {  // the diagonal, then the upper triangle row by row into the lower one
        const T* hq = hb + m;
        for (int64_t c = 0; c < C; ++c) A[c * C + c] += hq[c * hcs];
        for (int64_t r = 0, j = C; r < C; ++r)
          for (int64_t c = r + 1; c < C; ++c, ++j) A[c * C + r] += hq[j * hcs];
      }
    }
    if (!P.weighted.empty()) {
      i[D - 1] = k;
      regsolve::add_self_block(P.weighted.data(), static_cast<int>(P.weighted.size()), i, s.g,
                               wv, C, A);
    }
  };
#if defined(NJ_RS_VECTOR)
  if (NC && !op.generic) {
    constexpr int NT = NC * (NC + 1) / 2;
    const T* ai[NT > 0 ? NT : 1];  // the lower triangles, one row of M per entry
    T* rows = work + C * C + C;
    for (int r = 0; r < NC; ++r)
      for (int k = 0; k <= r; ++k) ai[tri(r, k)] = rows + tri(r, k) * M;
    auto put = [&](int64_t m) {  // A of element m into the rows
      block(m);
      for (int r = 0; r < NC; ++r)
        for (int k = 0; k <= r; ++k) rows[tri(r, k) * M + m] = A[r * C + k];
    };
    auto lanes = [&](int64_t m0, int64_t m1, bool fact) {
      if (m1 <= m0) return;
#if defined(NJ_RS_AVX2)
      if (op.avx2) return solve_lanes_avx2(ai, vi, ldi, vo, ldo, m0, m1, NC, fact);
#endif
      solve_lanes_v(ai, vi, ldi, vo, ldo, m0, m1, NC, fact);
    };
    if (!hb && P.weighted.empty() && !P.frows.empty() && st == P.st) {
      // no Hessian, no weights: the voxels of a class share one block, factorised once per
      // call, laid out along the row
      for (int j = 0; j < NT; ++j) ai[j] = P.frows.data() + (comb * NT + j) * s.N + P.start[k0];
      return lanes(0, M, false);
    }
    const RowSpan sp = P.span(s.N, k0, st, M);
    for (int64_t m = 0; m < sp.m0; ++m) put(m);  // the border classes along the last axis
    for (int64_t m = sp.m1; m < M; ++m) put(m);
    if (!P.weighted.empty()) {
      for (int64_t m = sp.m0; m < sp.m1; ++m) put(m);
    } else {  // the interior: L_vv + H in plain loops
      const T* a0 = self + 2 * C * C;
      for (int r = 0; r < NC; ++r)
        for (int k = 0; k <= r; ++k) {
          T* ar = rows + tri(r, k) * M;
          const T c0 = a0[r * C + k];
          const T* hr = K == 1 ? (r == k ? hb : nullptr)
                        : K == C ? (r == k ? hb + r * hcs : nullptr)
                                 : hb + regsolve::packed_index(r, k, C) * hcs;
          if (hr)
            for (int64_t m = sp.m0; m < sp.m1; ++m) ar[m] = c0 + hr[m];
          else
            for (int64_t m = sp.m0; m < sp.m1; ++m) ar[m] = c0;
        }
    }
    return lanes(0, M, true);
  }
#endif
  for (int64_t m = 0; m < M; ++m) {  // voxel by voxel
    if (op.generic) {  // regsolve.h alone
      i[D - 1] = k0 + m * st;
      std::fill(A, A + C * C, T(0));
      regsolve::add_hess_block(op.view(op.h, K, b), C, soff + k0 + m * st, A);
      regsolve::add_self_block(P.taps.data(), static_cast<int>(P.taps.size()), i, s.g, wv, C, A);
    } else {
      block(m);
    }
    for (int64_t c = 0; c < C; ++c) z[c] = vi[c * ldi + m];
    regsolve::chol_solve(A, C, z);
    for (int64_t c = 0; c < C; ++c) vo[c * ldo + m] = z[c];
  }
}

template <typename T>
void solve_row_any(const Op<T>& op, int64_t b, int64_t* i, int64_t soff, int64_t k0, int64_t st,
                   int64_t M, const T* hm, int64_t hcs, const T* vi, int64_t ldi, T* vo,
                   int64_t ldo, T* work) {
  switch (op.s.C) {
#define NJ_RS_ROW(NC) solve_row<T, NC>(op, b, i, soff, k0, st, M, hm, hcs, vi, ldi, vo, ldo, work)
    case 1: return NJ_RS_ROW(1);
    case 2: return NJ_RS_ROW(2);
    case 3: return NJ_RS_ROW(3);
    default: return NJ_RS_ROW(0);
#undef NJ_RS_ROW
  }
}

// work of solve_row for rows of ldv elements
inline int64_t solve_work(int64_t C, int64_t ldv) { return C * C + C + C * (C + 1) / 2 * ldv; }

template <typename T>
void precond_kernel(const Op<T>& op, const T* r, T* z) {
  const Shape& s = op.s;
  const int64_t C = s.C, N = s.N, S = s.S;
  // a row: the self block's taps and a C x C solve per element, every channel
  const int64_t work = N * C * (op.P.max_taps + C + 1);
  parallel::parallel_for(0, s.B * s.R, work, [&](int64_t r0, int64_t r1) {
    std::vector<T> work(solve_work(C, N));
    int64_t i[kMaxDim];
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t b = row / s.R, rr = row % s.R, o = b * C * S + rr * N;
      row_index(s, rr, i);
      const T* hm = op.h ? op.h + b * op.K * S + rr * N : nullptr;
      solve_row_any<T>(op, b, i, rr * N, 0, 1, N, hm, S, r + o, S, z + o, S, work.data());
    }
  });
}

// ------------------------------------------------------------------------- relaxation
// Rows of [rows, N] between the plain layout and the plan's (to: plain -> plan's), in place.
template <typename T>
void relayout(const Plan<T>& P, T* data, int64_t rows, int64_t N, bool to) {
  parallel::parallel_for(0, rows, 2 * N,  // a row: a copy out and a strided copy back
                         [&](int64_t r0, int64_t r1) {
    std::vector<T> tmp(N);
    for (int64_t row = r0; row < r1; ++row) {
      T* a = data + row * N;
      std::copy(a, a + N, tmp.data());
      for (int64_t r = 0; r < P.st && r < N; ++r) {
        const int64_t p = P.start[r];
        if (to)
          for (int64_t k = r, m = p; k < N; k += P.st, ++m) a[m] = tmp[k];
        else
          for (int64_t k = r, m = p; k < N; k += P.st, ++m) a[k] = tmp[m];
      }
    }
  });
}

// The arguments of one reg_relax_ call. lx: x (xw) and the weights in the plan's layout, no
// Hessian: the rows of L x. op: the plain layout (the Hessian, the weights of the solves;
// generic: also x, and L x + H x).
template <typename T>
struct Relax {
  const Op<T>& lx;
  const Op<T>& op;
  T* xw;
  const T* g;
  const int64_t* per;
  int64_t count(int64_t k0) const {  // elements of residue k0 along the last axis
    const int64_t N = op.s.N, st = per[op.s.D - 1];
    return k0 < N ? (N - k0 + st - 1) / st : 0;
  }
};

template <typename T>
struct RelaxScratch {
  Scratch<T> sc;
  std::vector<T> v, dx, wk, hs, hx, gs;
  RelaxScratch(const Op<T>& op, int64_t M)
      : sc(op.P.max_taps), v(op.s.C * M), dx(op.s.C * M), wk(solve_work(op.s.C, M)),
        hs(op.K * M), hx(M), gs(M) {}
};

// The lines of g and H that relax_row reads for the row (b, i) and residue k0: they are read
// strided (runs too short for the hardware to foresee), the first time from memory.
template <typename T>
void relax_prefetch(const Relax<T>& R, int64_t b, const int64_t* i, int64_t k0) {
#if defined(__GNUC__)
  const Op<T>& op = R.op;
  const Shape& s = op.s;
  const int64_t M = R.count(k0), C = s.C, K = op.K, S = s.S, st = R.per[s.D - 1];
  if (M == 0 || op.generic) return;
  int64_t soff = 0;
  for (int d = 0; d + 1 < s.D; ++d) soff += i[d] * s.ss[d];
  const T* gn = R.g + b * C * S + soff + k0;
  const T* hn = op.h ? op.h + b * K * S + soff + k0 : nullptr;
  const int64_t span = (M - 1) * st + 1, line = 64 / sizeof(T);
  for (int64_t e = 0; e < span + line - 1; e += line) {
    const int64_t q = std::min(e, span - 1);
    for (int64_t c = 0; c < C; ++c) __builtin_prefetch(gn + c * S + q);
    for (int64_t c = 0; hn && c < K; ++c) __builtin_prefetch(hn + c * S + q);
  }
#else
  (void)R, (void)b, (void)i, (void)k0;
#endif
}

// dst[m] = src[m * st] (m < M); the small strides with a constant one (vectorised loads).
template <int ST, typename T>
inline void gather_st(T* NJ_RS_RESTRICT dst, const T* NJ_RS_RESTRICT src, int64_t M) {
  for (int64_t m = 0; m < M; ++m) dst[m] = src[m * ST];
}
template <typename T>
void gather(T* dst, const T* src, int64_t M, int64_t st) {
  switch (st) {
    case 1: return gather_st<1>(dst, src, M);
    case 2: return gather_st<2>(dst, src, M);
    case 3: return gather_st<3>(dst, src, M);
    case 4: return gather_st<4>(dst, src, M);
    default:
      for (int64_t m = 0; m < M; ++m) dst[m] = src[m * st];
  }
}

// The Gauss-Seidel update of the voxels of one row (batch b, non-last indices i) whose last
// index is k0 mod the period: x += (H + L_vv)^-1 (g - H x - L x) there.
template <typename T>
void relax_row(const Relax<T>& R, int64_t b, int64_t* i, int64_t k0, RelaxScratch<T>& rs) {
  const Op<T>& op = R.op;
  const Shape& s = op.s;
  const int D = s.D;
  const int64_t C = s.C, S = s.S, K = op.K, st = R.per[D - 1], M = R.count(k0);
  if (M == 0) return;
  int64_t soff = 0;
  for (int d = 0; d + 1 < D; ++d) soff += i[d] * s.ss[d];
  const int64_t ob = b * C * S + soff;
  // element m of the row in xw: at q0 + m * qs
  const int64_t q0 = op.generic ? k0 : R.lx.P.start[k0], qs = op.generic ? st : 1;
  const T* gr = R.g + ob + k0;  // element m at [c * S + m * st]
  T* xr = R.xw + ob + q0;       // element m at [c * S + m * qs]
  T* v = rs.v.data();
  const T* hm = nullptr;        // H of element m at [j * M + m]
  if (op.generic) {
    for (int c = 0; c < C; ++c) eval_row_generic<T>(op, b, i, c, k0, st, M, v + c * M);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t m = 0; m < M; ++m) v[c * M + m] = gr[c * S + m * st] - v[c * M + m];
  } else {
    for (int c = 0; c < C; ++c) eval_row<T>(R.lx, b, i, soff, c, k0, M, v + c * M, rs.sc);
    if (op.h) {  // the colour's H, gathered once for H x and the solves
      const T* hr = op.h + b * K * S + soff + k0;
      for (int64_t j = 0; j < K; ++j) gather(&rs.hs[j * M], hr + j * S, M, st);
      hm = rs.hs.data();
    }
    T* hx = rs.hx.data();
    T* gc = rs.gs.data();
    for (int64_t c = 0; c < C; ++c) {
      T* vc = v + c * M;
      gather(gc, gr + c * S, M, st);
      if (!hm) {
        for (int64_t m = 0; m < M; ++m) vc[m] = gc[m] - vc[m];
        continue;
      }
      // (H x)[c] in the order of eval_row
      if (K == 1 || K == C) {
        const T* hc = hm + (K == 1 ? 0 : c) * M;
        const T* xc = xr + c * S;
        for (int64_t m = 0; m < M; ++m) hx[m] = hc[m] * xc[m];
      } else {
        std::fill(hx, hx + M, T(0));
        for (int64_t e = 0; e < C; ++e) {
          const T* hc = hm + regsolve::packed_index(c, e, C) * M;
          const T* xe = xr + e * S;
          for (int64_t m = 0; m < M; ++m) hx[m] += hc[m] * xe[m];
        }
      }
      for (int64_t m = 0; m < M; ++m) vc[m] = gc[m] - (hx[m] + vc[m]);
    }
  }
  T* dx = rs.dx.data();
  solve_row_any<T>(op, b, i, soff, k0, st, M, hm, M, v, M, dx, M, rs.wk.data());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < M; ++m) xr[c * S + m * qs] += dx[c * M + m];
}

// Positions along axis d that a voxel at position p reads (through the taps' folds) or that
// read it, p excluded.
template <typename T>
std::vector<std::vector<int64_t>> axis_neighbours(const Plan<T>& P, const Shape& s, int d) {
  const int64_t n = s.g.n[d];
  std::vector<std::vector<int64_t>> nb(n);
  std::vector<std::pair<int, int>> reads;  // (offset, bound)
  for (const auto& t : P.taps)
    if (t.off[d]) reads.emplace_back(t.off[d], t.bound[d]);
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  for (int64_t p = 0; p < n; ++p)
    for (const auto& r : reads) {
      int sg;
      const int64_t j = fold_index(p + r.first, n, r.second, sg);
      if (!sg || j == p) continue;
      nb[p].push_back(j);
      nb[j].push_back(p);
    }
  for (auto& v : nb) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  return nb;
}

// Gauss-Seidel by colours, reordered for the caches. Along an axis, position p has the tasks
// cols[p] (colour numbers, increasing; those of one colour at different positions are
// independent). A task must run after those of lower colours at the positions it reads or
// that read it (nb), and no other order matters: the wave runs each position's tasks as soon
// as they may, the lowest positions first, so that the data a task reads was read by the
// tasks just before (in cache), where colour by colour each colour reads the whole field.
// Returns (position, colour) in order. Never stuck: the lowest colour left is always ready.
inline std::vector<std::pair<int64_t, int64_t>> wave(
    const std::vector<std::vector<int64_t>>& nb, const std::vector<std::vector<int64_t>>& cols) {
  const int64_t n = static_cast<int64_t>(cols.size());
  const int64_t done = std::numeric_limits<int64_t>::max();
  std::vector<size_t> next(n, 0);
  std::vector<int64_t> pending;
  std::vector<std::pair<int64_t, int64_t>> order;
  auto colour = [&](int64_t p) { return next[p] < cols[p].size() ? cols[p][next[p]] : done; };
  auto ready = [&](int64_t p) {
    const int64_t c = colour(p);
    if (c == done) return false;
    for (int64_t q : nb[p])
      if (colour(q) < c) return false;
    return true;
  };
  for (int64_t front = 0; front <= n; ++front) {  // front == n: the rest
    if (front < n) pending.push_back(front);
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t q : pending)
        for (; ready(q); progress = true) order.emplace_back(q, cols[q][next[q]++]);
      pending.erase(std::remove_if(pending.begin(), pending.end(),
                                   [&](int64_t q) { return next[q] == cols[q].size(); }),
                    pending.end());
    }
  }
  return order;
}

// D >= 2: G iterations at once. Tasks are (plane along the first axis, colour), colours
// numbered across the iterations, ordered by wave(); the consecutive tasks of one plane form a
// run, the unit of work of a thread. A run waits for the runs before it on the planes it
// conflicts with (and its own), then does its rows in the order of a wave along the second
// axis (D = 3). Threads take the runs in order; a run only waits for earlier ones, all taken.
template <typename T>
void relax_waves(const Relax<T>& R, int64_t G) {
  const Op<T>& op = R.op;
  const Shape& s = op.s;
  const int D = s.D;
  const int64_t* per = R.per;
  const int64_t n0 = s.g.n[0], ncol1 = D == 3 ? per[1] * per[2] : per[1];
  const int64_t ncol = per[0] * ncol1;
  const auto nb0 = axis_neighbours(op.P, s, 0);
  std::vector<std::vector<int64_t>> cols(n0);
  for (int64_t p = 0; p < n0; ++p)
    for (int64_t it = 0; it < G; ++it)
      for (int64_t j = 0; j < ncol1; ++j) cols[p].push_back(it * ncol + (p % per[0]) * ncol1 + j);
  const auto order = wave(nb0, cols);
  struct Run {
    int64_t p, j0, len;            // plane, first colour (of the plane's ncol1), count
    size_t dep0, dep1;             // its waits: deps[dep0, dep1)
  };
  std::vector<Run> runs;
  std::vector<std::pair<int64_t, int64_t>> deps;  // (plane, runs done there before it)
  std::vector<int64_t> nruns(n0, 0);
  for (size_t t = 0; t < order.size();) {
    const int64_t p = order[t].first;
    size_t e = t;
    while (e < order.size() && order[e].first == p) ++e;
    Run r{p, order[t].second % ncol % ncol1, static_cast<int64_t>(e - t), deps.size(), 0};
    deps.emplace_back(p, nruns[p]);
    for (int64_t q : nb0[p]) deps.emplace_back(q, nruns[q]);
    r.dep1 = deps.size();
    runs.push_back(r);
    ++nruns[p];
    t = e;
  }
  // the rows of a run (D = 3): (row, colour within the run), by a wave along the second axis;
  // the same for every run of the same colours
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> rows;
  const auto nb1 = D == 3 ? axis_neighbours(op.P, s, 1) : std::vector<std::vector<int64_t>>();
  for (const Run& r : runs) {
    auto& list = rows[{r.j0, r.len}];
    if (!list.empty()) continue;
    if (D == 2) {
      for (int64_t c = 0; c < r.len; ++c) list.emplace_back(0, c);
      continue;
    }
    const int64_t n1 = s.g.n[1];
    std::vector<std::vector<int64_t>> rc(n1);
    for (int64_t c = 0; c < r.len; ++c) {
      const int64_t c1 = (r.j0 + c) % ncol1 / per[2];
      for (int64_t i1 = c1; i1 < n1; i1 += per[1]) rc[i1].push_back(c);
    }
    list = wave(nb1, rc);
  }
  // Threads take runs in order, but a ready run up to kAhead runs on before a waiting one
  // (the runs next in the wave mostly wait for each other). A thread waits only for a run it
  // took as the first not taken, whose own waits were all taken before: never stuck.
  constexpr size_t kAhead = 16;
  const size_t nr = runs.size();
  std::unique_ptr<std::atomic<int64_t>[]> done(new std::atomic<int64_t>[n0]);
  std::unique_ptr<std::atomic<bool>[]> taken(new std::atomic<bool>[nr]);
  for (int64_t p = 0; p < n0; ++p) done[p].store(0);
  for (size_t t = 0; t < nr; ++t) taken[t].store(false);
  std::atomic<size_t> head{0};  // runs before it are taken
  auto ready = [&](const Run& r) {
    for (size_t d = r.dep0; d < r.dep1; ++d)
      if (done[deps[d].first].load(std::memory_order_acquire) < deps[d].second) return false;
    return true;
  };
  auto take = [&]() -> size_t {  // nr when none is left
    for (;;) {
      size_t h = head.load();
      while (h < nr && taken[h].load()) ++h;
      if (h >= nr) return nr;
      size_t cur = head.load();  // advance head (monotonic)
      while (cur < h && !head.compare_exchange_weak(cur, h)) {
      }
      for (size_t t = h; t < std::min(nr, h + kAhead); ++t)
        if (!taken[t].load() && ready(runs[t]) && !taken[t].exchange(true)) return t;
      if (!taken[h].exchange(true)) return h;
    }
  };
  const int64_t M = R.count(0);
  // G sweeps, each a row of L x and a C x C solve per element (nt == 1: inline, in order)
  const int64_t nt =
      parallel::threads_for(s.B * s.S, G * s.C * (op.P.max_taps + s.C + 1));
  at::parallel_for(0, nt, 1, [&](int64_t, int64_t) {
    RelaxScratch<T> rs(op, M);
    int64_t i[kMaxDim] = {0, 0, 0};
    for (size_t t; (t = take()) < nr;) {
      const Run& r = runs[t];
      while (!ready(r)) std::this_thread::yield();
      const auto& list = rows.at({r.j0, r.len});
      i[0] = r.p;
      auto where = [&](size_t e, int64_t* idx) {  // indices of entry e; returns k0
        const int64_t j = (r.j0 + list[e].second) % ncol1;
        if (D == 3) idx[1] = list[e].first;
        return j % per[D - 1];
      };
      size_t ahead = 0;  // the next entry on another row (its g and H: prefetched)
      for (size_t e = 0; e < list.size(); ++e) {
        const int64_t k0 = where(e, i);
        int64_t inext[kMaxDim] = {r.p, 0, 0};
        if (ahead <= e) {
          for (ahead = e + 1; ahead < list.size() && list[ahead].first == list[e].first;) ++ahead;
          const int64_t k = ahead < list.size() ? where(ahead, inext) : -1;
          for (int64_t b = 0; k >= 0 && b < s.B; ++b) relax_prefetch(R, b, inext, k);
        }
        for (int64_t b = 0; b < s.B; ++b) relax_row(R, b, i, k0, rs);
      }
      done[r.p].fetch_add(1, std::memory_order_release);
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
  at::Tensor out = empty_output(x.sizes(), x.options());
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
  at::Tensor z = empty_output(r.sizes(), r.options());
  if (z.numel() == 0) return z;
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "reg_precond", [&] {
    const Plan<scalar_t> P = make_plan<scalar_t>(in.taps, in.s, in.w.defined(), 1, !in.h.defined());
    precond_kernel<scalar_t>(make_op<scalar_t>(P, in, r), r.const_data_ptr<scalar_t>(),
                             z.data_ptr<scalar_t>());
  });
  return z;
}

void reg_relax_(at::Tensor& x, const std::optional<at::Tensor>& hessian,
                const at::Tensor& gradient_, const std::optional<at::Tensor>& weights,
                at::ArrayRef<double> taps, at::IntArrayRef period, int64_t nb_iter) {
  const std::string op = "reg_relax_";
  Inputs in = prepare(x, hessian, weights, taps, op, "x");
  const Shape& s = in.s;
  if (!host::check_relax<CpuDevice>(in, x, gradient_, period, nb_iter, op)) return;
  at::Tensor xc = x.is_contiguous() ? x : x.contiguous();  // work on a copy, copied back
  // the inputs that share x's memory are read before the sweeps change it (x is also
  // reordered in place during the call)
  auto own = [&](const at::Tensor& t) { return t.defined() && t.is_alias_of(x) ? t.clone() : t; };
  const at::Tensor g = own(gradient_.contiguous());
  in.h = own(in.h);
  in.w = own(in.w);
  int64_t per[kMaxDim] = {1, 1, 1}, ncol = 1;
  for (int d = 0; d < s.D; ++d) {
    per[d] = period[d];
    ncol *= per[d];
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "reg_relax_", [&] {
    using T = scalar_t;
    const bool generic = generic_requested();
    // the layout of the rows of L x: by residue of the last index (generic: plain)
    const int64_t st = generic ? 1 : per[s.D - 1];
    const Plan<T> P = make_plan<T>(in.taps, s, in.w.defined(), st, !in.h.defined());
    const Op<T> o = make_op<T>(P, in, xc);
    // x in that layout in place (no new buffer: fresh pages cost more than the copies), the
    // weights in a copy
    at::Tensor ww = in.w;
    if (st > 1 && in.w.defined()) {
      ww = in.w.clone();
      relayout<T>(P, ww.data_ptr<T>(), ww.numel() / s.N, s.N, true);
    }
    if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, true);
    Op<T> lx = o;
    lx.w = ptr<T>(ww);
    lx.h = nullptr;
    lx.K = 0;
    const Relax<T> R{lx, o, xc.data_ptr<T>(), g.const_data_ptr<T>(), per};
    auto sweeps = [&] {
      if (s.D >= 2) {  // iterations in groups of at most 4, each group one pipelined wave
        const int64_t G = std::min<int64_t>(nb_iter, 4);
        for (int64_t it = 0; it + G <= nb_iter; it += G) relax_waves<T>(R, G);
        if (nb_iter % G) relax_waves<T>(R, nb_iter % G);
        return;
      }
      for (int64_t it = 0; it < nb_iter; ++it)  // a row per batch: colour by colour
        for (int64_t c = 0; c < ncol; ++c)
          parallel::parallel_for(0, s.B, s.S * s.C * (o.P.max_taps + s.C + 1),
                                 [&](int64_t b0, int64_t b1) {
            RelaxScratch<T> rs(o, R.count(0));
            int64_t i[kMaxDim] = {0, 0, 0};
            for (int64_t b = b0; b < b1; ++b) relax_row(R, b, i, c, rs);
          });
    };
    try {
      sweeps();
    } catch (...) {  // x back in its layout
      if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, false);
      throw;
    }
    if (st > 1) relayout<T>(P, xc.data_ptr<T>(), xc.numel() / s.N, s.N, false);
  });
  if (!xc.is_same(x)) x.copy_(xc);
}

}  // namespace

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("reg_matvec", &reg_matvec);
  m.impl("reg_precond", &reg_precond);
  m.impl("reg_relax_", &reg_relax_);
}

}  // namespace nitorch_jit
