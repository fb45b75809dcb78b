"""Solvers of (H + L) x = g for fields and displacement grids: preconditioned conjugate
gradients, coloured Gauss–Seidel relaxation, full multigrid and the voxel-wise closed form.

NITorch's names and defaults. The loops run in Python over three kernels (reg_matvec,
reg_precond, reg_relax_; docs/regsolve-spec.md §3-4), so both backends share them. The
solutions are differentiable with respect to the gradient, the Hessian and the weights by
implicit differentiation (one more solve with the same operator).
"""
import math
import textwrap

import torch

from .. import backends
from ..codes import BOUND_NAMES, BoundType
from ..torch_impl import regsolve as _twin
from . import regularisers as _reg
from .docfill import DOCS as docfill_entries
from .docfill import docfill, register as docfill_register
from .resize import prolong as _prolong, restrict as _restrict

_ops = torch.ops.nitorch_jit
_OPTIMS = {"cg": "cg", "pcg": "cg", "relax": "relax", "relaks": "relax", "gs": "relax"}


# ----------------------------------------------------------------------------- the system
class System:
    """(H + L) at one resolution: tensors [B, C, *S] and the tap list.

    `kernels` provides reg_matvec / reg_precond / reg_relax_: the dispatcher's ops (default),
    or nitorch_jit.torch_impl.regsolve to run the twin in the same process (benchmarks)."""

    def __init__(self, hessian, weights, taps, period, spatial, kernels=None):
        self.hessian, self.weights, self.taps = hessian, weights, taps
        self.period, self.spatial = period, spatial
        self.kernels = _ops if kernels is None else kernels

    def matvec(self, x):
        return self.kernels.reg_matvec(x, self.hessian, self.weights, self.taps)

    def precond(self, r):
        return self.kernels.reg_precond(r, self.hessian, self.weights, self.taps)

    def relax_(self, x, g, nb_iter):
        self.kernels.reg_relax_(x, self.hessian, g, self.weights, self.taps, self.period,
                                nb_iter)


def _dot(a, b, block=4096):
    """Per-batch <a, b>, [B, 1, ..., 1] float64: products summed in float32 within blocks of
    `block` (torch's cascade sum, ~1e-7 relative), the block sums accumulated in float64.
    A float64 reduction of the whole product costs 10x more (a converted copy)."""
    prod = (a * b).reshape(a.shape[0], -1)
    n = prod.shape[1] // block * block
    out = prod[:, :n].reshape(a.shape[0], -1, block).sum(-1).sum(-1, dtype=torch.float64)
    if n < prod.shape[1]:
        out = out + prod[:, n:].sum(-1, dtype=torch.float64)
    return out.reshape([-1] + [1] * (a.dim() - 1))


def cg(system, g, x=None, max_iter=16, tolerance=1e-5, best=True):
    """Preconditioned conjugate gradients, per batch element (x=None starts from 0).

    best=True: returns the iterate of smallest residual. best=False (smoothing): returns the
    last iterate and its residual, (x, r), with no convergence test."""
    if x is None:
        x, r = torch.zeros_like(g), g.clone()
    else:
        x = x.clone()
        r = g - system.matvec(x)
    if best:
        gnorm = _dot(g, g).sqrt().clamp_min(1e-300)
        best_x, best_res = x.clone(), _dot(r, r).sqrt() / gnorm
    p = rz = None
    for _ in range(max_iter):
        if best and float(best_res.max()) <= tolerance:
            break
        z = system.precond(r)
        rz_new = _dot(r, z)
        if p is None:
            p = z
        else:
            ok = rz > 0
            beta = torch.where(ok, rz_new / torch.where(ok, rz, torch.ones_like(rz)),
                               torch.zeros_like(rz)).to(g.dtype)
            p = torch.addcmul(z, beta, p)
        rz = rz_new
        ap = system.matvec(p)
        pap = _dot(p, ap)
        ok = pap > 0
        if not bool(ok.any()):
            break  # converged exactly, or breakdown: nothing left to improve
        alpha = torch.where(ok, rz / torch.where(ok, pap, torch.ones_like(pap)),
                            torch.zeros_like(pap)).to(g.dtype)
        x.addcmul_(alpha, p)
        r.addcmul_(alpha, ap, value=-1)
        if best:
            res = _dot(r, r).sqrt() / gnorm
            better = res < best_res
            if bool(better.all()):
                best_x.copy_(x)
            elif bool(better.any()):
                best_x = torch.where(better, x, best_x)
            best_res = torch.where(better, res, best_res)
    return best_x if best else (x, r)


