// CUDA pushpull launches: the variant a call takes (fast path by order and dim, tiled scatter,
// generic kernel), the dtype dispatch, and the macros that the per-op kernel files (pull.cu,
// push.cu, ...) expand: launch<OP>, and in a kernel library (-DNJ_KERNEL_LIB, one op for one
// dtype) its plain-C entry nj_pushpull_<op>, which the CUDA binding finds by name
// (core/binding.h). Includes no torch header.
#pragma once

#include "core/cuda_entry.h"
#include "core/host.h"
#include "pushpull/cuda/kernels.cuh"
#include "pushpull/cuda/tiles.cuh"  // the tiled scatter (push, pull_backward)
namespace nitorch_jit {
namespace pushpull {
namespace cuda {

// --------------------------------------------------------------------------------------------
// Variant selection and launch. MASK bit o: fast path for "every dim has order o".
// blocks of the affine_grad_dot reduction: enough to fill the GPU, few atomics
constexpr int64_t kAffineDotBlocks = 512;

template <class Op, int O, int DIM>
cudaError_t launch_affine_dot(const Geo<typename Op::I>& G, const Params& prm,
                              cudaStream_t stream) {
  const int64_t nb = (prm.P + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(nb < kAffineDotBlocks ? nb : kAffineDotBlocks),
                  static_cast<unsigned>(prm.B < kMaxGridY ? prm.B : kMaxGridY));
#ifdef NJ_PUSHPULL_EMULATE
  (void)stream;
  nj_emulate_launch(grid, dim3(kThreads), [&] { affine_dot_kernel<Op, O, DIM>(G); });
  return cudaSuccess;
#else
  affine_dot_kernel<Op, O, DIM><<<grid, kThreads, 0, stream>>>(G);
  return cudaGetLastError();
#endif
}

template <class Op, int O, int DIM>
cudaError_t launch_variant(const Params& prm, cudaStream_t stream) {
  const Geo<typename Op::I> G = make_geo<typename Op::I>(prm);
  if constexpr (std::is_same<Op, AffineDotOp<typename Op::S, typename Op::I>>::value) {
    return launch_affine_dot<Op, O, DIM>(G, prm, stream);
  } else {
    if constexpr (tiled_variant<Op, O, DIM>()) {
      if (prm.tile) return launch_tiled<Op, O, DIM>(G, prm, stream);
    }
    const int64_t bx = (prm.P + kThreads - 1) / kThreads;
    const dim3 grid(static_cast<unsigned>(bx),
                    static_cast<unsigned>(prm.B < kMaxGridY ? prm.B : kMaxGridY));
#ifdef NJ_PUSHPULL_EMULATE  // the host emulation of the tests (tests/cuda/emu/test_pushpull.py)
    (void)stream;
    nj_emulate_launch(grid, dim3(kThreads), [&] { pushpull_kernel<Op, O, DIM>(G); });
    return cudaSuccess;
#else
    if constexpr ((O == 0 || O == 1) && std::is_same<typename Op::A, float>::value)
      pushpull_kernel_capped<Op, O, DIM><<<grid, kThreads, 0, stream>>>(G);
    else
      pushpull_kernel<Op, O, DIM><<<grid, kThreads, 0, stream>>>(G);
    return cudaGetLastError();
#endif
  }
}

template <class Op, int O>
cudaError_t launch_dim(const Params& prm, cudaStream_t stream) {
  switch (prm.D) {
    case 1: return launch_variant<Op, O, 1>(prm, stream);
    case 2: return launch_variant<Op, O, 2>(prm, stream);
    default: return launch_variant<Op, O, 3>(prm, stream);
  }
}

template <class Op, int MASK>
cudaError_t launch_op(const Params& prm, cudaStream_t stream) {
  const int f = 3 - prm.D;
  const int o = prm.order[f];
  bool iso = true;
  for (int k = f; k < 3; ++k) iso = iso && prm.order[k] == o;
  if (iso) {
    if constexpr ((MASK & 1) != 0)
      if (o == 0) return launch_dim<Op, 0>(prm, stream);
    if constexpr ((MASK & 2) != 0)
      if (o == 1) return launch_dim<Op, 1>(prm, stream);
    if constexpr ((MASK & 4) != 0)
      if (o == 2) return launch_dim<Op, 2>(prm, stream);
    if constexpr ((MASK & 8) != 0)
      if (o == 3) return launch_dim<Op, 3>(prm, stream);
  }
  return launch_variant<Op, -1, 0>(prm, stream);
}

// MASK32: fast paths with 32-bit offsets; MASK64: with 64-bit offsets (huge tensors).
template <template <typename, typename> class OpT, int MASK32, int MASK64>
cudaError_t launch_all(const Params& prm, Dtype dtype, bool i32, cudaStream_t stream) {
  auto go = [&](auto s) -> cudaError_t {
    using S = decltype(s);
    if (i32) return launch_op<OpT<S, int32_t>, MASK32>(prm, stream);
    return launch_op<OpT<S, int64_t>, MASK64>(prm, stream);
  };
  switch (dtype) {
    case kHalf:
      if constexpr (nitorch_jit::builds_dtype(kHalf)) return go(__half());
      break;
    case kBFloat16:
      if constexpr (nitorch_jit::builds_dtype(kBFloat16)) return go(__nv_bfloat16());
      break;
    case kFloat:
      if constexpr (nitorch_jit::builds_dtype(kFloat)) return go(float());
      break;
    case kDouble:
      if constexpr (nitorch_jit::builds_dtype(kDouble)) return go(double());
      break;
  }
  return cudaErrorInvalidValue;  // a dtype this kernel library was not built for
}

// The affine ops: float32 and float64 only (the Python side computes half data in float32).
template <template <typename, typename> class OpT, int MASK32, int MASK64>
cudaError_t launch_affine(const Params& prm, Dtype dtype, bool i32, cudaStream_t stream) {
  auto go = [&](auto s) -> cudaError_t {
    using S = decltype(s);
    if (i32) return launch_op<OpT<S, int32_t>, MASK32>(prm, stream);
    return launch_op<OpT<S, int64_t>, MASK64>(prm, stream);
  };
  if constexpr (nitorch_jit::builds_dtype(kFloat))
    if (dtype == kFloat) return go(float());
  if constexpr (nitorch_jit::builds_dtype(kDouble))
    if (dtype == kDouble) return go(double());
  return cudaErrorInvalidValue;  // a dtype this kernel library was not built for
}

}  // namespace cuda
}  // namespace pushpull
}  // namespace nitorch_jit

// The specialisations of launch<OP> that the per-op stub files instantiate (one op per file,
// so that nvcc builds them in parallel): a grid op over every dtype, or an affine op over
// float32 / float64, with the fast paths FAST (bit o: every dim of order o) on 32-bit
// offsets and the generic kernel on 64-bit ones.
#define NJ_PUSHPULL_LAUNCH(OP, KERNEL, FAST)                                              \
  template <>                                                                           \
  cudaError_t nitorch_jit::pushpull::cuda::launch<nitorch_jit::pushpull::cuda::OP>(     \
      const Params& p, Dtype dtype, bool i32, cudaStream_t stream) {                    \
    return launch_all<KERNEL, FAST, 0>(p, dtype, i32, stream);                          \
  }
#define NJ_PUSHPULL_LAUNCH_AFFINE(OP, KERNEL, FAST)                                       \
  template <>                                                                           \
  cudaError_t nitorch_jit::pushpull::cuda::launch<nitorch_jit::pushpull::cuda::OP>(     \
      const Params& p, Dtype dtype, bool i32, cudaStream_t stream) {                    \
    return launch_affine<KERNEL, FAST, 0>(p, dtype, i32, stream);                       \
  }

// The plain-C entry of a kernel library (core/host.h's nj_kernel_fn) for op NAME, whose call
// is a KernelCall (params.cuh); a launch error comes back as its text. Nothing elsewhere.
#if defined(NJ_KERNEL_LIB) && !defined(NJ_PUSHPULL_EMULATE)
#define NJ_PUSHPULL_EXPORT(NAME, OP)                                                            \
  extern "C" __attribute__((visibility("default"))) int nj_pushpull_##NAME(                    \
      const nj_host*, const void* call, char* err, int64_t err_len) {                          \
    const auto& c = *static_cast<const nitorch_jit::pushpull::cuda::KernelCall*>(call);        \
    const cudaError_t rc = nitorch_jit::pushpull::cuda::launch<nitorch_jit::pushpull::cuda::OP>( \
        *c.params, static_cast<nitorch_jit::pushpull::cuda::Dtype>(c.dtype), c.i32 != 0,      \
        static_cast<cudaStream_t>(c.stream));                                                  \
    return nitorch_jit::launch_error(rc, #NAME, err, err_len);                                 \
  }
#else
#define NJ_PUSHPULL_EXPORT(NAME, OP)
#endif
