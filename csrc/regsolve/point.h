// Per-point math of module "regsolve" (docs/regsolve-spec.md): taps, the operator at one
// voxel, its self-coupling block L_vv, packed Hessians and the voxel solve. Torch-free and
// host/device portable (NJ_HD): no allocation, no exceptions; work arrays come from the caller.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bounds.h"
#include "core/common.h"

namespace nitorch_jit {
namespace regsolve {

constexpr int kMaxDim = 3;
constexpr int kMaxOffset = 2;  // |offset| of a tap, per axis

// One tap of the flat list: c_out, c_in, kind, coef, off_0..off_{D-1}, bound_0..bound_{D-1}.
// kind 0: plain; 1: weighted difference (c_in == c_out); 2: weighted identity (offsets 0).
template <typename T>
struct Tap {
  int c_out = 0, c_in = 0, kind = 0;
  T coef = T(0);
  int off[kMaxDim] = {0, 0, 0};
  int bound[kMaxDim] = {0, 0, 0};
};

NJ_HD NJ_INLINE int tap_length(int D) { return 4 + 2 * D; }

// Decodes the tap starting at t (already validated by the host).
template <typename T>
NJ_HD inline Tap<T> decode_tap(const double* t, int D) {
  Tap<T> tap;
  tap.c_out = static_cast<int>(t[0]);
  tap.c_in = static_cast<int>(t[1]);
  tap.kind = static_cast<int>(t[2]);
  tap.coef = static_cast<T>(t[3]);
  for (int d = 0; d < D; ++d) {
    tap.off[d] = static_cast<int>(t[4 + d]);
    tap.bound[d] = static_cast<int>(t[4 + D + d]);
  }
  return tap;
}

// Spatial geometry: D dims of sizes n.
struct Grid {
  int D = 1;
  int64_t n[kMaxDim] = {1, 1, 1};
};

// A [nc, *S] view of one batch: element (c, i) at p[c * sc + sum_d i_d * s[d]]. p may be null
// (an absent tensor: weights read 1, Hessian 0).
template <typename T>
struct View {
  const T* p = nullptr;
  int64_t nc = 0, sc = 0;
  int64_t s[kMaxDim] = {0, 0, 0};

