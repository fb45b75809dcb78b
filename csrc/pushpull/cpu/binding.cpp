// The CPU ops of module "pushpull" (docs/pushpull-spec.md) as torch sees them: the binding
// (issue 31). It checks the arguments (pushpull/checks.h, shared with CUDA), makes the outputs
// (core/host_output.h), fills a Call (call.h) and runs the kernel of the op and dtype from its
// torch-free kernel library (pull.cpp, push.cpp, dot.cpp), found by name (core/binding.h).
// The only translation unit of the module that includes torch headers: a torch upgrade
// rebuilds it alone, and the kernel libraries are reused. Written on core/torch_api.h: built on
// the LibTorch stable ABI where torch has what it needs (NJ_STABLE_ABI), else on the classic
// headers, from this one source.
#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "core/binding.h"
#include "core/host_output.h"
#include "core/message.h"
#include "core/torch_api.h"
#include "core/tuning.h"
#include "pushpull/checks.h"
#include "pushpull/cpu/call.h"
#include "pushpull/cpu/variants.h"
#include "pushpull/geometry.h"
#include "pushpull/tensor.h"

namespace nitorch_jit {
namespace pushpull {
namespace cpu {
namespace {

using Geom = Geometry;

struct CpuDev {
  static constexpr const char* kDevice = "CPU";
  static constexpr bool kHalf = false;
  static bool on_device(const api::Tensor& t) { return t.is_cpu(); }
};
inline int64_t check_grid(const api::Tensor& grid) { return checks::check_grid<CpuDev>(grid); }
inline int64_t check_affine(const api::Tensor& affine) {
  return checks::check_affine<CpuDev>(affine);
}
inline int64_t check_affine_resample(const api::Tensor& input, const char* layout,
                                     const api::Tensor& affine, api::IntArg shape,
                                     api::IntArg order, api::IntArg bound) {
  return checks::check_affine_resample<CpuDev>(input, layout, affine, shape, order, bound);
}
using checks::check_channels;
using checks::check_options;
using checks::check_point_shape;
using checks::check_shape;
using checks::check_tensor;
using checks::point_shape;
using checks::resampled_size;

// Geometry of B batches of points of spatial shape `pts`, options, and the source tensor's
// sizes/strides (spatial dims only). No grid strides: see make_geom.
Geom make_points_geom(int64_t B, api::IntRef pts, int64_t D, int64_t C, api::IntRef src_size,
                      api::IntRef src_stride, api::IntRef order, api::IntRef bound,
                      bool extrapolate) {
  Geom G;
  set_points(G, B, pts, D, order, bound, extrapolate);
  G.C = C;
  set_source(G, src_size, src_stride);
  return G;
}

// Geometry from the grid, options, and the source tensor's sizes/strides (spatial dims only).
Geom make_geom(const api::Tensor& grid, int64_t D, int64_t C, api::IntRef src_size,
               api::IntRef src_stride, api::IntRef order, api::IntRef bound, bool extrapolate) {
  Geom G = make_points_geom(grid.size(0), grid.sizes().slice(1, D), D, C, src_size, src_stride,
                            order, bound, extrapolate);
  set_grid_strides(G, grid.strides());
  return G;
}

// The checks and geometry of a gather from input [B, C, *S] at the points of `grid`.
Geom gather_geom(const api::Tensor& input, const api::Tensor& grid, api::IntRef order,
                 api::IntRef bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_options(order, bound, D);
  return make_geom(grid, D, input.size(1), input.sizes().slice(2), input.strides().slice(2),
                   order, bound, extrapolate);
}

// Strides of a per-point tensor [B, C, *O(, D)], internal order.
PointStrides point_strides(const api::Tensor& t, int64_t D, bool with_d) {
  PointStrides ps{t.stride(0), t.stride(1), {0, 0, 0}, with_d ? t.stride(-1) : 0};
  for (int64_t d = 0; d < D; ++d) ps.s[3 - D + d] = t.stride(2 + d);
  return ps;
}

Call make_call(const Geom& G) {
  Call c{};
  c.G = G;
  return c;
}

void set_source_ptr(Call& c, const api::Tensor& t) {
  c.src = t.const_data_ptr();
  c.sB = t.stride(0);
  c.sC = t.stride(1);
}

void set_affine(Call& c, const api::Tensor& affine) {
  c.mat = affine.const_data_ptr();
  c.mB = affine.stride(0);
  c.mR = affine.stride(1);
  c.mC = affine.stride(2);
}

void set_out(Call& c, const api::Tensor& out) {
  c.out = out.data_ptr();
  c.out_numel = out.numel();
}

// Run kernel `op` for `dtype` from the kernel library of the call's variant (variants.h: the
// fast path the call takes, from the op's fast paths `mask`); `slots` caches the entries of the
// op's call site, one per dtype and variant.
void run_kernel(const char* op, int mask, std::atomic<nj_kernel_fn>* slots, api::ScalarType dtype,
                const Call& call) {
  NJ_CHECK(dtype == api::kFloat || dtype == api::kDouble,
           "nitorch_jit CPU kernels take float32 or float64, got ", msg::dt(dtype));
  const bool f64 = dtype == api::kDouble;
  const Variant v = variant_of(call.G, dtype_mask(mask, f64));
  binding::run_kernel(slots[(f64 ? kNumVariants : 0) + v.index()], "pushpull", op, f64,
                      v.name(), &call);
}

#define NJ_RUN(op, dtype, call)                                      \
  do {                                                               \
    static std::atomic<nj_kernel_fn> slots_[2 * kNumVariants] = {};  \
    run_kernel(#op, kFast_##op, slots_, dtype, call);                \
  } while (0)

// ---- the ops, in the order of nitorch_jit/backends/schemas.py

// grid_pull (kGrad false) and grid_grad: one output per point of the grid.
template <bool kGrad>
api::Tensor gather_impl(const api::Tensor& input, const api::Tensor& grid, api::IntArg order,
                        api::IntArg bound, bool extrapolate) {
  const Geom G = gather_geom(input, grid, order, bound, extrapolate);
  api::Tensor out = empty_output(point_shape(grid, G.B, G.C, G.D, kGrad), grid);
  if (out.numel() == 0) return out;
  if (G.empty_source()) return api::zero_(out);
  Call c = make_call(G);
  c.grid = grid.const_data_ptr();
  set_source_ptr(c, input);
  set_out(c, out);
  if (kGrad)
    NJ_RUN(grid_grad, grid.scalar_type(), c);
  else
    NJ_RUN(grid_pull, grid.scalar_type(), c);
  return out;
}

api::Tensor grid_pull(const api::Tensor& input, const api::Tensor& grid, api::IntArg order,
                     api::IntArg bound, bool extrapolate) {
  return gather_impl<false>(input, grid, order, bound, extrapolate);
}

api::Tensor grid_grad(const api::Tensor& input, const api::Tensor& grid, api::IntArg order,
                     api::IntArg bound, bool extrapolate) {
  return gather_impl<true>(input, grid, order, bound, extrapolate);
}

// affine_pull: the points are the voxels of `shape`, their coordinates affine[b] @ (i, 1).
api::Tensor affine_pull(const api::Tensor& input, const api::Tensor& affine, api::IntArg shape,
                       api::IntArg order, api::IntArg bound, bool extrapolate) {
  const int64_t D = check_affine_resample(input, "[B, C, *S]", affine, shape, order, bound);
  api::Tensor out = empty_output(resampled_size(input, shape), input);
  if (out.numel() == 0) return out;
  const Geom G = make_points_geom(input.size(0), shape, D, input.size(1), input.sizes().slice(2),
                                  input.strides().slice(2), order, bound, extrapolate);
  if (G.empty_source()) return api::zero_(out);
  Call c = make_call(G);
  set_affine(c, affine);
  set_source_ptr(c, input);
  set_out(c, out);
  NJ_RUN(affine_pull, input.scalar_type(), c);
  return out;
}

template <bool kGrad>
api::Tensor push_impl(const api::Tensor& input, const api::Tensor& grid, api::IntArg shape,
                     api::IntArg order, api::IntArg bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, kGrad, kGrad ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(input, "input", grid, D);
  check_options(order, bound, D);
  check_shape(shape, D);
  api::Tensor out = zeros_output(resampled_size(input, shape), grid);
  if (out.numel() == 0) return out;
  std::vector<int64_t> ostride(out.strides().begin() + 2, out.strides().end());
  const Geom G = make_geom(grid, D, input.size(1), shape, ostride, order, bound, extrapolate);
  Call c = make_call(G);
  c.grid = grid.const_data_ptr();
  c.pts = input.const_data_ptr();
  c.ps = point_strides(input, D, kGrad);
  set_out(c, out);
  if (kGrad)
    NJ_RUN(grid_pushgrad, grid.scalar_type(), c);
  else
    NJ_RUN(grid_push, grid.scalar_type(), c);
  return out;
}

api::Tensor grid_push(const api::Tensor& input, const api::Tensor& grid, api::IntArg shape,
                     api::IntArg order, api::IntArg bound, bool extrapolate) {
  return push_impl<false>(input, grid, shape, order, bound, extrapolate);
}

api::Tensor grid_pushgrad(const api::Tensor& input, const api::Tensor& grid, api::IntArg shape,
                         api::IntArg order, api::IntArg bound, bool extrapolate) {
  return push_impl<true>(input, grid, shape, order, bound, extrapolate);
}

template <bool kHess>
api::Tensor dot_impl(const api::Tensor& weight, const api::Tensor& input, const api::Tensor& grid,
                    api::IntArg order, api::IntArg bound, bool extrapolate) {
  const Geom G = gather_geom(input, grid, order, bound, extrapolate);
  const int64_t D = G.D;
  check_tensor(weight, "weight", grid, D, kHess, kHess ? "[B, C, *O, D]" : "[B, C, *O]");
  check_point_shape(weight, "weight", grid, D);
  check_channels(weight, "weight", input);
  api::Tensor out = empty_output(grid.sizes(), grid);  // [B, *O, D]
  if (out.numel() == 0) return out;
  if (G.empty_source() || G.C == 0) return api::zero_(out);
  Call c = make_call(G);
  c.grid = grid.const_data_ptr();
  set_source_ptr(c, input);
  c.pts = weight.const_data_ptr();
  c.ps = point_strides(weight, D, kHess);
  set_out(c, out);
  if (kHess)
    NJ_RUN(grid_hess_dot, grid.scalar_type(), c);
  else
    NJ_RUN(grid_grad_dot, grid.scalar_type(), c);
  return out;
}

api::Tensor grid_grad_dot(const api::Tensor& weight, const api::Tensor& input, const api::Tensor& grid,
                         api::IntArg order, api::IntArg bound, bool extrapolate) {
  return dot_impl<false>(weight, input, grid, order, bound, extrapolate);
}

api::Tensor grid_hess_dot(const api::Tensor& weight, const api::Tensor& input, const api::Tensor& grid,
                         api::IntArg order, api::IntArg bound, bool extrapolate) {
  return dot_impl<true>(weight, input, grid, order, bound, extrapolate);
}

std::tuple<api::Tensor, api::Tensor> grid_pull_backward(const api::Tensor& grad,
                                                      const api::Tensor& input,
                                                      const api::Tensor& grid,
                                                      api::IntArg order,
                                                      api::IntArg bound, bool extrapolate) {
  const int64_t D = check_grid(grid);
  check_tensor(input, "input", grid, D, false, "[B, C, *S]");
  check_tensor(grad, "grad", grid, D, false, "[B, C, *O]");
  check_point_shape(grad, "grad", grid, D);
  check_channels(grad, "grad", input);
  check_options(order, bound, D);
  api::Tensor gin = zeros_output(input.sizes(), grid);
  std::vector<int64_t> gsize(grid.sizes().begin(), grid.sizes().end());
  api::Tensor ggrid = empty_output(gsize, grid);
  if (ggrid.numel() == 0) return {gin, ggrid};
  if (gin.numel() == 0) return {gin, api::zero_(ggrid)};  // no channel or an empty source
  const SpatiallyContiguous src = spatially_contiguous(input, D);
  const Geom G = make_geom(grid, D, input.size(1), src.data.sizes().slice(2),
                           src.data.strides().slice(2), order, bound, extrapolate);
  Call c = make_call(G);
  c.grid = grid.const_data_ptr();
  c.src = src.data.const_data_ptr();
  c.sB = src.sB;
  c.sC = src.sC;
  c.pts = grad.const_data_ptr();
  c.ps = point_strides(grad, D, false);
  set_out(c, gin);
  c.out2 = ggrid.data_ptr();
  NJ_RUN(grid_pull_backward, grid.scalar_type(), c);
  return {gin, ggrid};
}

// affine_push: the adjoint of affine_pull. input [B, C, *O] holds one value per output voxel of
// the pull; they are splatted at affine[b] @ (i, 1) into [B, C, *shape].
api::Tensor affine_push(const api::Tensor& input, const api::Tensor& affine, api::IntArg shape,
                       api::IntArg order, api::IntArg bound, bool extrapolate) {
  const int64_t D = check_affine_resample(input, "[B, C, *O]", affine, shape, order, bound);
  api::Tensor out = zeros_output(resampled_size(input, shape), input);
  if (out.numel() == 0) return out;
  std::vector<int64_t> ostride(out.strides().begin() + 2, out.strides().end());
  const Geom G = make_points_geom(input.size(0), input.sizes().slice(2), D, input.size(1), shape,
                                  ostride, order, bound, extrapolate);
  Call c = make_call(G);
  set_affine(c, affine);
  c.pts = input.const_data_ptr();
  c.ps = point_strides(input, D, false);
  set_out(c, out);
  NJ_RUN(affine_push, input.scalar_type(), c);
  return out;
}

// d<weight, affine_pull(input, affine)> / d affine: [B, D, D + 1].
api::Tensor affine_grad_dot(const api::Tensor& weight, const api::Tensor& input,
                           const api::Tensor& affine, api::IntArg order, api::IntArg bound,
                           bool extrapolate) {
  const int64_t D = check_affine(affine);
  check_tensor(input, "input", affine, D, false, "[B, C, *S]", "affine");
  check_tensor(weight, "weight", affine, D, false, "[B, C, *O]", "affine");
  check_channels(weight, "weight", input);
  check_options(order, bound, D);
  const std::vector<int64_t> osize = {affine.size(0), D, D + 1};
  api::Tensor out = zeros_output(osize, affine);
  const Geom G = make_points_geom(input.size(0), weight.sizes().slice(2), D, input.size(1),
                                  input.sizes().slice(2), input.strides().slice(2), order, bound,
                                  extrapolate);
  if (out.numel() == 0 || G.P == 0 || G.empty_source() || G.C == 0) return out;
  Call c = make_call(G);
  set_affine(c, affine);
  set_source_ptr(c, input);
  c.pts = weight.const_data_ptr();
  c.ps = point_strides(weight, D, false);
  set_out(c, out);
  for (int k = 0; k < 3; ++k) c.out_stride[k] = out.stride(k);
  NJ_RUN(affine_grad_dot, input.scalar_type(), c);
  return out;
}

}  // namespace
}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit

NJ_DEFINE_SET_TUNING()        // the process's knobs, read by every kernel library (core/host.h)
NJ_DEFINE_BINDING_EXPORTS()   // kernels bound by name, and the resolver (core/binding.h)

NJ_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  using namespace nitorch_jit::pushpull::cpu;
  NJ_IMPL(m, "grid_pull", &grid_pull);
  NJ_IMPL(m, "grid_push", &grid_push);
  NJ_IMPL(m, "grid_grad", &grid_grad);
  NJ_IMPL(m, "grid_pushgrad", &grid_pushgrad);
  NJ_IMPL(m, "grid_grad_dot", &grid_grad_dot);
  NJ_IMPL(m, "grid_hess_dot", &grid_hess_dot);
  NJ_IMPL(m, "grid_pull_backward", &grid_pull_backward);
  NJ_IMPL(m, "affine_pull", &affine_pull);
  NJ_IMPL(m, "affine_push", &affine_push);
  NJ_IMPL(m, "affine_grad_dot", &affine_grad_dot);
}
