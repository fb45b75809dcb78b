"""Regularisers of non-linear registration: ``regulariser`` (fields) and ``regulariser_grid``
(displacement fields), NITorch's names and defaults.

The operator L is the Hessian of a quadratic energy (absolute, membrane, bending and, for
grids, linear elasticity); docs/regsolve-spec.md gives the exact discretisation. It reaches
both backends as one flat tap list built here by ``taps`` (the stencil is written once).
Fields are ``[*batch, C, *spatial]``, grids ``[*batch, *spatial, D]`` in voxels; voxel-wise
Hessians are packed (K = 1, C or C(C+1)/2 values per voxel: diagonal, then upper triangle).
"""
import math

import torch

from .. import backends
from ..codes import BOUND_NAMES, DCT1, DCT2, DFT, DST1, DST2, REPLICATE, ZERO
from ..torch_impl import regsolve as _twin
from .common import HALF
from .options import bound_codes, check_tensor, checked_per_dim, is_real, positive_floats

_ops = torch.ops.nitorch_jit
_MODULE = "regsolve"

# 1-D stencils {offset: coefficient}: membrane (-second difference), bending (fourth
# difference), central first difference.
_M = {-1: -1.0, 0: 2.0, 1: -1.0}
_B = {-2: 1.0, -1: -4.0, 0: 6.0, 1: -4.0, 2: 1.0}
_G = {-1: -0.5, 1: 0.5}
# The dual bound makes G's transpose -G.
_DUAL = {DCT2: DST2, DST2: DCT2, DST1: DST1, DFT: DFT, ZERO: ZERO}
_REFUSED = (REPLICATE, DCT1)


# ----------------------------------------------------------------------------- fake kernels
def _fake_matvec(x, hessian, weights, taps):
    backends.ensure(_MODULE, x.device)
    return x.new_empty(x.shape)


def _fake_relax(x, hessian, gradient, weights, taps, period, nb_iter):
    backends.ensure(_MODULE, x.device)


torch.library.register_fake("nitorch_jit::reg_matvec", _fake_matvec)
torch.library.register_fake("nitorch_jit::reg_precond", _fake_matvec)
torch.library.register_fake("nitorch_jit::reg_relax_", _fake_relax)


# ----------------------------------------------------------------------------- autograd
def weight_grad(a, b, weights, taps):
    """d<a, L_w b>/dw: <a, L_w b> is linear in w, so autograd over the twin is exact."""
    with torch.enable_grad():
        w = weights.detach().requires_grad_()
        y = _twin.reg_matvec(b.detach(), None, w, taps)
        return torch.autograd.grad(y, w, a)[0]


def _setup(ctx, inputs, output):
    x, hessian, weights, taps = inputs
    ctx.taps = taps
    ctx.save_for_backward(x, hessian, weights)


def _matvec_backward(ctx, grad):
    x, hessian, weights = ctx.saved_tensors
    gx = gh = gw = None
    if ctx.needs_input_grad[0]:
        gx = _ops.reg_matvec(grad, hessian, weights, ctx.taps)  # L and H are symmetric
    if ctx.needs_input_grad[1]:
        gh = _twin.sym_outer(grad, x, hessian.shape[1])
    if ctx.needs_input_grad[2]:
        gw = weight_grad(grad, x, weights, ctx.taps)
    return gx, gh, gw, None


torch.library.register_autograd("nitorch_jit::reg_matvec", _matvec_backward,
                                setup_context=_setup)


# ----------------------------------------------------------------------------- the stencil
def _penalty(value, n, argname):
    return checked_per_dim(value, n, argname, float, lambda v: is_real(v) and math.isfinite(v),
                           lambda v: v >= 0, "expected finite numbers",
                           "penalties must be >= 0")


def voxel_sizes(voxel_size, dim):
    """`dim` positive voxel sizes from a number or a list."""
    return positive_floats(voxel_size, dim, "voxel_size")


def bounds(bound, dim):
    """Bound codes accepted by the regularisers (L must be symmetric)."""
    codes = bound_codes(bound, dim)
    for b in codes:
        if b in _REFUSED:
            raise ValueError(
                f"bound: {BOUND_NAMES[b]!r} makes the regulariser non-symmetric (conjugate "
                f"gradients would solve the wrong system); use 'dct2' (Neumann, the same as "
                f"replicate for a membrane), 'dst1', 'dst2', 'dft' or 'zero'")
    return codes


