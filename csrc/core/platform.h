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

#if defined(NJ_X86_64) && defined(_MSC_VER) && !defined(__clang__)
#include <immintrin.h>  // _xgetbv
#include <intrin.h>     // __cpuid, __cpuidex
#endif

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

}  // namespace platform
}  // namespace nitorch_jit
