"""NITorch's compiled module ``nitorch._C.spatial``, served by nitorch_jit's kernels.

Every name NITorch imports from it (``nitorch/_C/grid.py``, ``solve.py``, ``resize.py``), with
its positional order, its integer codes and its return conventions (see
``../shared/reference/clients-facts.md`` §1 in a source checkout):

- resampling: ``grid_pull/push/count/grad`` and their ``_backward``s (``compat._resampling``);
- regularisers and solvers, fields ``[N, C, *spatial]`` and grids ``[N, D, *spatial]`` (channel
  first, as NITorch's wrappers hand them over): ``regulariser(_grid)(_backward)``,
  ``relax(_grid)``, ``precond(_grid)``, ``pcg(_grid)``, ``fmg(_grid)``. An empty tensor means
  "absent"; a non-empty ``output`` receives the result, which is also returned;
- resizing: ``resize``, ``prolongation``, ``restriction``, their ``_backward``s,
  ``fmg_prolongation`` and ``fmg_restriction``;
- the enums ``BoundType``, ``InterpolationType`` and ``GridAlignType``.

Where NITorch's C code has a known bug (reference/nitorch-facts.md §7), the right thing is done
instead; the README lists the differences: 3-D anisotropic orders, spline second derivatives
at orders 5-7, ``fmg_grid``'s component scaling, ``resize``'s normalisation and its 'last' and
size-1 'center' alignments, relax/precond with a 1-D Hessian, and the weight gradient of
``regulariser(_grid)_backward`` (a placeholder in NITorch). The solvers start from zero, as
NITorch's Python wrappers always ask; ``precond`` is served as the voxel-wise closed-form
solve, the only way NITorch calls it.
"""
import math

import torch

from ..ops.regularisers import regulariser as _regulariser
from ..ops.regularisers import regulariser_grid as _regulariser_grid
from ..ops.resize import anchor_map, prolong, resize as _resize, restrict
from ..ops.solvers import (solve_field, solve_field_closedform, solve_field_fmg, solve_grid,
                           solve_grid_closedform, solve_grid_fmg)
from . import _enums
from ._resampling import (NAMES as _RESAMPLING, grid_count, grid_count_backward,  # noqa: F401
                          grid_grad, grid_grad_backward, grid_pull, grid_pull_backward,
                          grid_push, grid_push_backward, names)

BoundType = _enums.bound_type(__name__, _enums.NITORCH_BOUND_ALIASES)
InterpolationType = _enums.interpolation_type(__name__)
GridAlignType = _enums.grid_align_type(__name__)
_ANCHORS = {"edge": "e", "center": "c", "first": "f", "last": "l"}


# ----------------------------------------------------------------------------- arguments
def _opt(t):
    """An empty tensor (pybind's way of saying None) -> None."""
    return None if t is None or t.numel() == 0 else t


def _bounds(bound):
    return names(bound, "bound", _enums.C_BOUNDS)


def _orders(interpolation):
    return names(interpolation, "interpolation", _enums.ORDER_NAMES)


def _check(x, argname, dims=(3, 4, 5)):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{argname}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in dims:
        raise ValueError(f"{argname}: expected a [N, C, *spatial] tensor with 1 to 3 spatial "
                         f"dims, got shape {tuple(x.shape)}")
    return x


def _into(output, result):
    """Write `result` into a non-empty `output` (NITorch's in-place convention)."""
    output = _opt(output)
    if output is None:
        return result
    if output.shape != result.shape:
        raise ValueError(f"output: expected shape {tuple(result.shape)}, got "
                         f"{tuple(output.shape)}")
    return output.copy_(result)


def _grid_in(x):
    """[N, D, *spatial] -> [N, *spatial, D]."""
    return None if x is None else x.movedim(1, -1)


def _grid_out(x):
    return x.movedim(-1, 1)


