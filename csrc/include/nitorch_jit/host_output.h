// Output tensors of the CPU kernels. A fresh allocation of tens of MiB comes from the OS
// untouched, and the kernel's first write to each 4 KiB page faults: on the project's 2-core VM
// a fresh 25 MB tensor costs ~9 ms of faults when first written, as much as a trilinear pull of
// 2 M points. With the huge_pages tuning knob (NI_JIT_HUGE_PAGES=1, off by default) large
// outputs ask for transparent huge pages before the first touch (madvise; Linux), one fault per
// 2 MiB. Off by default: where THP's defrag setting is "madvise" (a common default) the kernel
// compacts memory synchronously to serve the advice, and on that VM the first calls of a
// process paid +100 ms each for a 92 MB output, before freed huge pages were there to reuse. A
// loop that allocates such outputs again and again gains (8-channel 128^3 pull: 44 -> 31 ms).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "nitorch_jit/tuning.h"

namespace nitorch_jit {

// Advise huge pages for the whole 2 MiB pages inside [data, data + bytes), for blocks of 32 MiB
// or more: glibc maps those fresh from the OS on every allocation (its largest mmap threshold),
// so every call pays the faults (measured: an 8-channel 128^3 pull, 64 MiB out, 44 -> 31 ms).
// Smaller blocks are often recycled from the heap, where the advice made later faults dearer
// (a 16 MiB output: 28 ms some calls, 46 ms others, against 28-32 ms without it).
inline void advise_huge_pages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  if (bytes < (int64_t(32) << 20) || !tuning::get(tuning::kHugePages)) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (p + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (p + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (end > begin)  // advice only: a refusal changes nothing
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data, (void)bytes;
#endif
}

// at::empty for a kernel's output: huge pages advised before anything writes it (CPU).
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
  if (t.is_cpu()) advise_huge_pages(t.data_ptr(), static_cast<int64_t>(t.nbytes()));
  return t;
}

// at::zeros, the same way
inline at::Tensor zeros_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return empty_output(sizes, options).zero_();
}

}  // namespace nitorch_jit