class _Taps:
    """Accumulates taps {(c_out, c_in, kind, offsets, bounds): coef}."""

    def __init__(self, dim, bnd):
        self.dim, self.bnd, self.taps = dim, bnd, {}

    def add(self, co, ci, coef, factors=(), kind=0):
        """coef times the Kronecker product of 1-D stencils [(axis, stencil, dual?)]."""
        if coef == 0:
            return
        terms = [((0,) * self.dim, tuple(self.bnd), coef)]
        for axis, stencil, dual in factors:
            b = _DUAL[self.bnd[axis]] if dual else self.bnd[axis]
            new = []
            for offs, bnds, c in terms:
                for o, w in stencil.items():
                    offs2, bnds2 = list(offs), list(bnds)
                    offs2[axis], bnds2[axis] = o, (b if o else self.bnd[axis])
                    new.append((tuple(offs2), tuple(bnds2), c * w))
            terms = new
        for offs, bnds, c in terms:
            key = (co, ci, kind, offs, bnds)
            self.taps[key] = self.taps.get(key, 0.0) + c

    def flat(self):
        out = []
        for (co, ci, kind, offs, bnds), c in self.taps.items():
            if c != 0:
                out += [float(co), float(ci), float(kind), c] + [float(o) for o in offs] \
                    + [float(b) for b in bnds]
        return out


def _field_terms(t, co, ci, scale, a, m, b, vx, weighted):
    """absolute, membrane and bending of one channel, all multiplied by `scale`."""
    dim = t.dim
    t.add(co, ci, scale * a, kind=2 if weighted else 0)
    for d in range(dim):
        if weighted:
            for o in (-1, 1):
                t.add(co, ci, scale * m * vx[d], [(d, {o: 1.0}, False)], kind=1)
        else:
            t.add(co, ci, scale * m * vx[d], [(d, _M, False)])
        t.add(co, ci, scale * b * vx[d] ** 2, [(d, _B, False)])
        for e in range(d + 1, dim):
            t.add(co, ci, 2 * scale * b * vx[d] * vx[e], [(d, _M, False), (e, _M, False)])


def taps(dim, channels, absolute, membrane, bending, voxel_size, bound, lame=(0.0, 0.0),
         grid=False, weighted=False):
    """The flat tap list of L (spec §1-2).

    Fields: absolute / membrane / bending are per-channel lists (factor included).
    Grids (grid=True, channels == dim): scalars, component d scaled by voxel_size[d]**2, plus
    linear elasticity lame = (shear, div).
    """
    vx = [1.0 / v ** 2 for v in voxel_size]
    t = _Taps(dim, bound)
    if not grid:
        for c in range(channels):
            _field_terms(t, c, c, 1.0, absolute[c], membrane[c], bending[c], vx, weighted)
        return t.flat()
    mu, lam = lame
    for d in range(dim):
        _field_terms(t, d, d, voxel_size[d] ** 2, absolute, membrane, bending, vx, weighted)
        for e in range(dim):
            t.add(d, d, mu * voxel_size[d] ** 2 * vx[e], [(e, _M, False)])
        t.add(d, d, mu + lam, [(d, _M, False)])
        for e in range(dim):
            if e != d:
                t.add(d, e, -mu, [(e, _G, True), (d, _G, False)])
                t.add(d, e, -lam, [(d, _G, True), (e, _G, False)])
    return t.flat()


def reach(flat, dim):
    """The largest |offset| of a tap list."""
    n = 4 + 2 * dim
    offs = [abs(flat[i + 4 + d]) for i in range(0, len(flat), n) for d in range(dim)]
    return int(max(offs, default=0))


def colour_periods(flat, shape, bnd):
    """Per-dim colour periods: no tap couples two voxels of one colour (spec §4)."""
    r = reach(flat, len(shape))
    out = []
    for n, b in zip(shape, bnd):
        p = r + 1
        if r and b == DFT and n > p:
            while 1 <= n % p <= r:
                p += 1
        out.append(p)
    return out


# ----------------------------------------------------------------------------- arguments
def _broadcast(shapes, xname):
    # torch.broadcast_shapes would import sympy (over 1 s) on the first call
    n = max(len(s) for s in shapes)
    shapes = [[1] * (n - len(s)) + list(s) for s in shapes]
    out = []
    for sizes in zip(*shapes):
        big = {s for s in sizes if s != 1}
        if len(big) > 1:
            raise ValueError(f"batch dims do not broadcast: {xname} {shapes[0]}, then "
                             f"hessian / weights {shapes[1:]}")
        out.append(big.pop() if big else 1)
    return out


