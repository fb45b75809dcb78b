// CUDA kernels of module "regsolve": the definitions of params.cuh. Included by exactly
// one kernel file (kernels.cu) and by the host emulation of the tests
// (tests/cuda/emu/regsolve_cuda_emu.cpp); torch-free.
//
// One thread per voxel (b, v), all output channels, each launch a grid-stride loop (any size,
// 64-bit counters; element offsets in int32 when they fit). The per-point math is
// regsolve/point.h, shared with the CPU kernels. A launch covers its voxels as a few
// boxes (set_boxes, params.cuh): first the interior, where no tap folds, so a tap reads
// the voxel's element plus a precomputed offset and the self-coupling of the kind 0 taps is one
// table; then the border shell, packed (its warps do not idle beside interior ones), where
// the taps fold through their bounds (point_value, add_self_block). The taps (merged, sorted
// by output channel, kind 0 first) are in global memory: every thread of a warp reads the same
// tap at the same time (one broadcast load).
//   matvec:  out = (L + H) x.
//   precond: out = (H_v + L_vv)^-1 r, the block's Cholesky solve (regsolve::chol_solve).
//   relax:   one colour of a sweep: the voxels i_d = col_d + m_d * per_d only (the boxes
//            enumerate them), residual then solve then x += z, in place. The host checked
//            that no tap couples two voxels of one colour, so the threads never read what
//            another one writes.
// The voxel solves keep their C x C block in registers for C <= 3, in a local array for
// C <= kLocalC, else in a slice of the global scratch buffer (no channel cap).
// NJ_REGSOLVE_EMULATE (tests/cuda/emu/regsolve_cuda_emu.cpp): run the threads one by one on the
// host through nj_emulate_launch instead of <<<>>>.
#pragma once

#include "regsolve/point.h"
#include "core/cuda_entry.h"
#include "regsolve/cuda/params.cuh"

namespace nitorch_jit {
namespace regsolve {
namespace cuda {
namespace {

__device__ __forceinline__ int64_t first_item() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t item_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The typed view of a launch's Params. I: the type of the element offsets.
template <typename T, typename I>
struct Data {
  int D, C, wc, K, reach, ntaps;
  I S;
  Grid g;
  int64_t st[kMaxDim];  // spatial strides (contiguous)
  const Tap<T>* taps;
  const int64_t* rel;
  const int* first;
  const int* mid;
  const T* self;
  const T* x;
  const T* w;
  const T* h;

