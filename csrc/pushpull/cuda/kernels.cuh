// CUDA pushpull kernels (docs/pushpull-spec.md): one thread per grid point, looping over channels.
//
// Included by the kernel files only (one per op); each instantiates launch<OP> for the four dtypes.
// The per-point math is the CPU kernels': spline weights (core/spline.h), index folding
// (core/bounds.h), range constants, folded tap lists and the contractions (pushpull/point.h, with
// the device's memory access: DeviceLoad, DeviceAtomicAdd). This file holds the iteration.
//
// Per point, three paths:
// * fast (every dim has the same order O, one of the op's fast-path orders: 0, 1, 3 for pull
//   and push, 1, 3 for the others): the tap lists have a fixed length O+1 and are held in
//   registers (all loops unrolled, constant indices), with 32-bit offsets when the tensors
//   allow it; interior points skip the folding, border points fold each tap and flag the ones
//   that read zero (no divergent slow path, no local memory);
// * generic (mixed orders, orders 4..7, or orders without a fast path for the op):
//   make_taps_unrolled_rt with runtime tap counts (small per-thread arrays in local memory).
// Push and pull_backward on a grid with one point per source voxel also have a block-tiled
// variant that accumulates in shared memory (tiles.cuh).
// Half types are loaded/stored as half and computed in float32; scatters add into a float32
// (half data) or the data's own type (float, double) buffer with atomicAdd.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "pushpull/cuda/params.cuh"
#include "core/bounds.h"
#include "core/spline.h"
#include "pushpull/point.h"

