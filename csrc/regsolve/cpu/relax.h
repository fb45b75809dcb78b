// reg_relax_ on CPU: the residue-ordered layout of the rows, a colour's rows evaluated at
// that colour's elements only, and the dependency-respecting waves in which the colours'
// tasks run (plan.h says why).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "regsolve/cpu/matvec.h"
#include "regsolve/cpu/plan.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {

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
  nitorch_jit::host::parallel_for(0, nt, 1, [&](int64_t, int64_t) {
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

}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit
