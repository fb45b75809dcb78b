"""The ``nitorch_jit`` operator namespace: every schema is defined here, in Python, at import.

Compiled libraries only add kernels (``TORCH_LIBRARY_IMPL(nitorch_jit, CPU|CUDA, m)``), so
importing the package never compiles anything, and fake kernels / autograd can be
registered before any library exists. Schemas are grouped by module: a module is one folder
of csrc/ (one CPU library, one CUDA library) and one file of nitorch_jit/torch_impl/.
"""
import torch

LIB = torch.library.Library("nitorch_jit", "DEF")  # kept alive for the whole process

MODULES = {
    # spline resampling. input [B, C, *S], grid [B, *O, D] in voxels; order/bound one per dim.
    # The contract is docs/pushpull-spec.md.
    "pushpull": {
        "grid_pull": "(Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "grid_push": "(Tensor input, Tensor grid, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "grid_grad": "(Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "grid_pushgrad": "(Tensor input, Tensor grid, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "grid_grad_dot": "(Tensor weight, Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "grid_hess_dot": "(Tensor weight, Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> Tensor",
        # both gradients of grid_pull in one pass: (grid_push(grad, grid, input spatial shape),
        # grid_grad_dot(grad, input, grid))
        "grid_pull_backward": "(Tensor grad, Tensor input, Tensor grid, int[] order, int[] bound, bool extrapolate) -> (Tensor, Tensor)",
        # resampling through an affine map, without a grid: output voxel i of `shape` samples
        # input at affine[b] @ (i, 1) (affine [B, D, D+1], voxel to voxel). affine_push is the
        # adjoint (input [B, C, *O], shape = the pulled input's spatial shape); affine_grad_dot
        # the gradient of <weight, affine_pull(input, affine)> with respect to affine.
        "affine_pull": "(Tensor input, Tensor affine, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "affine_push": "(Tensor input, Tensor affine, int[] shape, int[] order, int[] bound, bool extrapolate) -> Tensor",
        "affine_grad_dot": "(Tensor weight, Tensor input, Tensor affine, int[] order, int[] bound, bool extrapolate) -> Tensor",
    },
    # interpolating B-spline coefficients (the spline prefilter), filtered along each dim of
    # `dim` with order[i] / bound[i]; adjoint=True applies the transposed filter.
    "splinc": {
        "spline_coeff_nd": "(Tensor input, int[] order, int[] bound, int[] dim, bool adjoint) -> Tensor",
        "spline_coeff_nd_": "(Tensor(a!) input, int[] order, int[] bound, int[] dim, bool adjoint) -> ()",
    },
    # separable resizing of the last len(shape) dims: output index o of dim d samples the
    # (prefiltered) input at x = scale[d] * o + shift[d]. resize_adjoint is its transpose:
    # input [..., *m] (the forward's output), shape = the forward's input spatial shape.
    "resize": {
        "resize": "(Tensor input, int[] shape, float[] scale, float[] shift, int[] order, int[] bound, bool prefilter) -> Tensor",
        "resize_adjoint": "(Tensor input, int[] shape, float[] scale, float[] shift, int[] order, int[] bound, bool prefilter) -> Tensor",
    },
    # regularisers of fields and displacement grids and their solver kernels. x [B, C, *S];
    # the operator arrives as a flat tap list (4 + 2D numbers per tap); docs/regsolve-spec.md.
    "regsolve": {
        "reg_matvec": "(Tensor x, Tensor? hessian, Tensor? weights, float[] taps) -> Tensor",
        "reg_precond": "(Tensor r, Tensor? hessian, Tensor? weights, float[] taps) -> Tensor",
        "reg_relax_": "(Tensor(a!) x, Tensor? hessian, Tensor gradient, Tensor? weights, float[] taps, int[] period, int nb_iter) -> ()",
    },
}


for _ops in MODULES.values():
    for _name, _schema in _ops.items():
        LIB.define(_name + _schema)


def register_kernels(module, kernels, dispatch_key):
    """Register `kernels` ({op name: callable}) as the `dispatch_key` kernels of every op of
    `module`, all or nothing; return the Library that holds them (keep it alive).

    A provider's table that fails halfway (a missing op, a refused override) leaves nothing
    registered, so the next provider of the walk registers on a clean slate instead of
    overriding half a set of kernels (a warning on some torch releases, an error on others).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.backends.schemas import register_kernels
    >>> try:
    ...     register_kernels("splinc", {}, "Meta")  # the table lacks every op
    ... except KeyError as err:
    ...     print(err)
    'spline_coeff_nd'
    """
    impls = [(op, kernels[op]) for op in MODULES[module]]  # the whole table, before any impl
    lib = torch.library.Library("nitorch_jit", "IMPL")
    try:
        for op, fn in impls:
            lib.impl(op, fn, dispatch_key)
    except BaseException:
        lib._destroy()  # drops the impls made so far (torch >= 2.1)
        raise
    return lib
