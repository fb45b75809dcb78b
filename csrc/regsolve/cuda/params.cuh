// CUDA kernels of module "regsolve" (docs/regsolve-spec.md): the launch parameters and the
// launchers that the host code (host.cuh) calls. No torch header: the kernels
// (kernels.cu) compile quickly and in parallel with the host file.
//
// Every tensor is contiguous: x, out, g [B, C, *S], w [B, wc, *S], h [B, K, *S], so an element
// (b, c, v) of a tensor with nc channels is at (b * nc + c) * S + v, v the voxel's index in
// the S voxels of a channel. One thread per voxel (b, v) evaluates all output channels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// Hidden (as lines/cuda.h): each library calls its own.
#if defined(__GNUC__)
#define NJ_REGSOLVE_API __attribute__((visibility("hidden")))
#else
#define NJ_REGSOLVE_API
#endif

namespace nitorch_jit {
namespace regsolve {
namespace cuda {

constexpr int kThreads = 256;
// more work than kMaxBlocks * kThreads: the grid-stride loops take it (tests lower the cap)
#ifndef NJ_REGSOLVE_MAX_BLOCKS
#define NJ_REGSOLVE_MAX_BLOCKS (int64_t(1) << 20)
#endif
constexpr int64_t kMaxBlocks = NJ_REGSOLVE_MAX_BLOCKS;
// The voxel solves keep their C x C block and C-vector in a local array for C <= kLocalC,
// else in a global scratch buffer of C * C + C values per thread, at most kScratchBytes in
// all (which caps the grid of those launches).
constexpr int kLocalC = 8;
constexpr int64_t kScratchBytes = int64_t(64) << 20;

// Blocks of a launch over `work` voxels; C and the type's size set the scratch cap.
inline int64_t launch_blocks(int64_t work, int64_t C, size_t tsize) {
  int64_t b = (work + kThreads - 1) / kThreads;
  if (b > kMaxBlocks) b = kMaxBlocks;
  if (C > kLocalC) {
    int64_t cap = kScratchBytes / (kThreads * (C * C + C) * static_cast<int64_t>(tsize));
    if (cap < 1) cap = 1;
    if (b > cap) b = cap;
  }
  return b < 1 ? 1 : b;
}

// Scratch values a launch over `work` voxels needs (0 for C <= kLocalC).
inline int64_t scratch_size(int64_t work, int64_t C, size_t tsize) {
  return C > kLocalC ? launch_blocks(work, C, tsize) * kThreads * (C * C + C) : 0;
}

// A box of voxels of a launch: i_d = start_d + m_d * step_d (m_d < cnt_d), every batch; its
// first element is work item `first` of the launch.
struct Box {
  int64_t first = 0;
  int64_t start[3] = {0, 0, 0}, cnt[3] = {1, 1, 1};
};
constexpr int kMaxBoxes = 1 + 2 * 3;

// One launch. Device pointers, of the data's type T (float or double) unless stated.
struct Params {
  int D = 1;
  int C = 1;         // channels of x
  int wc = 0;        // channels of w (0: no weights, w reads 1)
  int K = 0;         // values per voxel of h (0: no Hessian)
  int reach = 0;     // largest |offset| of the taps: a voxel at least that far from every
                     // border is interior (no tap folds there)
  int ntaps = 0;
  int64_t B = 0, S = 0;
  int64_t n[3] = {1, 1, 1};  // spatial sizes
  const void* taps = nullptr;     // regsolve::Tap<T>[ntaps], merged, sorted by c_out
  const int64_t* rel = nullptr;   // [ntaps]: where an interior voxel's tap reads, from channel 0
                                  // of the voxel: c_in * S + the spatial offset
  const int* first = nullptr;     // [C + 1]: the taps of c_out are [first[c], first[c + 1])
  const int* mid = nullptr;       // [C]: its kind 0 taps [first[c], mid[c]), then kinds 1, 2
  const void* self = nullptr;     // [C * C]: L_vv of the kind 0 taps at an interior voxel
  const void* x = nullptr;        // matvec: x; precond: r; relax: x (updated in place)
  const void* w = nullptr;
  const void* h = nullptr;
  const void* g = nullptr;        // relax: the gradient
  void* out = nullptr;            // matvec, precond: the result; relax: x
  void* scratch = nullptr;        // C > kLocalC: launch_blocks * kThreads * (C * C + C)
  // the voxels of the launch (set_boxes): work items [0, work), in nbox boxes; box 0 holds the
  // interior ones if inner0
  int64_t work = 0;
  int nbox = 0;
  bool inner0 = false;
  int64_t step[3] = {1, 1, 1};
  Box box[kMaxBoxes];
};

// The voxels i_d = col_d + m_d * per_d (m_d >= 0, i_d < n_d) of every batch, as boxes (p.D,
// p.B, p.n and p.reach set): box 0 the interior ones (at least `reach` from every border, no
// tap folds there), if any, then the border shell, compact: for each axis a, the voxels within
// reach of a border along a and in the interior range along the axes before a. matvec and
// precond: col 0, per 1; relax: one colour.
inline void set_boxes(Params& p, const int64_t* col, const int64_t* per) {
  const int D = p.D;
  int64_t ilo[3], ihi[3];  // the interior range of each axis
  for (int d = 0; d < D; ++d) {
    ilo[d] = p.reach < p.n[d] ? p.reach : p.n[d];
    ihi[d] = p.n[d] - p.reach > ilo[d] ? p.n[d] - p.reach : ilo[d];
    p.step[d] = per[d];
  }
  p.nbox = 0;
  p.work = 0;
  p.inner0 = false;
  auto add = [&](const int64_t* lo, const int64_t* hi, bool inner) {
    Box b;
    int64_t size = p.B;
    for (int d = 0; d < D; ++d) {
      int64_t s = col[d];  // the first index >= lo of the lattice
      if (s < lo[d]) s += (lo[d] - s + per[d] - 1) / per[d] * per[d];
      b.start[d] = s;
      b.cnt[d] = s < hi[d] ? (hi[d] - 1 - s) / per[d] + 1 : 0;
      size *= b.cnt[d];
    }
    if (size == 0) return;
    b.first = p.work;
    p.box[p.nbox++] = b;
    p.work += size;
    p.inner0 = p.inner0 || inner;
  };
  add(ilo, ihi, true);
  for (int a = 0; a < D; ++a) {
    int64_t lo[3], hi[3];
    for (int d = 0; d < D; ++d) {
      lo[d] = d < a ? ilo[d] : 0;
      hi[d] = d < a ? ihi[d] : p.n[d];
    }
    hi[a] = ilo[a];  // below the interior range
    add(lo, hi, false);
    lo[a] = ihi[a];  // above it
    hi[a] = p.n[a];
    add(lo, hi, false);
  }
}

// One launch, as the CUDA binding hands it to a kernel library's entry (kernels.cu).
struct KernelCall {
  const Params* params;
  int dbl, i32;
  void* stream;  // the cudaStream_t to launch on
};

// out = (L + H) x. dbl: float64, else float32. i32: every element offset of every tensor fits
// in int32 (faster index arithmetic).
NJ_REGSOLVE_API cudaError_t matvec(const Params& p, bool dbl, bool i32, cudaStream_t stream);
// out = (H_v + L_vv)^-1 x, voxel by voxel.
NJ_REGSOLVE_API cudaError_t precond(const Params& p, bool dbl, bool i32, cudaStream_t stream);
// One colour of a Gauss-Seidel sweep, in place on x.
NJ_REGSOLVE_API cudaError_t relax(const Params& p, bool dbl, bool i32, cudaStream_t stream);

}  // namespace cuda
}  // namespace regsolve
}  // namespace nitorch_jit