namespace nitorch_jit {
namespace pushpull {
namespace cuda {

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;
// Resident blocks per SM asked of the order-0/1 fast kernels, i.e. a register cap (256-thread
// blocks, 65536 registers per SM): 6 (<= 40 registers) for pull/push, 5 (<= 48) for the ops with
// derivatives. Measured on an H200 (256^3 float32, order 1): pull 0.35 -> 0.22 ms against an
// explicit 1, grad_dot 0.55 -> 0.33 ms; 8 was slower. Other kernels get no minimum (an explicit
// 1 made the order-3 pull twice slower), nor does float64 (it would spill).
#ifndef NJ_PP_MINB_GATHER
#define NJ_PP_MINB_GATHER 6
#endif
#ifndef NJ_PP_MINB_DERIV
#define NJ_PP_MINB_DERIV 5
#endif

// --------------------------------------------------------------------------------------------
// Scalar types: S the stored type, A = AccOf<S> the computation type.
template <typename S>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <typename S>
constexpr bool kIsHalf = std::is_same<S, __half>::value || std::is_same<S, __nv_bfloat16>::value;

__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <typename S>
__device__ __forceinline__ S from_acc(typename AccOf<S>::type v);
template <>
__device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <>
__device__ __forceinline__ double from_acc<double>(double v) { return v; }

// read-only load of a tensor element, converted to the computation type
template <typename S>
__device__ __forceinline__ typename AccOf<S>::type ld(const S* p) {
  return to_acc(__ldg(p));
}


// --------------------------------------------------------------------------------------------
// Device-side copy of Params in the offset type I (int32_t when every offset fits).
template <typename I>
struct Geo {
  int order[3], bound[3];
  int first;  // 3 - D: the first real internal dim
  bool extrapolate, flat, grid_f32;
  I B, C, P, N;  // N = prod(src): voxels per channel of the source
  I src[3], sst[3], sB, sC;
  I pts[3];
  I gB, g[3], gD, gP;
  I pB, pC, ps[3], pD, pP;
  const void* src_ptr;
  const void* grid;
  const void* pin;
  void* out;
  void* out2;
  const void* mat;  // affine ops: [B, D, D+1] in the computation type
  I mB;
};

template <typename I>
inline Geo<I> make_geo(const Params& p) {
  Geo<I> G;
  G.first = 3 - p.D;
  G.extrapolate = p.extrapolate;
  G.flat = p.flat;
  G.grid_f32 = p.grid_f32;
  G.B = static_cast<I>(p.B);
  G.C = static_cast<I>(p.C);
  G.P = static_cast<I>(p.P);
  G.N = static_cast<I>(p.src[0] * p.src[1] * p.src[2]);
  for (int k = 0; k < 3; ++k) {
    G.order[k] = p.order[k];
    G.bound[k] = p.bound[k];
    G.src[k] = static_cast<I>(p.src[k]);
    G.sst[k] = static_cast<I>(p.sst[k]);
    G.pts[k] = static_cast<I>(p.pts[k]);
    G.g[k] = static_cast<I>(p.g[k]);
    G.ps[k] = static_cast<I>(p.ps[k]);
  }
  G.sB = static_cast<I>(p.sB);
  G.sC = static_cast<I>(p.sC);
  G.gB = static_cast<I>(p.gB);
  G.gD = static_cast<I>(p.gD);
  G.gP = static_cast<I>(p.gP);
  G.pB = static_cast<I>(p.pB);
  G.pC = static_cast<I>(p.pC);
  G.pD = static_cast<I>(p.pD);
  G.pP = static_cast<I>(p.pP);
  G.src_ptr = p.src_ptr;
  G.grid = p.grid;
  G.pin = p.pin;
  G.out = p.out;
  G.out2 = p.out2;
  G.mat = p.mat;
  G.mB = static_cast<I>(p.mB);
  return G;
}

// coordinate stored at grid offset `off`
template <typename S, typename I>
__device__ __forceinline__ typename AccOf<S>::type load_coord(const Geo<I>& G, I off) {
  if constexpr (kIsHalf<S>) {
    if (G.grid_f32) return __ldg(static_cast<const float*>(G.grid) + off);
    return to_acc(__ldg(static_cast<const S*>(G.grid) + off));
  } else {
    return __ldg(static_cast<const S*>(G.grid) + off);
  }
}

// store into a grid-typed output (the dots' out, pullback's out2): S, or float32 for half data
// with a float32 grid
template <typename S, typename I>
__device__ __forceinline__ void store_grid_typed(const Geo<I>& G, void* dst, I idx,
                                                 typename AccOf<S>::type v) {
  if constexpr (kIsHalf<S>) {
    if (G.grid_f32) {
      static_cast<float*>(dst)[idx] = v;
      return;
    }
  }
  static_cast<S*>(dst)[idx] = from_acc<S>(v);
}

// the D components (internal dims first..2) of point p of batch b of a grid-typed [B, P, D]
template <typename S, typename I, typename A>
__device__ __forceinline__ void store_point_vector(const Geo<I>& G, void* dst, I b, I p, A a0,
                                                   A a1, A a2) {
  const int f = G.first;
  const I o = (b * G.P + p) * (3 - f);
  if (f <= 0) store_grid_typed<S>(G, dst, o - f, a0);
  if (f <= 1) store_grid_typed<S>(G, dst, o + 1 - f, a1);
  store_grid_typed<S>(G, dst, o + 2 - f, a2);
}

// --------------------------------------------------------------------------------------------
// Fixed-length tap list of one dim (fast paths): the shared FoldedLineTaps (pushpull/point.h),
// O+1 taps with offsets in I, held in registers (every index is a constant once the loops are
// unrolled). Border taps are folded with their bound's sign; a tap whose sign is 0 gets weight
// 0, offset 0 and its bit of `valid` cleared, and is never read or written (a NaN at the
// placeholder address cannot leak in).
template <typename A, typename I, int O, int DER>
using FTaps = FoldedLineTaps<A, O + 1, DER, I>;

// the single constant tap of a padded dim
template <typename A, typename I, int DER>
__device__ __forceinline__ void set_constant(FTaps<A, I, 0, DER>& t) {
  t.valid = 1u;
  t.off_[0] = I(0);
  t.w_[0] = A(1);
  t.dw_[0] = A(0);
  t.ddw_[0] = A(0);
}

__device__ __forceinline__ float nj_floor(float v) { return floorf(v); }
__device__ __forceinline__ double nj_floor(double v) { return floor(v); }

// Taps of order O at x (|x| <= kCoordLimit) on a dim of size n. u = x - (O-1)/2 - floor(...),
// computed as spline_start<O> does, so the weights match the CPU kernels bit for bit.
template <int O, int DER, typename A, typename I>
__device__ __forceinline__ void fixed_taps(A x, I n, int bound, I stride,
                                           FTaps<A, I, O, DER>& t) {
  const A xs = (O & 1) ? x - A((O - 1) / 2) : x - A(O - 1) * A(0.5);
  const A fl = nj_floor(xs);
  const A u = xs - fl;
  SplineTaps<O, 0>::eval(u, t.w_);
  if constexpr (DER >= 1) SplineTaps<O, 1>::eval(u, t.dw_);
  if constexpr (DER >= 2) SplineTaps<O, 2>::eval(u, t.ddw_);
  if (fl >= A(0) && fl < static_cast<A>(n - O)) {  // interior: no folding
    const I i0 = static_cast<I>(fl);
    if (i0 + O < n) {  // (float rounding of n - O)
#pragma unroll
      for (int k = 0; k <= O; ++k) t.off_[k] = (i0 + k) * stride;
      t.valid = (1u << (O + 1)) - 1u;
      return;
    }
  }
  const int64_t i0 = static_cast<int64_t>(fl);
  t.valid = 0u;
#pragma unroll
  for (int k = 0; k <= O; ++k) {
    int s;
    const int64_t j = fold_index(i0 + k, static_cast<int64_t>(n), bound, s);
    t.off_[k] = static_cast<I>(j) * stride;
    if (s == 0) {
      t.w_[k] = A(0);
      if constexpr (DER >= 1) t.dw_[k] = A(0);
      if constexpr (DER >= 2) t.ddw_[k] = A(0);
    } else {
      t.valid |= 1u << k;
      if (s < 0) {
        t.w_[k] = -t.w_[k];
        if constexpr (DER >= 1) t.dw_[k] = -t.dw_[k];
        if constexpr (DER >= 2) t.ddw_[k] = -t.ddw_[k];
      }
    }
  }
}

// Memory access of the shared contractions (pushpull/point.h): read-only loads converted to the
// computation type, and atomic adds (points of different threads share output voxels).
struct DeviceLoad {
  template <typename S>
  __device__ __forceinline__ static typename AccOf<S>::type load(const S* p) {
    return ld(p);
  }
};

struct DeviceAtomicAdd {
  template <typename A>
  __device__ __forceinline__ static void add(A* p, A v) {
    atomicAdd(p, v);
  }
};

// --------------------------------------------------------------------------------------------
// The ops. apply(G, b, p, poff, t0, t1, t2): point p of batch b, whose
// per-point tensor (pin) lies at offset poff (batch included); empty(G, b, p): a point that
// contributes nothing.

// The names every op declares: S the stored type, I the offset type, A the computation type,
// DER the derivatives its tap lists carry, kTile: it has a tiled variant (tiles.cuh).
#define NJ_PP_OP_TYPES(der, tile)    \
  using S = S_;                      \
  using I = I_;                      \
  using A = typename AccOf<S>::type; \
  static constexpr int DER = der;    \
  static constexpr bool kTile = tile

// batch b of the gathered source; the per-point tensor at offset poff; batch b of a scatter's
// buffer ([B, C, N] in the computation type)
template <typename S, typename I>
__device__ __forceinline__ const S* source_of(const Geo<I>& G, I b) {
  return static_cast<const S*>(G.src_ptr) + b * G.sB;
}
template <typename S, typename I>
__device__ __forceinline__ const S* point_data(const Geo<I>& G, I poff) {
  return static_cast<const S*>(G.pin) + poff;
}
template <typename A, typename I>
__device__ __forceinline__ A* scatter_out(const Geo<I>& G, I b) {
  return static_cast<A*>(G.out) + b * G.C * G.N;
}

template <typename S_, typename I_>
struct PullOp {
  NJ_PP_OP_TYPES(0, false);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I p, I, const T0& t0,
                                               const T1& t1, const T2& t2) {
    const S* in = source_of<S>(G, b);
    S* out = static_cast<S*>(G.out) + b * G.C * G.P + p;
    for (I c = 0; c < G.C; ++c)
      out[c * G.P] = from_acc<S>(pull_point<DeviceLoad>(t0, t1, t2, in + c * G.sC));
  }
  static __device__ __forceinline__ void empty(const Geo<I>& G, I b, I p) {
    S* out = static_cast<S*>(G.out) + b * G.C * G.P + p;
    for (I c = 0; c < G.C; ++c) out[c * G.P] = from_acc<S>(A(0));
  }
};

template <typename S_, typename I_>
struct GradOp {
  NJ_PP_OP_TYPES(1, false);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I p, I, const T0& t0,
                                               const T1& t1, const T2& t2) {
    const S* in = source_of<S>(G, b);
    const int f = G.first;
    const I D = 3 - f;
    S* out = static_cast<S*>(G.out) + (b * G.C * G.P + p) * D;
    for (I c = 0; c < G.C; ++c) {
      A g[3];
      grad_point<DeviceLoad>(t0, t1, t2, in + c * G.sC, g[0], g[1], g[2]);
      S* o = out + c * G.P * D;
#pragma unroll
      for (int k = 0; k < 3; ++k)
        if (k >= f) o[k - f] = from_acc<S>(g[k]);
    }
  }
  static __device__ __forceinline__ void empty(const Geo<I>& G, I b, I p) {
    const I D = 3 - G.first;
    S* out = static_cast<S*>(G.out) + (b * G.C * G.P + p) * D;
    for (I c = 0; c < G.C; ++c)
      for (I d = 0; d < D; ++d) out[c * G.P * D + d] = from_acc<S>(A(0));
  }
};

template <typename S_, typename I_>
struct PushOp {
  NJ_PP_OP_TYPES(0, true);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I, I poff, const T0& t0,
                                               const T1& t1, const T2& t2) {
    const S* in = point_data<S>(G, poff);
    A* out = scatter_out<A>(G, b);
    for (I c = 0; c < G.C; ++c) {
      const A v = ld(in + c * G.pC);
      if (v == A(0)) continue;  // adds exactly nothing (weights are finite)
      push_point<DeviceAtomicAdd>(t0, t1, t2, out + c * G.N, v);
    }
  }
  static __device__ __forceinline__ void empty(const Geo<I>&, I, I) {}
  // Tiled scatter (tiles.cuh): channel c of a point whose taps all lie in the block's
  // shared window `win`; t0..t2 the weights, w0..w2 the offsets into the window.
  template <class T0, class T1, class T2, class W0, class W1, class W2>
  static __device__ __forceinline__ void tile_apply(const Geo<I>& G, I, I, I poff, I c,
                                                    const T0& t0, const T1& t1, const T2& t2,
                                                    const W0& w0, const W1& w1, const W2& w2,
                                                    A* win) {
    const A v = ld(point_data<S>(G, poff) + c * G.pC);
    if (v == A(0)) return;
    push_point_to<DeviceAtomicAdd>(t0, t1, t2, w0, w1, w2, win, v);
  }
  static __device__ __forceinline__ void tile_empty(const Geo<I>&, I, I, I) {}
};