  __device__ explicit Data(const Params& p)
      : D(p.D), C(p.C), wc(p.wc), K(p.K), reach(p.reach), ntaps(p.ntaps),
        S(static_cast<I>(p.S)), taps(static_cast<const Tap<T>*>(p.taps)), rel(p.rel),
        first(p.first), mid(p.mid), self(static_cast<const T*>(p.self)),
        x(static_cast<const T*>(p.x)), w(static_cast<const T*>(p.w)),
        h(static_cast<const T*>(p.h)) {
    g.D = D;
    int64_t s = 1;
    NJ_UNROLL
    for (int d = kMaxDim - 1; d >= 0; --d) {
      g.n[d] = d < D ? p.n[d] : 1;
      st[d] = d < D ? s : 0;
      if (d < D) s *= p.n[d];
    }
  }
};

// One voxel: batch b, index v among the S voxels of a channel, multi-index i.
template <typename I>
struct Voxel {
  I b, v;
  int64_t i[kMaxDim];
  bool inner;  // in the interior box: no tap folds
};

// Work item q of a launch: its box (Params::box, a few), then i_d = start_d + m_d * step_d
// with the last dim fastest and the batch slowest. The loops over the boxes and dims unroll
// (constant indices: the boxes stay in the parameter space, the voxel in registers).
template <typename T, typename I>
__device__ __forceinline__ Voxel<I> voxel_at(const Data<T, I>& d, const Params& p, int64_t q) {
  Box bx = p.box[0];
  bool inner = p.inner0;
  NJ_UNROLL
  for (int k = 1; k < kMaxBoxes; ++k)
    if (k < p.nbox && q >= p.box[k].first) {
      bx = p.box[k];
      inner = false;
    }
  Voxel<I> vx;
  vx.inner = inner;
  I r = static_cast<I>(q - bx.first), v = 0;
  NJ_UNROLL
  for (int k = kMaxDim - 1; k >= 0; --k) {
    vx.i[k] = 0;
    if (k >= d.D) continue;
    const I cnt = static_cast<I>(bx.cnt[k]);
    const I nr = r / cnt;
    vx.i[k] = bx.start[k] + static_cast<int64_t>(r - nr * cnt) * p.step[k];
    v += static_cast<I>(vx.i[k]) * static_cast<I>(d.st[k]);
    r = nr;
  }
  vx.b = r;
  vx.v = v;
  return vx;
}

// The [nc, *S] view of batch b of a contiguous tensor (regsolve/point.h's point functions).
template <typename T, typename I>
__device__ __forceinline__ View<T> view_of(const Data<T, I>& d, const T* base, int nc, I b) {
  View<T> v;
  if (!base) return v;
  v.p = base + static_cast<int64_t>(b) * nc * static_cast<int64_t>(d.S);
  v.nc = nc;
  v.sc = d.S;
  for (int k = 0; k < kMaxDim; ++k) v.s[k] = d.st[k];
  return v;
}

// (L x + H x)[c, voxel].
template <typename T, typename I>
__device__ T value_at(const Data<T, I>& d, int c, const Voxel<I>& vx) {
  const int t0 = d.first[c], t1 = d.first[c + 1];
  if (!vx.inner)
    return point_value(d.taps + t0, t1 - t0, c, vx.i, d.g, view_of(d, d.x, d.C, vx.b),
                       view_of(d, d.w, d.wc, vx.b), view_of(d, d.h, d.K, vx.b),
                       static_cast<int64_t>(d.C));
  const I S = d.S, C = static_cast<I>(d.C);
  const T* xv = d.x + vx.b * C * S + vx.v;  // channel 0 of the voxel
  T acc = T(0);
  if (d.h) {
    const T* hv = d.h + vx.b * static_cast<I>(d.K) * S + vx.v;
    if (d.K == 1)
      acc = hv[0] * xv[c * S];
    else if (d.K == d.C)
      acc = hv[c * S] * xv[c * S];
    else
      for (int k = 0; k < d.C; ++k)
        acc += hv[static_cast<I>(packed_index(c, k, d.C)) * S] * xv[k * S];
  }
  const int tm = d.mid[c];
  for (int t = t0; t < tm; ++t) acc += d.taps[t].coef * xv[static_cast<I>(d.rel[t])];
  if (tm == t1) return acc;
  // kinds 1 and 2 (weights given): the weight of channel c (or the only one)
  const T* wv = d.w ? d.w + (vx.b * static_cast<I>(d.wc) + (d.wc == 1 ? 0 : c)) * S + vx.v
                    : nullptr;
  const T wi = wv ? wv[0] : T(1);
  for (int t = tm; t < t1; ++t) {
    const Tap<T>& tap = d.taps[t];
    const I r = static_cast<I>(d.rel[t]);
    if (tap.kind == 2) {
      acc += tap.coef * wi * xv[r];
    } else {  // c_in == c: the spatial offset is r - c * S
      const T wn = wv ? wv[r - c * S] : T(1);
      acc += tap.coef * T(0.5) * (wi + wn) * (xv[c * S] - xv[r]);
    }
  }
  return acc;
}

// A (C x C, row-major, zero on entry) = H_v + L_vv.
template <typename T, typename I>
__device__ void block_at(const Data<T, I>& d, const Voxel<I>& vx, int64_t C, T* A) {
  if (!vx.inner) {
    add_hess_block(view_of(d, d.h, d.K, vx.b), C, static_cast<int64_t>(vx.v), A);
    add_self_block(d.taps, d.ntaps, vx.i, d.g, view_of(d, d.w, d.wc, vx.b), C, A);
    return;
  }
  for (int64_t j = 0; j < C * C; ++j) A[j] = d.self[j];
  add_hess_block(view_of(d, d.h, d.K, vx.b), C, static_cast<int64_t>(vx.v), A);
  const I S = d.S;
  for (int c = 0; c < C; ++c) {
    const int t0 = d.mid[c], t1 = d.first[c + 1];
    if (t0 == t1) continue;
    const T* wv = d.w ? d.w + (vx.b * static_cast<I>(d.wc) + (d.wc == 1 ? 0 : c)) * S + vx.v
                      : nullptr;
    const T wi = wv ? wv[0] : T(1);
    for (int t = t0; t < t1; ++t) {
      const Tap<T>& tap = d.taps[t];
      if (tap.kind == 2) {
        A[c * C + tap.c_in] += tap.coef * wi;
        continue;
      }
      const I off = static_cast<I>(d.rel[t]) - c * S;  // kind 1: c_in == c
      if (off == 0) continue;  // every offset 0: the difference is 0
      const T wn = wv ? wv[off] : T(1);
      A[c * C + c] += tap.coef * T(0.5) * (wi + wn);
    }
  }
}

// Work arrays of a voxel solve: NC in 1..kLocalC-1: C == NC (registers); NC == kLocalC:
// C <= kLocalC (local arrays); NC == 0: the thread's slice of the scratch buffer.
template <typename T, int NC>
struct Work {
  static constexpr int kN = NC > 0 ? NC : 1;
  T a[kN * kN], z[kN];
  T* A;
  T* Z;
  __device__ explicit Work(const Params& p) {
    if (NC > 0) {
      A = a;
      Z = z;
    } else {
      const int64_t C = p.C;
      A = static_cast<T*>(p.scratch) + first_item() * (C * C + C);
      Z = A + C * C;
    }
  }
};

template <typename T, int NC>
__device__ __forceinline__ int64_t channels(const Params& p) {
  return (NC > 0 && NC < kLocalC) ? NC : p.C;
}

template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) matvec_kernel(Params p) {
  const Data<T, I> d(p);
  T* out = static_cast<T*>(p.out);
  for (int64_t q = first_item(); q < p.work; q += item_stride()) {
    const Voxel<I> vx = voxel_at(d, p, q);
    T* o = out + vx.b * static_cast<I>(d.C) * d.S + vx.v;
    for (int c = 0; c < d.C; ++c) o[c * d.S] = value_at(d, c, vx);
  }
}

template <typename T, typename I, int NC>
__global__ void __launch_bounds__(kThreads) precond_kernel(Params p) {
  const Data<T, I> d(p);
  const int64_t C = channels<T, NC>(p);
  Work<T, NC> wk(p);
  T* out = static_cast<T*>(p.out);
  for (int64_t q = first_item(); q < p.work; q += item_stride()) {
    const Voxel<I> vx = voxel_at(d, p, q);
    for (int64_t j = 0; j < C * C; ++j) wk.A[j] = T(0);
    block_at(d, vx, C, wk.A);
    const I o = vx.b * static_cast<I>(C) * d.S + vx.v;
    for (int c = 0; c < C; ++c) wk.Z[c] = d.x[o + c * d.S];
    chol_solve(wk.A, C, wk.Z);
    for (int c = 0; c < C; ++c) out[o + c * d.S] = wk.Z[c];
  }
}

template <typename T, typename I, int NC>
__global__ void __launch_bounds__(kThreads) relax_kernel(Params p) {
  const Data<T, I> d(p);
  const int64_t C = channels<T, NC>(p);
  Work<T, NC> wk(p);
  T* x = static_cast<T*>(p.out);
  const T* g = static_cast<const T*>(p.g);
  for (int64_t q = first_item(); q < p.work; q += item_stride()) {
    const Voxel<I> vx = voxel_at(d, p, q);
    const I o = vx.b * static_cast<I>(C) * d.S + vx.v;
    // every residual first (they read x at this voxel), then the update
    for (int c = 0; c < C; ++c) wk.Z[c] = g[o + c * d.S] - value_at(d, c, vx);
    for (int64_t j = 0; j < C * C; ++j) wk.A[j] = T(0);
    block_at(d, vx, C, wk.A);
    chol_solve(wk.A, C, wk.Z);
    for (int c = 0; c < C; ++c) x[o + c * d.S] += wk.Z[c];
  }
}

// ------------------------------------------------------------------------- launchers
enum class Op { kMatvec, kPrecond, kRelax };

template <Op OP, typename T, typename I, int NC>
cudaError_t launch(const Params& p, cudaStream_t stream) {
  const int64_t work = p.work;
  if (work == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(launch_blocks(work, OP == Op::kMatvec ? 0 : p.C,
                                                      sizeof(T))));
#ifdef NJ_REGSOLVE_EMULATE
  (void)stream;
  nj_emulate_launch(grid, dim3(kThreads), [&] {
    if constexpr (OP == Op::kMatvec) matvec_kernel<T, I>(p);
    else if constexpr (OP == Op::kPrecond) precond_kernel<T, I, NC>(p);
    else relax_kernel<T, I, NC>(p);
  });
  return cudaSuccess;
#else
  if constexpr (OP == Op::kMatvec) matvec_kernel<T, I><<<grid, kThreads, 0, stream>>>(p);
  else if constexpr (OP == Op::kPrecond) precond_kernel<T, I, NC><<<grid, kThreads, 0, stream>>>(p);
  else relax_kernel<T, I, NC><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
#endif
}

template <Op OP, typename T, typename I>
cudaError_t launch_nc(const Params& p, cudaStream_t stream) {
  if constexpr (OP == Op::kMatvec) return launch<OP, T, I, 1>(p, stream);  // NC unused
  else
    switch (p.C) {
      case 1: return launch<OP, T, I, 1>(p, stream);
      case 2: return launch<OP, T, I, 2>(p, stream);
      case 3: return launch<OP, T, I, 3>(p, stream);
      default:
        if (p.C <= kLocalC) return launch<OP, T, I, kLocalC>(p, stream);
        return launch<OP, T, I, 0>(p, stream);
    }
}

// A kernel library holds one op for one dtype (core/cuda_entry.h); the emulation, every one.
template <Op OP>
cudaError_t launch_any(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  if constexpr (builds_dtype(3))
    if (dbl)
      return i32 ? launch_nc<OP, double, int32_t>(p, stream)
                 : launch_nc<OP, double, int64_t>(p, stream);
  if constexpr (builds_dtype(2))
    if (!dbl)
      return i32 ? launch_nc<OP, float, int32_t>(p, stream)
                 : launch_nc<OP, float, int64_t>(p, stream);
  return cudaErrorInvalidValue;  // a dtype this kernel library was not built for
}

}  // namespace

#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_reg_matvec)
cudaError_t matvec(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  return launch_any<Op::kMatvec>(p, dbl, i32, stream);
}
#endif
#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_reg_precond)
cudaError_t precond(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  return launch_any<Op::kPrecond>(p, dbl, i32, stream);
}
#endif
#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_reg_relax_)
cudaError_t relax(const Params& p, bool dbl, bool i32, cudaStream_t stream) {
  return launch_any<Op::kRelax>(p, dbl, i32, stream);
}
#endif

}  // namespace cuda
}  // namespace regsolve
}  // namespace nitorch_jit
