// reg_matvec and reg_precond on CPU, row by row: a row's interior as shifted sums of source
// rows (lanes.h), its first and last two elements through the fold tables; the generic
// per-point path (NI_JIT_REGSOLVE_GENERIC=1, regsolve/point.h); the voxel solves of a row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/tuning.h"
#include "regsolve/cpu/lanes.h"
#include "regsolve/cpu/plan.h"

namespace nitorch_jit {
namespace regsolve {
namespace cpu {

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
// regsolve/point.h, which the CUDA kernels share).
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

inline bool generic_requested() { return tuning::get(tuning::kRegsolveGeneric) != 0; }

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
    if (op.generic) {  // regsolve/point.h alone
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

}  // namespace cpu
}  // namespace regsolve
}  // namespace nitorch_jit