template <typename S_, typename I_>
struct PushGradOp {
  NJ_PP_OP_TYPES(1, false);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I, I poff, const T0& t0,
                                               const T1& t1, const T2& t2) {
    const S* in = point_data<S>(G, poff);
    A* out = scatter_out<A>(G, b);
    const int f = G.first;
    for (I c = 0; c < G.C; ++c) {
      A g[3];
      bool any = false;
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        g[k] = k >= f ? ld(in + c * G.pC + (k - f) * G.pD) : A(0);
        any = any || (g[k] != A(0));
      }
      if (!any) continue;
      pushgrad_point<DeviceAtomicAdd>(t0, t1, t2, out + c * G.N, g[0], g[1], g[2]);
    }
  }
  static __device__ __forceinline__ void empty(const Geo<I>&, I, I) {}
};

template <typename S_, typename I_>
struct GradDotOp {
  NJ_PP_OP_TYPES(1, false);
  // acc_k = sum_c weight[c] grad(input[c])_k at the point (internal dims k)
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void contract(const Geo<I>& G, I b, I poff, const T0& t0,
                                                  const T1& t1, const T2& t2, A& acc0, A& acc1,
                                                  A& acc2) {
    const S* in = source_of<S>(G, b);
    const S* wt = point_data<S>(G, poff);
    acc0 = acc1 = acc2 = A(0);
    for (I c = 0; c < G.C; ++c) {
      A g0, g1, g2;
      grad_point<DeviceLoad>(t0, t1, t2, in + c * G.sC, g0, g1, g2);
      const A w = ld(wt + c * G.pC);
      acc0 += w * g0;
      acc1 += w * g1;
      acc2 += w * g2;
    }
  }
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I p, I poff, const T0& t0,
                                               const T1& t1, const T2& t2) {
    A acc0, acc1, acc2;
    contract(G, b, poff, t0, t1, t2, acc0, acc1, acc2);
    store(G, b, p, acc0, acc1, acc2);
  }
  static __device__ __forceinline__ void store(const Geo<I>& G, I b, I p, A a0, A a1, A a2) {
    store_point_vector<S>(G, G.out, b, p, a0, a1, a2);
  }
  static __device__ __forceinline__ void empty(const Geo<I>& G, I b, I p) {
    store(G, b, p, A(0), A(0), A(0));
  }
};

