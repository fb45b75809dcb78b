// Tiled scatter of push and pull_backward on CUDA (included by kernels.cuh).
//
// Why: with scattered targets (e.g. i.i.d. displacements) the one-thread-per-point kernel issues
// (O+1)^D global atomics per point to addresses that neighbouring threads do not share, and
// they dominate its time. When the grid has one point per source voxel (O == S) and moves
// points by a few voxels, the taps of a compact tile of points fall in a small box: a block
// accumulates them in shared memory (shared atomics), then adds the box to the output once with
// coalesced global atomics that skip the cells nothing touched.
//
// Block = one tile of TZ x TY x TX points (grid index = source index, as O == S); its window =
// the tile's box grown by kTileLo voxels below and kTileHi above along each real dim (the taps
// of orders 0-3 for displacements within about +-2 voxels). For each batch of the block and
// each channel, three steps separated by __syncthreads():
//   0 zero the window;
//   1 scatter: a point whose taps are all interior (no folding) and inside the window adds to
//     the window; any other point (border, farther displaced, out of range) takes the
//     one-point path (run_point, global atomics), for all channels in the step of channel 0;
//   2 flush: add the window's non-zero cells to the output (global atomics).
// So the result is the same for any grid; only the speed depends on it. Each step is a function
// of (step index, thread), which lets the host emulation run a block step by step over its
// threads (tests/cuda/emu/pushpull_cuda_emu.cpp).
#pragma once

namespace nitorch_jit {
namespace pushpull {
namespace cuda {

constexpr int kTileLo = 3, kTileHi = 4;

// Tile extents (points) per internal dim, for DIM real dims and computation type A. 3-D:
// 8 x 16 x 16 (float, a 15 x 23 x 23 window: 31 KiB) or 4 x 16 x 16 (double, 46 KiB: under
// the 48 KiB of static shared memory); 2-D: 32 x 64.
template <int DIM, typename A>
struct TileShape {
  static constexpr int TZ = DIM == 3 ? (sizeof(A) == 4 ? 8 : 4) : 1;
  static constexpr int TY = DIM == 3 ? 16 : 32;
  static constexpr int TX = DIM == 3 ? 16 : 64;
};

// Offsets of one dim's taps into the window.
template <typename I, int N>
struct WOff {
  I off_[N];
  __device__ __forceinline__ I off(int k) const { return off_[k]; }
};

// Taps of order O at x when all of them are interior (0 <= i0, i0 + O < n: no folding) and
// inside the window [lo, lo + wn): weights (and derivatives) and source offsets (stride st) in
// t, window offsets (stride ws) in w. u is computed as fixed_taps does (same weights, bit for
// bit). False otherwise.
template <int O, int DER, typename A, typename I>
__device__ __forceinline__ bool window_taps(A x, I n, I st, I lo, I wn, I ws,
                                            FTaps<A, I, O, DER>& t, WOff<I, O + 1>& w) {
  const A xs = (O & 1) ? x - A((O - 1) / 2) : x - A(O - 1) * A(0.5);
  const A fl = nj_floor(xs);
  // compared in A first: fl may lie far outside I's range
  if (!(fl >= A(0) && fl >= static_cast<A>(lo) && fl < static_cast<A>(n - O) &&
        fl < static_cast<A>(lo + wn - O)))
    return false;
  const I i0 = static_cast<I>(fl);
  if (i0 + O >= n || i0 + O >= lo + wn) return false;  // (float rounding of the bounds)
  const A u = xs - fl;
  SplineTaps<O, 0>::eval(u, t.w_);
  if constexpr (DER >= 1) SplineTaps<O, 1>::eval(u, t.dw_);
  if constexpr (DER >= 2) SplineTaps<O, 2>::eval(u, t.ddw_);
  t.valid = (1u << (O + 1)) - 1u;
#pragma unroll
  for (int k = 0; k <= O; ++k) {
    t.off_[k] = (i0 + k) * st;
    w.off_[k] = (i0 - lo + k) * ws;
  }
  return true;
}

template <class Op, int O, int DIM>
struct TiledScatter {
  using S = typename Op::S;
  using A = typename Op::A;
  using I = typename Op::I;
  static constexpr int DER = Op::DER;
  static constexpr int TZ = TileShape<DIM, A>::TZ, TY = TileShape<DIM, A>::TY,
                       TX = TileShape<DIM, A>::TX;
  static constexpr int kGrow = kTileLo + kTileHi;
  static constexpr int WZ = DIM == 3 ? TZ + kGrow : 1, WY = TY + kGrow, WX = TX + kGrow;
  static constexpr int kWin = WZ * WY * WX;  // window cells
  static constexpr int kPerThread = TZ * TY * TX / kThreads;
  static_assert(TZ * TY * TX == kPerThread * kThreads, "a tile is a whole number of rounds");

  static __host__ __device__ int64_t tiles(int64_t n, int64_t t) { return (n + t - 1) / t; }

  // blocks along x: one per tile
  static int64_t blocks(const Params& p) {
    return tiles(p.pts[0], TZ) * tiles(p.pts[1], TY) * tiles(p.pts[2], TX);
  }

  // steps of this block: 3 per (batch of the block, channel), uniform over its threads
  static __device__ __forceinline__ int64_t steps(const Geo<I>& G) {
    const int64_t y = blockIdx.y, ny = gridDim.y, B = G.B;
    const int64_t nb = y < B ? (B - 1 - y) / ny + 1 : 0;
    return nb * static_cast<int64_t>(G.C) * 3;
  }

  static __device__ __forceinline__ void step(const Geo<I>& G, A* win, int64_t s) {
    const int kind = static_cast<int>(s % 3);
    if (kind == 0) {
      for (int w = threadIdx.x; w < kWin; w += kThreads) win[w] = A(0);
      return;
    }
    const int64_t r = s / 3;
    const I c = static_cast<I>(r % G.C);
    const I b = static_cast<I>(blockIdx.y + (r / G.C) * gridDim.y);
    // the tile's first point (internal dims) and the window's first voxel
    I o[3], lo[3];
    {
      int64_t t = blockIdx.x;
      const int64_t ntx = tiles(G.pts[2], TX), nty = tiles(G.pts[1], TY);
      o[2] = static_cast<I>((t % ntx) * TX);
      t /= ntx;
      o[1] = static_cast<I>((t % nty) * TY);
      o[0] = static_cast<I>((t / nty) * TZ);
      lo[0] = DIM == 3 ? o[0] - kTileLo : I(0);
      lo[1] = o[1] - kTileLo;
      lo[2] = o[2] - kTileLo;
    }
    if (kind == 1)
      scatter(G, win, b, c, o, lo);
    else
      flush(G, win, b, c, lo);
  }

  static __device__ __forceinline__ void scatter(const Geo<I>& G, A* win, I b, I c, const I* o,
                                                 const I* lo) {
#pragma unroll 1
    for (int k = 0; k < kPerThread; ++k) {
      const int q = threadIdx.x + k * kThreads;
      const I i0 = o[0] + q / (TX * TY), i1 = o[1] + (q / TX) % TY, i2 = o[2] + q % TX;
      if (i0 >= G.pts[0] || i1 >= G.pts[1] || i2 >= G.pts[2]) continue;
      const I p = (i0 * G.pts[1] + i1) * G.pts[2] + i2;
      I goff, poff;
      if (G.flat) {
        goff = p * G.gP;
        poff = p * G.pP;
      } else {
        point_offsets(G, i0, i1, i2, goff, poff);
      }
      point(G, win, b, c, p, goff + b * G.gB, poff + b * G.pB, lo);
    }
  }

  static __device__ __forceinline__ void point(const Geo<I>& G, A* win, I b, I c, I p, I goff,
                                               I poff, const I* lo) {
    A x[3];
    if (!load_point<S>(G, goff, 3 - DIM, x)) {
      Op::tile_empty(G, b, p, c);
      return;
    }
    constexpr int O0 = DIM >= 3 ? O : 0;
    FTaps<A, I, O0, DER> t0;
    FTaps<A, I, O, DER> t1, t2;
    WOff<I, O0 + 1> w0;
    WOff<I, O + 1> w1, w2;
    bool in = window_taps<O, DER>(x[2], G.src[2], G.sst[2], lo[2], I(WX), I(1), t2, w2) &&
              window_taps<O, DER>(x[1], G.src[1], G.sst[1], lo[1], I(WY), I(WX), t1, w1);
    if constexpr (DIM >= 3) {
      in = in && window_taps<O, DER>(x[0], G.src[0], G.sst[0], lo[0], I(WZ), I(WY * WX), t0, w0);
    } else {
      set_constant(t0);
      w0.off_[0] = I(0);
    }
    if (!in) {
      if (c == 0) run_point<Op, O, DIM>(G, b, p, goff, poff);  // every channel, global atomics
      return;
    }
    Op::tile_apply(G, b, p, poff, c, t0, t1, t2, w0, w1, w2, win);
  }

