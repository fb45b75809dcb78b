// The binding's half of the kernel-library interface (core/host.h), for a binding that links
// torch: the host table filled from ATen, and the kernels found by name.
//
// A kernel library is loaded by Python (nitorch_jit/backends/compiled.py), which hands each of
// its entries to the binding (nitorch_jit_bind_kernel). An op that finds no entry for its
// specialisation asks Python through the resolver (nitorch_jit_set_resolver), which builds or
// loads that library and binds it: so a call that reaches the op without our front end
// (opcheck, inductor's generated code) works as well.
#pragma once

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/host.h"
#include "core/torch_api.h"
#include "core/tuning.h"

#if !defined(NJ_STABLE_ABI)
#include <ATen/Parallel.h>
#endif

extern "C" {
// Build or load the kernel library of specialisation `name` and bind its entries; 0 on
// success, else the reason is written into err.
typedef int (*nj_resolver_fn)(const char* name, char* err, int64_t err_len);
}

namespace nitorch_jit {
namespace binding {

#if defined(NJ_STABLE_ABI)
// The stable ABI has no in_parallel_region: the ranges that our parallel_for runs (on the calling
// thread too, as ATen's do) mark their thread.
inline int& region_depth() {
  static thread_local int depth = 0;
  return depth;
}
inline void aten_parallel_for(int64_t begin, int64_t end, int64_t grain, nj_range_fn fn,
                              void* ctx) {
  torch::stable::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    ++region_depth();
    fn(ctx, b, e);
    --region_depth();
  });
}
inline int aten_in_parallel_region() { return region_depth() > 0 ? 1 : 0; }
inline int aten_num_threads() { return static_cast<int>(torch::stable::get_num_threads()); }
#else
inline void aten_parallel_for(int64_t begin, int64_t end, int64_t grain, nj_range_fn fn,
                              void* ctx) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
}
inline int aten_in_parallel_region() { return at::in_parallel_region() ? 1 : 0; }
inline int aten_num_threads() { return at::get_num_threads(); }
#endif
inline void* aligned_alloc64(int64_t bytes) {
  if (bytes <= 0) bytes = 64;
  return std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64));
}
inline void aligned_release(void* p) { std::free(p); }

// The one host table of the process (the binding's knobs: core/tuning.h).
inline const nj_host* host() {
  static const nj_host h{NJ_HOST_ABI,      &aten_parallel_for, &aten_in_parallel_region,
                         &aten_num_threads, &aligned_alloc64,   &aligned_release,
                         tuning::values()};
  return &h;
}

class Kernels {
 public:
  static Kernels& get() {
    static Kernels* k = new Kernels;  // never destroyed: ops may run during exit
    return *k;
  }
  void bind(const char* name, nj_kernel_fn fn) {
    std::lock_guard<std::mutex> lock(m_);
    map_[name] = fn;
  }
  void set_resolver(nj_resolver_fn fn) { resolver_.store(fn); }

  // The entry of `name`, resolved through Python the first time it is missing.
  nj_kernel_fn find(const char* name) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = map_.find(name);
    if (it != map_.end()) return it->second;
    nj_resolver_fn resolve = resolver_.load();
    NJ_CHECK(resolve != nullptr, "nitorch_jit: no kernel library for ", name,
                " is loaded and no resolver is set (import nitorch_jit first)");
    char err[4096] = {0};
    // Python's resolver binds through bind(): let it take the lock
    m_.unlock();
    const int rc = resolve(name, err, sizeof(err));
    m_.lock();
    NJ_CHECK(rc == 0, std::string(err[0] ? err : "nitorch_jit: building the kernels failed"));
    it = map_.find(name);
    NJ_CHECK(it != map_.end(), "nitorch_jit: the kernel library of ", name,
                " was loaded but did not bind it");
    return it->second;
  }

 private:
  std::mutex m_;
  std::unordered_map<std::string, nj_kernel_fn> map_;
  std::atomic<nj_resolver_fn> resolver_{nullptr};
};

// The entry of `name`, cached in `slot` (one per op call site and dtype).
inline nj_kernel_fn kernel(std::atomic<nj_kernel_fn>& slot, const char* name) {
  nj_kernel_fn fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = Kernels::get().find(name);
    slot.store(fn, std::memory_order_release);
  }
  return fn;
}

// Run one kernel call; its error text becomes the op's error, unchanged.
inline void run(nj_kernel_fn fn, const void* call) {
  char err[2048];
  err[0] = 0;
  const int rc = fn(host(), call, err, sizeof(err));
  NJ_CHECK(rc == 0, std::string(err));
}

// The name of a kernel specialisation, '<module>.<op>.<float32|float64>.<variant>' (variant
// "any": the generic path), as nitorch_jit/backends/compiled.py's kernel_names lists them.
// (variant "cuda": the CUDA library of that op and dtype).
inline std::string kernel_name(const char* module, const char* op, const char* dtype,
                               const std::string& variant) {
  return std::string(module) + "." + op + "." + dtype + "." + variant;
}

// Run the kernel of (module, op) for `dtype` ("float32", ...) and `variant` on `call`; `slot`
// caches its entry (one slot per call site, dtype and variant).
inline void run_kernel(std::atomic<nj_kernel_fn>& slot, const char* module, const char* op,
                       const char* dtype, const std::string& variant, const void* call) {
  nj_kernel_fn fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) fn = kernel(slot, kernel_name(module, op, dtype, variant).c_str());
  run(fn, call);
}

// The same for the CPU kernels, float64 (f64) or float32.
inline void run_kernel(std::atomic<nj_kernel_fn>& slot, const char* module, const char* op,
                       bool f64, const std::string& variant, const void* call) {
  run_kernel(slot, module, op, f64 ? "float64" : "float32", variant, call);
}

}  // namespace binding
}  // namespace nitorch_jit

// The binding library's C entries (once per library, beside NJ_DEFINE_SET_TUNING()).
#define NJ_DEFINE_BINDING_EXPORTS()                                                          \
  extern "C" NJ_EXPORT int64_t nitorch_jit_bind_kernel(         \
      const char* name, void* fn) {                                                          \
    nitorch_jit::binding::Kernels::get().bind(name, reinterpret_cast<nj_kernel_fn>(fn));     \
    return NJ_HOST_ABI;                                                                      \
  }                                                                                          \
  extern "C" NJ_EXPORT int64_t nitorch_jit_set_resolver(        \
      void* fn) {                                                                            \
    nitorch_jit::binding::Kernels::get().set_resolver(reinterpret_cast<nj_resolver_fn>(fn)); \
    return NJ_HOST_ABI;                                                                      \
  }