template <typename S_, typename I_>
struct HessDotOp {
  NJ_PP_OP_TYPES(2, false);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I p, I poff, const T0& t0,
                                               const T1& t1, const T2& t2) {
    // written out, not source_of / point_data: through them nvcc compiled this kernel
    // differently (more spills in its order-3 variants)
    const S* in = static_cast<const S*>(G.src_ptr) + b * G.sB;
    const S* wt = static_cast<const S*>(G.pin) + poff;
    const int f = G.first;
    A acc0 = A(0), acc1 = A(0), acc2 = A(0);
    for (I c = 0; c < G.C; ++c) {
      A h[6];
      hess_point<DeviceLoad>(t0, t1, t2, in + c * G.sC, h);
      const S* wc = wt + c * G.pC;
      const A w0 = f <= 0 ? ld(wc + (0 - f) * G.pD) : A(0);
      const A w1 = f <= 1 ? ld(wc + (1 - f) * G.pD) : A(0);
      const A w2 = ld(wc + (2 - f) * G.pD);
      // H = [[h0 h3 h4] [h3 h1 h5] [h4 h5 h2]] (symmetric)
      acc0 += w0 * h[0] + w1 * h[3] + w2 * h[4];
      acc1 += w0 * h[3] + w1 * h[1] + w2 * h[5];
      acc2 += w0 * h[4] + w1 * h[5] + w2 * h[2];
    }
    GradDotOp<S, I>::store(G, b, p, acc0, acc1, acc2);
  }
  static __device__ __forceinline__ void empty(const Geo<I>& G, I b, I p) {
    GradDotOp<S, I>::store(G, b, p, A(0), A(0), A(0));
  }
};

