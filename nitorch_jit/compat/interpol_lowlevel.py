"""torch-interpol's internal modules ``interpol.coeff`` and ``interpol.pushpull``, on our kernels.

NITorch (``nitorch/_C/grid.py``) imports ``interpol.coeff.spline_coeff(_nd)`` and
``interpol.pushpull.grid_push``; interpol's own ``autograd`` classes call the rest. Their
conventions (torch-interpol 0.3.0), kept here:

- positional options **bound first**: ``spline_coeff(inp, bound, order, dim, inplace)``,
  ``grid_pull(inp, grid, bound, interpolation, extrapolate)``;
- bounds as integers of interpol's numbering (zero 0, replicate 1, dct1 2, dct2 3, dst1 4,
  dst2 5, dft 6), names or enum members; per-dim lists padded with their last value and cut
  to the number of spatial dims, as interpol's ``pad_list_int`` does;
- tensors ``[B, C, *spatial]`` and grids ``[B, *spatial, D]``;
- ``extrapolate`` 0, 1 or 2 (2: in bounds within half a voxel, interpol's "hist" mode);
- a ``*_backward`` returns ``(grad_input, grad_grid)``, each None unless that tensor requires
  grad (``grid_count_backward``: the grid's gradient or None).

Everything runs on nitorch_jit's public functions, the positional resampling of
``compat._resampling`` (shared with the NITorch and MONAI compat modules) and the code-level
entry ``ops.pushpull.resample_backward``.
"""
import numbers

import torch

from ..codes import BOUND_NAMES, PEER_BOUND_CODES, bound_code, enum_member_name
from ..ops.options import check_tensor, order_codes
from ..ops.splinc import spline_coeff as _coeff
from ..ops.splinc import spline_coeff_nd as _coeff_nd
from . import _resampling

INTERPOL_BOUNDS = PEER_BOUND_CODES["torch-interpol and NITorch's TorchScript backend"]


# ----------------------------------------------------------------------------- options
def _values(value, dim, argname):
    """interpol's per-dim lists: a value or a list, cut to `dim` values (padding is ours)."""
    values = list(value) if isinstance(value, (list, tuple, torch.Size)) else [value]
    if not values:
        raise ValueError(f"{argname}: expected a value or a non-empty list (one value per "
                         f"spatial dim)")
    return values if dim is None else values[:dim]


_PARSED = {}  # (parser, dim, argname, typed value) -> parsed list: the same few, call after call


def _cached(parse, value, dim, argname):
    """parse(value, dim, argname), remembered per distinct value (an invalid one raises every
    time; an unhashable one is parsed every time)."""
    items = list(value) if isinstance(value, (list, tuple, torch.Size)) else [value]
    try:
        key = (parse, dim, argname, type(value), tuple((type(v), v) for v in items))
        return list(_PARSED[key])
    except KeyError:
        pass
    except TypeError:
        return parse(value, dim, argname)
    out = parse(value, dim, argname)
    if len(_PARSED) >= 1024:
        _PARSED.clear()
    _PARSED[key] = tuple(out)
    return out


def bound_names(bound, dim=None, argname="bound"):
    """interpol's `bound` (integers of its numbering, names, enum members; one or a list)
    -> canonical bound names, cut to `dim` values.

    Parameters
    ----------
    bound : int, str, enum member or a list of them
    dim : int, optional
        Number of spatial dims (a longer list is cut, as interpol does).
    argname : str
        The argument's name in error messages.

    Returns
    -------
    list[str]
        One name of nitorch_jit.BoundType per value.

    Examples
    --------
    >>> from nitorch_jit.compat.interpol_lowlevel import bound_names
    >>> bound_names([3, 'wrap', 0, 1], dim=3)
    ['dct2', 'dft', 'zero']
    """
    return _cached(_bound_names, bound, dim, argname)


def _bound_names(bound, dim, argname):
    out = []
    for b in _values(bound, dim, argname):
        code = bound_code(b)
        if code is None and enum_member_name(b) is None and not isinstance(b, bool) \
                and isinstance(b, numbers.Integral) and 0 <= b < len(INTERPOL_BOUNDS):
            code = bound_code(INTERPOL_BOUNDS[b])
        if code is None:
            valid = ", ".join(f"{n} {i}" for i, n in enumerate(INTERPOL_BOUNDS))
            raise ValueError(f"{argname}: unknown bound {b!r}; expected a name (zero, replicate, "
                             f"dct1, dct2, dst1, dst2, dft or an alias such as 'reflect'), a "
                             f"BoundType member, or an integer of torch-interpol's numbering "
                             f"({valid})")
        out.append(BOUND_NAMES[code])
    return out


