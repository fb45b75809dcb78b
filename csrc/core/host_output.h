// Output tensors of the CPU kernels. glibc maps every block of 32 MiB or more afresh from the OS
// (its largest mmap threshold) and unmaps it on free, so each call that returns such an output
// pays a page fault per 4 KiB page on first write: on the project's 2-core VM ~11 ms for a
// 46 MB tensor (2 threads), more than the resampling itself in many workloads.
//
// Two remedies, both tuning knobs:
// - output_cache_mb (NI_JIT_OUTPUT_CACHE_MB, default 256): freed outputs of >= 32 MiB are kept,
//   up to that many MiB per process, and the next output of the same size reuses one whose
//   pages are already mapped. Registration loops and batch reslicing allocate the same sizes
//   over and over. 0 turns it off; nitorch_jit.empty_cache() gives the blocks back.
// - huge_pages (NI_JIT_HUGE_PAGES=1, off by default): fresh large outputs ask for transparent
//   huge pages before the first touch (madvise), one fault per 2 MiB. Off by default: where
//   THP's defrag setting is "madvise" (a common default) the kernel compacts memory
//   synchronously to serve the advice, and on that VM the first calls of a process paid
//   +100 ms each for a 92 MB output.
//
// Written for both torches of core/torch_api.h: on the stable ABI a cached output is a
// from_blob tensor with a deleter (torch >= 2.11), which torch cannot resize in place (the
// classic one can: its storage is resizable); torch's own ops never resize an op's output.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/process.h"
#include "core/torch_api.h"
#include "core/tuning.h"

#if !defined(NJ_STABLE_ABI)
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Storage.h>
#endif

// Every function here is hidden: each library that allocates outputs has the code of a block
// cache, and an inline function of one library must never be interposed by another's (with
// default visibility the dynamic linker merges them). The process uses one cache: the first
// library to need it installs its own in the process state (core/process.h), and every block
// goes back to the cache it came from.
#if defined(__GNUC__)  // MSVC: hidden is its default (nothing is exported unmarked)
#pragma GCC visibility push(hidden)
#endif

