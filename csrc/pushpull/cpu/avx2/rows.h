// The scaffold every AVX2 fast path shares (select.h): the points a vector block cannot take,
// redone one by one by the scalar fast path (ScalarPoints), and the walk of a row in blocks of
// lanes, a chunk of blocks at a time, then its tail (Avx2Path).
#pragma once

#include "core/platform.h"

#if defined(NJ_AVX2_PATHS)  // x86-64, gcc or clang (core/platform.h)
#include <algorithm>

#include "pushpull/cpu/avx2/lanes.h"
#include "pushpull/cpu/loop.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// The points a vector block cannot take go through the scalar fast path one by one (it applies
// the bound and extrapolate rules). Out of line: keeps the vector loops' registers free.
template <int O, int DIM, int DER, class Op, typename T = float>
struct ScalarPoints {
  const Geom& G;
  FastPoint<T, O, DIM, DER, Op, true> scalar;
  const CoordRule<T> rule;

  ScalarPoints(const Geom& G_, const Op& op) : G(G_), scalar(G_, op), rule(G_, DIM) {}

  // point j of the row starting at pt
  template <class Row>
  __attribute__((noinline)) void point(Point pt, const Row& r, int64_t j) {
    pt.p += j;
    pt.i[2] += j;
    T x[3] = {T(0), T(0), T(0)};
    const bool ok = rule.load(r, j, x);
    scalar(pt, x, ok);
  }
  // the points of block l..l+LANES-1 whose in_mask bit is clear
  template <int LANES = 8, class Row>
  NJ_TARGET_AVX2_FMA void block(const Point& pt, const Row& r, int64_t l,
                                                   int in_mask) {
    if (in_mask == (1 << LANES) - 1) return;
    // The scalar path may call SSE (non-VEX) code: clear the upper halves first.
    _mm256_zeroupper();
    for (int j = 0; j < LANES; ++j)
      if (!((in_mask >> j) & 1)) point(pt, r, l + j);
  }
  // the points l..count-1 (a row's tail)
  template <class Row>
  NJ_TARGET_AVX2_FMA void tail(const Point& pt, const Row& r, int64_t l,
                                                  int64_t count) {
    _mm256_zeroupper();
    for (; l < count; ++l) point(pt, r, l);
  }
};

// A lambda compiled for AVX2 + FMA and inlined (a lambda does not take its enclosing
// function's target).
#define NJ_AVX2_LAMBDA NJ_TARGET_AVX2_FMA __attribute__((always_inline))

// What every fast path is: its geometry and op, the scalar path for the points its blocks
// cannot take (rest), and the walk of one row (blocks). A path derives from Avx2Path and
// writes row(pt, r, count) as its per-row set-up and one call of blocks.
template <int O, int DIM, int DER, class Op, typename T = float>
struct Avx2Path {
  const Geom& G;
  const Op& op;
  ScalarPoints<O, DIM, DER, Op, T> rest;

  Avx2Path(const Geom& G_, const Op& op_) : G(G_), op(op_), rest(G_, op_) {}

  // The points 0..count-1 of a row: blocks of LANES points, CHUNK blocks at a time (paths that
  // keep the weights of several blocks, so that channels are the outer loop over the chunk).
  // prepare(b, l): block b of the chunk, points l..l+LANES-1; returns the lanes it completes
  // (the others are redone by the scalar path once emit has run). emit(l, nb): the chunk's nb
  // blocks, from point l (paths of one block at a time do all in prepare and emit nothing).
  // Then the row's tail, fewer than LANES points, by the scalar path.
  template <int LANES, int CHUNK, class Row, class Prepare, class Emit>
  NJ_TARGET_AVX2_FMA __attribute__((always_inline)) inline void blocks(
      const Point& pt, const Row& r, int64_t count, Prepare&& prepare, Emit&& emit) {
    int done[CHUNK];
    int64_t l = 0;
    while (l + LANES <= count) {
      const int nb =
          CHUNK == 1 ? 1 : static_cast<int>(std::min<int64_t>(CHUNK, (count - l) / LANES));
      for (int b = 0; b < nb; ++b) done[b] = prepare(b, l + LANES * b);
      emit(l, nb);
      for (int b = 0; b < nb; ++b) rest.template block<LANES>(pt, r, l + LANES * b, done[b]);
      l += LANES * nb;
    }
    rest.tail(pt, r, l, count);
  }
};

// The emit of paths that do a block's work in prepare.
struct NoEmit {
  void operator()(int64_t, int) const {}
};

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
#endif  // AVX2 path
