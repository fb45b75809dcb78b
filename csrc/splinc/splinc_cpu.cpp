// CPU kernels of module "splinc": interpolating B-spline coefficients.
//
// Filtering along one dim: tiles of W adjacent lines (nitorch_jit/lines_cpu.h) are copied
// into a small buffer [n][W], filtered with the recursions vectorised across the W lanes
// (nitorch_jit/splinc.h), and written back; lines::parallel_chunks distributes the tiles.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "nitorch_jit/host_output.h"
#include "nitorch_jit/lines_checks.h"
#include "nitorch_jit/lines_cpu.h"
#include "nitorch_jit/splinc.h"

namespace nitorch_jit {
namespace {

using splinc::LinePlan;

// Filter src along dim d into dst (same sizes, any strides; dst may alias src exactly).
template <typename T>
void filter_dim(const at::Tensor& src, const at::Tensor& dst, int64_t d, const LinePlan& plan) {
  constexpr int W = lines::Lanes<T>::W;
  const int64_t n = src.size(d);
  const lines::Tiling tl(src, dst, d, W);
  const T* sp = src.const_data_ptr<T>();
  T* dp = dst.data_ptr<T>();
  lines::parallel_chunks(
      tl.ntiles, lines::grain(n, W), [&] { return std::vector<T>(n * W, T(0)); },
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

// Filter src along each dim into dst; returns false if every dim was the identity.
bool apply(const at::Tensor& src, const at::Tensor& dst, at::IntArrayRef order,
           at::IntArrayRef bound, at::IntArrayRef dim, bool adjoint) {
  if (src.numel() == 0) return false;
  bool done = false;
  LinePlan plan;
  const bool dbl = src.scalar_type() == at::kDouble;
  for (size_t i = 0; i < dim.size(); ++i) {
    if (!splinc::make_plan((int)order[i], (int)bound[i], src.size(dim[i]), dbl, adjoint, plan))
      continue;
    AT_DISPATCH_FLOATING_TYPES(src.scalar_type(), "spline_coeff", [&] {
      filter_dim<scalar_t>(done ? dst : src, dst, dim[i], plan);
    });
    done = true;
  }
  return done;
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

NJ_DEFINE_SET_TUNING()  // one per library: the knobs (host_output.h reads huge_pages)

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("spline_coeff_nd", &spline_coeff_nd);
  m.impl("spline_coeff_nd_", &spline_coeff_nd_);
}

}  // namespace nitorch_jit