def relax(system, g, x=None, max_iter=16, tolerance=1e-5, check_every=4):
    """Coloured Gauss–Seidel; the residual is checked every `check_every` sweeps."""
    x = torch.zeros_like(g) if x is None else x.clone()
    gnorm = _dot(g, g).sqrt().clamp_min(1e-300)
    r = g - system.matvec(x)
    best_x, best = x.clone(), _dot(r, r).sqrt() / gnorm
    done = 0
    while done < max_iter and float(best.max()) > tolerance:
        n = min(check_every, max_iter - done)
        system.relax_(x, g, n)
        done += n
        r = g - system.matvec(x)
        res = _dot(r, r).sqrt() / gnorm
        better = res < best
        best_x = torch.where(better, x, best_x)
        best = torch.where(better, res, best)
    return best_x


# ----------------------------------------------------------------------------- multigrid
def _dense_inverse(system, b):
    """Pseudo-inverse of (H + L) on a coarse grid, [B, N, N], probed with unit vectors."""
    n = b[0].numel()
    eye = torch.eye(n, dtype=b.dtype, device=b.device).reshape([n] + list(b.shape[1:]))
    mats = []
    for i in range(b.shape[0]):
        sub = System(None if system.hessian is None else system.hessian[i:i + 1].expand(
                         [n] + list(system.hessian.shape[1:])),
                     None if system.weights is None else system.weights[i:i + 1].expand(
                         [n] + list(system.weights.shape[1:])),
                     system.taps, system.period, system.spatial, system.kernels)
        mat = sub.matvec(eye).reshape(n, n).double()
        mats.append(torch.linalg.pinv(0.5 * (mat + mat.T), hermitian=True))
    return torch.stack(mats).to(b.dtype)


def _coarsen(t, shape, bound):
    # `bound` holds kernel codes; the public restrict / prolong take BoundType members
    return _restrict(t, shape=shape, anchor="e", bound=[BoundType(b) for b in bound])


class _Level:
    def __init__(self, shape, voxel_size, system, g):
        self.shape, self.voxel_size, self.system, self.g = shape, voxel_size, system, g


def _scale_channels(t, s):
    return t * torch.tensor(s, dtype=t.dtype, device=t.device).reshape([1, -1] + [1] * (t.dim() - 2))


def _grid_hessian_scale(h, s):
    """H_ij * s_i * s_j for a packed grid Hessian (a scalar one becomes diagonal)."""
    c = len(s)
    kind = _twin.packing(h.shape[1], c)
    if kind == "scalar":
        if all(v == s[0] for v in s):
            return h * s[0] ** 2
        h = h.expand([h.shape[0], c] + list(h.shape[2:]))
        kind = "diag"
    scale = [v * v for v in s]
    if kind == "sym":
        scale += [s[i] * s[j] for i, j in _twin.upper_pairs(c)]
    return _scale_channels(h, scale)


