// tiny_op.cpp's twin on torch's stable C ABI (torch >= 2.13), built by one compiler call in
// about a quarter of the classic headers' time: the loader's tests of cache life, locking and
// where users run build it dozens of times in cold caches. Same op, same result.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#ifndef TINY_OFFSET
#define TINY_OFFSET 1
#endif

using torch::stable::Tensor;

// x + TINY_OFFSET, as TINY_OFFSET - (-1) * x: the stable ABI names subtract, not add
static Tensor tiny_add(Tensor x) {
  Tensor offset = torch::stable::fill_(torch::stable::empty_like(x), TINY_OFFSET);
  return torch::stable::subtract(offset, x, -1.0);
}

STABLE_TORCH_LIBRARY(nitorch_jit_tiny, m) { m.def("add(Tensor x) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(nitorch_jit_tiny, CPU, m) { m.impl("add", TORCH_BOX(&tiny_add)); }
