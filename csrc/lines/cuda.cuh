// CUDA kernels that work line by line along one dim: the definitions of cuda.h.
// Include from exactly one kernel file per library (csrc/splinc/cuda/kernels.cu,
// csrc/resize/cuda/kernels.cu); torch-free. The kernels are in an anonymous namespace so
// that the two libraries share no kernel symbol.
//
// * filter: one thread per line runs the recursive prefilter (splinc::filter_lanes<1>) along
//   it, in place. The plan lives in global memory; every thread of a warp reads the same plan
//   entry at the same time (one broadcast load). Lines along the last dim (inner == 1) are
//   read with a stride per thread (uncoalesced): correct, not fast, no speed goal here.
// * gather: one thread per output element sums its K taps.
//
// Each launch covers its work with a grid-stride loop (any size, 64-bit counters).
// NJ_LINES_EMULATE (tests/cuda/emu/lines_cuda_emu.cpp): run the threads one by one on the host
// through nj_emulate_launch instead of <<<>>>.
#pragma once

#include "core/cuda_entry.h"
#include "core/host.h"
#include "lines/cuda.h"

namespace nitorch_jit {
namespace lines_cuda {
namespace {

constexpr int kThreads = 256;
// more work than kMaxBlocks * kThreads: the grid-stride loop takes it (tests lower the cap)
#ifndef NJ_LINES_MAX_BLOCKS
#define NJ_LINES_MAX_BLOCKS (int64_t(1) << 20)
#endif
constexpr int64_t kMaxBlocks = NJ_LINES_MAX_BLOCKS;

inline dim3 blocks_for(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks));
}

__device__ __forceinline__ int64_t first_item() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t item_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    filter_kernel(T* x, int64_t nlines, int64_t n, int64_t inner,
                  const splinc::LinePlan* __restrict__ plan) {
  for (int64_t t = first_item(); t < nlines; t += item_stride()) {
    const int64_t o = t / inner, i = t - o * inner;
    splinc::filter_lanes<1, T>(x + o * n * inner + i, inner, *plan);
  }
}

// I: the type of the element offsets (int32_t when they all fit).
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t total, I lin, I lout,
                  I inner, const int32_t* __restrict__ idx, const T* __restrict__ w, int K) {
  for (int64_t q = first_item(); q < total; q += item_stride()) {
    const I e = static_cast<I>(q);
    const I r = e / inner;
    const I i = e - r * inner;
    const I o = r / lout;
    const I j = r - o * lout;
    const T* src = in + o * lin * inner + i;
    const int32_t* ix = idx + static_cast<int64_t>(j) * K;
    const T* wt = w + static_cast<int64_t>(j) * K;
    // the CPU's order: first product, then += the others
    T acc = wt[0] * src[static_cast<I>(ix[0]) * inner];
    for (int k = 1; k < K; ++k) acc += wt[k] * src[static_cast<I>(ix[k]) * inner];
    out[e] = acc;
  }
}

template <typename T>
cudaError_t filter_t(T* x, int64_t outer, int64_t n, int64_t inner,
                     const splinc::LinePlan* plan, cudaStream_t stream) {
  const int64_t nlines = outer * inner;
  if (nlines == 0 || n == 0) return cudaSuccess;
  const dim3 grid = blocks_for(nlines);
#ifdef NJ_LINES_EMULATE
  (void)stream;
  nj_emulate_launch(grid, dim3(kThreads), [&] { filter_kernel<T>(x, nlines, n, inner, plan); });
  return cudaSuccess;
#else
  filter_kernel<T><<<grid, kThreads, 0, stream>>>(x, nlines, n, inner, plan);
  return cudaGetLastError();
#endif
}

template <typename T, typename I>
cudaError_t gather_t(const T* in, T* out, int64_t outer, int64_t lin, int64_t lout,
                     int64_t inner, const int32_t* idx, const T* w, int K, cudaStream_t stream) {
  const int64_t total = outer * lout * inner;
  if (total == 0) return cudaSuccess;
  const dim3 grid = blocks_for(total);
  const I li = static_cast<I>(lin), lo = static_cast<I>(lout), in_ = static_cast<I>(inner);
#ifdef NJ_LINES_EMULATE
  (void)stream;
  nj_emulate_launch(grid, dim3(kThreads), [&] {
    gather_kernel<T, I>(in, out, total, li, lo, in_, idx, w, K);
  });
  return cudaSuccess;
#else
  gather_kernel<T, I><<<grid, kThreads, 0, stream>>>(in, out, total, li, lo, in_, idx, w, K);
  return cudaGetLastError();
#endif
}

}  // namespace

