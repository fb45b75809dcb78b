"""grid_pull / push / count / grad and their backwards, in the positional form that NITorch's
``nitorch._C.spatial`` and MONAI's ``monai._C`` share (their C++ came from one source):

    grid_pull(input, grid, bound, interpolation, extrapolate)
    grid_pull_backward(grad, input, grid, bound, interpolation, extrapolate)
    grid_push(input, grid, source_size, bound, interpolation, extrapolate)
    grid_count(grid, source_size, bound, interpolation, extrapolate)
    ...

Note the option order (bound first), reversed from the Python APIs. ``bound`` and
``interpolation`` are lists of the client module's enum members (one per spatial dim, the last
one repeating); a name, or an integer in the clients' C numbering (``compat._enums``), is taken
too. ``extrapolate`` is 0 (in bounds within 0.05 voxel), 1 (everywhere, by the bound) or 2
(in bounds within half a voxel + 0.05: NITorch's histogram mode, used by its ``histc`` and so by
``nitorch register``); MONAI passes a bool. A backward returns the gradients of the inputs that
``require_grad``, input first, as the C++ deque does.

Everything runs on nitorch_jit's public functions (forward) and its fused backward entry
``nitorch_jit.ops.pushpull.resample_backward``: no forward is recomputed under autograd.
"""
import numbers

import torch

from ..ops.pushpull import grid_count as _count
from ..ops.pushpull import grid_grad as _grad
from ..ops.pushpull import grid_pull as _pull
from ..ops.pushpull import grid_push as _push
from ..ops.pushpull import resample_backward
from ._enums import C_BOUNDS, ORDER_NAMES, UNSERVED

_HIST_TOL = 0.55  # extrapolate=2: half a voxel plus the 0.05 of extrapolate=0


def names(values, argname, table):
    """A client option list -> names our public functions read (members of any enum, names
    and the clients' integers)."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    if not values:
        raise ValueError(f"{argname}: expected a non-empty list (one value per spatial dim)")
    out = []
    for v in values:
        # the clients' enum members are ints of their numbering, like their plain codes
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            if not 0 <= v < len(table) or table[v] in UNSERVED:
                valid = ", ".join(f"{n} {i}" for i, n in enumerate(table) if n not in UNSERVED)
                raise ValueError(f"{argname}: {v!r} is not a valid code; expected one of {valid}")
            v = table[v]
        out.append(v)
    return out


def options(bound, interpolation, extrapolate):
    """(interpolation names, bound names, extrapolate for our kernels, histogram mode)."""
    if isinstance(extrapolate, bool) or extrapolate in (0, 1, 2):
        mode = int(extrapolate)
    else:
        raise ValueError(f"extrapolate: expected 0, 1, 2 or a bool, got {extrapolate!r}")
    return (names(interpolation, "interpolation", ORDER_NAMES), names(bound, "bound", C_BOUNDS),
            mode >= 1, mode == 2)


def _hist_mask(grid, shape):
    """[N, 1, *out]: 1 where every coordinate is within half a voxel (+0.05) of the image."""
    dim = grid.shape[-1]
    inside = torch.ones(grid.shape[:-1], dtype=torch.bool, device=grid.device)
    for d in range(dim):
        x = grid[..., d]
        inside &= (x >= -_HIST_TOL) & (x <= (shape[d] - 1) + _HIST_TOL)
    return inside.unsqueeze(1).to(grid.dtype)


def _spatial(x, grid):
    return list(x.shape[x.dim() - grid.shape[-1]:])


def _requires(input, grid, gi, gg):
    """The C++ deque: the gradients of the inputs that require grad, input first."""
    out = []
    if input.requires_grad:
        out.append(gi)
    if grid.requires_grad:
        out.append(gg)
    return out


def grid_pull(input, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    out = _pull(input, grid, order, bnd, extrap)
    return out * _hist_mask(grid, _spatial(input, grid)) if hist else out


def grid_pull_backward(grad, input, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    if hist:
        grad = grad * _hist_mask(grid, _spatial(input, grid))
    gi, gg = resample_backward("pull", grad, input, grid, order, bnd, extrap,
                               input.requires_grad, grid.requires_grad)
    return _requires(input, grid, gi, gg)


def grid_push(input, grid, source_size, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    shape = list(source_size) or None
    if hist:
        input = input * _hist_mask(grid, shape or _spatial(input, grid))
    return _push(input, grid, shape, order, bnd, extrap)


def grid_push_backward(grad, input, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    mask = _hist_mask(grid, _spatial(grad, grid)) if hist else None
    values = input if mask is None else input * mask
    gi, gg = resample_backward("push", grad, values, grid, order, bnd, extrap,
                               input.requires_grad, grid.requires_grad)
    if mask is not None and gi is not None:
        gi = gi * mask
    return _requires(input, grid, gi, gg)


def grid_count(grid, source_size, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    shape = list(source_size) or None
    if hist:
        mask = _hist_mask(grid, shape or list(grid.shape[1:-1]))
        return _push(mask, grid, shape, order, bnd, extrap)
    return _count(grid, shape, order, bnd, extrap)


def grid_count_backward(grad, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    ones = (_hist_mask(grid, _spatial(grad, grid)) if hist
            else grid.new_ones([grid.shape[0], 1, *grid.shape[1:-1]]))
    return resample_backward("push", grad, ones, grid, order, bnd, extrap, False, True)[1]


def grid_grad(input, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    out = _grad(input, grid, order, bnd, extrap)
    return out * _hist_mask(grid, _spatial(input, grid)).unsqueeze(-1) if hist else out


def grid_grad_backward(grad, input, grid, bound, interpolation, extrapolate):
    order, bnd, extrap, hist = options(bound, interpolation, extrapolate)
    if hist:
        grad = grad * _hist_mask(grid, _spatial(input, grid)).unsqueeze(-1)
    gi, gg = resample_backward("grad", grad, input, grid, order, bnd, extrap,
                               input.requires_grad, grid.requires_grad)
    return _requires(input, grid, gi, gg)


NAMES = ["grid_pull", "grid_pull_backward", "grid_push", "grid_push_backward", "grid_count",
         "grid_count_backward", "grid_grad", "grid_grad_backward"]
