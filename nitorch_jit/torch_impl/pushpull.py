"""Pure-PyTorch spline push/pull: the TORCH backend of the ``pushpull`` ops.

The contract is docs/pushpull-spec.md; signatures follow nitorch_jit/backends/schemas.py.

Formulation: for each spatial dim, the tap indices (folded by the bound, times the dim's
stride in the flattened volume) and the tap weights and derivatives (with the bound's sign
folded in) are computed once, vectorised over all points. The taps of the D dims are then
combined one multi-dim tap at a time (nested loops over the taps of each dim, partial
products kept per level), so nothing of size points x (all taps) is ever built: each
multi-dim tap is one ``gather`` (pull side) or one ``scatter_add_`` (push side) on the
flattened volume, accumulated in place. Loops run over dims and taps only (Python ints),
never over points or tensor values, so ``torch.compile(fullgraph=True)`` traces it whole.

Points that are out of range (extrapolate=False) or have a non-finite coordinate are
masked on the per-point output (pull side, ``masked_fill_``) or per-point input (push side,
``torch.where``); their coordinate is replaced by 0 beforehand so that every index stays valid.
"""
import math

import torch

from .bounds import fold
from .splines import mul, spline_taps

TOL = 0.05  # extrapolate=False: a point is in range iff -TOL <= x <= n - 1 + TOL


def _spatial_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc = acc * n
    return strides[::-1], acc


def _prepare(grid, shape, order, bound, extrapolate, nderiv):
    """Per-dim taps and the point mask.

    Returns ``(dims, mask)``: ``dims[d]`` a list over taps of ``(lin, weights)`` with ``lin``
    the int64 offset ``j * stride_d`` [B, P] and ``weights[a]`` the a-th derivative of the
    signed tap weight ([B, P] tensor, Python float, or None for zero); ``mask`` a bool
    tensor [B, P], True where the point contributes.
    """
    B, D = grid.shape[0], grid.shape[-1]
    g = grid.reshape(B, -1, D)
    strides, _ = _spatial_strides(shape)
    if len(order) != D or len(bound) != D or len(shape) != D:
        raise ValueError("order, bound and shape need one entry per spatial dim")
    mask = None
    dims = []
    for d in range(D):
        n, o, b, stride = shape[d], int(order[d]), int(bound[d]), strides[d]
        x = g[:, :, d]
        if extrapolate:
            ok = torch.isfinite(x)
        else:
            ok = (x >= -TOL) & (x <= (n - 1) + TOL)  # False for NaN and +-inf
        mask = ok if mask is None else mask & ok
        x = torch.where(ok, x, 0)
        i0, ws = spline_taps(x, o, nderiv)
        taps = []
        for k in range(o + 1):
            j, s = fold(i0 + k if k else i0, n, b)
            lin = j * stride if stride != 1 else j
            wk = [ws[a][k] for a in range(nderiv + 1)]
            if s is not None:
                s = s.to(grid.dtype)
                wk = [mul(w, s) for w in wk]
            taps.append((lin, wk))
        dims.append(taps)
    return dims, mask


def _for_each_tap(dims, needed, visit):
    """Call ``visit(lin, prods)`` for every multi-dim tap.

    ``needed``: derivative multi-indices (tuples of length D, entries 0-2); ``prods[alpha]``
    is prod_d (d^alpha_d w_d) for the tap, present only when not identically zero. Taps
    where every needed product is zero are skipped.
    """
    D = len(dims)
    prefixes = [{a[:d] for a in needed} for d in range(D + 1)]

    def rec(d, lin, prods):
        if d == D:
            visit(lin, prods)
            return
        for lin_k, wk in dims[d]:
            new = {}
            for pre, p in prods.items():
                for a, w in enumerate(wk):
                    key = pre + (a,)
                    if key in prefixes[d + 1]:
                        v = mul(p, w)
                        if v is not None:
                            new[key] = v
            if new:
                rec(d + 1, lin_k if lin is None else lin + lin_k, new)

    rec(0, None, {(): 1.0})


def _unit(D, *ds):
    a = [0] * D
    for d in ds:
        a[d] += 1
    return tuple(a)


def _acc(accs, k, val, w, channels=True):
    """accs[k] += val * w; the first contribution allocates (no zero-filled buffer).

    ``w``: a [B, P] tensor (unsqueezed to broadcast over channels if ``channels``) or a
    Python float. Accumulators are separate tensors, never views of one buffer, so that
    in-place updates stay trivial to functionalize under torch.compile.
    """
    if isinstance(w, torch.Tensor):
        w = w.unsqueeze(1) if channels else w
        if accs[k] is None:
            accs[k] = val * w
        else:
            accs[k].addcmul_(val, w)
    elif accs[k] is None:
        accs[k] = val * w
    else:
        accs[k].add_(val, alpha=w)