namespace nitorch_jit {

constexpr int64_t kLargeOutputBytes = int64_t(32) << 20;  // glibc's largest mmap threshold

// Advise huge pages for the whole 2 MiB pages inside [data, data + bytes) (large blocks only).
inline void advise_huge_pages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  if (bytes < kLargeOutputBytes || !tuning::get(tuning::kHugePages)) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (p + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (p + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (end > begin)  // advice only: a refusal changes nothing
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data, (void)bytes;
#endif
}

#if defined(__linux__)
// The freed large outputs of the process, oldest first, at most output_cache_mb MiB in all.
// Blocks are anonymous mappings of whole 2 MiB multiples; a request reuses a block of exactly
// its rounded size (the same shapes recur), else maps a new one.
class OutputBlocks {
 public:
  // This library's (hidden: an inline function's static is otherwise merged across the
  // libraries of a process), never destroyed: an output may be freed after static
  // destructors have run.
#if defined(__GNUC__)
  __attribute__((visibility("hidden")))
#endif
  static OutputBlocks& get() {
    static OutputBlocks* blocks = new OutputBlocks;
    return *blocks;
  }

  static int64_t budget() { return tuning::get(tuning::kOutputCacheMB) << 20; }
  static int64_t rounded(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  // A block of rounded(bytes) bytes, or nullptr (the mapping failed).
  void* take(int64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(m_);
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->bytes == bytes) {
          void* p = it->p;
          total_ -= bytes;
          free_.erase(it);
          return p;
        }
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    advise_huge_pages(p, bytes);
    return p;
  }

  // Keep a freed block (the oldest ones go first when the budget is exceeded), or unmap it.
  void give(void* p, int64_t bytes) {
    std::lock_guard<std::mutex> lock(m_);
    const int64_t cap = budget();
    if (bytes > cap) {
      munmap(p, bytes);
    } else {
      free_.push_back({p, bytes});
      total_ += bytes;
    }
    trim_locked(cap);
  }

  // Unmap the oldest blocks until the cache fits the budget.
  void trim() {
    std::lock_guard<std::mutex> lock(m_);
    trim_locked(budget());
  }

 private:
  static constexpr int64_t kAlign = int64_t(2) << 20;
  struct Block {
    void* p;
    int64_t bytes;
  };

  void trim_locked(int64_t cap) {
    while (total_ > cap && !free_.empty()) {
      munmap(free_.front().p, free_.front().bytes);
      total_ -= free_.front().bytes;
      free_.pop_front();
    }
  }

  std::mutex m_;
  std::deque<Block> free_;
  int64_t total_ = 0;
};

// The process's block cache: the one in the process state, else this library's, installed
// there (the first library to need one wins; the others use it).
inline const nj_block_cache* process_blocks() {
  nj_process* state = process::current();
  const nj_block_cache* blocks = platform::atomic_load_acquire(&state->blocks);
  if (blocks != nullptr) return blocks;
  static const nj_block_cache mine{
      [](int64_t bytes) { return OutputBlocks::get().take(bytes); },
      [](void* p, int64_t bytes) { OutputBlocks::get().give(p, bytes); },
      [] { OutputBlocks::get().trim(); }};
  const nj_block_cache* expected = nullptr;
  if (platform::atomic_cas(&state->blocks, &expected, &mine))
    return &mine;
  return expected;  // another library installed its cache first
}

// The deleter's context of a cached output: its block and the cache it came from.
struct CachedOutput {
  void* p;
  int64_t bytes;
  const nj_block_cache* blocks;
  static void release(void* ctx) {
    auto* b = static_cast<CachedOutput*>(ctx);
    b->blocks->give(b->p, b->bytes);
    delete b;
  }
};

// The block of a large CPU output of `nbytes` (its rounded size in *bytes, its cache in
// *blocks), or nullptr when the cache is off, the output is small or the mapping failed (the
// caller allocates as usual).
inline void* cached_block(int64_t nbytes, int64_t* bytes, const nj_block_cache** blocks) {
  if (tuning::get(tuning::kOutputCacheMB) <= 0 || nbytes < kLargeOutputBytes) return nullptr;
  *bytes = OutputBlocks::rounded(nbytes);
  *blocks = process_blocks();
  return (*blocks)->take(*bytes);
}

#if defined(NJ_STABLE_ABI)
// A contiguous CPU tensor of `like`'s dtype on a cached block, or an undefined tensor.
inline api::Tensor cached_output(api::IntRef sizes, const api::Tensor& like) {
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  int64_t bytes = 0;
  const nj_block_cache* blocks = nullptr;
  void* p = cached_block(n * static_cast<int64_t>(like.element_size()), &bytes, &blocks);
  if (p == nullptr) return api::Tensor();
  std::vector<int64_t> strides(sizes.size());
  int64_t st = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = st;
    st *= sizes[i];
  }
  return torch::stable::from_blob(p, sizes, strides, like.device(), like.scalar_type(),
                                  [bytes, blocks](void* q) { blocks->give(q, bytes); });
#else
  (void)sizes, (void)like;
  return api::Tensor();
#endif
}
#else
// A contiguous CPU tensor on a cached block, or an undefined tensor when the cache is off or
// the block could not be had (the caller then allocates as usual).
inline at::Tensor cached_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  const int64_t nbytes = n * static_cast<int64_t>(options.dtype().itemsize());
  int64_t bytes = 0;
  const nj_block_cache* blocks = nullptr;
  void* p = cached_block(nbytes, &bytes, &blocks);
  if (p == nullptr) return at::Tensor();
  c10::DataPtr data(p, new CachedOutput{p, bytes, blocks}, &CachedOutput::release,
                    c10::Device(c10::kCPU));
  // resizable like any CPU tensor: growing it moves the data to the default allocator
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes),
                       std::move(data), c10::GetCPUAllocator(), /*resizable=*/true);
  return at::empty({0}, options).set_(std::move(storage), 0, sizes);
}
#endif
#endif  // __linux__

#if defined(NJ_STABLE_ABI)
// The output of a kernel, like `like` (CPU: large ones from the block cache).
inline api::Tensor empty_output(api::IntRef sizes, const api::Tensor& like) {
#if defined(__linux__)
  if (like.is_cpu()) {
    api::Tensor t = cached_output(sizes, like);
    if (t.defined()) return t;
  }
#endif
  api::Tensor t = api::empty(sizes, like);
  if (t.is_cpu())
    advise_huge_pages(t.data_ptr(), t.numel() * static_cast<int64_t>(t.element_size()));
  return t;
}
inline api::Tensor zeros_output(api::IntRef sizes, const api::Tensor& like) {
  api::Tensor t = empty_output(sizes, like);
  return api::zero_(t);
}
#else
// at::empty for a kernel's output (CPU: large ones from the block cache, or with huge pages
// advised before anything writes them).
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
#if defined(__linux__)
  if (options.device().is_cpu()) {
    at::Tensor t = cached_output(sizes, options);
    if (t.defined()) return t;
  }
#endif
  at::Tensor t = at::empty(sizes, options);
  if (t.is_cpu()) advise_huge_pages(t.data_ptr(), static_cast<int64_t>(t.nbytes()));
  return t;
}

// at::zeros, the same way
inline at::Tensor zeros_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return empty_output(sizes, options).zero_();
}

// the same, with `like`'s options (the form both torches of core/torch_api.h have)
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::Tensor& like) {
  return empty_output(sizes, like.options());
}
inline at::Tensor zeros_output(at::IntArrayRef sizes, const at::Tensor& like) {
  return zeros_output(sizes, like.options());
}
#endif

}  // namespace nitorch_jit

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
