// What a torch-free kernel library asks of the process that calls it (issue 31): threads,
// temporaries and the tuning knobs, through one plain-C table that the binding fills in
// (core/aten_host.h). Plain C on purpose: torch 2.4-2.6 build with the old libstdc++ ABI and a
// kernel library must not care which one its caller has.
//
// Kernel libraries are built with NJ_KERNEL_LIB defined and include no torch header; every
// other library (the binding, the monolithic libraries of the other modules) reaches ATen
// directly. core/parallel.h and core/tuning.h are written once on the three primitives below.
#pragma once

#include <cstdint>

#include "core/platform.h"  // NJ_EXPORT

extern "C" {

// One range of a parallel loop: fn(ctx, begin, end). It must not throw (kernels catch first).
typedef void (*nj_range_fn)(void* ctx, int64_t begin, int64_t end);

typedef struct nj_host {
  int64_t abi;  // NJ_HOST_ABI of the binding that filled the table
  // at::parallel_for: split [begin, end) in ranges of at least `grain` among the threads
  void (*parallel_for)(int64_t begin, int64_t end, int64_t grain, nj_range_fn fn, void* ctx);
  int (*in_parallel_region)(void);
  int (*num_threads)(void);
  // temporaries of a call: 64-byte aligned, NULL when the memory is not there
  void* (*alloc)(int64_t bytes);
  void (*release)(void* p);
  // the process-wide tuning knobs (core/tuning.h's order), read with relaxed atomic loads
  const int64_t* knobs;
} nj_host;

// A kernel entry: run the call described by `call` (a POD of the module's call.h); 0 on
// success, else the message (its first line is what the user sees) is written into err.
typedef int (*nj_kernel_fn)(const nj_host* host, const void* call, char* err, int64_t err_len);

}  // extern "C"

#define NJ_HOST_ABI 1

#if defined(NJ_KERNEL_LIB)
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

namespace nitorch_jit {
namespace host {

// The host of this library's current call (one binding per process, so always the same table).
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
inline const nj_host*& current() {
  static const nj_host* h = nullptr;
  return h;
}

inline int in_parallel_region() { return current()->in_parallel_region(); }
inline int num_threads() { return current()->num_threads(); }
inline const int64_t* knobs() { return current()->knobs; }

// f(begin, end) over ranges of at least `grain`; an exception of f is carried back to the
// calling thread and rethrown there (the host table is C: nothing may unwind through it).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  struct Ctx {
    const F* f;
    std::exception_ptr err;
    int failed;
  } ctx{&f, nullptr, 0};
  auto range = [](void* p, int64_t b, int64_t e) {
    Ctx* c = static_cast<Ctx*>(p);
    if (platform::atomic_load_relaxed(&c->failed)) return;
    try {
      (*c->f)(b, e);
    } catch (...) {
      if (!platform::atomic_exchange(&c->failed, 1)) c->err = std::current_exception();
    }
  };
  current()->parallel_for(begin, end, grain, range, &ctx);
  if (ctx.err) std::rethrow_exception(ctx.err);
}

// A temporary buffer of n elements of T, given back when it goes out of scope.
template <typename T>
class Temporary {
 public:
  explicit Temporary(int64_t n)
      : p_(static_cast<T*>(current()->alloc(n * static_cast<int64_t>(sizeof(T))))) {
    if (p_ == nullptr && n > 0)
      throw std::runtime_error("out of memory: a temporary of " +
                               std::to_string(n * static_cast<int64_t>(sizeof(T))) + " bytes");
  }
  ~Temporary() {
    if (p_ != nullptr) current()->release(p_);
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  T* get() const { return p_; }

 private:
  T* p_;
};

// The body of an entry: set the host, run, turn any exception into the error text.
template <class F>
int run_entry(const nj_host* h, char* err, int64_t err_len, const F& f) {
  if (h == nullptr || h->abi != NJ_HOST_ABI) {
    if (err_len > 0)
      std::snprintf(err, static_cast<size_t>(err_len),
                    "kernel library built for host interface %d, called through %lld: clear the "
                    "cache (nitorch-jit cache clear)",
                    NJ_HOST_ABI, h ? static_cast<long long>(h->abi) : -1LL);
    return 1;
  }
  current() = h;
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "%s", e.what());
  } catch (...) {
    if (err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "unknown C++ exception");
  }
  return 1;
}

}  // namespace host
}  // namespace nitorch_jit

// Defines the entry `nj_<name>` of a kernel library: `body` runs with `call` cast to `Type`.
#define NJ_KERNEL_ENTRY(name, Type, body)                                                  \
  extern "C" NJ_EXPORT int nj_##name(                         \
      const nj_host* host_, const void* call_, char* err_, int64_t err_len_) {              \
    const Type& call = *static_cast<const Type*>(call_);                                   \
    return nitorch_jit::host::run_entry(host_, err_, err_len_, [&] { body; });              \
  }

#elif !defined(NJ_STABLE_ABI)  // a library that links classic torch: the primitives are ATen's

#include <ATen/Parallel.h>

namespace nitorch_jit {
namespace host {

inline int in_parallel_region() { return at::in_parallel_region() ? 1 : 0; }
inline int num_threads() { return at::get_num_threads(); }

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  at::parallel_for(begin, end, grain, f);
}

}  // namespace host
}  // namespace nitorch_jit

#endif