def _scaled(val, w):
    return val * w.unsqueeze(1) if isinstance(w, torch.Tensor) else val * w


def _check(input, grid, nspatial):
    D = grid.shape[-1]
    if D not in (1, 2, 3):
        raise ValueError(f"grid.size(-1) must be 1, 2 or 3, got {D}")
    if grid.dim() != D + 2 or input.dim() != nspatial + 2:
        raise ValueError("expected input [B, C, *spatial] and grid [B, *spatial, D]")
    if input.shape[0] != grid.shape[0]:
        raise ValueError("input and grid must have the same batch size")
    return D


def _empty(input, grid, S):
    return input.numel() == 0 or grid.numel() == 0 or any(n == 0 for n in S)


def grid_pull(input, grid, order, bound, extrapolate):
    """out[b, c, *O] = sum over taps of the spline weight times the folded input."""
    D = _check(input, grid, grid.shape[-1])
    B, C, S, O = input.shape[0], input.shape[1], list(input.shape[2:]), grid.shape[1:-1]
    if _empty(input, grid, S):
        return input.new_zeros([B, C, *O])
    dims, mask = _prepare(grid, S, order, bound, extrapolate, 0)
    inp = input.reshape(B, C, -1)
    P = mask.shape[-1]
    zero = _unit(D)
    accs = [None]

    def visit(lin, prods):
        val = torch.gather(inp, 2, lin.unsqueeze(1).expand(B, C, P))
        _acc(accs, 0, val, prods[zero])

    _for_each_tap(dims, [zero], visit)
    out = input.new_zeros([B, C, P]) if accs[0] is None else accs[0]
    out = out.view(B, C, *O)
    return out.masked_fill_(~mask.reshape(B, 1, *O), 0)


def grid_grad(input, grid, order, bound, extrapolate):
    """out[b, c, *O, d] = spatial gradient of the interpolated input along dim d."""
    D = _check(input, grid, grid.shape[-1])
    B, C, S, O = input.shape[0], input.shape[1], list(input.shape[2:]), grid.shape[1:-1]
    if _empty(input, grid, S):
        return input.new_zeros([B, C, *O, D])
    dims, mask = _prepare(grid, S, order, bound, extrapolate, 1)
    inp = input.reshape(B, C, -1)
    P = mask.shape[-1]
    units = [_unit(D, d) for d in range(D)]
    accs = [None] * D

    def visit(lin, prods):
        val = torch.gather(inp, 2, lin.unsqueeze(1).expand(B, C, P))
        for d in range(D):
            if units[d] in prods:
                _acc(accs, d, val, prods[units[d]])

    _for_each_tap(dims, units, visit)
    out = torch.stack([input.new_zeros([B, C, P]) if a is None else a for a in accs], -1)
    out = out.view(B, C, *O, D)
    return out.masked_fill_(~mask.reshape(B, 1, *O, 1), 0)


def grid_push(input, grid, shape, order, bound, extrapolate):
    """Adjoint of grid_pull: out[b, c, *shape] accumulates weight * input[b, c, point]."""
    D = _check(input, grid, grid.shape[-1])
    shape = [int(n) for n in shape]
    B, C, O = input.shape[0], input.shape[1], grid.shape[1:-1]
    out = input.new_zeros([B, C, math.prod(shape)])
    if _empty(input, grid, shape):
        return out.view(B, C, *shape)
    dims, mask = _prepare(grid, shape, order, bound, extrapolate, 0)
    inp = torch.where(mask.reshape(B, 1, *O), input, 0).reshape(B, C, -1)
    P = inp.shape[-1]
    zero = _unit(D)

    def visit(lin, prods):
        out.scatter_add_(2, lin.unsqueeze(1).expand(B, C, P), _scaled(inp, prods[zero]))

    _for_each_tap(dims, [zero], visit)
    return out.view(B, C, *shape)


