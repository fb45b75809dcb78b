// CUDA splinc ops, host side (docs/splinc-resize-spec.md): the CPU ops' checks and messages,
// the plans, the launches, written on core/torch_api.h (the stable ABI or the classic
// headers). Templated on a Policy (lines/cuda_host.cuh) so that
// the same code serves the CUDA binding (binding.cpp) and the host emulation of the
// kernels (tests/cuda/emu/lines_cuda_emu.cpp).
//
// The data are filtered in a contiguous buffer (the output; for the in-place op the input
// itself when contiguous, else a contiguous copy written back at the end), one launch per
// filtered dim, one thread per line (lines/cuda.cuh). Every plan goes to the device in one
// copy before the first launch.
#pragma once

#include <vector>

#include "core/torch_api.h"
#include "lines/checks.h"
#include "lines/cuda_host.cuh"
#include "lines/filter.h"

namespace nitorch_jit {
namespace splinc {
namespace cuda {

// Filter the contiguous tensor x in place along each dim (identity dims skipped).
template <class Policy>
void apply(const api::Tensor& x, api::IntRef order, api::IntRef bound, api::IntRef dim,
           bool adjoint) {
  if (x.numel() == 0) return;
  const bool dbl = x.scalar_type() == api::kDouble;
  std::vector<int64_t> dims;
  std::vector<size_t> offs;
  lines_cuda::Staging stage;
  LinePlan plan;
  for (size_t i = 0; i < dim.size(); ++i) {
    if (!make_plan((int)order[i], (int)bound[i], x.size(dim[i]), dbl, adjoint, plan)) continue;
    dims.push_back(dim[i]);
    offs.push_back(stage.add(&plan, sizeof(LinePlan)));
  }
  if (dims.empty()) return;
  stage.upload<Policy>(x);
  for (size_t k = 0; k < dims.size(); ++k)
    lines_cuda::filter_dim<Policy>(x, dims[k], stage.at<LinePlan>(offs[k]));
}

template <class Policy>
struct Ops {
  static api::Tensor spline_coeff_nd(const api::Tensor& input, api::IntArg order,
                                     api::IntArg bound, api::IntArg dim, bool adjoint) {
    lines::check_splinc_args(input, order, bound, dim, Policy::on_device(input), Policy::kDevice,
                             "spline_coeff_nd");
    const typename Policy::Guard guard(input.device());
    api::Tensor out = api::empty(input.sizes(), input);  // contiguous
    api::copy_(out, input);
    apply<Policy>(out, order, bound, dim, adjoint);
    return out;
  }

  static void spline_coeff_nd_(const api::Tensor& input, api::IntArg order, api::IntArg bound,
                               api::IntArg dim, bool adjoint) {
    lines::check_splinc_args(input, order, bound, dim, Policy::on_device(input), Policy::kDevice,
                             "spline_coeff_nd_");
    lines::check_not_expanded(input);
    const typename Policy::Guard guard(input.device());
    if (input.is_contiguous()) {
      apply<Policy>(input, order, bound, dim, adjoint);
      return;
    }
    api::Tensor work = api::contiguous(input);
    apply<Policy>(work, order, bound, dim, adjoint);
    api::Tensor dst = input;  // a handle on the same tensor
    api::copy_(dst, work);
  }
};

}  // namespace cuda
}  // namespace splinc
}  // namespace nitorch_jit