def fmg(problem, g, system0, optim, nb_cycles, nb_iter, max_levels=16):
    """Full multigrid (spec §4): coarse solve, then prolong + V-cycles at each finer level."""
    bound = problem.bound
    def smooth(system, x, b):
        """nb_iter smoothing iterations: (x, its residual)."""
        if optim == "cg":
            return cg(system, b, x, max_iter=nb_iter, best=False)
        x = torch.zeros_like(b) if x is None else x.clone()
        system.relax_(x, b, nb_iter)
        return x, b - system.matvec(x)
    levels = [_Level(problem.shape, problem.voxel_size, system0, g)]
    h, w = system0.hessian, system0.weights
    while len(levels) < max_levels and max(levels[-1].shape) > 4:
        fine = levels[-1]
        shape = [max(1, math.ceil(n / 2)) for n in fine.shape]
        ratio = [n / m for n, m in zip(fine.shape, shape)]
        vs = [v * r for v, r in zip(fine.voxel_size, ratio)]
        gc = _coarsen(fine.g, shape, bound)
        hc = None if h is None else _coarsen(h, shape, bound)
        w = None if w is None else _coarsen(w, shape, bound)
        if problem.grid:
            gc = _scale_channels(gc, ratio)
            hc = None if hc is None else _grid_hessian_scale(hc, ratio)
        h = hc
        taps = problem.make_taps(vs)
        sys = System(hc, w, taps, _reg.colour_periods(taps, shape, bound), system0.spatial,
                     system0.kernels)
        levels.append(_Level(shape, vs, sys, gc))

    def up(x, fine, coarse):
        x = _prolong(x, shape=fine.shape, bound=[BoundType(b) for b in bound])
        if problem.grid:
            x = _scale_channels(x, [n / m for n, m in zip(fine.shape, coarse.shape)])
        return x

    def down(r, fine, coarse):
        r = _coarsen(r, coarse.shape, bound)
        if problem.grid:
            r = _scale_channels(r, [n / m for n, m in zip(fine.shape, coarse.shape)])
        return r

    def coarse_solve(level, b):
        n = b[0].numel()
        if n > 1024:
            return cg(level.system, b, max_iter=min(4 * n, 400), tolerance=1e-10)
        if not hasattr(level, "inverse"):
            level.inverse = _dense_inverse(level.system, b)
        return torch.einsum("bij,bj->bi", level.inverse, b.reshape(b.shape[0], -1)) \
            .reshape(b.shape)

    def vcycle(i, x, b):
        """One V-cycle from x (None: zero) on level i; returns the new x."""
        lev = levels[i]
        if i == len(levels) - 1:
            return coarse_solve(lev, b)
        x, r = smooth(lev.system, x, b)
        e = vcycle(i + 1, None, down(r, lev, levels[i + 1]))
        x = x + up(e, lev, levels[i + 1])
        return smooth(lev.system, x, b)[0]

    x = coarse_solve(levels[-1], levels[-1].g)
    for i in range(len(levels) - 2, -1, -1):
        x = up(x, levels[i], levels[i + 1])
        for _ in range(nb_cycles):
            x = vcycle(i, x, levels[i].g)
    return x


# ----------------------------------------------------------------------------- implicit autograd
class _Solve(torch.autograd.Function):
    """x = A⁻¹ g; backward: ḡ = A⁻¹ x̄, H̄ = −outer(ḡ, x), w̄ = −∂<ḡ, L_w x>/∂w."""

    @staticmethod
    def forward(ctx, g, hessian, weights, run, taps):
        with torch.no_grad():
            x = run(g, hessian, weights)
        ctx.run, ctx.taps = run, taps
        ctx.save_for_backward(x, hessian, weights)
        return x

    @staticmethod
    def backward(ctx, grad):
        x, hessian, weights = ctx.saved_tensors
        with torch.no_grad():
            gg = ctx.run(grad.contiguous(), hessian, weights)
        gh = gw = None
        if ctx.needs_input_grad[1]:
            gh = -_twin.sym_outer(gg, x, hessian.shape[1])
        if ctx.needs_input_grad[2]:
            gw = -_reg.weight_grad(gg, x, weights, ctx.taps)
        return gg, gh, gw, None, None


def _check_int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return value


def _check_optim(optim):
    if not isinstance(optim, str) or optim.lower() not in _OPTIMS:
        raise ValueError(f"optim: expected 'cg' or 'relax', got {optim!r}")
    return _OPTIMS[optim.lower()]


def _cg_options(optim, max_iter, tolerance):
    """The checked method and options of _solve for a CG or relaxation solver."""
    return dict(method=_check_optim(optim), max_iter=_check_int(max_iter, "max_iter", 1),
                tolerance=_check_tol(tolerance))