def grid_pushgrad(input, grid, shape, order, bound, extrapolate):
    """Adjoint of grid_grad: input [B, C, *O, D] -> out [B, C, *shape]."""
    D = grid.shape[-1]
    if input.dim() != D + 3 or input.shape[-1] != D:
        raise ValueError("grid_pushgrad expects input [B, C, *O, D]")
    _check(input[..., 0], grid, D)
    shape = [int(n) for n in shape]
    B, C, O = input.shape[0], input.shape[1], grid.shape[1:-1]
    out = input.new_zeros([B, C, math.prod(shape)])
    if _empty(input, grid, shape):
        return out.view(B, C, *shape)
    dims, mask = _prepare(grid, shape, order, bound, extrapolate, 1)
    inp = torch.where(mask.reshape(B, 1, *O, 1), input, 0).reshape(B, C, -1, D)
    comps = [inp[..., d] for d in range(D)]
    P = inp.shape[2]
    units = [_unit(D, d) for d in range(D)]

    def visit(lin, prods):
        val = None
        for d in range(D):
            if units[d] in prods:
                term = _scaled(comps[d], prods[units[d]])
                val = term if val is None else val + term
        out.scatter_add_(2, lin.unsqueeze(1).expand(B, C, P), val)

    _for_each_tap(dims, units, visit)
    return out.view(B, C, *shape)


def grid_grad_dot(weight, input, grid, order, bound, extrapolate):
    """out[b, *O, d] = sum_c weight[b, c, *O] * grid_grad(input)[b, c, *O, d]."""
    D = _check(input, grid, grid.shape[-1])
    B, C, S, O = input.shape[0], input.shape[1], list(input.shape[2:]), grid.shape[1:-1]
    if _empty(input, grid, S):
        return input.new_zeros([B, *O, D])
    dims, mask = _prepare(grid, S, order, bound, extrapolate, 1)
    inp = input.reshape(B, C, -1)
    wgt = weight.expand(B, C, *O).reshape(B, C, -1)
    P = mask.shape[-1]
    units = [_unit(D, d) for d in range(D)]
    accs = [None] * D

    def visit(lin, prods):
        val = torch.gather(inp, 2, lin.unsqueeze(1).expand(B, C, P))
        val = (val * wgt).sum(1)
        for d in range(D):
            if units[d] in prods:
                _acc(accs, d, val, prods[units[d]], channels=False)

    _for_each_tap(dims, units, visit)
    out = torch.stack([input.new_zeros([B, P]) if a is None else a for a in accs], -1)
    out = out.view(B, *O, D)
    return out.masked_fill_(~mask.reshape(B, *O, 1), 0)


def grid_hess_dot(weight, input, grid, order, bound, extrapolate):
    """out[b, *O, e] = sum_c sum_d weight[b, c, *O, d] * H[b, c, *O, d, e] (H: spatial Hessian)."""
    D = _check(input, grid, grid.shape[-1])
    B, C, S, O = input.shape[0], input.shape[1], list(input.shape[2:]), grid.shape[1:-1]
    if _empty(input, grid, S):
        return input.new_zeros([B, *O, D])
    dims, mask = _prepare(grid, S, order, bound, extrapolate, 2)
    inp = input.reshape(B, C, -1)
    wgt = weight.expand(B, C, *O, D).reshape(B, C, -1, D)
    wgts = [wgt[..., d] for d in range(D)]
    P = mask.shape[-1]
    pairs = {(d, e): _unit(D, d, e) for d in range(D) for e in range(D)}
    accs = [None] * D

    def visit(lin, prods):
        val = torch.gather(inp, 2, lin.unsqueeze(1).expand(B, C, P))
        q = {}  # q[d] = sum_c weight[:, c, :, d] * val[:, c, :], computed once if needed
        for (d, e), alpha in pairs.items():
            if alpha in prods:
                if d not in q:
                    q[d] = (val * wgts[d]).sum(1)
                _acc(accs, e, q[d], prods[alpha], channels=False)

    _for_each_tap(dims, sorted(set(pairs.values())), visit)
    out = torch.stack([input.new_zeros([B, P]) if a is None else a for a in accs], -1)
    out = out.view(B, *O, D)
    return out.masked_fill_(~mask.reshape(B, *O, 1), 0)


def grid_pull_backward(grad, input, grid, order, bound, extrapolate):
    """Both gradients of grid_pull: (grid_push(grad) into input's shape, grid_grad_dot(grad, input))."""
    shape = list(input.shape[2:])
    return (grid_push(grad, grid, shape, order, bound, extrapolate),
            grid_grad_dot(grad, input, grid, order, bound, extrapolate))