class Problem:
    """Normalised tensors and operator settings of one field or grid call.

    Tensors are [B, C, *S] (hessian [B, K, *S], weights [B, 1|C, *S]); ``restore`` maps a
    [B, C, *S] result back to the caller's layout.
    """

    def __init__(self, x, hessian, weights, dim, absolute, membrane, bending, lame, factor,
                 voxel_size, bound, grid, xname):
        check_tensor(x, xname)
        self.grid, self.xname = grid, xname
        if grid:
            if x.dim() < 2:
                raise ValueError(f"{xname}: expected [*batch, *spatial, D], got shape "
                                 f"{tuple(x.shape)}")
            dim = x.shape[-1]
            if dim not in (1, 2, 3) or x.dim() < dim + 1:
                raise ValueError(f"{xname}: the last dim ({x.shape[-1]}) must be the number of "
                                 f"spatial dims (1, 2 or 3), with that many spatial dims before "
                                 f"it; got shape {tuple(x.shape)}")
            x = x.movedim(-1, -dim - 1)
        else:
            if dim is None:
                dim = min(x.dim() - 1, 3)
            if isinstance(dim, bool) or not isinstance(dim, int) or dim not in (1, 2, 3):
                raise ValueError(f"dim: expected 1, 2 or 3 spatial dims, got {dim!r}")
            if x.dim() < dim + 1:
                raise ValueError(f"{xname}: expected [*batch, C, *spatial] with {dim} spatial "
                                 f"dims, got shape {tuple(x.shape)}")
        self.dim = dim
        self.shape = list(x.shape[-dim:])
        self.channels = x.shape[-dim - 1]
        self.dtype = x.dtype
        if x.dtype in HALF:
            x = x.float()
        self.batch = list(x.shape[:-dim - 1])
        self.hessian = self.weights = None
        bshapes = [self.batch]
        if hessian is not None:
            hessian = self._field(hessian, "hessian", None)
            _twin.packing(hessian.shape[-dim - 1], self.channels)
            bshapes.append(list(hessian.shape[:-dim - 1]))
        if weights is not None:
            if grid:
                check_tensor(weights, "weights")
                weights = weights.unsqueeze(-dim - 1)
            weights = self._field(weights, "weights", (1, self.channels))
            bshapes.append(list(weights.shape[:-dim - 1]))
        self.batch = _broadcast(bshapes, xname)
        self.x = self._flat(x)
        self.hessian = None if hessian is None else self._flat(hessian)
        self.weights = None if weights is None else self._flat(weights)
        # penalties
        self.bound = bounds(bound, dim)
        self.voxel_size = voxel_sizes(voxel_size, dim)
        if grid:
            self.absolute = _penalty(absolute, 1, "absolute")[0]
            self.membrane = _penalty(membrane, 1, "membrane")[0]
            self.bending = _penalty(bending, 1, "bending")[0]
            lam = list(lame) if isinstance(lame, (list, tuple)) else [lame, lame]
            if len(lam) != 2:
                raise ValueError(f"lame: expected one number or (shear, div), got {lame!r}")
            self.lame = _penalty(lam, 2, "lame")
            f = _penalty(factor, 1, "factor")[0]
            self.absolute *= f
            self.membrane *= f
            self.bending *= f
            self.lame = [v * f for v in self.lame]
            spatial = self.membrane or self.bending or any(self.lame)
            if weights is not None and (self.bending or any(self.lame)):
                raise ValueError("weights: only absolute and membrane support voxel weights "
                                 "(bending and lame with weights are not the Hessian of a "
                                 "weighted energy here)")
        else:
            c = self.channels
            f = _penalty(factor, c, "factor")
            self.absolute = [a * g for a, g in zip(_penalty(absolute, c, "absolute"), f)]
            self.membrane = [a * g for a, g in zip(_penalty(membrane, c, "membrane"), f)]
            self.bending = [a * g for a, g in zip(_penalty(bending, c, "bending"), f)]
            self.lame = (0.0, 0.0)
            spatial = any(self.membrane) or any(self.bending)
            if weights is not None and any(self.bending):
                raise ValueError("weights: only absolute and membrane support voxel weights "
                                 "(bending with weights is not the Hessian of a weighted energy "
                                 "here)")
        self.spatial = bool(spatial)
        self.taps = self.make_taps(self.voxel_size)

    def make_taps(self, voxel_size, absolute_only=False):
        zero = 0.0 if self.grid else [0.0] * self.channels
        return taps(self.dim, self.channels, self.absolute,
                    zero if absolute_only else self.membrane,
                    zero if absolute_only else self.bending, voxel_size, self.bound,
                    lame=(0.0, 0.0) if absolute_only else self.lame, grid=self.grid,
                    weighted=self.weights is not None)

    def _field(self, t, name, channels):
        """[*batch, K, *S] (grids: [*batch, *S, K]) checked against x."""
        check_tensor(t, name)
        dim = self.dim
        if self.grid and name == "hessian":
            if t.dim() < dim + 1:
                raise ValueError(f"hessian: expected [*batch, *spatial, K], got shape "
                                 f"{tuple(t.shape)}")
            t = t.movedim(-1, -dim - 1)
        if t.dim() < dim + 1 or list(t.shape[-dim:]) != self.shape:
            layout = "[*batch, *spatial]" if self.grid and name == "weights" else (
                "[*batch, *spatial, K]" if self.grid else "[*batch, K, *spatial]")
            raise ValueError(f"{name}: expected {layout} with spatial shape {self.shape}, got "
                             f"shape {tuple(t.shape)}")
        if channels is not None and t.shape[-dim - 1] not in channels:
            raise ValueError(f"{name}: expected 1 or {self.channels} channels, got "
                             f"{t.shape[-dim - 1]}")
        if t.dtype != self.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} does not match {self.xname}'s "
                            f"{self.dtype}")
        return t.float() if t.dtype in HALF else t

    def _flat(self, t):
        """[B, K, *S], contiguous: the kernels would otherwise copy it on every call."""
        dim = self.dim
        return t.expand(self.batch + list(t.shape[-dim - 1:])).reshape(
            [-1] + list(t.shape[-dim - 1:])).contiguous()

    def check_device(self, *tensors):
        for name, t in tensors:
            if t is not None and t.device != self.x.device:
                raise ValueError(f"{name}: device {t.device} does not match {self.xname}'s "
                                 f"{self.x.device}")

    def restore(self, y):
        y = y.reshape(self.batch + list(y.shape[1:]))
        if self.grid:
            y = y.movedim(-self.dim - 1, -1)
        return y.to(self.dtype)


# ----------------------------------------------------------------------------- public API
def _apply(p):
    p.check_device(("hessian", p.hessian), ("weights", p.weights))
    backends.ensure_eager(_MODULE, p.x.device, ("reg_matvec", p.x.dtype, ()))
    return p.restore(_ops.reg_matvec(p.x, p.hessian, p.weights, p.taps))


def regulariser(x, absolute=0, membrane=0, bending=0, factor=1, voxel_size=1, bound="dct2",
                dim=None, weights=None, hessian=None):
    """Apply the regulariser L (or H + L) to a field.

    Parameters
    ----------
    x : tensor [*batch, C, *spatial]
        Field; the last `dim` dims are spatial.
    absolute, membrane, bending : float or list[float], >= 0
        Penalties on the values, first and second derivatives (one per channel or one for all).
    factor : float or list[float]
        Multiplies every penalty (per channel).
    voxel_size : float or list[float]
        Per spatial dim.
    bound : str or BoundType, or a list of them
        'dct2' (default, Neumann), 'dst1', 'dst2', 'dft' or 'zero' (dct1 and replicate are
        refused: they make L non-symmetric).
    dim : int, optional
        Number of spatial dims (default ``min(x.dim() - 1, 3)``).
    weights : tensor [*batch, 1|C, *spatial], optional
        Voxel weights of the energy (absolute and membrane only).
    hessian : tensor [*batch, K, *spatial], optional
        Voxel-wise Hessian, K = 1, C or C(C+1)/2; the result is then (H + L) x.

    Returns
    -------
    tensor [*batch, C, *spatial]

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> x = torch.randn(2, 32, 32, 32)
    >>> y = nitorch_jit.regulariser(x, membrane=1, bending=0.1, voxel_size=[1, 1, 2])
    >>> float((x * y).sum()) >= 0   # L is positive semi-definite
    True
    """
    p = Problem(x, hessian, weights, dim, absolute, membrane, bending, 0, factor, voxel_size,
                bound, False, "x")
    return _apply(p)


def regulariser_grid(v, absolute=0, membrane=0, bending=0, lame=0, factor=1, voxel_size=1,
                     bound="dft", weights=None, hessian=None):
    """Apply the regulariser L (or H + L) to a displacement field (in voxels).

    Parameters
    ----------
    v : tensor [*batch, *spatial, D]
        Displacement field in voxels; penalties are in mm (component d scaled by
        voxel_size[d]**2).
    absolute, membrane, bending : float, >= 0
    lame : float or (float, float)
        Linear elasticity (shear, div); one number sets both.
    factor : float
        Multiplies every penalty.
    voxel_size : float or list[float]
    bound : str or BoundType, or a list of them, default 'dft'
    weights : tensor [*batch, *spatial], optional
        Voxel weights (absolute and membrane only).
    hessian : tensor [*batch, *spatial, K], optional
        K = 1, D or D(D+1)/2; the result is then (H + L) v.

    Returns
    -------
    tensor [*batch, *spatial, D]

    Examples
    --------
    >>> import torch, nitorch_jit
    >>> v = torch.randn(1, 24, 24, 24, 3)
    >>> m = nitorch_jit.regulariser_grid(v, membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
    >>> m.shape
    torch.Size([1, 24, 24, 24, 3])
    """
    p = Problem(v, hessian, weights, None, absolute, membrane, bending, lame, factor,
                voxel_size, bound, True, "v")
    return _apply(p)


__all__ = ["regulariser", "regulariser_grid", "BOUND_NAMES"]