def _fmg_options(optim, nb_cycles, nb_iter, max_levels):
    """The checked method and options of _solve for a full-multigrid solver."""
    return dict(method="fmg", optim=_check_optim(optim),
                nb_cycles=_check_int(nb_cycles, "nb_cycles", 1),
                nb_iter=_check_int(nb_iter, "nb_iter", 1),
                max_levels=_check_int(max_levels, "max_levels", 1))


def _solve(p, gradient, method, **opts):
    """Run `method` on the normalised problem `p` (gradient in p.x) with implicit autograd."""
    p.check_device(("hessian", p.hessian), ("weights", p.weights))
    # the kernels the method runs, built beside the binding on a first call (full multigrid
    # smooths with its `optim`)
    iterative = opts["optim"] if method == "fmg" else method
    ops = ("reg_precond",) if method == "closedform" or not p.spatial else \
        ("reg_precond", "reg_matvec") if iterative == "cg" else ("reg_relax_", "reg_matvec")
    if method == "fmg" and p.spatial:  # its restrictions and prolongations, built meanwhile
        backends.prefetch("resize", p.x.device,
                          (("resize_adjoint", "resize"), p.x.dtype, [1] * len(p.shape)))
    backends.ensure_eager("regsolve", p.x.device, (ops, p.x.dtype, ()))
    g = p.x.contiguous()
    absolute_only = not p.spatial or method == "closedform"
    taps = p.make_taps(p.voxel_size, absolute_only=absolute_only)
    period = _reg.colour_periods(taps, p.shape, p.bound)

    def run(b, hessian, weights):
        system = System(hessian, weights, taps, period, p.spatial)
        if absolute_only:
            return system.precond(b)  # the operator is voxel-wise: exact
        if method == "cg":
            return cg(system, b, max_iter=opts["max_iter"], tolerance=opts["tolerance"])
        if method == "relax":
            return relax(system, b, max_iter=opts["max_iter"], tolerance=opts["tolerance"])
        return fmg(p, b, system, opts["optim"], opts["nb_cycles"], opts["nb_iter"],
                   opts["max_levels"])

    x = _Solve.apply(g, p.hessian, p.weights, run, taps)
    return p.restore(x)


def field_problem(hessian, gradient, weights, dim, absolute, membrane, bending, factor,
                  voxel_size, bound):
    """The checked Problem of solve_field's arguments (benchmarks time its solves)."""
    p = _reg.Problem(gradient, hessian, weights, dim, absolute, membrane, bending, 0, factor,
                     voxel_size, bound, False, "gradient")
    return p


def grid_problem(hessian, gradient, weights, absolute, membrane, bending, lame, factor,
                 voxel_size, bound):
    """The checked Problem of solve_grid's arguments (benchmarks time its solves)."""
    return _reg.Problem(gradient, hessian, weights, None, absolute, membrane, bending, lame,
                        factor, voxel_size, bound, True, "gradient")


# ----------------------------------------------------------------------------- public API
# the parameters the solvers' docstrings share (ops/docfill.py places them)
docfill_register(
    field_problem="""\
hessian : tensor [*batch, K, *spatial] or None
    Voxel-wise Hessian H, K = 1, C or C(C+1)/2 (diagonal, then upper triangle).
gradient : tensor [*batch, C, *spatial]
    Right-hand side g.
weights : tensor [*batch, 1|C, *spatial], optional
    Voxel weights of the regulariser (absolute and membrane only).
dim : int, optional
    Number of spatial dims (default ``min(gradient.dim() - 1, 3)``).
absolute, membrane, bending : float or list[float], >= 0
factor : float or list[float]
voxel_size : float or list[float]
bound : str or BoundType, or a list of them, default 'dct2' (dct1 and replicate are
    refused)""",
    grid_problem="""\
hessian : tensor [*batch, *spatial, K] or None
    Voxel-wise Hessian, K = 1, D or D(D+1)/2.
gradient : tensor [*batch, *spatial, D]
    Right-hand side, in voxels.
absolute, membrane, bending : float, >= 0
lame : float or (float, float)
    Linear elasticity (shear, div).
factor : float
voxel_size : float or list[float]
bound : str or BoundType, or a list of them, default 'dft'
weights : tensor [*batch, *spatial], optional
    Voxel weights (absolute and membrane only).""",
    cg_options="""\
optim : {'cg', 'relax'}
    Preconditioned conjugate gradients or coloured Gauss–Seidel.
max_iter : int >= 1
tolerance : float, stop when ||g - (H+L)x|| <= tolerance * ||g||; the best iterate is
    returned if it is not reached.""",
    fmg_options="""\
optim : {'cg', 'relax'}
    Smoother of the V-cycles.
nb_cycles : int >= 1, V-cycles per level
nb_iter : int >= 1, smoothing iterations before and after each coarse correction
max_levels : int >= 1, default 16
    Most levels of the pyramid, the finest included (coarsening also stops once every
    dim is 4 or less); with 1, the coarse solver (CG to 1e-10, or a direct solve on
    small grids) runs at full resolution.""",
    solver_returns="""\
The solution, shaped like `gradient`. Differentiable with respect to `gradient`,
`hessian` and `weights` (implicit differentiation: one more solve).""")
# the solution's line of the Returns section, by problem
_SOLUTIONS = {"field": "x : tensor [*batch, C, *spatial]",
              "grid": "x : tensor [*batch, *spatial, D]"}


def _solver_sections(problem, method):
    """The Parameters and Returns sections of an iterative solver's docstring."""
    return "\n".join(["Parameters", "----------", docfill_entries[f"{problem}_problem"],
                      docfill_entries[f"{method}_options"], "", "Returns", "-------",
                      _SOLUTIONS[problem],
                      textwrap.indent(docfill_entries["solver_returns"], "    ")])


# the iterative solvers' sections, by problem and method: %(field_cg_sections)s, ...
docfill_register(**{f"{problem}_{method}_sections": _solver_sections(problem, method)
                    for problem in _SOLUTIONS for method in ("cg", "fmg")})


@docfill
def solve_field(hessian, gradient, weights=None, dim=None, absolute=0, membrane=0, bending=0,
                factor=1, voxel_size=1, bound="dct2", optim="cg", max_iter=16, tolerance=1e-5):
    """Solve (H + L) x = g for a field, by PCG or relaxation.

    %(field_cg_sections)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g = torch.randn(2, 32, 32, 32, dtype=torch.float64)
    >>> h = torch.rand(1, 32, 32, 32, dtype=torch.float64)
    >>> x = nitorch_jit.solve_field(h, g, membrane=1e-1, bending=1e-2)
    >>> x.shape
    torch.Size([2, 32, 32, 32])
    """
    p = field_problem(hessian, gradient, weights, dim, absolute, membrane, bending, factor,
                      voxel_size, bound)
    return _solve(p, gradient, **_cg_options(optim, max_iter, tolerance))


@docfill
def solve_grid(hessian, gradient, absolute=0, membrane=0, bending=0, lame=0, factor=1,
               voxel_size=1, bound="dft", weights=None, optim="cg", max_iter=16,
               tolerance=1e-5):
    """Solve (H + L) x = g for a displacement grid, by PCG or relaxation.

    %(grid_cg_sections)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g = torch.randn(1, 32, 32, 32, 3)
    >>> h = torch.rand(1, 32, 32, 32, 6) * torch.tensor([1, 1, 1, 0, 0, 0.])
    >>> x = nitorch_jit.solve_grid(h, g, membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
    >>> x.shape
    torch.Size([1, 32, 32, 32, 3])
    """
    p = grid_problem(hessian, gradient, weights, absolute, membrane, bending, lame, factor,
                     voxel_size, bound)
    return _solve(p, gradient, **_cg_options(optim, max_iter, tolerance))


@docfill
def solve_field_fmg(hessian, gradient, weights=None, dim=None, absolute=0, membrane=0,
                    bending=0, factor=1, voxel_size=1, bound="dct2", optim="cg", nb_cycles=2,
                    nb_iter=2, max_levels=16):
    """Solve (H + L) x = g for a field by full multigrid.

    %(field_fmg_sections)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g = torch.randn(1, 64, 64, dtype=torch.float64)    # a 2-D field, one channel
    >>> h = torch.rand(1, 64, 64, dtype=torch.float64)
    >>> x = nitorch_jit.solve_field_fmg(h, g, dim=2, membrane=1e-1, bending=1e-2)
    >>> x.shape
    torch.Size([1, 64, 64])
    """
    p = field_problem(hessian, gradient, weights, dim, absolute, membrane, bending, factor,
                      voxel_size, bound)
    return _solve(p, gradient, **_fmg_options(optim, nb_cycles, nb_iter, max_levels))


@docfill
def solve_grid_fmg(hessian, gradient, absolute=0, membrane=0, bending=0, lame=0, factor=1,
                   voxel_size=1, bound="dft", weights=None, optim="cg", nb_cycles=2, nb_iter=2,
                   max_levels=16):
    """Solve (H + L) x = g for a displacement grid by full multigrid.

    %(grid_fmg_sections)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g = torch.randn(1, 64, 64, 2)                       # a 2-D displacement grid
    >>> h = torch.rand(1, 64, 64, 3) * torch.tensor([1, 1, 0.])
    >>> x = nitorch_jit.solve_grid_fmg(h, g, membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
    >>> x.shape
    torch.Size([1, 64, 64, 2])
    """
    p = grid_problem(hessian, gradient, weights, absolute, membrane, bending, lame, factor,
                     voxel_size, bound)
    return _solve(p, gradient, **_fmg_options(optim, nb_cycles, nb_iter, max_levels))


@docfill
def solve_field_closedform(hessian, gradient, weights=None, dim=None, absolute=0, factor=1):
    """Voxel-wise solve of (H + absolute * factor * weights) x = g for a field.

    Parameters
    ----------
    hessian : tensor [*batch, K, *spatial] or None
    gradient : tensor [*batch, C, *spatial]
    weights : tensor [*batch, 1|C, *spatial], optional
    dim : int, optional
    absolute, factor : float or list[float]

    Returns
    -------
    x : tensor [*batch, C, *spatial]
        %(solver_returns)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g, h = torch.randn(3, 8, 8), torch.rand(3, 8, 8) + 1
    >>> x = nitorch_jit.solve_field_closedform(h, g, absolute=1, dim=2)
    >>> bool(torch.allclose(x, g / (h + 1)))
    True
    """
    p = field_problem(hessian, gradient, weights, dim, absolute, 0, 0, factor, 1, "dct2")
    return _solve(p, gradient, "closedform")


@docfill
def solve_grid_closedform(hessian, gradient, weights=None, absolute=0, voxel_size=1, factor=1):
    """Voxel-wise solve of (H + absolute * factor * weights * vs_d^2) x = g for a grid.

    Parameters
    ----------
    hessian : tensor [*batch, *spatial, K] or None
    gradient : tensor [*batch, *spatial, D]
    weights : tensor [*batch, *spatial], optional
    absolute, factor : float
    voxel_size : float or list[float]

    Returns
    -------
    x : tensor [*batch, *spatial, D]
        %(solver_returns)s

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> g, h = torch.randn(8, 8, 2), torch.rand(8, 8, 2) + 1
    >>> x = nitorch_jit.solve_grid_closedform(h, g, absolute=1)
    >>> bool(torch.allclose(x, g / (h + 1)))
    True
    """
    p = grid_problem(hessian, gradient, weights, absolute, 0, 0, 0, factor, voxel_size, "dft")
    return _solve(p, gradient, "closedform")


def _check_tol(tolerance):
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
            or not tolerance >= 0:
        raise ValueError(f"tolerance: expected a number >= 0, got {tolerance!r}")
    return float(tolerance)


__all__ = ["solve_field", "solve_field_closedform", "solve_field_fmg", "solve_grid",
           "solve_grid_closedform", "solve_grid_fmg", "BOUND_NAMES"]
