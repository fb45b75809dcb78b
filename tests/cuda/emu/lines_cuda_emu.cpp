// Host emulation of the CUDA splinc and resize kernels (tests/cuda/emu/test_lines.py):
// compiles the CUDA sources of csrc/splinc and csrc/resize (the line kernels of
// lines/cuda.cuh and both modules' host logic) with the host compiler and runs
// every "thread" of every launch one after the other on the CPU. It checks the kernels'
// logic (line and element indexing, grid-stride loops, plans and tables in the uploaded
// buffer, 32/64-bit offsets) without a GPU; what only a GPU does (memory spaces, the launch
// itself, streams) is left to tests/cuda/gpu/test_lines.py. The ops are registered under the CPU
// key of the namespace nj_emu_lines (schemas defined by the test).
#define NJ_LINES_EMULATE 1
#define NJ_LINES_MAX_BLOCKS 2  // the grid-stride loops run
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
#include "lines/cuda.cuh"
#undef __noinline__

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "resize/cuda/host.cuh"
#include "splinc/cuda/host.cuh"

#include "cuda_emu_policy.h"

using nj_emu::EmuPolicy;

NJ_DEFINE_SET_TUNING()

TORCH_LIBRARY_IMPL(nj_emu_lines, CPU, m) {
  using Splinc = nitorch_jit::splinc::cuda::Ops<EmuPolicy>;
  using Resize = nitorch_jit::resize::cuda::Ops<EmuPolicy>;
  m.impl("spline_coeff_nd", &Splinc::spline_coeff_nd);
  m.impl("spline_coeff_nd_", &Splinc::spline_coeff_nd_);
  m.impl("resize", &Resize::resize);
  m.impl("resize_adjoint", &Resize::resize_adjoint);
}
