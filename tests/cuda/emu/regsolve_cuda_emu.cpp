// Host emulation of the CUDA regsolve kernels (tests/cuda/emu/test_regsolve.py): compiles the
// CUDA sources of csrc/regsolve (the kernels of regsolve/cuda/kernels.cuh and the host logic of
// regsolve/cuda/host.cuh, with the checks it shares with the CPU ops) with the host compiler
// and runs every "thread" of every launch one after the other on the CPU, with at most 2
// blocks per grid so that the grid-stride loops run. It checks the kernels' logic (voxel and
// colour indexing, the interior and border paths, the staged taps, the voxel solves in
// registers, local arrays and the scratch buffer, 32/64-bit offsets) without a GPU; what only
// a GPU does (memory spaces, the launch itself, streams) is left to tests/cuda/gpu/test_regsolve.py.
// The ops are registered under the CPU key of the namespace nj_emu_regsolve (schemas defined
// by the test).
#define NJ_REGSOLVE_EMULATE 1
#define NJ_REGSOLVE_MAX_BLOCKS 2  // the grid-stride loops run
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <type_traits>  // (standard headers first: they use __attribute__((__noinline__)))

#include "core/cuda_entry.h"
#include "core/host.h"

#include "cuda_emu.h"

#define __noinline__ __attribute__((noinline))
#include "regsolve/cuda/kernels.cuh"
#undef __noinline__

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "regsolve/cuda/host.cuh"

#include "cuda_emu_policy.h"

using nj_emu::EmuPolicy;

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nj_emu_regsolve, CPU, m) {
  using Ops = nitorch_jit::regsolve::cuda::Ops<EmuPolicy>;
  m.impl("reg_matvec", &Ops::reg_matvec);
  m.impl("reg_precond", &Ops::reg_precond);
  m.impl("reg_relax_", &Ops::reg_relax_);
}