// A kernel library (-DNJ_KERNEL_LIB) holds one launcher (-DNJ_KERNEL_filter or _gather) for one
// dtype (core/cuda_entry.h); the emulation of the tests holds both, for both dtypes.
#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_filter)
cudaError_t filter(void* x, bool dbl, int64_t outer, int64_t n, int64_t inner,
                   const splinc::LinePlan* plan, cudaStream_t stream) {
  if constexpr (builds_dtype(3))
    if (dbl) return filter_t(static_cast<double*>(x), outer, n, inner, plan, stream);
  if constexpr (builds_dtype(2))
    if (!dbl) return filter_t(static_cast<float*>(x), outer, n, inner, plan, stream);
  return cudaErrorInvalidValue;  // a dtype this kernel library was not built for
}
#endif

#if !defined(NJ_KERNEL_LIB) || defined(NJ_KERNEL_gather)
cudaError_t gather(const void* in, void* out, bool dbl, int64_t outer, int64_t lin, int64_t lout,
                   int64_t inner, const int32_t* idx, const void* w, int K, bool i32,
                   cudaStream_t stream) {
  auto go = [&](auto zero) -> cudaError_t {
    using T = decltype(zero);
    const auto* s = static_cast<const T*>(in);
    auto* d = static_cast<T*>(out);
    const auto* wt = static_cast<const T*>(w);
    if (i32) return gather_t<T, int32_t>(s, d, outer, lin, lout, inner, idx, wt, K, stream);
    return gather_t<T, int64_t>(s, d, outer, lin, lout, inner, idx, wt, K, stream);
  };
  if constexpr (builds_dtype(3))
    if (dbl) return go(0.0);
  if constexpr (builds_dtype(2))
    if (!dbl) return go(0.0f);
  return cudaErrorInvalidValue;  // a dtype this kernel library was not built for
}
#endif

}  // namespace lines_cuda
}  // namespace nitorch_jit

// The plain-C entries of a kernel library of MODULE (splinc, resize): nj_<MODULE>_filter or
// nj_<MODULE>_gather, whose call is a FilterCall or GatherCall (cuda.h). Expanded by the
// module's kernels.cu; nothing outside a kernel library.
#if defined(NJ_KERNEL_LIB) && defined(NJ_KERNEL_filter) && !defined(NJ_LINES_EMULATE)
#define NJ_LINES_EXPORT(MODULE)                                                                \
  extern "C" __attribute__((visibility("default"))) int nj_##MODULE##_filter(                 \
      const nj_host*, const void* call, char* err, int64_t err_len) {                         \
    const auto& c = *static_cast<const nitorch_jit::lines_cuda::FilterCall*>(call);           \
    return nitorch_jit::launch_error(                                                          \
        nitorch_jit::lines_cuda::filter(c.x, c.dbl != 0, c.outer, c.n, c.inner, c.plan,        \
                                        static_cast<cudaStream_t>(c.stream)),                  \
        "the line filter", err, err_len);                                                      \
  }
#elif defined(NJ_KERNEL_LIB) && defined(NJ_KERNEL_gather) && !defined(NJ_LINES_EMULATE)
#define NJ_LINES_EXPORT(MODULE)                                                                \
  extern "C" __attribute__((visibility("default"))) int nj_##MODULE##_gather(                 \
      const nj_host*, const void* call, char* err, int64_t err_len) {                         \
    const auto& c = *static_cast<const nitorch_jit::lines_cuda::GatherCall*>(call);           \
    return nitorch_jit::launch_error(                                                          \
        nitorch_jit::lines_cuda::gather(c.in, c.out, c.dbl != 0, c.outer, c.lin, c.lout,       \
                                        c.inner, c.idx, c.w, c.K, c.i32 != 0,                  \
                                        static_cast<cudaStream_t>(c.stream)),                  \
        "the line gather", err, err_len);                                                      \
  }
#else
#define NJ_LINES_EXPORT(MODULE)
#endif