def _grid_weight(w, dim):
    """NITorch hands grid weights over as [N, 1, *spatial]; ours are [N, *spatial]."""
    if w is None:
        return None
    if w.dim() == dim + 2:
        if w.shape[1] != 1:
            raise ValueError(f"weight: expected [N, 1, *spatial] for a grid, got "
                             f"{tuple(w.shape)}")
        return w[:, 0]
    return w


def _lame(lame_shear, lame_div):
    return (float(lame_shear), float(lame_div))


def _field(hessian, gradient, weight, absolute, membrane, bending, voxel_size, bound):
    _check(gradient, "gradient")
    return dict(hessian=_opt(hessian), gradient=gradient, weights=_opt(weight),
                dim=gradient.dim() - 2, absolute=list(absolute), membrane=list(membrane),
                bending=list(bending), voxel_size=list(voxel_size), bound=_bounds(bound))


def _grid(hessian, gradient, weight, absolute, membrane, bending, lame_shear, lame_div,
          voxel_size, bound):
    _check(gradient, "gradient")
    dim = gradient.dim() - 2
    if gradient.shape[1] != dim:
        raise ValueError(f"gradient: expected [N, D, *spatial] with D = {dim} components, got "
                         f"{tuple(gradient.shape)}")
    return dict(hessian=_grid_in(_opt(hessian)), gradient=_grid_in(gradient),
                weights=_grid_weight(_opt(weight), dim), absolute=float(absolute),
                membrane=float(membrane), bending=float(bending),
                lame=_lame(lame_shear, lame_div), voxel_size=list(voxel_size),
                bound=_bounds(bound))


def _voxelwise(p):
    """No spatial penalty (membrane, bending, Lamé): the system is solved voxel by voxel."""
    spatial = [p["membrane"], p["bending"], *p.get("lame", ())]
    return not any(any(v) if isinstance(v, list) else v for v in spatial)


# ----------------------------------------------------------------------------- regularisers
def regulariser(input, output, weight, hessian, absolute, membrane, bending, voxel_size,
                bound):
    """(H +) L applied to a field [N, C, *spatial]; per-channel penalty lists."""
    _check(input, "input")
    y = _regulariser(input, list(absolute), list(membrane), list(bending), 1,
                     list(voxel_size), _bounds(bound), input.dim() - 2, _opt(weight),
                     _opt(hessian))
    return _into(output, y)


def regulariser_backward(grad, input, weight, hessian, absolute, membrane, bending,
                         voxel_size, bound, do_input, do_weight):
    """(grad wrt input, grad wrt weight): L is symmetric, so the first is L applied to
    `grad`; the second is d<grad, L_w input>/dw (NITorch's C returns a placeholder)."""
    gi = gw = None
    if do_input:
        gi = regulariser(grad, None, weight, hessian, absolute, membrane, bending,
                         voxel_size, bound)
    if do_weight and _opt(weight) is not None:
        with torch.enable_grad():
            w = weight.detach().requires_grad_()
            y = _regulariser(input.detach(), list(absolute), list(membrane), list(bending), 1,
                             list(voxel_size), _bounds(bound), input.dim() - 2, w, None)
            gw = torch.autograd.grad(y, w, grad)[0]
    return gi, gw


def regulariser_grid(input, output, weight, hessian, absolute, membrane, bending, lame_shear,
                     lame_div, voxel_size, bound):
    """(H +) L applied to a displacement grid, channel first: [N, D, *spatial]."""
    _check(input, "input")
    dim = input.dim() - 2
    y = _regulariser_grid(_grid_in(input), float(absolute), float(membrane), float(bending),
                          _lame(lame_shear, lame_div), 1, list(voxel_size), _bounds(bound),
                          _grid_weight(_opt(weight), dim), _grid_in(_opt(hessian)))
    return _into(output, _grid_out(y))


