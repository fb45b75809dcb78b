// CPU kernels of module "splinc": interpolating B-spline coefficients.
//
// Filtering along one dim: the lines along that dim are grouped in tiles of W adjacent
// lines (adjacent along the other dim of smallest stride, the "lane" dim). A tile is copied
// into a small buffer [n][W], filtered with the recursions vectorised across the W lanes
// (nitorch_jit/splinc.h), and written back. The tiles are distributed by at::parallel_for.
// A strided dim thus reads whole cache lines, and the contiguous dim is transposed on load.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "nitorch_jit/splinc.h"

namespace nitorch_jit {
namespace {

using splinc::LinePlan;

template <typename T>
struct Lanes { static constexpr int W = 16; };
template <>
struct Lanes<double> { static constexpr int W = 8; };

// Filter src along dim d into dst (same sizes, any strides; dst may alias src exactly).
template <typename T>
void filter_dim(const at::Tensor& src, const at::Tensor& dst, int64_t d, const LinePlan& plan) {
  constexpr int W = Lanes<T>::W;
  const int64_t D = src.dim();
  const int64_t n = src.size(d);
  const int64_t sN = src.stride(d), dN = dst.stride(d);

  // lane dim: the other dim of size > 1 with the smallest dst stride
  int64_t lane = -1;
  for (int64_t k = 0; k < D; ++k) {
    if (k == d || src.size(k) < 2) continue;
    if (lane < 0 || std::abs(dst.stride(k)) < std::abs(dst.stride(lane))) lane = k;
  }
  const int64_t nlane = lane < 0 ? 1 : src.size(lane);
  const int64_t sL = lane < 0 ? 0 : src.stride(lane), dL = lane < 0 ? 0 : dst.stride(lane);
  // the remaining ("outer") dims
  std::vector<int64_t> osize, ostride_s, ostride_d;
  for (int64_t k = 0; k < D; ++k) {
    if (k == d || k == lane || src.size(k) < 2) continue;
    osize.push_back(src.size(k));
    ostride_s.push_back(src.stride(k));
    ostride_d.push_back(dst.stride(k));
  }
  int64_t nouter = 1;
  for (auto s : osize) nouter *= s;
  const int64_t tiles_per_outer = (nlane + W - 1) / W;
  const int64_t ntiles = nouter * tiles_per_outer;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * W));
  const bool lane_fast_s = std::abs(sL) <= std::abs(sN);  // load rows (i outer) if lanes are closer
  const bool lane_fast_d = std::abs(dL) <= std::abs(dN);

  const T* sp = src.const_data_ptr<T>();
  T* dp = dst.data_ptr<T>();

  at::parallel_for(0, ntiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(n * W, T(0));
    T* b = buf.data();
    for (int64_t t = begin; t < end; ++t) {
      int64_t o = t / tiles_per_outer;
      const int64_t l0 = (t % tiles_per_outer) * W;
      const int nl = (int)std::min<int64_t>(W, nlane - l0);
      int64_t so = l0 * sL, dof = l0 * dL;
      for (int64_t k = (int64_t)osize.size() - 1; k >= 0; --k) {
        const int64_t i = o % osize[k];
        o /= osize[k];
        so += i * ostride_s[k];
        dof += i * ostride_d[k];
      }
      const T* s0 = sp + so;
      T* d0 = dp + dof;
      // load
      if (nl < W) std::fill(b, b + n * W, T(0));
      if (lane_fast_s) {
        if (sL == 1) {
          for (int64_t i = 0; i < n; ++i) {
            const T* r = s0 + i * sN;
            T* q = b + i * W;
            if (nl == W) for (int w = 0; w < W; ++w) q[w] = r[w];
            else for (int w = 0; w < nl; ++w) q[w] = r[w];
          }
        } else {
          for (int64_t i = 0; i < n; ++i)
            for (int w = 0; w < nl; ++w) b[i * W + w] = s0[i * sN + w * sL];
        }
      } else {
        if (sN == 1) {
          for (int w = 0; w < nl; ++w) {
            const T* r = s0 + w * sL;
            for (int64_t i = 0; i < n; ++i) b[i * W + w] = r[i];
          }
        } else {
          for (int w = 0; w < nl; ++w)
            for (int64_t i = 0; i < n; ++i) b[i * W + w] = s0[i * sN + w * sL];
        }
      }
      splinc::filter_lanes<W, T>(b, W, plan);
      // store
      if (lane_fast_d) {
        if (dL == 1) {
          for (int64_t i = 0; i < n; ++i) {
            T* r = d0 + i * dN;
            const T* q = b + i * W;
            if (nl == W) for (int w = 0; w < W; ++w) r[w] = q[w];
            else for (int w = 0; w < nl; ++w) r[w] = q[w];
          }
        } else {
          for (int64_t i = 0; i < n; ++i)
            for (int w = 0; w < nl; ++w) d0[i * dN + w * dL] = b[i * W + w];
        }
      } else {
        if (dN == 1) {
          for (int w = 0; w < nl; ++w) {
            T* r = d0 + w * dL;
            for (int64_t i = 0; i < n; ++i) r[i] = b[i * W + w];
          }
        } else {
          for (int w = 0; w < nl; ++w)
            for (int64_t i = 0; i < n; ++i) d0[i * dN + w * dL] = b[i * W + w];
        }
      }
    }
  });
}

void check_args(const at::Tensor& input, at::IntArrayRef order, at::IntArrayRef bound,
                at::IntArrayRef dim, const char* name) {
  TORCH_CHECK(input.device().is_cpu(), name, ": expected a CPU tensor");
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble, name,
              ": expected float32 or float64, got ", input.scalar_type());
  TORCH_CHECK(order.size() == bound.size() && bound.size() == dim.size(), name,
              ": order, bound and dim must have the same length");
  for (size_t i = 0; i < dim.size(); ++i) {
    TORCH_CHECK(dim[i] >= 0 && dim[i] < input.dim(), name, ": dim ", dim[i], " out of range");
    TORCH_CHECK(order[i] >= 0 && order[i] <= 7, name, ": order must be in 0..7, got ", order[i]);
    TORCH_CHECK(splinc::filter_bound((int)bound[i]) >= 0, name, ": unknown bound code ", bound[i]);
  }
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
  check_args(input, order, bound, dim, "spline_coeff_nd");
  at::Tensor out = at::empty(input.sizes(), input.options());
  if (!apply(input, out, order, bound, dim, adjoint)) out.copy_(input);
  return out;
}

void spline_coeff_nd_(const at::Tensor& input, at::IntArrayRef order, at::IntArrayRef bound,
                      at::IntArrayRef dim, bool adjoint) {
  check_args(input, order, bound, dim, "spline_coeff_nd_");
  // expanded (stride 0) dims alias memory and cannot be filtered in place
  for (int64_t k = 0; k < input.dim(); ++k)
    TORCH_CHECK(input.size(k) < 2 || input.stride(k) != 0,
                "spline_coeff_nd_: input has an expanded dim (stride 0); use inplace=False");
  apply(input, input, order, bound, dim, adjoint);
}

}  // namespace

TORCH_LIBRARY_IMPL(nitorch_jit, CPU, m) {
  m.impl("spline_coeff_nd", &spline_coeff_nd);
  m.impl("spline_coeff_nd_", &spline_coeff_nd_);
}

}  // namespace nitorch_jit
