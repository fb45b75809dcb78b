// When a CPU kernel goes parallel: the one rule of every family (issue 19).
//
// A parallel region ends at a barrier that waits for every thread of the team. When another
// process keeps a core busy, a woken worker waits for a scheduler quantum: measured here
// (2-core VM, one core spinning) the p95 of a region is 4-20 ms whatever its work, against
// about 20 us on an idle machine. Small calls therefore run on the calling thread, with no
// region at all, as torch's own ops do below their grain size; a call goes parallel only when
// every thread gets at least min_work_per_thread() of work.
//
// Work is counted in multiply-adds: one spline weight applied to one channel, one stencil
// coefficient applied to one value (about 1 ns each in the generic loops here, 0.5-1 ns in
// the vector paths). Each call site states the cost of one of its items in those units.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host.h"
#include "core/tuning.h"

namespace nitorch_jit {
namespace parallel {

// The least work per thread, the tuning knob parallel_min_work (NI_JIT_PARALLEL_MIN_WORK,
// default 2^19 = about 0.5 ms, nitorch_jit/ops/tuning.py): every small-call shape of
// scripts/bench_small_calls.py (up to a 3-D order-3 grad of 4,096 points, ~0.7 ms) stays
// serial, a 512^2 linear pull (issue 11) still splits, and the idle-machine cost of a region is
// a few % of its work. Tests move it to run one input on both sides of the threshold.
inline int64_t min_work_per_thread() {
  return std::max<int64_t>(1, tuning::get(tuning::kParallelMinWork));
}

// Threads worth using for n items of `cost` each: 1 (the calling thread) unless every thread
// gets at least min_work_per_thread(); at most n; 1 inside a parallel region.
inline int64_t threads_for(int64_t n, int64_t cost) {
  if (n <= 1 || host::in_parallel_region()) return 1;
  const double work = static_cast<double>(n) * static_cast<double>(std::max<int64_t>(cost, 1));
  const double most = work / static_cast<double>(min_work_per_thread());
  const int64_t nt = std::min<int64_t>(host::num_threads(), n);
  return most >= static_cast<double>(nt) ? nt : std::max<int64_t>(1, static_cast<int64_t>(most));
}

// host::parallel_for (at::parallel_for, or the binding's through core/host.h) over [begin, end)
// with items of `cost`: split among threads_for() threads (whole chunks of equal size), else run
// inline on the calling thread. Inline still goes through the parallel_for (grain = the range),
// so in_parallel_region() holds inside as it does in a region, and nested calls stay serial
// either way.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t cost, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t nt = threads_for(n, cost);
  host::parallel_for(begin, end, nt <= 1 ? n : (n + nt - 1) / nt, f);
}

}  // namespace parallel
}  // namespace nitorch_jit