// grid_pull_backward: src_ptr the pulled input (spatial strides those of out), pin the incoming
// gradient; out += push (accumulation type, [B, C, N]), out2 = grad_dot (grid-typed [B, P, D]).
template <typename S_, typename I_>
struct PullBackOp {
  NJ_PP_OP_TYPES(1, true);
  template <class T0, class T1, class T2>
  static __device__ __forceinline__ void apply(const Geo<I>& G, I b, I p, I poff, const T0& t0,
                                               const T1& t1, const T2& t2) {
    const S* in = source_of<S>(G, b);
    const S* gr = point_data<S>(G, poff);
    A* out = scatter_out<A>(G, b);
    A acc0 = A(0), acc1 = A(0), acc2 = A(0);
    for (I c = 0; c < G.C; ++c) {
      const A v = ld(gr + c * G.pC);
      // adds nothing to grad_input, and v * (finite gradient) adds nothing to grad_grid
      if (v == A(0)) continue;
      A g0, g1, g2;
      // the input and out share the tap offsets (same spatial strides)
      pullback_point<DeviceLoad, DeviceAtomicAdd>(t0, t1, t2, t0, t1, t2, in + c * G.sC,
                                                  out + c * G.N, v, g0, g1, g2);
      acc0 += v * g0;
      acc1 += v * g1;
      acc2 += v * g2;
    }
    store_point_vector<S>(G, G.out2, b, p, acc0, acc1, acc2);
  }
  static __device__ __forceinline__ void empty(const Geo<I>& G, I b, I p) {
    store_point_vector<S>(G, G.out2, b, p, A(0), A(0), A(0));
  }
  // Tiled scatter (tiles.cuh, float and double only): channel c of a point whose taps
  // all lie in the block's shared window; t0..t2 the weights and input offsets, w0..w2 the
  // window offsets. out2 accumulates over the channel steps in place (only the thread that
  // owns the point touches it), in the order of apply's sum.
  template <class T0, class T1, class T2, class W0, class W1, class W2>
  static __device__ __forceinline__ void tile_apply(const Geo<I>& G, I b, I p, I poff, I c,
                                                    const T0& t0, const T1& t1, const T2& t2,
                                                    const W0& w0, const W1& w1, const W2& w2,
                                                    A* win) {
    static_assert(!kIsHalf<S>, "the tiled scatter accumulates out2 in the data type");
    const S* in = source_of<S>(G, b) + c * G.sC;
    const A v = ld(point_data<S>(G, poff) + c * G.pC);
    A a[3] = {A(0), A(0), A(0)};
    if (v != A(0)) {
      A g0, g1, g2;
      pullback_point<DeviceLoad, DeviceAtomicAdd>(t0, t1, t2, w0, w1, w2, in, win, v, g0, g1, g2);
      a[0] = v * g0;
      a[1] = v * g1;
      a[2] = v * g2;
    } else if (c > 0) {
      return;
    }
    if (c == 0) {
      store_point_vector<S>(G, G.out2, b, p, a[0], a[1], a[2]);
      return;
    }
    const int f = G.first;
    A* gg = static_cast<A*>(G.out2) + (b * G.P + p) * (3 - f);
#pragma unroll
    for (int k = 0; k < 3; ++k)
      if (k >= f) gg[k - f] += a[k];
  }
  static __device__ __forceinline__ void tile_empty(const Geo<I>& G, I b, I p, I c) {
    if (c == 0) empty(G, b, p);
  }
};

