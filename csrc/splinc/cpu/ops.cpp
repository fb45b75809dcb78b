// CPU kernels of module "splinc": interpolating B-spline coefficients.
//
// Filtering along one dim: tiles of W adjacent lines (lines/cpu.h) are copied
// into a small buffer [n][W], filtered with the recursions vectorised across the W lanes
// (lines/filter.h), and written back; lines::parallel_chunks distributes the tiles.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "core/host_output.h"
#include "lines/checks.h"
#include "lines/cpu.h"
#include "lines/filter.h"

namespace nitorch_jit {
namespace {

using splinc::LinePlan;

// The cost of filtering a tile of W lines of n (core/parallel.h's units): copy in and out, and per
// pole a causal and an anti-causal recursion (a multiply-add each) on every element.
inline int64_t tile_cost(int64_t n, int W, const LinePlan& plan) {
  return n * W * (2 + 2 * static_cast<int64_t>(plan.npoles));
}

// Filter src along dim d into dst (same sizes, any strides; dst may alias src exactly).
template <typename T>
void filter_dim(const at::Tensor& src, const at::Tensor& dst, int64_t d, const LinePlan& plan) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t n = src.size(d);
  const lines::Tiling tl(src, dst, d, W);
  const T* sp = src.const_data_ptr<T>();
  T* dp = dst.data_ptr<T>();
  lines::parallel_chunks(
      tl.ntiles, tile_cost(n, W, plan), [&] { return std::vector<T>(n * W, T(0)); },
      [&](int64_t begin, int64_t end, std::vector<T>& buf) {
        T* b = buf.data();
        for (int64_t t = begin; t < end; ++t) {
          int64_t so, dof;
          int nl;
          tl.tile(t, W, so, dof, nl);
          lines::load<W>(sp + so, n, tl.sN, tl.sL, nl, b);
          splinc::filter_lanes<W, T>(b, W, plan);
          lines::store<W>(dp + dof, n, tl.dN, tl.dL, nl, b);
        }
      });
}

// The two innermost dims of contiguous tensors, plane by plane: each plane is filtered along
// both while it is in cache, one pass over memory instead of two (a 256 x 256 x 176 float32
// prefilter: 15 -> ~11 ms). Planes of 16 KiB to 1 MiB; false (nothing done) otherwise.
template <typename T>
bool filter_planes(const at::Tensor& src, const at::Tensor& dst, const LinePlan& last,
                   const LinePlan& second) {
  const int64_t D = src.dim(), n1 = src.size(D - 2), n2 = src.size(D - 1);
  const int64_t bytes = n1 * n2 * static_cast<int64_t>(sizeof(T));
  if (!src.is_contiguous() || !dst.is_contiguous() || bytes < (16 << 10) || bytes > (1 << 20))
    return false;
  const at::Tensor s3 = src.view({-1, n1, n2}), d3 = dst.view({-1, n1, n2});
  if (s3.size(0) < 2) return false;
  const int64_t plane_cost = tile_cost(n1, 1, second) * n2 + tile_cost(n2, 1, last) * n1;
  parallel::parallel_for(0, s3.size(0), plane_cost, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {  // inside the parallel region: filter_dim runs inline
      const at::Tensor sp = s3.select(0, p), dp = d3.select(0, p);
      filter_dim<T>(sp, dp, 1, last);
      filter_dim<T>(dp, dp, 0, second);
    }
  });
  return true;
}

// Filter src along each dim into dst; returns false if every dim was the identity.
bool apply(const at::Tensor& src, const at::Tensor& dst, at::IntArrayRef order,
           at::IntArrayRef bound, at::IntArrayRef dim, bool adjoint) {
  if (src.numel() == 0) return false;
  const bool dbl = src.scalar_type() == at::kDouble;
  const int64_t D = src.dim();
  std::vector<std::pair<int64_t, LinePlan>> steps;  // the dims that are no identity
  for (size_t i = 0; i < dim.size(); ++i) {
    const int64_t d = dim[i] < 0 ? dim[i] + D : dim[i];
    LinePlan plan;
    if (splinc::make_plan((int)order[i], (int)bound[i], src.size(d), dbl, adjoint, plan))
      steps.emplace_back(d, plan);
  }
  if (steps.empty()) return false;
  bool done = false;
  AT_DISPATCH_FLOATING_TYPES(src.scalar_type(), "spline_coeff", [&] {
    auto find = [&](int64_t d) {
      for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i].first == d) return static_cast<int64_t>(i);
      return int64_t(-1);
    };
    const int64_t a = D >= 3 ? find(D - 1) : -1, b = D >= 3 ? find(D - 2) : -1;
    if (a >= 0 && b >= 0 &&
        filter_planes<scalar_t>(src, dst, steps[a].second, steps[b].second)) {
      steps.erase(steps.begin() + std::max(a, b));
      steps.erase(steps.begin() + std::min(a, b));
      done = true;
    }
    for (const auto& [d, plan] : steps) {
      filter_dim<scalar_t>(done ? dst : src, dst, d, plan);
      done = true;
    }
  });
  return true;
}

at::Tensor spline_coeff_nd(const at::Tensor& input, at::IntArrayRef order, at::IntArrayRef bound,
                           at::IntArrayRef dim, bool adjoint) {
  lines::check_splinc_args(input, order, bound, dim, input.device().is_cpu(), "CPU",
                           "spline_coeff_nd");
  at::Tensor out = empty_output(input.sizes(), input.options());
  if (!apply(input, out, order, bound, dim, adjoint)) out.copy_(input);
  return out;
}

void spline_coeff_nd_(const at::Tensor& input, at::IntArrayRef order, at::IntArrayRef bound,
                      at::IntArrayRef dim, bool adjoint) {
  lines::check_splinc_args(input, order, bound, dim, input.device().is_cpu(), "CPU",
                           "spline_coeff_nd_");
  lines::check_not_expanded(input);
  apply(input, input, order, bound, dim, adjoint);
}

}  // namespace

NJ_DEFINE_SET_TUNING()  // one per library: the knobs (core/host_output.h reads huge_pages)

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("spline_coeff_nd", &spline_coeff_nd);
  m.impl("spline_coeff_nd_", &spline_coeff_nd_);
}

}  // namespace nitorch_jit