def regulariser_grid_backward(grad, input, weight, hessian, absolute, membrane, bending,
                              lame_shear, lame_div, voxel_size, bound, do_input, do_weight):
    """(grad wrt input, grad wrt weight) of regulariser_grid (see regulariser_backward)."""
    gi = gw = None
    dim = input.dim() - 2
    if do_input:
        gi = regulariser_grid(grad, None, weight, hessian, absolute, membrane, bending,
                              lame_shear, lame_div, voxel_size, bound)
    if do_weight and _opt(weight) is not None:
        with torch.enable_grad():
            w = _grid_weight(weight, dim).detach().requires_grad_()
            y = _regulariser_grid(_grid_in(input.detach()), float(absolute), float(membrane),
                                  float(bending), _lame(lame_shear, lame_div), 1,
                                  list(voxel_size), _bounds(bound), w, None)
            gw = torch.autograd.grad(y, w, _grid_in(grad))[0]
            gw = gw.unsqueeze(1) if weight.dim() == dim + 2 else gw
    return gi, gw


# ----------------------------------------------------------------------------- solvers
def _solved(p, solve, closedform, *closedform_args):
    """`solve(**p)`, or the voxel-wise closed form where the problem has no spatial penalty
    (called with the entries `closedform_args` of `p`)."""
    if _voxelwise(p):
        return closedform(*(p[name] for name in closedform_args))
    return solve(**p)


def _field_solve(p, output, solve):
    return _into(output, _solved(p, solve, solve_field_closedform, "hessian", "gradient",
                                 "weights", "dim", "absolute"))


def _grid_solve(p, output, solve):
    return _into(output, _grid_out(_solved(p, solve, solve_grid_closedform, "hessian",
                                           "gradient", "weights", "absolute", "voxel_size")))


def relax(hessian, gradient, output, weight, absolute, membrane, bending, voxel_size, bound,
          nb_iter):
    """`nb_iter` coloured Gauss-Seidel sweeps on (H + L) x = g, from x = 0 (fields)."""
    p = _field(hessian, gradient, weight, absolute, membrane, bending, voxel_size, bound)
    return _field_solve(p, output, lambda **k: solve_field(
        **k, optim="relax", max_iter=int(nb_iter), tolerance=0))


def relax_grid(hessian, gradient, output, weight, absolute, membrane, bending, lame_shear,
               lame_div, voxel_size, bound, nb_iter):
    """relax for displacement grids [N, D, *spatial]."""
    p = _grid(hessian, gradient, weight, absolute, membrane, bending, lame_shear, lame_div,
              voxel_size, bound)
    return _grid_solve(p, output, lambda **k: solve_grid(
        **k, optim="relax", max_iter=int(nb_iter), tolerance=0))


def _closed_form_only(p, name):
    if not _voxelwise(p):
        raise NotImplementedError(
            f"nitorch_jit.compat.nitorch.{name}: only the voxel-wise closed form is served "
            f"(membrane = bending = lame = 0), which is how NITorch calls it; use pcg, relax "
            f"or fmg to solve with a spatial regulariser")


def precond(hessian, gradient, output, weight, absolute, membrane, bending, voxel_size,
            bound):
    """(H + absolute * weight)^-1 g, voxel-wise (fields)."""
    p = _field(hessian, gradient, weight, absolute, membrane, bending, voxel_size, bound)
    _closed_form_only(p, "precond")
    return _field_solve(p, output, None)


def precond_grid(hessian, gradient, output, weight, absolute, membrane, bending, lame_shear,
                 lame_div, voxel_size, bound):
    """precond for displacement grids."""
    p = _grid(hessian, gradient, weight, absolute, membrane, bending, lame_shear, lame_div,
              voxel_size, bound)
    _closed_form_only(p, "precond_grid")
    return _grid_solve(p, output, None)