// The affine ops: pull and push as above, with each point's coordinates computed from the matrix
// (kAffine, load_coords); affine_grad_dot reduces grad_dot times the homogeneous voxel index
// over the points (affine_dot_kernel), its op handing the point's grad_dot to the thread (g).
template <typename S_, typename I_>
struct AffinePullOp : PullOp<S_, I_> {
  static constexpr bool kAffine = true;
};

template <typename S_, typename I_>
struct AffinePushOp : PushOp<S_, I_> {
  static constexpr bool kAffine = true;
  static constexpr bool kTile = false;
};

template <typename S_, typename I_>
struct AffineDotOp {
  NJ_PP_OP_TYPES(1, false);
  static constexpr bool kAffine = true;
  A* g;  // the thread's [3]: grad_dot at the point, internal dims
  template <class T0, class T1, class T2>
  __device__ __forceinline__ void apply(const Geo<I>& G, I b, I, I poff, const T0& t0,
                                        const T1& t1, const T2& t2) const {
    GradDotOp<S, I>::contract(G, b, poff, t0, t1, t2, g[0], g[1], g[2]);
  }
  __device__ __forceinline__ void empty(const Geo<I>&, I, I) const { g[0] = g[1] = g[2] = A(0); }
};

template <class Op, class = void>
struct IsAffine : std::false_type {};
template <class Op>
struct IsAffine<Op, std::void_t<decltype(Op::kAffine)>>
    : std::integral_constant<bool, Op::kAffine> {};

// products and sums of the affine coordinates rounded one by one, as on the CPU and in
// torch_impl.pushpull.affine_coords (no contraction into fused multiply-adds)
#ifdef NJ_PUSHPULL_EMULATE  // the host compiler (no FMA in the emulation's target) rounds each
template <typename A>
inline A mul_rn(A a, A b) { return a * b; }
template <typename A>
inline A add_rn(A a, A b) { return a + b; }
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
#endif

// --------------------------------------------------------------------------------------------
// The coordinates x of the point at grid offset goff (internal dims first..2; 0 elsewhere) with
// the range rules applied; false: the point contributes nothing.
// The range rules (apply_coord_rule) for coordinate v of internal dim k; false: no contribution.
template <typename A, typename I>
__device__ __forceinline__ bool coord_rule(const Geo<I>& G, int k, A& v) {
  const auto hi = [&] { return static_cast<A>(G.src[k] - 1) + static_cast<A>(kExtrapolateTol); };
  return apply_coord_rule(G.extrapolate, -static_cast<A>(kExtrapolateTol), hi,
                          static_cast<A>(kCoordLimit), v);
}

template <typename S, typename A, typename I>
__device__ __forceinline__ bool load_point(const Geo<I>& G, I goff, int first, A* x) {
  bool ok = true;
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    x[k] = A(0);
    if (k >= first) {
      A v = load_coord<S>(G, goff + (k - first) * G.gD);
      ok = coord_rule(G, k, v) && ok;
      x[k] = v;
    }
  }
  return ok;
}