# ----------------------------------------------------------------------------- affine maps
def affine_coords(mat, shape, start=0, stop=None):
    """Coordinates affine[..., d, :] @ (i, 1) of the voxels i of `shape` whose first index lies
    in [start, stop): [*batch, stop - start, *shape[1:], D] from `mat` [*batch, D, D+1].

    The rule of every affine resampling here (affine_grid, affine_pull in C, CUDA and this
    twin): x_d = ((A[d,D] + A[d,0] i_0) + A[d,1] i_1) + A[d,2] i_2, left to right (the offset
    first, as scipy.ndimage.affine_transform sums), one rounding per operation (no fused
    multiply-add), in mat's dtype.
    """
    D = len(shape)
    stop = shape[0] if stop is None else stop
    batch = mat.shape[:-2]
    axes = []
    for j, n in enumerate(shape):
        i = torch.arange(start, stop) if j == 0 else torch.arange(n)
        view = [1] * D
        view[j] = -1
        axes.append(i.to(mat.dtype).to(mat.device).view(*view))
    coords = []
    for d in range(D):
        acc = mat[..., d, D].reshape(batch + (1,) * D)
        for j in range(D):
            acc = acc + mat[..., d, j].reshape(batch + (1,) * D) * axes[j]
        coords.append(acc)
    out = torch.stack(coords, -1)
    return out.expand(batch + (stop - start,) + tuple(shape[1:]) + (D,))


def _affine_chunks(shape, max_points=1 << 20):
    """Ranges of the first output dim holding about max_points voxels each."""
    rows = max(1, max_points // max(1, math.prod(shape[1:])))
    return [(s, min(s + rows, shape[0])) for s in range(0, shape[0], rows)]


def affine_kernels(pull, push, grad_dot):
    """The affine ops built on grid kernels (grid_pull, grid_push, grid_grad_dot of the pushpull
    schemas): the grid of a chunk of the first output dim at a time, so memory stays bounded.
    Serves this twin and any backend that has only the grid ops."""

    def affine_pull(input, affine, shape, order, bound, extrapolate):
        """pull at affine_coords(affine, shape), chunk by chunk."""
        shape = [int(n) for n in shape]
        if any(n == 0 for n in shape) or input.shape[1] == 0:
            return input.new_zeros([input.shape[0], input.shape[1], *shape])
        return torch.cat([pull(input, affine_coords(affine, shape, s, e), order, bound,
                               extrapolate) for s, e in _affine_chunks(shape)], dim=2)

    def affine_push(input, affine, shape, order, bound, extrapolate):
        """Adjoint of affine_pull: push at affine_coords, accumulated over chunks."""
        pts = list(input.shape[2:])
        out = input.new_zeros([input.shape[0], input.shape[1], *[int(n) for n in shape]])
        if out.numel() == 0 or any(n == 0 for n in pts):
            return out
        for s, e in _affine_chunks(pts):
            out = out + push(input[:, :, s:e], affine_coords(affine, pts, s, e), shape, order,
                             bound, extrapolate)
        return out

    def affine_grad_dot(weight, input, affine, order, bound, extrapolate):
        """d<weight, affine_pull(input)>/d affine: sum over output voxels i of g(i) (x) (i, 1)."""
        pts = list(weight.shape[2:])
        D = len(pts)
        out = affine.new_zeros([affine.shape[0], D, D + 1])
        if any(n == 0 for n in pts) or any(n == 0 for n in input.shape[2:]) \
                or input.shape[1] == 0:
            return out
        eye = torch.eye(D, D + 1, dtype=affine.dtype, device=affine.device)[None]
        for s, e in _affine_chunks(pts):
            g = grad_dot(weight[:, :, s:e], input, affine_coords(affine, pts, s, e), order,
                         bound, extrapolate)  # [B, *chunk, D]
            idx = affine_coords(eye, pts, s, e)  # the voxel indices [1, *chunk, D]
            hom = torch.cat([idx, idx.new_ones(idx.shape[:-1] + (1,))], -1)
            out = out + torch.einsum("b...d,b...j->bdj", g, hom.expand(g.shape[:-1] + (D + 1,)))
        return out

    return {"affine_pull": affine_pull, "affine_push": affine_push,
            "affine_grad_dot": affine_grad_dot}


_AFFINE = affine_kernels(grid_pull, grid_push, grid_grad_dot)
affine_pull = _AFFINE["affine_pull"]
affine_push = _AFFINE["affine_push"]
affine_grad_dot = _AFFINE["affine_grad_dot"]


KERNELS = {
    "grid_pull": grid_pull,
    "grid_push": grid_push,
    "grid_grad": grid_grad,
    "grid_pushgrad": grid_pushgrad,
    "grid_grad_dot": grid_grad_dot,
    "grid_hess_dot": grid_hess_dot,
    "grid_pull_backward": grid_pull_backward,
    "affine_pull": affine_pull,
    "affine_push": affine_push,
    "affine_grad_dot": affine_grad_dot,
}