def orders(interpolation, dim=None, argname="interpolation"):
    """interpol's `interpolation` (orders 0..7, names, enum members; one or a list) ->
    orders, cut to `dim` values.

    Parameters
    ----------
    interpolation : int, str, enum member or a list of them
    dim : int, optional
        As bound_names.
    argname : str

    Returns
    -------
    list[int]
        Spline orders.

    Examples
    --------
    >>> from nitorch_jit.compat.interpol_lowlevel import orders
    >>> orders(['cubic', 1, 5], dim=2)
    [3, 1]
    """
    return _cached(_orders, interpolation, dim, argname)


def _orders(interpolation, dim, argname):
    values = _values(interpolation, dim, argname)
    return order_codes(values, len(values), argname)  # our one parser, on interpol's cut list


def _dim(grid):
    check_tensor(grid, "grid")
    if grid.dim() < 2 or grid.shape[-1] not in (1, 2, 3):
        raise ValueError(f"grid: expected [B, *spatial, D] with D = 1, 2 or 3, got shape "
                         f"{tuple(grid.shape)}")
    return grid.shape[-1]


def _opts(grid, bound, interpolation):
    dim = _dim(grid)
    return bound_names(bound, dim), orders(interpolation, dim)


def _pair(inp, grid, grads):
    """The C-style list (gradients of the tensors that require grad) -> interpol's pair."""
    grads = list(grads)
    gi = grads.pop(0) if inp.requires_grad else None
    gg = grads.pop(0) if grid.requires_grad else None
    return gi, gg


# ----------------------------------------------------------------------------- interpol.coeff
def spline_coeff(inp, bound, order, dim=-1, inplace=False):
    """Spline coefficients along one dim: ``interpol.coeff.spline_coeff``.

    Parameters
    ----------
    inp : tensor
    bound : int (interpol's numbering), str or enum member
    order : int 0..7
    dim : int, default -1
    inplace : bool, default False

    Returns
    -------
    tensor
        The coefficients, shaped like `inp` (`inp` itself when `inplace`).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import spline_coeff
    >>> spline_coeff(torch.tensor([0., 1., 0.], dtype=torch.float64), 3, 3)  # dct2, cubic
    tensor([-0.3333,  1.6667, -0.3333], dtype=torch.float64)
    """
    return _coeff(inp, orders(order, 1, "order"), bound_names(bound, 1), dim, inplace)


def spline_coeff_nd(inp, bound, order, dim=None, inplace=False):
    """Spline coefficients along the last `dim` dims: ``interpol.coeff.spline_coeff_nd``.

    Parameters
    ----------
    inp : tensor [..., *spatial]
    bound : list (or one) of int (interpol's numbering), str or enum member
    order : list (or one) of int 0..7
    dim : int, optional
        Number of spatial dims (default: all of them).
    inplace : bool, default False

    Returns
    -------
    tensor
        As spline_coeff, along each of the last `dim` dims.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import spline_coeff_nd
    >>> c = spline_coeff_nd(torch.ones(3, 4, dtype=torch.float64), [2, 6], [3])
    >>> round(c.sum().item(), 6)
    12.0
    """
    nd = inp.dim() if dim is None and isinstance(inp, torch.Tensor) else dim
    return _coeff_nd(inp, orders(order, nd, "order"), bound_names(bound, nd), dim, inplace)