// Voxel indices (internal dims) of point p of a batch.
template <typename I>
__device__ __forceinline__ void point_index(const Geo<I>& G, I p, I* i) {
  i[2] = p % G.pts[2];
  const I r = p / G.pts[2];
  i[1] = r % G.pts[1];
  i[0] = r / G.pts[1];
}

// The coordinates of point p of batch b from the matrix: x_d = ((A[d,D] + A[d,0] i_0) +
// A[d,1] i_1) + A[d,2] i_2 (d = k - first), offset first as on the CPU.
template <typename A, typename I>
__device__ __forceinline__ bool load_affine_point(const Geo<I>& G, I b, I p, int first, A* x) {
  I i[3];
  point_index(G, p, i);
  const int D = 3 - first;
  const A* m = static_cast<const A*>(G.mat) + b * G.mB;
  bool ok = true;
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    x[k] = A(0);
    if (k >= first) {
      const A* md = m + (k - first) * (D + 1);
      A v = __ldg(md + D);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (j + 1 < D) v = add_rn(v, mul_rn(__ldg(md + j), static_cast<A>(i[first + j])));
      v = add_rn(v, mul_rn(__ldg(md + D - 1), static_cast<A>(i[2])));
      ok = coord_rule(G, k, v) && ok;
      x[k] = v;
    }
  }
  return ok;
}

template <class Op, typename A, typename I>
__device__ __forceinline__ bool load_coords(const Geo<I>& G, I b, I p, I goff, int first, A* x) {
  if constexpr (IsAffine<Op>::value)
    return load_affine_point(G, b, p, first, x);
  else
    return load_point<typename Op::S>(G, goff, first, x);
}

// One point: coordinates, range rules, tap lists, then the op (an instance: the static
// functions of most ops, or an op with per-thread state).
template <class Op, int O, int DIM>
__device__ __forceinline__ void run_point_op(const Op& op, const Geo<typename Op::I>& G,
                                             typename Op::I b, typename Op::I p,
                                             typename Op::I goff, typename Op::I poff) {
  using S = typename Op::S;
  using A = typename Op::A;
  using I = typename Op::I;
  constexpr int DER = Op::DER;
  constexpr bool kGeneric = O < 0;
  const int first = kGeneric ? G.first : 3 - DIM;

  A x[3];
  if (!load_coords<Op>(G, b, p, goff, first, x)) {
    op.empty(G, b, p);
    return;
  }

  if constexpr (!kGeneric) {
    constexpr int O0 = DIM >= 3 ? O : 0, O1 = DIM >= 2 ? O : 0;
    FTaps<A, I, O0, DER> f0;
    FTaps<A, I, O1, DER> f1;
    FTaps<A, I, O, DER> f2;
    fixed_taps<O, DER>(x[2], G.src[2], G.bound[2], G.sst[2], f2);
    if constexpr (DIM >= 2)
      fixed_taps<O, DER>(x[1], G.src[1], G.bound[1], G.sst[1], f1);
    else
      set_constant(f1);
    if constexpr (DIM >= 3)
      fixed_taps<O, DER>(x[0], G.src[0], G.bound[0], G.sst[0], f0);
    else
      set_constant(f0);
    if (f0.valid == 0u || f1.valid == 0u || f2.valid == 0u) {
      op.empty(G, b, p);  // every tap reads zero
      return;
    }
    op.apply(G, b, p, poff, f0, f1, f2);
  } else {
    Taps<A, kMaxTaps, DER> t[3];
#pragma unroll 1
    for (int k = 0; k < 3; ++k) {
      if (k < first)
        t[k].set_unit();
      else
        make_taps_unrolled_rt<DER>(G.order[k], x[k], static_cast<int64_t>(G.src[k]), G.bound[k],
                                     static_cast<int64_t>(G.sst[k]), t[k]);
    }
    if (t[0].n == 0 || t[1].n == 0 || t[2].n == 0) {
      op.empty(G, b, p);
      return;
    }
    op.apply(G, b, p, poff, t[0], t[1], t[2]);
  }
}

template <class Op, int O, int DIM>
__device__ __forceinline__ void run_point(const Geo<typename Op::I>& G, typename Op::I b,
                                          typename Op::I p, typename Op::I goff,
                                          typename Op::I poff) {
  run_point_op<Op, O, DIM>(Op{}, G, b, p, goff, poff);
}

