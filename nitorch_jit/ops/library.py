"""The ``nitorch_jit`` operator namespace: every schema is defined here, in Python, at import.

Compiled libraries only add kernels (``TORCH_LIBRARY_IMPL(nitorch_jit, CPU|CUDA, m)``), so
importing the package never compiles anything, and fake kernels / autograd can be
registered before any library exists.
"""
import torch

LIB = torch.library.Library("nitorch_jit", "DEF")  # kept alive for the whole process

SCHEMAS = {
    # ---- spline resampling (csrc/pushpull) -----------------------------------------
    # input [B, C, *S], grid [B, *O, D] (voxel coordinates), order/bound one per dim.
    "grid_pull": "grid_pull(Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
    "grid_push": "grid_push(Tensor input, Tensor grid, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
    "grid_grad": "grid_grad(Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
    "grid_pushgrad": "grid_pushgrad(Tensor input, Tensor grid, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
    "grid_grad_dot": "grid_grad_dot(Tensor weight, Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
    "grid_hess_dot": "grid_hess_dot(Tensor weight, Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
}

for _schema in SCHEMAS.values():
    LIB.define(_schema)