# ----------------------------------------------------------------------------- interpol.pushpull
def grid_pull(inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_pull``: [B, C, *in] sampled at [B, *out, D] -> [B, C, *out].

    Parameters
    ----------
    inp : tensor [B, C, *in]
    grid : tensor [B, *out, D]
    bound : list of int (interpol's numbering), str or enum member
    interpolation : list of int
    extrapolate : int 0, 1 or 2

    Returns
    -------
    tensor [B, C, *out]
        The input's spline at the grid points.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_pull
    >>> grid_pull(torch.arange(4.).reshape(1, 1, 4), torch.tensor([[[1.5]]]), [0], [1], 0)
    tensor([[[1.5000]]])
    """
    b, o = _opts(grid, bound, interpolation)
    return _resampling.grid_pull(inp, grid, b, o, extrapolate)


def grid_push(inp, grid, shape, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_push``: the adjoint of grid_pull.

    Parameters
    ----------
    inp : tensor [B, C, *in]
    grid : tensor [B, *in, D]
    shape : list[int] or None
        Output spatial shape (default: the input's).
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [B, C, *shape]
        Each input value spread over the voxels around its point, by the spline weights.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_push
    >>> grid_push(torch.ones(1, 1, 1), torch.tensor([[[1.5]]]), [3], [0], [1], 0)
    tensor([[[0.0000, 0.5000, 0.5000]]])
    """
    b, o = _opts(grid, bound, interpolation)
    return _resampling.grid_push(inp, grid, list(shape or []), b, o, extrapolate)


def grid_count(grid, shape, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_count``: grid_push of ones.

    Parameters
    ----------
    grid : tensor [B, *in, D]
    shape : list[int] or None
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [B, 1, *shape]
        The spline weights of the points, summed per voxel.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_count
    >>> grid_count(torch.tensor([[[0.5], [1.0]]]), [2], [0], [1], 0)
    tensor([[[0.5000, 1.5000]]])
    """
    b, o = _opts(grid, bound, interpolation)
    return _resampling.grid_count(grid, list(shape or []), b, o, extrapolate)


def grid_grad(inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_grad``: spatial gradients at the grid points.

    Parameters
    ----------
    inp : tensor [B, C, *in]
    grid : tensor [B, *out, D]
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [B, C, *out, D]
        The derivatives of the input's spline along each dim, at the points.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_grad
    >>> grid_grad(torch.tensor([[[0., 1., 4.]]]), torch.tensor([[[1.5]]]), [0], [1], 0)
    tensor([[[[3.]]]])
    """
    b, o = _opts(grid, bound, interpolation)
    return _resampling.grid_grad(inp, grid, b, o, extrapolate)


def grid_pushgrad(inp, grid, shape, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_pushgrad``: the adjoint of grid_grad.

    Parameters
    ----------
    inp : tensor [B, C, *in, D]
        Gradients at the grid points.
    grid : tensor [B, *in, D]
    shape : list[int] or None
        Output spatial shape (default: the grid's spatial shape).
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [B, C, *shape]
        The gradients pushed back through the spline's derivatives.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_pushgrad
    >>> grid_pushgrad(torch.ones(1, 1, 1, 1), torch.tensor([[[1.5]]]), [3], [0], [1], 0)
    tensor([[[ 0., -1.,  1.]]])
    """
    b, o = _opts(grid, bound, interpolation)
    dim = grid.shape[-1]
    shape = list(shape) if shape is not None else list(grid.shape[-dim - 1:-1])
    check_tensor(inp, "inp")
    # the input of grid_grad only gives the output's shape; a leaf that requires grad asks
    # the shared backward for the input gradient alone
    zeros = inp.new_zeros([inp.shape[0], inp.shape[1], *shape]).requires_grad_()
    return _resampling.grid_grad_backward(inp, zeros, grid.detach(), b, o, extrapolate)[0]


def grid_hess(inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_hess``: the spatial Hessian at the grid points.

    Parameters
    ----------
    inp, grid, bound, interpolation, extrapolate
        As grid_grad.

    Returns
    -------
    tensor [B, C, *out, D, D]
        The second derivatives of the input's spline, at the points.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_hess
    >>> x = torch.tensor([[[0., 1., 4., 9., 16.]]], dtype=torch.float64)
    >>> grid_hess(x, torch.tensor([[[2.]]], dtype=torch.float64), [3], [2], 0)  # x = i^2
    tensor([[[[[2.]]]]], dtype=torch.float64)
    """
    b, o = _opts(grid, bound, interpolation)
    check_tensor(inp, "inp")
    dim = grid.shape[-1]
    n, c = inp.shape[:2]
    out = grid.shape[1:-1]
    x = inp.detach().reshape(n * c, 1, *inp.shape[2:])
    g = grid.detach().unsqueeze(1).expand(n, c, *grid.shape[1:]).reshape(n * c, *grid.shape[1:])
    g.requires_grad_()
    rows = []
    for k in range(dim):  # row k: the grid gradient of the k-th spatial derivative
        w = x.new_zeros([n * c, 1, *out, dim])
        w[..., k] = 1
        rows.append(_resampling.grid_grad_backward(w, x, g, b, o, extrapolate)[0])
    return torch.stack(rows, -2).reshape(n, c, *out, dim, dim).detach()


def grid_pull_backward(grad, inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_pull_backward``: the gradients of grid_pull.

    Parameters
    ----------
    grad : tensor [B, C, *out]
        The gradient of grid_pull's output.
    inp, grid, bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    grad_inp : tensor [B, C, *in], or None unless `inp` requires grad
        `grad` pushed back onto the input's voxels.
    grad_grid : tensor [B, *out, D], or None unless `grid` requires grad

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_pull_backward
    >>> x = torch.tensor([[[0., 1., 4.]]])
    >>> g = torch.tensor([[[1.5]]], requires_grad=True)
    >>> with torch.no_grad():  # as interpol's autograd calls it
    ...     grid_pull_backward(torch.ones(1, 1, 1), x, g, [0], [1], 0)
    (None, tensor([[[3.]]]))
    """
    b, o = _opts(grid, bound, interpolation)
    return _pair(inp, grid, _resampling.grid_pull_backward(grad, inp, grid, b, o, extrapolate))


def grid_push_backward(grad, inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_push_backward``: the gradients of grid_push, with respect to its
    values and its points.

    Parameters
    ----------
    grad : tensor [B, C, *shape]
        The gradient of grid_push's output, on the voxels.
    inp : tensor [B, C, *in]
    grid : tensor [B, *in, D]
        Where each value of `inp` was pushed.
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    grad_inp : tensor [B, C, *in], or None unless `inp` requires grad
        `grad` pulled at the points.
    grad_grid : tensor [B, *in, D], or None unless `grid` requires grad

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_push_backward
    >>> v = torch.ones(1, 1, 1, requires_grad=True)
    >>> grid_push_backward(torch.tensor([[[0., 1., 4.]]]), v, torch.tensor([[[1.5]]]),
    ...                    [0], [1], 0)
    (tensor([[[2.5000]]]), None)
    """
    b, o = _opts(grid, bound, interpolation)
    return _pair(inp, grid, _resampling.grid_push_backward(grad, inp, grid, b, o, extrapolate))


def grid_count_backward(grad, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_count_backward``: the gradient of grid_count.

    Parameters
    ----------
    grad : tensor [B, 1, *shape]
    grid : tensor [B, *in, D]
    bound, interpolation, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [B, *in, D], or None unless `grid` requires grad
        The gradient with respect to the grid (a count has no input).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_count_backward
    >>> g = torch.tensor([[[1.5]]], requires_grad=True)
    >>> with torch.no_grad():
    ...     grid_count_backward(torch.tensor([[[0., 1., 4.]]]), g, [0], [1], 0)
    tensor([[[3.]]])
    """
    if not grid.requires_grad:
        return None
    b, o = _opts(grid, bound, interpolation)
    return _resampling.grid_count_backward(grad, grid, b, o, extrapolate)


def grid_grad_backward(grad, inp, grid, bound, interpolation, extrapolate):
    """``interpol.pushpull.grid_grad_backward``: the gradients of grid_grad, with respect to
    its input and its grid.

    Parameters
    ----------
    grad : tensor [B, C, *out, D]
        The gradient of grid_grad's output.
    inp, grid, bound, interpolation, extrapolate
        As grid_grad.

    Returns
    -------
    grad_inp, grad_grid : tensor or None
        Each None unless that tensor requires grad; `grad_inp` is `grad` pushed back through
        the spline's derivatives (grid_pushgrad).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_lowlevel import grid_grad_backward
    >>> x = torch.zeros(1, 1, 3, requires_grad=True)
    >>> grid_grad_backward(torch.ones(1, 1, 1, 1), x, torch.tensor([[[1.5]]]), [0], [1], 0)
    (tensor([[[ 0., -1.,  1.]]]), None)
    """
    b, o = _opts(grid, bound, interpolation)
    return _pair(inp, grid, _resampling.grid_grad_backward(grad, inp, grid, b, o, extrapolate))


COEFF = ["spline_coeff", "spline_coeff_nd"]
PUSHPULL = ["grid_pull", "grid_push", "grid_count", "grid_grad", "grid_pushgrad", "grid_hess",
            "grid_pull_backward", "grid_push_backward", "grid_count_backward",
            "grid_grad_backward"]