  static __device__ __forceinline__ void flush(const Geo<I>& G, const A* win, I b, I c,
                                               const I* lo) {
    A* out = static_cast<A*>(G.out) + (b * G.C + c) * G.N;
    for (int w = threadIdx.x; w < kWin; w += kThreads) {
      const A v = win[w];
      if (v == A(0)) continue;  // nothing added here (or it cancelled out): adds nothing
      const I z = lo[0] + w / (WY * WX), y = lo[1] + (w / WX) % WY, x = lo[2] + w % WX;
      // cells outside the source receive nothing (only interior taps go to the window)
      if (z < 0 || y < 0 || x < 0 || z >= G.src[0] || y >= G.src[1] || x >= G.src[2]) continue;
      atomicAdd(out + (z * G.sst[0] + y * G.sst[1] + x * G.sst[2]), v);
    }
  }
};

// Variants that have a tiled kernel: the ops with tile_apply (push, pull_backward) on fast
// paths in 2-D and 3-D, float and double (the window holds the data type), 32-bit offsets.
template <class Op, int O, int DIM>
constexpr bool tiled_variant() {
  return Op::kTile && O >= 0 && DIM >= 2 &&
         std::is_same<typename Op::S, typename Op::A>::value &&
         std::is_same<typename Op::I, int32_t>::value;
}

// Resident blocks per SM asked of the float32 order-0/1 variants (a register cap): the most
// without spills in ptxas's report for sm_90 (not yet timed on a GPU): push 4 (<= 64 registers;
// 4 x 31 KiB of shared memory), pull_backward 3 (<= 85). Without a cap they take 64-90 and
// ~100 registers; other variants spill under any useful cap: none.
#ifndef NJ_PP_MINB_TILED
#define NJ_PP_MINB_TILED 4
#endif
#ifndef NJ_PP_MINB_TILED_DERIV
#define NJ_PP_MINB_TILED_DERIV 3
#endif

template <class Op, int O>
constexpr int tiled_min_blocks() {
  if (O > 1 || sizeof(typename Op::A) != 4) return 1;
  return Op::DER == 0 ? NJ_PP_MINB_TILED : NJ_PP_MINB_TILED_DERIV;
}

#ifndef NJ_PUSHPULL_EMULATE
template <class Op, int O, int DIM>
__global__ void __launch_bounds__(kThreads, tiled_min_blocks<Op, O>())
    pushpull_tiled_kernel(const __grid_constant__ Geo<typename Op::I> G) {
  using T = TiledScatter<Op, O, DIM>;
  __shared__ typename Op::A win[T::kWin];
  const int64_t n = T::steps(G);
  for (int64_t s = 0; s < n; ++s) {
    T::step(G, win, s);
    __syncthreads();
  }
}
#endif

template <class Op, int O, int DIM>
cudaError_t launch_tiled(const Geo<typename Op::I>& G, const Params& prm, cudaStream_t stream) {
  using T = TiledScatter<Op, O, DIM>;
  const dim3 grid(static_cast<unsigned>(T::blocks(prm)),
                  static_cast<unsigned>(prm.B < kMaxGridY ? prm.B : kMaxGridY));
#ifdef NJ_PUSHPULL_EMULATE
  (void)stream;
  nj_emulate_phased_launch(
      grid, dim3(kThreads), T::kWin * sizeof(typename Op::A), [&] { return T::steps(G); },
      [&](void* win, int64_t s) { T::step(G, static_cast<typename Op::A*>(win), s); });
  return cudaSuccess;
#else
  pushpull_tiled_kernel<Op, O, DIM><<<grid, kThreads, 0, stream>>>(G);
  return cudaGetLastError();
#endif
}

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit
