"""Interpolating B-spline coefficients (the spline prefilter): spline_coeff, spline_coeff_nd.

Pulling the coefficients with the same order and bound at integer coordinates gives back the
input. The filter is the exact recursive one (Unser 1993; Thevenaz, Blu & Unser 2000) for
orders 0-7 and the bounds dct1 (mirror), dct2 (reflect), dst1, dst2 and dft (wrap); zero is
filtered as dct1 and replicate as dct2 (as in NITorch). The kernels behind
``torch.ops.nitorch_jit.spline_coeff_nd(_)`` are chosen by nitorch_jit.backends; autograd (the
adjoint filter) and fake kernels are registered here.
"""
import torch

from .. import backends
from .common import HALF
from .docfill import docfill
from .options import bound_codes, check_tensor, order_codes

_ops = torch.ops.nitorch_jit
_MODULE = "splinc"

# ----------------------------------------------------------------------------- fake kernels
def _fake(input, order, bound, dim, adjoint):
    backends.ensure(_MODULE, input.device)  # load the real kernels while tracing
    return input.new_empty(input.shape)


def _fake_(input, order, bound, dim, adjoint):
    backends.ensure(_MODULE, input.device)


torch.library.register_fake("nitorch_jit::spline_coeff_nd", _fake)
torch.library.register_fake("nitorch_jit::spline_coeff_nd_", _fake_)


# ----------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    ctx.opts = inputs[1:]  # order, bound, dim, adjoint


def _backward(ctx, grad):
    order, bound, dim, adjoint = ctx.opts
    return _ops.spline_coeff_nd(grad, order, bound, dim, not adjoint), None, None, None, None


torch.library.register_autograd("nitorch_jit::spline_coeff_nd", _backward, setup_context=_setup)


# ----------------------------------------------------------------------------- internal entry
def prefilter(input, order, bound, adjoint=False, dims=None):
    """Spline coefficients of `input` along `dims` (default: its last len(order) dims).

    The code-level entry of the family, for the front ends: `order` and `bound` are lists
    of kernel codes (already parsed, one per filtered dim), as grid_pull / grid_grad
    (before sampling) and grid_push (after splatting, with adjoint=True) hold them.

    Parameters
    ----------
    input : tensor
        Floating point (half precision is filtered in float32).
    order : list[int]
        Spline orders 0..7, one per filtered dim.
    bound : list[int]
        Bound codes of nitorch_jit.codes, one per filtered dim.
    adjoint : bool, default False
        Apply the transposed filter.
    dims : list[int], optional
        The dims to filter, one per order (default the last len(order)).

    Returns
    -------
    tensor
        A new tensor (``input`` itself when every order is 0 or 1); differentiable.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.codes import bound_code
    >>> from nitorch_jit.ops.splinc import prefilter
    >>> x = torch.tensor([[0., 1., 0., 0.]], dtype=torch.float64)
    >>> c = prefilter(x, [3], [bound_code("dct2")])
    >>> from nitorch_jit.ops.pushpull import pull_codes  # the cubic spline of c interpolates x
    >>> at = torch.arange(4, dtype=torch.float64).reshape(1, 4, 1)
    >>> torch.allclose(pull_codes(c[None], at, [3], [bound_code("dct2")], False)[0], x)
    True
    """
    if all(o < 2 for o in order):  # orders 0 and 1 interpolate already: no copy
        return input
    if dims is None:
        dims = list(range(input.dim() - len(order), input.dim()))
    return _run(input, list(order), list(bound), list(dims), adjoint, inplace=False)


def _run(input, order, bound, dims, adjoint, inplace):
    if all(o < 2 for o in order):  # orders 0 and 1 interpolate already
        return input if inplace else input.clone()
    dtype = input.dtype
    x = input.float() if dtype in HALF else input
    backends.ensure_eager(_MODULE, x.device, ("spline_coeff", x.dtype, order))
    grad = torch.is_grad_enabled() and x.requires_grad
    if inplace and not grad and x is input and all(
            s < 2 or st != 0 for s, st in zip(x.shape, x.stride())):
        _ops.spline_coeff_nd_(x, order, bound, dims, adjoint)
        return input
    out = _ops.spline_coeff_nd(x, order, bound, dims, adjoint)
    if inplace:
        return input.copy_(out)
    return out.to(dtype)


def _check(input):
    check_tensor(input, "input", floating=False)
    if not input.is_floating_point():
        raise TypeError(f"input: expected a floating-point tensor, got {input.dtype}")
    if input.is_complex():
        raise TypeError("input: complex tensors are not supported")


def _check_inplace(inplace):
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace: expected True or False, got {inplace!r}")


# ----------------------------------------------------------------------------- public API
@docfill
def spline_coeff(input, interpolation="linear", bound="dct2", dim=-1, inplace=False):
    """Interpolating B-spline coefficients of a tensor along one dimension.

    Pulling the coefficients with the same order and bound at integer coordinates gives
    back `input`. Filters exactly (Unser 1993) for the bounds dct1, dct2, dst1, dst2 and
    dft; zero is filtered as dct1 and replicate as dct2, as NITorch does.

    Parameters
    ----------
    input : tensor
        float32, float64, or float16 / bfloat16 (computed in float32).
    interpolation : int, str or InterpolationType, default 'linear'
        %(interpolation)s
    bound : str or BoundType, default 'dct2'
        %(bound)s
    dim : int, default -1
        The dimension to filter (negative counts from the end).
    inplace : bool, default False
        Write the coefficients into `input`.

    Returns
    -------
    coeff : tensor
        Same shape and dtype as `input` (``input`` itself when `inplace`).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import spline_coeff
    >>> x = torch.tensor([0., 1., 4., 9., 16.], dtype=torch.float64)
    >>> spline_coeff(x, 'cubic', 'reflect')  # scipy.ndimage.spline_filter1d(x, 3, mode='reflect')
    tensor([-0.1148,  0.5742,  3.8182,  8.1531, 17.5694], dtype=torch.float64)
    """
    _check(input)
    _check_inplace(inplace)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim: expected an int, got {dim!r}")
    if not -input.dim() <= dim < input.dim():
        raise ValueError(f"dim: {dim} is out of range for a {input.dim()}-D input")
    dim = dim % input.dim()
    order = order_codes(interpolation, 1)
    bounds = bound_codes(bound, 1)
    return _run(input, order, bounds, [dim], False, inplace)


@docfill
def spline_coeff_nd(input, interpolation="linear", bound="dct2", dim=None, inplace=False):
    """Interpolating B-spline coefficients of a tensor along its last `dim` dimensions.

    The separable product of spline_coeff along each dim.

    Parameters
    ----------
    input : tensor [..., *spatial]
        float32, float64, or float16 / bfloat16 (computed in float32).
    interpolation : int, str or InterpolationType, or a list of them, default 'linear'
        %(interpolation)s
    bound : str or BoundType, or a list of them, default 'dct2'
        %(bound)s
    dim : int, optional
        Number of spatial dims, the last ones (default: all dims of `input`).
    inplace : bool, default False
        Write the coefficients into `input`.

    Returns
    -------
    coeff : tensor
        As spline_coeff.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import grid_pull, identity_grid, spline_coeff_nd
    >>> x = torch.rand(1, 1, 5, 6, dtype=torch.float64)
    >>> c = spline_coeff_nd(x, 'fifth', 'dft', dim=2)
    >>> y = grid_pull(c, identity_grid([5, 6], torch.float64), 'fifth', 'dft')
    >>> torch.allclose(x, y)
    True
    """
    _check(input)
    _check_inplace(inplace)
    if dim is None:
        dim = input.dim()
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim: expected an int (number of spatial dims) or None, got {dim!r}")
    if not 1 <= dim <= input.dim():
        raise ValueError(f"dim: expected 1..{input.dim()} spatial dims for a {input.dim()}-D "
                         f"input, got {dim}")
    order = order_codes(interpolation, dim)
    bounds = bound_codes(bound, dim)
    dims = list(range(input.dim() - dim, input.dim()))
    return _run(input, order, bounds, dims, False, inplace)