  NJ_HD NJ_INLINE int64_t offset(const int64_t* i, int D) const {
    int64_t o = 0;
    for (int d = 0; d < D; ++d) o += i[d] * s[d];
    return o;
  }
};

// The tap's neighbour of voxel i: per axis, i_d + off_d folded through bound_d. Writes the
// folded index to j; returns the product of the axis signs (0: the tap reads zero).
template <typename T>
NJ_HD inline int tap_fold(const Tap<T>& tap, const int64_t* i, const Grid& g, int64_t* j) {
  int s = 1;
  for (int d = 0; d < g.D; ++d) {
    if (tap.off[d] == 0) {  // in range: the identity for every bound
      j[d] = i[d];
      continue;
    }
    int sd;
    j[d] = fold_index(i[d] + tap.off[d], g.n[d], tap.bound[d], sd);
    s *= sd;
  }
  return s;
}

NJ_HD NJ_INLINE bool same_voxel(const int64_t* i, const int64_t* j, int D) {
  for (int d = 0; d < D; ++d)
    if (i[d] != j[d]) return false;
  return true;
}

// ------------------------------------------------------------------------- packed Hessians
// K = 1 (one value for all channels), C (diagonal) or C(C+1)/2 (the diagonal, then the strict
// upper triangle row by row).
NJ_HD NJ_INLINE int64_t packed_sym_size(int64_t C) { return C * (C + 1) / 2; }

// Position of H[a, b] in the symmetric packing.
NJ_HD NJ_INLINE int64_t packed_index(int64_t a, int64_t b, int64_t C) {
  if (a == b) return a;
  if (a > b) {
    const int64_t t = a;
    a = b;
    b = t;
  }
  return C + a * (C - 1) - a * (a - 1) / 2 + (b - a - 1);
}

// H[a, b] at the element offset o of a Hessian view with K = h.nc values per voxel.
template <typename T>
NJ_HD inline T hess_entry(const View<T>& h, int64_t C, int64_t a, int64_t b, int64_t o) {
  if (h.nc == C || h.nc == 1) return a == b ? h.p[(h.nc == 1 ? 0 : a) * h.sc + o] : T(0);
  return h.p[packed_index(a, b, C) * h.sc + o];
}

// ------------------------------------------------------------------------- the operator
// Weight at element offset o for output channel c (channel c of w, or its only one).
template <typename T>
NJ_HD NJ_INLINE T weight_at(const View<T>& w, int c, int64_t o) {
  return w.p ? w.p[(w.nc == 1 ? 0 : c) * w.sc + o] : T(1);
}

// (L x + H x)[c_out, i] with the taps [taps, taps + ntaps) (those of other outputs skipped).
template <typename T>
NJ_HD inline T point_value(const Tap<T>* taps, int ntaps, int c_out, const int64_t* i,
                           const Grid& g, const View<T>& x, const View<T>& w, const View<T>& h,
                           int64_t C) {
  const int64_t xo = x.offset(i, g.D);
  T acc = T(0);
  if (h.p) {
    const int64_t ho = h.offset(i, g.D);
    if (h.nc == 1 || h.nc == C)
      acc = hess_entry(h, C, c_out, c_out, ho) * x.p[c_out * x.sc + xo];
    else
      for (int64_t c = 0; c < C; ++c) acc += hess_entry(h, C, c_out, c, ho) * x.p[c * x.sc + xo];
  }
  const int64_t wo = w.offset(i, g.D);
  for (int t = 0; t < ntaps; ++t) {
    const Tap<T>& tap = taps[t];
    if (tap.c_out != c_out) continue;
    if (tap.kind == 2) {
      acc += tap.coef * weight_at(w, c_out, wo) * x.p[tap.c_in * x.sc + xo];
      continue;
    }
    int64_t j[kMaxDim];
    const int s = tap_fold(tap, i, g, j);
    const T xn = s ? T(s) * x.p[tap.c_in * x.sc + x.offset(j, g.D)] : T(0);
    if (tap.kind == 0) {
      acc += tap.coef * xn;
    } else {  // weighted difference; the neighbour's weight is the voxel's own where s == 0
      const T wi = weight_at(w, c_out, wo);
      const T wn = s ? weight_at(w, c_out, w.offset(j, g.D)) : wi;
      acc += tap.coef * T(0.5) * (wi + wn) * (x.p[c_out * x.sc + xo] - xn);
    }
  }
  return acc;
}

// A += the self-coupling of voxel i by the taps: A[c_out * C + c_in], row-major C x C. Exact:
// a kind 0 tap counts where every axis folds back onto i (with its sign); a kind 1 tap
// counts coef * omega * (1 - s) where it folds back onto i, coef * omega elsewhere.
template <typename T>
NJ_HD inline void add_self_block(const Tap<T>* taps, int ntaps, const int64_t* i, const Grid& g,
                                 const View<T>& w, int64_t C, T* A) {
  const int64_t wo = w.offset(i, g.D);
  for (int t = 0; t < ntaps; ++t) {
    const Tap<T>& tap = taps[t];
    T* a = A + tap.c_out * C + tap.c_in;
    if (tap.kind == 2) {
      *a += tap.coef * weight_at(w, tap.c_out, wo);
      continue;
    }
    if (tap.kind == 0) {  // most taps leave i along some axis: test that before folding all
      int s = 1;
      for (int d = 0; d < g.D && s; ++d) {
        if (tap.off[d] == 0) continue;
        int sd;
        const int64_t jd = fold_index(i[d] + tap.off[d], g.n[d], tap.bound[d], sd);
        s = jd == i[d] ? s * sd : 0;
      }
      *a += tap.coef * T(s);
      continue;
    }
    int64_t j[kMaxDim];
    const int s = tap_fold(tap, i, g, j);
    const T wi = weight_at(w, tap.c_out, wo);
    const T wn = s ? weight_at(w, tap.c_out, w.offset(j, g.D)) : wi;
    const int back = (s && same_voxel(i, j, g.D)) ? s : 0;
    *a += tap.coef * T(0.5) * (wi + wn) * T(1 - back);
  }
}

// A += H_v at element offset o (both triangles).
template <typename T>
NJ_HD inline void add_hess_block(const View<T>& h, int64_t C, int64_t o, T* A) {
  if (!h.p) return;
  if (h.nc == 1 || h.nc == C) {
    for (int64_t c = 0; c < C; ++c) A[c * C + c] += h.p[(h.nc == 1 ? 0 : c) * h.sc + o];
    return;
  }
  for (int64_t a = 0; a < C; ++a)
    for (int64_t b = 0; b < C; ++b) A[a * C + b] += h.p[packed_index(a, b, C) * h.sc + o];
}

// ------------------------------------------------------------------------- the voxel solve
// A <- its Cholesky factor, for a symmetric A (row-major C x C; its lower triangle is read and
// overwritten, with the reciprocals of the pivots on the diagonal). A pivot <= 0 (a singular
// block) drops its component: its column is zeroed (reciprocal 0), so that chol_subst gives 0
// there and the other components solve the rest. With C a constant the loops unroll.
template <typename T>
NJ_HD NJ_INLINE void chol_factor(T* A, int64_t C) {
  for (int64_t j = 0; j < C; ++j) {
    T d = A[j * C + j];
    for (int64_t k = 0; k < j; ++k) d -= A[j * C + k] * A[j * C + k];
    if (!(d > T(0))) {  // also NaN
      for (int64_t r = j; r < C; ++r) A[r * C + j] = T(0);
      continue;
    }
    const T inv = T(1) / std::sqrt(d);
    A[j * C + j] = inv;
    for (int64_t r = j + 1; r < C; ++r) {
      T v = A[r * C + j];
      for (int64_t k = 0; k < j; ++k) v -= A[r * C + k] * A[j * C + k];
      A[r * C + j] = v * inv;
    }
  }
}

// z <- A^-1 z with A the factor of chol_factor (a factor can serve many right-hand sides).
template <typename T>
NJ_HD NJ_INLINE void chol_subst(const T* A, int64_t C, T* z) {
  for (int64_t r = 0; r < C; ++r) {  // L y = z
    const T inv = A[r * C + r];
    T v = z[r];
    for (int64_t k = 0; k < r; ++k) v -= A[r * C + k] * z[k];
    z[r] = inv != T(0) ? v * inv : T(0);
  }
  for (int64_t r = C - 1; r >= 0; --r) {  // L^T z = y
    const T inv = A[r * C + r];
    T v = z[r];
    for (int64_t k = r + 1; k < C; ++k) v -= A[k * C + r] * z[k];
    z[r] = inv != T(0) ? v * inv : T(0);
  }
}

// z <- A^-1 z (A overwritten by its factor).
template <typename T>
NJ_HD NJ_INLINE void chol_solve(T* A, int64_t C, T* z) {
  chol_factor(A, C);
  chol_subst(A, C, z);
}

}  // namespace regsolve
}  // namespace nitorch_jit