// grid and per-point tensor offsets of the point (i0, i1, i2) in batch 0
template <typename I>
__device__ __forceinline__ void point_offsets(const Geo<I>& G, I i0, I i1, I i2, I& goff,
                                              I& poff) {
  goff = i0 * G.g[0] + i1 * G.g[1] + i2 * G.g[2];
  poff = i0 * G.ps[0] + i1 * G.ps[1] + i2 * G.ps[2];
}

// x: points of a batch (one thread each); y: batches (strided loop past 65535). G stays in
// parameter space (__grid_constant__: no per-thread copy even where its address is taken).
template <class Op, int O, int DIM>
__device__ __forceinline__ void kernel_body(const Geo<typename Op::I>& G) {
  using I = typename Op::I;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (q >= static_cast<int64_t>(G.P)) return;
  const I p = static_cast<I>(q);
  I goff, poff;
  if (G.flat) {
    goff = p * G.gP;
    poff = p * G.pP;
  } else {
    const I i2 = p % G.pts[2];
    const I r = p / G.pts[2];
    const I i1 = r % G.pts[1];
    const I i0 = r / G.pts[1];
    point_offsets(G, i0, i1, i2, goff, poff);
  }
  for (I b = static_cast<I>(blockIdx.y); b < G.B; b += static_cast<I>(gridDim.y))
    run_point<Op, O, DIM>(G, b, p, goff + b * G.gB, poff + b * G.pB);
}

template <class Op, int O, int DIM>
__global__ void __launch_bounds__(kThreads)
    pushpull_kernel(const __grid_constant__ Geo<typename Op::I> G) {
  kernel_body<Op, O, DIM>(G);
}

// affine_grad_dot: out[b, d, j] += sum over points of g_d (i_0, .., i_{D-1}, 1)_j with g the
// point's grad_dot. Each thread sums its points (a grid-stride loop) in registers; the warp
// sums its threads (shuffles; the host emulation adds each thread's sums instead), then one
// atomic add per warp and entry. No early return: every thread reaches the shuffles.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#ifndef NJ_PUSHPULL_EMULATE
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
#endif
  return v;
}

template <class Op, int O, int DIM>
__global__ void __launch_bounds__(kThreads)
    affine_dot_kernel(const __grid_constant__ Geo<typename Op::I> G) {
  using A = typename Op::A;
  using I = typename Op::I;
  const int f = G.first, D = 3 - f;
  for (I b = static_cast<I>(blockIdx.y); b < G.B; b += static_cast<I>(gridDim.y)) {
    A acc[3][4];
#pragma unroll
    for (int k = 0; k < 3; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[k][j] = A(0);
    for (int64_t q = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
         q < static_cast<int64_t>(G.P); q += static_cast<int64_t>(gridDim.x) * kThreads) {
      const I p = static_cast<I>(q);
      I i[3], goff, poff;
      point_index(G, p, i);
      point_offsets(G, i[0], i[1], i[2], goff, poff);
      A g[3];
      run_point_op<Op, O, DIM>(Op{g}, G, b, p, goff, poff + b * G.pB);
      // column j of the matrix weighs g by: the outer indices i_f.. (j < D - 1), the innermost
      // index (j = D - 1), 1 (j = D)
      A h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        h[j] = j < D - 1 ? static_cast<A>(i[f + j < 2 ? f + j : 2])
                         : (j == D - 1 ? static_cast<A>(i[2]) : A(j == D ? 1 : 0));
#pragma unroll
      for (int k = 0; k < 3; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[k][j] += g[k] * h[j];
    }
    A* out = static_cast<A*>(G.out) + b * D * (D + 1);
#ifdef NJ_PUSHPULL_EMULATE
    const bool lead = true;
#else
    const bool lead = (threadIdx.x & 31) == 0;
#endif
#pragma unroll
    for (int k = 0; k < 3; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const A v = warp_sum(acc[k][j]);
        if (lead && k >= f && j <= D && v != A(0)) atomicAdd(out + (k - f) * (D + 1) + j, v);
      }
  }
}

// the order-0/1 fast paths computed in float32, with a register cap
template <class Op, int O, int DIM>
__global__ void __launch_bounds__(kThreads, Op::DER == 0 ? NJ_PP_MINB_GATHER : NJ_PP_MINB_DERIV)
    pushpull_kernel_capped(const __grid_constant__ Geo<typename Op::I> G) {
  kernel_body<Op, O, DIM>(G);
}

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit
