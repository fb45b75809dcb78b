// CPU machinery of the pushpull kernels: the parallel loop over output points, fast-path
// selection and the race-free scatter strategy. Torch-free (issue 31): a kernel library gets
// raw pointers in a Call (call.h) and threads and temporaries from its host (core/host.h);
// the argument checks and the outputs are the binding's (binding.cpp).
// Included by pull.cpp (pull, grad, affine_pull), push.cpp (push, pushgrad, pull_backward,
// affine_push) and dot.cpp (grad_dot, hess_dot, affine_grad_dot).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/host.h"
#include "core/parallel.h"
#include "core/tuning.h"
#include "pushpull/cpu/call.h"
#include "pushpull/cpu/variants.h"
#include "pushpull/geometry.h"
#include "pushpull/point.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

// ---------------------------------------------------------------------------------------------
// Atomic float add (compare-exchange on the value's bits; std::atomic_ref needs C++20).
struct AtomicAdd {
  template <typename T>
  static inline void add(T* p, T v) {
    // on T itself (core/platform.h): no integer lvalue aliasing the float
    T cur = platform::atomic_load_relaxed(p);
    while (!platform::atomic_cas_weak_relaxed(p, &cur, cur + v)) {
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Geometry (pushpull/geometry.h, shared with the CUDA host code).
using Geom = Geometry;

// One output point: batch, linear index within the batch, spatial multi-index.
struct Point {
  int64_t b, p, i[3];
};

// The typed pointers of a call.
template <typename T>
NJ_INLINE const T* in_ptr(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
NJ_INLINE T* out_ptr(void* p) {
  return static_cast<T*>(p);
}

// ---------------------------------------------------------------------------------------------
// Coordinate sources of the point loops. A source gives the row of points (along the innermost
// point dim) that starts at pt; a row gives coord(d, l), coordinate d (0..D-1) of its point l.
// GridCoords reads a grid tensor [B, *O, D]; AffineCoords computes the coordinates from a
// matrix [B, D, D+1] (voxel to voxel), x_d = ((A[d,D] + A[d,0] i_0) + A[d,1] i_1) + A[d,2] i_2
// in this order, one rounding per operation, as nitorch_jit.affine_grid does (so that
// affine_pull(x, A) == grid_pull(x, affine_grid(A)) bit for bit) and as scipy.ndimage's
// affine_transform does (offset first).
template <typename T>
struct GridRow {
  const T* gp;
  int64_t g2, gD;
  NJ_INLINE T coord(int d, int64_t l) const { return gp[l * g2 + d * gD]; }
};

template <typename T>
struct GridCoords {
  const T* grid;
  NJ_INLINE GridRow<T> row(const Geom& G, const Point& pt) const {
    return {grid + pt.b * G.gB + pt.i[0] * G.g[0] + pt.i[1] * G.g[1] + pt.i[2] * G.g[2], G.g[2],
            G.gD};
  }
};

template <typename T>
struct AffineRow {
  T r[3], a[3];  // per coordinate: the row's partial sum (offset and outer terms), the i_2 column
  int64_t i2;    // innermost index of the row's first point
  NJ_INLINE T coord(int d, int64_t l) const { return r[d] + a[d] * static_cast<T>(i2 + l); }
};

template <typename T>
struct AffineCoords {
  const T* mat;  // [B, D, D+1] (batch stride 0: one matrix for every batch)
  int64_t mB, mR, mC;
  int D;
  AffineRow<T> row(const Geom& G, const Point& pt) const {
    AffineRow<T> w;
    const T* m = mat + pt.b * mB;
    const int f = 3 - D;
    for (int d = 0; d < D; ++d) {
      const T* md = m + d * mR;
      T r = md[D * mC];
      for (int j = 0; j + 1 < D; ++j) r = r + md[j * mC] * static_cast<T>(pt.i[f + j]);
      w.r[d] = r;
      w.a[d] = md[(D - 1) * mC];
    }
    w.i2 = pt.i[2];
    return w;
  }
};

template <typename T>
inline AffineCoords<T> affine_coords(const Call& c) {
  return {in_ptr<T>(c.mat), c.mB, c.mR, c.mC, c.G.D};
}

// The loops take a grid pointer or a coordinate source.
template <typename T>
NJ_INLINE GridCoords<T> coords_of(const T* grid) {
  return {grid};
}
template <typename T>
NJ_INLINE const AffineCoords<T>& coords_of(const AffineCoords<T>& a) {
  return a;
}


// The cost of one point in core/parallel.h's units: its taps on every channel, once more per
// derivative order (DER); a scatter (a read-modify-write per tap) costs about 3/2 of a gather
// (measured: 3-D order-3 float64 pull / push / grad of 4,096 points take 0.36 / 0.50 / 0.66 ms).
inline int64_t point_cost(const Geom& G, int der, bool scatter = false) {
  const int64_t c = G.taps() * std::max<int64_t>(G.C, 1) * (1 + der);
  return scatter ? c + c / 2 : c;
}

// ---------------------------------------------------------------------------------------------
// The loop over points [begin, end) of the flattened (B, *O) range.
// O >= 0: fast path for "every dim has order O" with DIM real dims: an interior point (support
// inside the source on every dim) uses LineTaps (unrolled, in registers), other points use a
// folded Taps list. O < 0: generic path (runtime orders and D, folded Taps lists of up to 8).
// The op provides apply(pt, taps0, taps1, taps2) (templated on the tap list types) and
// empty(pt) for a point that reads nothing.

// Reads a point's coordinates (internal dims first..2) and applies the range / finiteness rules.
template <typename T>
struct CoordRule {
  int first;
  bool extrapolate;
  int64_t gD;
  T lo, lim, hi[3];
  CoordRule(const Geom& G, int nd)
      : first(3 - nd),
        extrapolate(G.extrapolate),
        gD(G.gD),
        lo(-static_cast<T>(kExtrapolateTol)),
        lim(static_cast<T>(kCoordLimit)) {
    for (int k = 0; k < 3; ++k)
      hi[k] = static_cast<T>(G.src[k] - 1) + static_cast<T>(kExtrapolateTol);
  }
  // point l of the row; false: the point contributes nothing
  template <class Row>
  NJ_INLINE bool load(const Row& row, int64_t l, T* x) const {
    bool ok = true;
    for (int k = 2; k >= first && k >= 0; --k) {
      T v = row.coord(k - first, l);
      ok = apply_coord_rule(extrapolate, lo, [&] { return hi[k]; }, lim, v) && ok;
      x[k] = v;
    }
    return ok;
  }
};

// Walks [begin, end) row by row (rows along the innermost point dim): fn(pt, row, count) with pt
// the row's first point, row its coordinates (co.row) and count its number of points.
template <class Coords, class Fn>
NJ_INLINE void for_rows(const Geom& G, const Coords& co, int64_t begin, int64_t end, Fn&& fn) {
  Point pt;
  pt.b = begin / G.P;
  pt.p = begin - pt.b * G.P;
  {
    const int64_t r = pt.p / G.pts[2];
    pt.i[2] = pt.p - r * G.pts[2];
    pt.i[0] = r / G.pts[1];
    pt.i[1] = r - pt.i[0] * G.pts[1];
  }
  int64_t q = begin;
  while (q < end) {
    const int64_t count = std::min(end - q, G.pts[2] - pt.i[2]);
    fn(pt, co.row(G, pt), count);
    q += count;
    pt.p += count;
    pt.i[2] = 0;
    if (++pt.i[1] == G.pts[1]) {
      pt.i[1] = 0;
      if (++pt.i[0] == G.pts[0]) {
        pt.i[0] = 0;
        pt.p = 0;
        ++pt.b;
      }
    }
  }
}

// Every point of [begin, end): fn(pt, x, ok) with x its (checked) coordinates.
template <typename T, class Coords, class Fn>
NJ_INLINE void for_points(const Geom& G, const Coords& co, int64_t begin, int64_t end, int nd,
                          Fn&& fn) {
  const CoordRule<T> rule(G, nd);
  for_rows(G, co, begin, end, [&](Point pt, const auto& row, int64_t count) {
    for (int64_t l = 0; l < count; ++l, ++pt.p, ++pt.i[2]) {
      T x[3] = {T(0), T(0), T(0)};
      const bool ok = rule.load(row, l, x);
      fn(pt, x, ok);
    }
  });
}

// A point with folded tap lists (generic path, and the border points of fast paths). Not
// inlined: one copy per op and dtype serves every variant (compile time), and its call costs
// little next to the folding.
template <class Op, class TP>
__attribute__((noinline)) void apply_folded(const Op& op, const Point& pt, const TP& t0,
                                            const TP& t1, const TP& t2) {
  op.apply(pt, t0, t1, t2);
}

// One point of the fast path (every dim of order O, DIM real dims). FIXED_BORDER: border points
// through fixed-length folded lists (unrolled contractions, one more instantiation of the op's
// apply) instead of apply_folded's shared runtime-count one: for the vector paths' leftover
// points, which are mostly border points.
template <typename T, int O, int DIM, int DER, class Op, bool FIXED_BORDER = false>
struct FastPoint {
  using FT = Taps<T, kMaxTaps, DER>;
  using LT = LineTaps<T, O + 1, DER>;
  const Geom& G;
  const Op& op;
  FT f[3];
  FastPoint(const Geom& G_, const Op& op_) : G(G_), op(op_) {
    for (int k = 0; k < 3 - DIM; ++k) f[k].set_unit();
  }
  // op.apply with the DIM real dims' lists t[3 - DIM .. 2], unit lists in front
  template <class TP>
  NJ_INLINE void apply_dims(const Point& pt, const TP* t) const {
    const UnitTaps<T> unit;
    if constexpr (DIM == 3)
      op.apply(pt, t[0], t[1], t[2]);
    else if constexpr (DIM == 2)
      op.apply(pt, unit, t[1], t[2]);
    else
      op.apply(pt, unit, unit, t[2]);
  }
  NJ_INLINE void operator()(const Point& pt, const T* x, bool ok) {
    if (!ok) return op.empty(pt);
    T u[3];
    int64_t i0[3];
    bool inside = true;
    for (int k = 3 - DIM; k < 3; ++k) {
      i0[k] = spline_start<O>(x[k], u[k]);
      inside = inside && taps_inside<O>(i0[k], G.src[k]);
    }
    if (inside) {
      LT l[3];
      for (int k = 3 - DIM; k < 3; ++k) line_taps<O, DER>(i0[k], u[k], G.sst[k], l[k]);
      apply_dims(pt, l);
    } else if constexpr (FIXED_BORDER) {
      FoldedLineTaps<T, O + 1, DER> b[3];
      for (int k = 3 - DIM; k < 3; ++k)
        if (!folded_line_taps<O, DER>(x[k], G.src[k], G.bound[k], G.sst[k], b[k]))
          return op.empty(pt);
      apply_dims(pt, b);
    } else {
      for (int k = 3 - DIM; k < 3; ++k) {
        make_taps<O>(x[k], G.src[k], G.bound[k], G.sst[k], f[k]);
        if (f[k].n == 0) return op.empty(pt);
      }
      apply_folded(op, pt, f[0], f[1], f[2]);
    }
  }
};

template <typename T, int O, int DIM, int DER, class Src, class Op>
void run_points(const Geom& G, const Src& src, int64_t begin, int64_t end, const Op& op) {
  const auto& co = coords_of(src);
  if constexpr (O < 0) {
    // generic
    using FT = Taps<T, kMaxTaps, DER>;
    const int first = 3 - G.D;
    FT f[3];
    for (int k = 0; k < first; ++k) f[k].set_unit();
    for_points<T>(G, co, begin, end, G.D, [&](const Point& pt, const T* x, bool ok) {
      if (!ok) return op.empty(pt);
      for (int k = first; k < 3; ++k) {
        make_taps_rt<DER>(G.order[k], x[k], G.src[k], G.bound[k], G.sst[k], f[k]);
        if (f[k].n == 0) return op.empty(pt);  // every tap reads zero
      }
      apply_folded(op, pt, f[0], f[1], f[2]);
    });
  } else {
    FastPoint<T, O, DIM, DER, Op> point(G, op);
    for_points<T>(G, co, begin, end, DIM, point);
  }
}

// ---------------------------------------------------------------------------------------------
// Fast-path selection. MASK bit o enables the fast path for "all dims of order o" (D = 2, 3).
template <int V>
using IC = std::integral_constant<int, V>;

// Calls f(IC<O>, IC<DIM>) with the call's variant (variants.h): the fast path "every dim of
// order O" in DIM dims, or O = -1 for the generic path. MASK: the op's fast paths for this dtype.
// A one-variant kernel library instantiates its own only, and refuses a call of another (the
// binding picks the library with the same variant_of).
template <int MASK, class F>
inline void with_variant(const Geom& G, F&& f) {
  const Variant v = variant_of(G, MASK);
#if defined(NJ_KERNEL_ORDER)
  if (!(v == Variant{NJ_KERNEL_ORDER, NJ_KERNEL_ORDER < 0 ? 0 : NJ_KERNEL_DIM}))
    throw std::logic_error("nitorch_jit: a " + v.name() + " call reached the kernel library of "
                           "another variant");
  if constexpr (NJ_KERNEL_ORDER < 0)
    f(IC<-1>{}, IC<0>{});
  else
    f(IC<NJ_KERNEL_ORDER>{}, IC<NJ_KERNEL_DIM>{});
#else
  auto fast = [&](auto O) {
    if (v.dim == 2)
      f(O, IC<2>{});
    else
      f(O, IC<3>{});
  };
  switch (v.order) {
    case 0: if constexpr ((MASK & 1) != 0) return fast(IC<0>{}); break;
    case 1: if constexpr ((MASK & 2) != 0) return fast(IC<1>{}); break;
    case 2: if constexpr ((MASK & 4) != 0) return fast(IC<2>{}); break;
    case 3: if constexpr ((MASK & 8) != 0) return fast(IC<3>{}); break;
    default: break;
  }
  f(IC<-1>{}, IC<0>{});
#endif
}

// The op's fast paths for dtype T (variants.h).
template <typename T>
constexpr int dtype_mask(int mask) {
  return cpu::dtype_mask(mask, sizeof(T) == 8);
}

// Gather ops (one output per point, no conflicts): parallel over points.
template <typename T, int DER, int MASK, class Src, class Op>
void gather_run(const Geom& G, const Src& grid, const Op& op) {
  const int64_t n = G.B * G.P;
  if (n == 0) return;
  with_variant<dtype_mask<T>(MASK)>(G, [&](auto O, auto DIM) {
    constexpr int kO = decltype(O)::value;
    constexpr int kD = decltype(DIM)::value;
    parallel::parallel_for(0, n, point_cost(G, DER), [&](int64_t b, int64_t e) {
      run_points<T, kO, kD, DER>(G, grid, b, e, op);
    });
  });
}

// Gather ops that accumulate per row of points (rows along the innermost point dim): parallel
// over whole rows, so a row's accumulator is touched by one thread only.
template <typename T, int DER, int MASK, class Src, class Op>
void rows_run(const Geom& G, const Src& src, const Op& op) {
  const int64_t rows = G.B * G.pts[0] * G.pts[1], n2 = G.pts[2];
  if (rows == 0 || n2 == 0) return;
  with_variant<dtype_mask<T>(MASK)>(G, [&](auto O, auto DIM) {
    constexpr int kO = decltype(O)::value;
    constexpr int kD = decltype(DIM)::value;
    parallel::parallel_for(0, rows, n2 * point_cost(G, DER), [&](int64_t b, int64_t e) {
      run_points<T, kO, kD, DER>(G, src, b * n2, e * n2, op);
    });
  });
}

// Bytes of private per-thread output copies a scatter may allocate (the push_buffer_mb knob,
// NI_JIT_PUSH_BUFFER_MB, default 256 MiB); beyond that it uses atomic adds.
inline int64_t scatter_buffer_budget() { return tuning::get(tuning::kPushBufferMB) << 20; }

// An op may offer a vectorised kernel for a range of points, bool fast_range(G, grid, begin,
// end) const, true when it handled them (else the generic loop runs).
template <class Op, class = void>
struct HasFastRange : std::false_type {};
template <class Op>
struct HasFastRange<Op, std::void_t<decltype(&Op::fast_range)>> : std::true_type {};

// Enough batches to split among nt threads with little imbalance (each thread whole batches).
inline bool batch_split_ok(int64_t B, int64_t nt) {
  return B >= nt && (B % nt == 0 || B >= 4 * nt);
}

// Scatter ops. make_op(T* dst, AddTag) returns the op writing into dst (a full output-sized
// buffer). Single thread: plain adds into out. Several, with enough batches: each thread adds
// whole batches into out (batch_split_ok). Else the points are split into nt equal chunks,
// chunk t adds into its own private copy (chunk 0 into out), then the copies are summed into
// out in a fixed order, so the result depends on the thread count only through rounding.
// If the copies would exceed the budget, all threads add atomically into out instead.
template <typename T, int DER, int MASK, class Src, class MakeOp>
void scatter_run(const Geom& G, const Src& grid, T* out, int64_t out_numel, MakeOp&& make_op) {
  const int64_t n = G.B * G.P;
  if (n == 0 || out_numel == 0) return;
  const int64_t cost = point_cost(G, DER, true);
  auto run_plain = [&](int64_t b, int64_t e, T* dst) {
    const auto op = make_op(dst, PlainAdd{});
    if constexpr (HasFastRange<std::decay_t<decltype(op)>>::value && std::is_pointer_v<Src>)
      if (op.fast_range(G, grid, b, e)) return;  // fast paths read a grid tensor
    with_variant<dtype_mask<T>(MASK)>(G, [&](auto O, auto DIM) {
      run_points<T, decltype(O)::value, decltype(DIM)::value, DER>(G, grid, b, e, op);
    });
  };
  const int64_t nt = parallel::threads_for(n, cost);
  if (nt <= 1) {
    run_plain(0, n, out);
    return;
  }
  // nt >= 2 threads from here: the loops below split into exactly nt chunks
  if (batch_split_ok(G.B, nt)) {
    // Points of batch b scatter only into out[b]: threads owning whole batches never share an
    // output voxel, so no private copies (memset + reduction) and no atomics are needed.
    host::parallel_for(0, G.B, (G.B + nt - 1) / nt,
                       [&](int64_t bb, int64_t be) { run_plain(bb * G.P, be * G.P, out); });
    return;
  }
  const int64_t bytes = (nt - 1) * out_numel * static_cast<int64_t>(sizeof(T));
  if (bytes <= scatter_buffer_budget()) {
    host::Temporary<T> buf((nt - 1) * out_numel);
    T* bp = buf.get();
    const int64_t chunk = (n + nt - 1) / nt;
    host::parallel_for(0, nt, 1, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        T* dst = out;
        if (t > 0) {
          dst = bp + (t - 1) * out_numel;
          std::memset(static_cast<void*>(dst), 0, sizeof(T) * out_numel);
        }
        const int64_t b = t * chunk, e = std::min(n, b + chunk);
        if (b < e) run_plain(b, e, dst);
      }
    });
    // the sum of the copies: nt - 1 adds per element
    parallel::parallel_for(0, out_numel, nt - 1, [&](int64_t b, int64_t e) {
      for (int64_t t = 0; t < nt - 1; ++t) {
        const T* src = bp + t * out_numel;
        for (int64_t i = b; i < e; ++i) out[i] += src[i];
      }
    });
  } else {
    const auto op = make_op(out, AtomicAdd{});
    host::parallel_for(0, n, (n + nt - 1) / nt, [&](int64_t b, int64_t e) {
      run_points<T, -1, 0, DER>(G, grid, b, e, op);
    });
  }
}

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