def pcg(hessian, gradient, output, weight, absolute, membrane, bending, voxel_size, bound,
        nb_iter, tol):
    """Preconditioned conjugate gradients on (H + L) x = g, from x = 0 (fields)."""
    p = _field(hessian, gradient, weight, absolute, membrane, bending, voxel_size, bound)
    return _field_solve(p, output, lambda **k: solve_field(
        **k, optim="cg", max_iter=int(nb_iter), tolerance=float(tol)))


def pcg_grid(hessian, gradient, output, weight, absolute, membrane, bending, lame_shear,
             lame_div, voxel_size, bound, nb_iter, tol):
    """pcg for displacement grids."""
    p = _grid(hessian, gradient, weight, absolute, membrane, bending, lame_shear, lame_div,
              voxel_size, bound)
    return _grid_solve(p, output, lambda **k: solve_grid(
        **k, optim="cg", max_iter=int(nb_iter), tolerance=float(tol)))


def fmg(hessian, gradient, output, weight, absolute, membrane, bending, voxel_size, bound,
        nb_cycles, nb_iter, max_levels, use_cg):
    """Full multigrid on (H + L) x = g (fields); CG or relaxation smoother."""
    p = _field(hessian, gradient, weight, absolute, membrane, bending, voxel_size, bound)
    return _field_solve(p, output, lambda **k: solve_field_fmg(
        **k, optim="cg" if use_cg else "relax", nb_cycles=int(nb_cycles),
        nb_iter=int(nb_iter), max_levels=int(max_levels)))


def fmg_grid(hessian, gradient, output, weight, absolute, membrane, bending, lame_shear,
             lame_div, voxel_size, bound, nb_cycles, nb_iter, max_levels, use_cg):
    """fmg for displacement grids."""
    p = _grid(hessian, gradient, weight, absolute, membrane, bending, lame_shear, lame_div,
              voxel_size, bound)
    return _grid_solve(p, output, lambda **k: solve_grid_fmg(
        **k, optim="cg" if use_cg else "relax", nb_cycles=int(nb_cycles),
        nb_iter=int(nb_iter), max_levels=int(max_levels)))


# ----------------------------------------------------------------------------- resizing
def _factors(factor, dim):
    f = [float(v) for v in (factor or [1.0])]
    f = f + f[-1:] * (dim - len(f))
    if len(f) != dim or not all(v > 0 and math.isfinite(v) for v in f):
        raise ValueError(f"factor: expected up to {dim} positive numbers, got {factor!r}")
    return f


def _anchors(mode, dim):
    names = [m.name if isinstance(m, _enums.PybindEnum) else str(m).lower()
             for m in (mode or [GridAlignType.center])]
    if any(n not in _ANCHORS for n in names):
        raise ValueError(f"mode: expected GridAlignType members (edge, center, first, last), "
                         f"got {mode!r}")
    names = names + names[-1:] * (dim - len(names))
    return [_ANCHORS[n] for n in names[:dim]]


def _norm(anchors, n, m, f):
    """The product of the per-dim scales of the resize n -> m (restrict's normalisation)."""
    out = 1.0
    for a, ni, mi, fi in zip(anchors, n, m, f):
        out *= anchor_map(a, ni, mi, fi)[0]
    return out


def _resample(input, shape, factor, anchors, order, bound, adjoint, normalize):
    """resize (or, with `adjoint`, its transpose) of [N, C, *spatial] onto `shape` (default
    floor(n * f), or ceil(n / f) for the transpose), normalised by the product of the scales
    when asked."""
    n = list(input.shape[2:])
    f = _factors(factor, len(n))
    if adjoint:
        m = shape or [math.ceil(a / b) for a, b in zip(n, f)]
        return restrict(input, f, m, anchors, order, not normalize, bound)
    m = shape or [max(1, math.floor(a * b)) for a, b in zip(n, f)]
    y = _resize(input, f, m, anchors, order, False, bound)
    return y * _norm(anchors, n, m, f) if normalize else y


def _out_shape(output):
    out = _opt(output)
    return None if out is None else list(out.shape[2:])


def resize(input, output, factor, bound, interpolation, mode, do_adjoint, normalize):
    """Resize [N, C, *spatial] by `factor` (or to `output`'s shape), without prefilter.

    do_adjoint: the transpose of the resize by `factor` from the output's grid to the input's
    (default output shape ceil(n / factor)); normalize: multiplied by the product of the
    scales, so that a constant stays about constant.
    """
    _check(input, "input")
    y = _resample(input, _out_shape(output), factor, _anchors(mode, input.dim() - 2),
                  _orders(interpolation), _bounds(bound), bool(do_adjoint), bool(normalize))
    return _into(output, y)


def resize_backward(grad, output, factor, bound, interpolation, mode, do_adjoint, normalize):
    """The transpose of resize (with the same arguments): onto `output`'s shape (the
    forward's input). NITorch inverts `factor` here because its adjoint inverts it again;
    ours is the transpose of the same resize, so the factor is kept."""
    return resize(grad, output, factor, bound, interpolation, mode, not do_adjoint, normalize)


def _multigrid(x, output, bound, interpolation, default_order, adjoint, normalize, ratio):
    """prolongation / restriction and their transposes: edges aligned, factor 2."""
    _check(x, "input")
    shape = _out_shape(output) or [max(1, math.ceil(n * ratio)) for n in x.shape[2:]]
    y = _resample(x, shape, [2.0], ["e"] * (x.dim() - 2),
                  _orders(list(interpolation) or [default_order]),
                  _bounds(list(bound) or ["dct2"]), adjoint, normalize)
    return _into(output, y)


def prolongation(input, output=None, bound=(), interpolation=()):
    """Prolongation (edges aligned, quadratic by default, no prefilter) onto `output`'s
    shape, or twice the input's (NITorch's C keeps the input's shape: a factor of 1)."""
    return _multigrid(input, output, bound, interpolation, "quadratic", False, False, 2)


def restriction(input, output=None, bound=(), interpolation=()):
    """Restriction (the normalised transpose of a linear prolongation) onto `output`'s shape,
    or half the input's, rounded up."""
    return _multigrid(input, output, bound, interpolation, "linear", True, True, 0.5)


def prolongation_backward(grad, output=None, bound=(), interpolation=()):
    """The transpose of prolongation, onto `output`'s shape (its input's)."""
    return _multigrid(grad, output, bound, interpolation, "quadratic", True, False, 0.5)


def restriction_backward(grad, output=None, bound=(), interpolation=()):
    """The transpose of restriction, onto `output`'s shape (its input's)."""
    return _multigrid(grad, output, bound, interpolation, "linear", False, True, 2)


def fmg_prolongation(input, output, bound):
    """The prolongation of nitorch_jit's multigrid solvers (``nitorch_jit.prolong``)."""
    _check(input, "input")
    shape = _out_shape(output) or [2 * n for n in input.shape[2:]]
    y = prolong(input, 2, shape, _bounds(bound) if bound else "dct2")
    return _into(output, y)


def fmg_restriction(input, output, bound):
    """The restriction of nitorch_jit's multigrid solvers (``restrict(x, 2, anchor='e')``)."""
    _check(input, "input")
    shape = _out_shape(output) or [math.ceil(n / 2) for n in input.shape[2:]]
    y = restrict(input, 2, shape, "e", 1, False, _bounds(bound) if bound else "dct2")
    return _into(output, y)


__all__ = _RESAMPLING + [
    "BoundType", "InterpolationType", "GridAlignType",
    "regulariser", "regulariser_backward", "regulariser_grid", "regulariser_grid_backward",
    "relax", "relax_grid", "precond", "precond_grid", "pcg", "pcg_grid", "fmg", "fmg_grid",
    "resize", "resize_backward", "prolongation", "prolongation_backward", "restriction",
    "restriction_backward", "fmg_prolongation", "fmg_restriction"]
