// The CPU ops of module "pushpull" (docs/pushpull-spec.md), in the order of
// nitorch_jit/ops/library.py: defined in pull.cpp (grid_pull, grid_grad, affine_pull), push.cpp
// (grid_push, grid_pushgrad, grid_pull_backward, affine_push) and dot.cpp (grid_grad_dot,
// grid_hess_dot, affine_grad_dot); registered together by pull.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace nitorch_jit {
namespace pushpull {
namespace cpu {

at::Tensor grid_pull_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef order,
                         at::IntArrayRef bound, bool extrapolate);
at::Tensor grid_push_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef shape,
                         at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate);
at::Tensor grid_grad_cpu(const at::Tensor& input, const at::Tensor& grid, at::IntArrayRef order,
                         at::IntArrayRef bound, bool extrapolate);
at::Tensor grid_pushgrad_cpu(const at::Tensor& input, const at::Tensor& grid,
                             at::IntArrayRef shape, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate);
at::Tensor grid_grad_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                             const at::Tensor& grid, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate);
at::Tensor grid_hess_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                             const at::Tensor& grid, at::IntArrayRef order, at::IntArrayRef bound,
                             bool extrapolate);
std::tuple<at::Tensor, at::Tensor> grid_pull_backward_cpu(const at::Tensor& grad,
                                                          const at::Tensor& input,
                                                          const at::Tensor& grid,
                                                          at::IntArrayRef order,
                                                          at::IntArrayRef bound,
                                                          bool extrapolate);
at::Tensor affine_pull_cpu(const at::Tensor& input, const at::Tensor& affine, at::IntArrayRef shape,
                           at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate);
at::Tensor affine_push_cpu(const at::Tensor& input, const at::Tensor& affine, at::IntArrayRef shape,
                           at::IntArrayRef order, at::IntArrayRef bound, bool extrapolate);
at::Tensor affine_grad_dot_cpu(const at::Tensor& weight, const at::Tensor& input,
                               const at::Tensor& affine, at::IntArrayRef order,
                               at::IntArrayRef bound, bool extrapolate);

}  // namespace cpu
}  // namespace pushpull
}  // namespace nitorch_jit
