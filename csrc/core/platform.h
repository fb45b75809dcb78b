// The compiler and architecture facts that the kernels branch on, in one place (issue 40):
// every SIMD guard of csrc/ reads these macros, never __x86_64__, __builtin_cpu_supports or
// __attribute__((target ...)) directly, so that a new compiler or architecture is taught here.
//
//   NJ_X86_64          1 on x86-64 (gcc/clang: __x86_64__; MSVC: _M_X64)
//   NJ_GNU_VECTORS     1 where GCC vector extensions (vector_size, lane-wise operators) exist:
//                      gcc and clang (both define __GNUC__), on any architecture; not MSVC.
//                      Code that uses them keeps a portable scalar twin for the rest.
//   NJ_AVX2_PATHS      1 where functions can be compiled for AVX2 + FMA by attribute beside
//                      baseline code (x86-64 with gcc/clang): the hand-written AVX2 paths.
//                      Elsewhere (aarch64, MSVC) they compile out and the portable code runs,
//                      which the compiler auto-vectorises for the baseline target.
//   NJ_TARGET_AVX2     function attribute: compile for AVX2 (empty without NJ_AVX2_PATHS)
//   NJ_TARGET_AVX2_FMA function attribute: compile for AVX2 + FMA (likewise)
//   NJ_ALWAYS_INLINE   force inlining (gcc/clang attribute, MSVC __forceinline)
//   NJ_EXPORT          an extern "C" entry point that the loader finds by name in a library
//                      built with hidden visibility (-fvisibility=hidden) or on Windows
//   nitorch_jit::platform::cpu_has_avx2_fma()  run-time check: the CPU and OS run AVX2 + FMA
//   nitorch_jit::platform::atomic_*  atomic access to a plain object of 4 or 8 bytes (C++17 has
//                      no std::atomic_ref): the GCC/clang builtins, or MSVC's intrinsics
//
// -DNJ_PORTABLE_ONLY turns NJ_GNU_VECTORS and NJ_AVX2_PATHS off: the portable code that MSVC
// compiles, built and tested here by gcc or clang.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#define NJ_X86_64 1
#endif

#if defined(__GNUC__) && !defined(NJ_PORTABLE_ONLY)
#define NJ_GNU_VECTORS 1
#endif

// not under nvcc: its device pass knows no x86 target attribute (no .cu file has AVX2 code)
#if defined(NJ_X86_64) && defined(NJ_GNU_VECTORS) && !defined(__CUDACC__)
#define NJ_AVX2_PATHS 1
#define NJ_TARGET_AVX2 __attribute__((target("avx2")))
#define NJ_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))
#else
#define NJ_TARGET_AVX2
#define NJ_TARGET_AVX2_FMA
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#define NJ_ALWAYS_INLINE __forceinline
#else
#define NJ_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

#if defined(_WIN32)
#define NJ_EXPORT __declspec(dllexport)
#else
#define NJ_EXPORT __attribute__((visibility("default")))
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>  // __cpuid, __cpuidex, _Interlocked*
#if defined(NJ_X86_64)
#include <immintrin.h>  // _xgetbv
#endif
#endif
#include <cstdint>
#include <cstring>

namespace nitorch_jit {
namespace platform {

// Whether this CPU (and its OS, which must save the YMM registers) runs AVX2 and FMA; false
// where no AVX2 code is compiled. Read once: the answer does not change while we run.
inline bool cpu_has_avx2_fma() {
#if defined(NJ_AVX2_PATHS)
  static const bool yes = [] {
    __builtin_cpu_init();  // harmless after the constructors, needed before them
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
#elif defined(NJ_X86_64) && defined(_MSC_VER) && !defined(__clang__)
  // No AVX2 path is compiled by MSVC today (NJ_AVX2_PATHS); the check is here for when one is.
  static const bool yes = [] {
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 7) return false;
    __cpuid(r, 1);
    const bool fma = (r[2] >> 12) & 1, osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
    if (!(fma && osxsave && avx) || (_xgetbv(0) & 6) != 6) return false;  // XMM + YMM state
    __cpuidex(r, 7, 0);
    return ((r[1] >> 5) & 1) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

// Atomic access to a plain object T of 4 or 8 bytes (an int, a float, a pointer), by the
// generic GCC/clang builtins, which take any such type (no cast through another type: its
// lvalue would break strict aliasing). MSVC: the interlocked intrinsics on the bit pattern, and
// volatile loads and stores, which MSVC orders as acquire / release (its default /volatile:ms).
#if defined(__GNUC__)
template <typename T>
inline T atomic_load_relaxed(const T* p) {
  T v;
  __atomic_load(p, &v, __ATOMIC_RELAXED);
  return v;
}
template <typename T>
inline T atomic_load_acquire(const T* p) {
  T v;
  __atomic_load(p, &v, __ATOMIC_ACQUIRE);
  return v;
}
template <typename T>
inline void atomic_store_relaxed(T* p, T v) {
  __atomic_store(p, &v, __ATOMIC_RELAXED);
}
// *p = desired if *p == *expected (bit for bit); else *expected = *p. Acquire-release.
template <typename T>
inline bool atomic_cas(T* p, T* expected, T desired) {
  return __atomic_compare_exchange(p, expected, &desired, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE);
}
// the same, relaxed, and it may fail spuriously (for a retry loop)
template <typename T>
inline bool atomic_cas_weak_relaxed(T* p, T* expected, T desired) {
  return __atomic_compare_exchange(p, expected, &desired, true, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED);
}
template <typename T>
inline T atomic_exchange(T* p, T v) {
  T old;
  __atomic_exchange(p, &v, &old, __ATOMIC_ACQ_REL);
  return old;
}
#elif defined(_MSC_VER)
template <typename T>
inline T atomic_load_acquire(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4 or 8 bytes");
  return *static_cast<const volatile T*>(p);
}
template <typename T>
inline T atomic_load_relaxed(const T* p) {
  return atomic_load_acquire(p);
}
template <typename T>
inline void atomic_store_relaxed(T* p, T v) {
  *static_cast<volatile T*>(p) = v;
}
template <typename T>
inline bool atomic_cas(T* p, T* expected, T desired) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4 or 8 bytes");
  if (sizeof(T) == 8) {
    __int64 e, d, old;
    std::memcpy(&e, expected, 8);
    std::memcpy(&d, &desired, 8);
    old = _InterlockedCompareExchange64(reinterpret_cast<volatile __int64*>(p), d, e);
    if (old == e) return true;
    std::memcpy(expected, &old, 8);
  } else {
    long e, d, old;
    std::memcpy(&e, expected, 4);
    std::memcpy(&d, &desired, 4);
    old = _InterlockedCompareExchange(reinterpret_cast<volatile long*>(p), d, e);
    if (old == e) return true;
    std::memcpy(expected, &old, 4);
  }
  return false;
}
template <typename T>
inline bool atomic_cas_weak_relaxed(T* p, T* expected, T desired) {
  return atomic_cas(p, expected, desired);
}
template <typename T>
inline T atomic_exchange(T* p, T v) {
  T cur = atomic_load_relaxed(p);
  while (!atomic_cas(p, &cur, v)) {
  }
  return cur;
}
#endif

}  // namespace platform
}  // namespace nitorch_jit
