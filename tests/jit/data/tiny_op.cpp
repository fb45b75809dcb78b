// A minimal library for testing the loader: small, so it compiles in a few seconds. It
// includes only what it uses (Tensor's methods and the registration), not ATen/ATen.h: its
// many builds in the loader's tests then cost about one CAL each, not two.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#ifndef TINY_OFFSET
#define TINY_OFFSET 1
#endif

static at::Tensor tiny_add(const at::Tensor& x) { return x.add(TINY_OFFSET); }

TORCH_LIBRARY(nitorch_jit_tiny, m) {
  m.def("add(Tensor x) -> Tensor");
  m.impl("add", c10::DispatchKey::CPU, &tiny_add);
}
