"""Affine resampling without a grid: affine_pull and its adjoint affine_push.

Output voxel ``i`` of ``shape`` samples the input at ``affine @ (i, 1)``, computed inside the
kernels (CPU and CUDA) with the rule of ``torch_impl.pushpull.affine_coords``, the same as
``affine_grid``: ``affine_pull(x, A, shape)`` equals ``grid_pull(x, affine_grid(A, shape))``
with the same options, without the ``[*batch, *shape, D]`` grid in memory. The ops
(``torch.ops.nitorch_jit.affine_pull / affine_push / affine_grad_dot``) belong to the pushpull
module; their autograd and fake kernels are registered here.
"""
import torch

from .. import backends
from .common import HALF, broadcast_batch, call, flatten_batch, restore_batch, shape_arg
from .docfill import docfill
from .options import check_tensor, resampling_options
from .splinc import prefilter as _prefilter

_ops = torch.ops.nitorch_jit
_MODULE = "pushpull"  # the affine ops are kernels of the pushpull library


# ----------------------------------------------------------------------------- fake kernels
def _fake_pull(input, affine, shape, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)  # load the real kernels while tracing
    return input.new_empty([input.shape[0], input.shape[1], *shape])


def _fake_grad_dot(weight, input, affine, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)
    return affine.new_empty([affine.shape[0], affine.shape[1], affine.shape[1] + 1])


torch.library.register_fake("nitorch_jit::affine_pull", _fake_pull)
torch.library.register_fake("nitorch_jit::affine_push", _fake_pull)
torch.library.register_fake("nitorch_jit::affine_grad_dot", _fake_grad_dot)


# ----------------------------------------------------------------------------- autograd
# pull <-> push for the image; the matrix gradient is affine_grad_dot, a reduction over the
# points of the grid gradient times the homogeneous voxel index (no grid is built). Second
# derivatives with respect to the matrix are not provided (affine_grad_dot has no autograd).
def _setup(ctx, inputs, output):
    ctx.opts = inputs[-3:]  # order, bound, extrapolate
    ctx.save_for_backward(inputs[0], inputs[1])


def _gradients(ctx, grad, adjoint, pushed):
    """The gradients of affine_pull / affine_push: `adjoint` (the other op) for the input,
    affine_grad_dot for the matrix, whose weight is the pushed side (`pushed`: the input was
    pushed, so it is the weight and `grad` the image)."""
    input, affine = ctx.saved_tensors
    gi = ga = None
    if ctx.needs_input_grad[0]:
        gi = adjoint(grad, affine, list(input.shape[2:]), *ctx.opts)
    if ctx.needs_input_grad[1]:
        weight, image = (input, grad) if pushed else (grad, input)
        ga = _ops.affine_grad_dot(weight, image, affine, *ctx.opts)
    return gi, ga, None, None, None, None


def _pull_backward(ctx, grad):
    return _gradients(ctx, grad, _ops.affine_push, pushed=False)


def _push_backward(ctx, grad):
    return _gradients(ctx, grad, _ops.affine_pull, pushed=True)


torch.library.register_autograd("nitorch_jit::affine_pull", _pull_backward, setup_context=_setup)
torch.library.register_autograd("nitorch_jit::affine_push", _push_backward, setup_context=_setup)


# ----------------------------------------------------------------------------- arguments
def _affine_dim(affine):
    """D of a [*batch, D+1, D+1] or [*batch, D, D+1] matrix, checked."""
    check_tensor(affine, "affine")
    if affine.dim() < 2 or affine.shape[-1] not in (2, 3, 4) \
            or affine.shape[-2] not in (affine.shape[-1] - 1, affine.shape[-1]):
        raise ValueError(f"affine: expected [*batch, D+1, D+1] or [*batch, D, D+1] with D = 1, "
                         f"2 or 3, got shape {tuple(affine.shape)}")
    if not backends.is_compiling() and affine.numel() and not bool(torch.isfinite(affine).all()):
        raise ValueError("affine: every entry must be finite (got inf or nan)")
    return affine.shape[-1] - 1


def _prepare(input, affine, dim, argname="input"):
    """Flattened input [B, C, *S] and matrix [B, D, D+1] (in the input's compute dtype), the
    broadcast batch shape and the output dtype."""
    check_tensor(input, argname)
    if input.dim() < dim + 1:
        raise ValueError(f"{argname}: expected shape [*batch, C, *spatial] with {dim} spatial "
                         f"dims (affine is {dim + 1}-column, D = {dim}), got "
                         f"{tuple(input.shape)}")
    if input.device != affine.device:
        raise ValueError(f"{argname} is on {input.device} but affine is on {affine.device}")
    out_dtype = input.dtype
    if input.dtype in HALF:  # computed in float32, cast back
        input = input.float()
    affine = affine[..., :dim, :].to(input.dtype)  # the last row of a square matrix is unused
    ibatch = input.shape[:input.dim() - dim - 1]
    abatch = affine.shape[:-2]
    batch = broadcast_batch(ibatch, abatch)
    return (flatten_batch(input, ibatch, batch), flatten_batch(affine, abatch, batch), batch,
            out_dtype)


# ----------------------------------------------------------------------------- public API
def affine_pull(input, affine, shape=None, interpolation="linear", bound="zero",
                extrapolate=False, prefilter=False):
    """Resample `input` through an affine map of voxel indices, without building a grid.

    Output voxel ``i`` (a multi-index into `shape`) takes the spline interpolation of `input`
    at ``affine @ (i, 1)``: the matrix maps *output* voxel indices to *input* voxel indices
    (a pull, like scipy's ``affine_transform``). The coordinates are computed inside the
    kernels as ``x_d = ((A[d,D] + A[d,0] i_0) + A[d,1] i_1) + A[d,2] i_2`` (the rule of
    :func:`affine_grid`, and scipy.ndimage's summation order), so the result equals
    ``grid_pull(input, affine_grid(affine, shape), ...)`` with the same options, without the
    ``[*batch, *shape, D]`` grid in memory.

    Parameters
    ----------
    input : torch.Tensor
        Image ``[*batch, C, *in]`` with D spatial dims (floating point).
    affine : torch.Tensor
        ``[*batch, D+1, D+1]`` (homogeneous; its last row is not used) or ``[*batch, D, D+1]``,
        output voxel -> input voxel; D = 1, 2 or 3 is read from its last dim. Batch dims
        broadcast with the input's. Cast to the input's dtype; must be finite.
    shape : sequence of int, optional
        Output spatial shape (D positive sizes). Default: the input's spatial shape.
    interpolation : int or str or sequence, default 'linear'
        Spline order 0-7 (or its name: 'nearest', 'linear', 'quadratic', 'cubic', ...), one
        for all dims or one per dim.
    bound : str or sequence, default 'zero'
        Boundary condition per dim: 'replicate', 'dct1', 'dct2', 'dst1', 'dst2', 'dft',
        'zero' (or their aliases, see :func:`grid_pull`).
    extrapolate : bool, default False
        False: points more than 0.05 voxel outside the input are zero. True: the bound
        decides everywhere.
    prefilter : bool, default False
        Interpolate the samples (apply the spline prefilter first, one coefficient copy of
        the input) rather than use them as spline coefficients.

    Returns
    -------
    torch.Tensor
        ``[*batch, C, *shape]``, the input's dtype. Differentiable with respect to `input`
        and `affine` (first order).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import affine_pull, affine_grid, grid_pull
    >>> x = torch.arange(12.).reshape(1, 3, 4)
    >>> A = torch.tensor([[1., 0., 0.], [0., 1., 0.5]])   # shift by half a voxel along dim 1
    >>> affine_pull(x, A, bound="replicate", extrapolate=True)
    tensor([[[ 0.5000,  1.5000,  2.5000,  3.0000],
             [ 4.5000,  5.5000,  6.5000,  7.0000],
             [ 8.5000,  9.5000, 10.5000, 11.0000]]])
    >>> y = affine_pull(x, A, [2, 2], interpolation=3, bound="dct2", prefilter=True)
    >>> torch.equal(y, grid_pull(x, affine_grid(A, [2, 2]), 3, "dct2", prefilter=True))
    True
    """
    dim = _affine_dim(affine)
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    return _pull(input, affine, dim, shape, opts, prefilter)


@docfill
def affine_pull_codes(input, affine, shape, order, bound, extrapolate, prefilter=False):
    """affine_pull with its options already parsed: the code-level entry, for the front ends.

    Parameters
    ----------
    input : tensor [*batch, C, *spatial]
    affine : tensor [*batch, D+1, D+1] or [*batch, D, D+1]
        Output voxel to input voxel.
    shape : list[int] or None
        Output spatial shape (default: the input's).
    %(code_options)s

    Returns
    -------
    tensor [*batch, C, *shape]
        As affine_pull: differentiable.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.codes import bound_code
    >>> from nitorch_jit.ops.affine import affine_pull_codes
    >>> x = torch.arange(4.).reshape(1, 1, 4)
    >>> A = torch.tensor([[[0.5, 1.0]]])  # o -> o / 2 + 1
    >>> affine_pull_codes(x, A, [3], [1], [bound_code("dct2")], False)
    tensor([[[1.0000, 1.5000, 2.0000]]])
    """
    dim = _affine_dim(affine)
    if len(order) != dim or len(bound) != dim:
        raise ValueError(f"order and bound: expected {dim} codes each (affine is {dim}-D), "
                         f"got {list(order)} and {list(bound)}")
    return _pull(input, affine, dim, shape, (list(order), list(bound), bool(extrapolate)),
                 prefilter)


def _pull(input, affine, dim, shape, opts, prefilter):
    """affine_pull once the matrix is checked and the options are codes."""
    x, A, batch, dtype = _prepare(input, affine, dim)
    shape = shape_arg(shape, dim, x.shape[2:])
    if prefilter:  # interpolate the samples rather than use them as spline coefficients
        x = _prefilter(x, *opts[:2])
    backends.ensure_eager(_MODULE, x.device, ("affine_pull", x.dtype, opts[0]))
    return restore_batch(call(_ops.affine_pull.default, x, A, shape, *opts), batch, dtype)


def affine_push(input, affine, shape=None, interpolation="linear", bound="zero",
                extrapolate=False, prefilter=False):
    """Splat `input` through an affine map: the adjoint of :func:`affine_pull`.

    Voxel ``i`` of `input` (the shape of an ``affine_pull`` output) is spread, with the spline
    weights, at ``affine @ (i, 1)`` in an image of spatial shape `shape`. With the same
    options, ``<affine_pull(x, A, y.shape), y> == <x, affine_push(y, A, x.shape)>``; with
    prefilter=True the transposed spline prefilter is applied after splatting.

    Parameters
    ----------
    input : torch.Tensor
        ``[*batch, C, *out]`` with D spatial dims.
    affine : torch.Tensor
        ``[*batch, D+1, D+1]`` or ``[*batch, D, D+1]``, voxel of `input` -> voxel of the
        result (as in :func:`affine_pull`).
    shape : sequence of int, optional
        Spatial shape of the result. Default: the input's spatial shape.
    interpolation, bound, extrapolate, prefilter
        As in :func:`affine_pull`.

    Returns
    -------
    torch.Tensor
        ``[*batch, C, *shape]``. Differentiable with respect to `input` and `affine`.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import affine_pull, affine_push
    >>> A = torch.tensor([[0.9, 0.1, 0.3], [-0.1, 1.1, 0.2]], dtype=torch.float64)
    >>> x = torch.randn(1, 5, 6, dtype=torch.float64)
    >>> y = torch.randn(1, 4, 7, dtype=torch.float64)
    >>> lhs = (affine_pull(x, A, [4, 7], 3, "dct2") * y).sum()
    >>> rhs = (x * affine_push(y, A, [5, 6], 3, "dct2")).sum()
    >>> bool(torch.allclose(lhs, rhs, rtol=1e-12))
    True
    """
    dim = _affine_dim(affine)
    x, A, batch, dtype = _prepare(input, affine, dim)
    shape = shape_arg(shape, dim, x.shape[2:])
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    backends.ensure_eager(_MODULE, x.device, ("affine_push", x.dtype, opts[0]))
    out = call(_ops.affine_push.default, x, A, shape, *opts)
    if prefilter:  # the transposed filter, so that push stays the adjoint of pull
        out = _prefilter(out, *opts[:2], adjoint=True)
    return restore_batch(out, batch, dtype)
