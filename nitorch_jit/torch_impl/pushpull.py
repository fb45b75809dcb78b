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

from ..codes import BOUND_NAMES
from .bounds import fold
from .checks import FLOATS, MAX_ORDER, NUM_BOUNDS, dtype_name
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


# ----------------------------------------------------------------------------- arguments
# The checks of the compiled ops (csrc/pushpull/checks.h, in the order of the CPU library,
# pushpull/cpu/*.cpp), with their messages: a bad raw-op call raises RuntimeError with the first
# line C raises. The twin runs on any device, so "must be a CPU tensor" is not checked; the other
# tensors must be on the device of the grid (affine). Data and grid share a dtype, float32 or
# float64 (no half data: the public layer gives the twin float32 copies). Only Python ints and
# sizes are read: no tensor op, so the cost stays a few microseconds a call. What the families'
# checks share (dtypes, code ranges, c10's dtype names) is checks.py.


def _shape(sizes):
    return str(list(sizes))


def _fail(*parts):
    raise RuntimeError("".join(str(p) for p in parts))


def _check_grid(grid):
    """grid [B, *O, D], D in 1..3, strided, float32 / float64: returns D."""
    dim = grid.dim()
    if dim < 3:
        _fail("grid must have shape [B, *O, D] with D in 1..3, got shape ", _shape(grid.shape))
    D = grid.shape[-1]
    if not 1 <= D <= 3:
        _fail("grid.size(-1) (D) must be 1, 2 or 3, got ", D)
    if dim != D + 2:
        _fail("grid must have D + 2 = ", D + 2, " dims [B, *O, D] (D = grid.size(-1)), got shape ",
              _shape(grid.shape))
    if grid.layout != torch.strided:
        _fail("grid must be a strided (dense) tensor")
    if grid.dtype not in FLOATS:
        _fail("grid must be float32 or float64, got ", dtype_name(grid.dtype))
    return D


def _check_affine(affine):
    """affine [B, D, D + 1], D in 1..3, strided, float32 / float64: returns D."""
    s = affine.shape
    if not (len(s) == 3 and s[2] == s[1] + 1 and 1 <= s[1] <= 3):
        _fail("affine must have shape [B, D, D + 1] with D in 1..3, got shape ", _shape(s))
    if affine.layout != torch.strided:
        _fail("affine must be a strided (dense) tensor")
    if affine.dtype not in FLOATS:
        _fail("affine must be float32 or float64, got ", dtype_name(affine.dtype))
    return s[1]


def _check_tensor(t, name, ref, D, with_d, layout, ref_name):
    """t [B, C, *spatial(D)] (+ a trailing D when with_d) on ref's device, in ref's dtype, with
    ref's batch size."""
    s = t.shape
    want = D + 2 + (1 if with_d else 0)
    if len(s) != want:
        _fail(name, " must have ", want, " dims ", layout, " for D = ", D, ", got shape ",
              _shape(s))
    if t.device != ref.device:
        _fail(name, " must be on the ", ref_name, "'s device (", ref.device, "), got ", t.device)
    if t.layout != torch.strided:
        _fail(name, " must be a strided (dense) tensor")
    if t.dtype != ref.dtype:
        _fail(name, " dtype (", dtype_name(t.dtype), ") must match ", ref_name, " dtype (",
              dtype_name(ref.dtype), ")")
    if s[0] != ref.shape[0]:
        _fail(name, " batch size (", s[0], ") must equal ", ref_name, " batch size (",
              ref.shape[0], ")")
    if with_d and s[-1] != D:
        _fail(name, ".size(-1) must be D = ", D, ", got ", s[-1])


def _check_point_shape(t, name, grid, D):
    """The spatial dims of t (from dim 2) are the grid's spatial dims."""
    if t.shape[2:2 + D] != grid.shape[1:1 + D]:
        _fail(name, " spatial shape ", _shape(t.shape[2:2 + D]),
              " must equal the grid spatial shape ", _shape(grid.shape[1:1 + D]))


def _check_channels(t, name, input):
    if t.shape[1] != input.shape[1]:
        _fail(name, " channels (", t.shape[1], ") must equal input channels (", input.shape[1],
              ")")


def _check_options(order, bound, D):
    if len(order) != D:
        _fail("order must have D = ", D, " entries (one per spatial dim), got ", len(order))
    if len(bound) != D:
        _fail("bound must have D = ", D, " entries (one per spatial dim), got ", len(bound))
    for d in range(D):
        if not 0 <= order[d] <= MAX_ORDER:
            _fail("order[", d, "] must be in 0..", MAX_ORDER, ", got ", order[d])
        if not 0 <= bound[d] < NUM_BOUNDS:
            _fail("bound[", d, "] must be in 0..", NUM_BOUNDS - 1, " (", ", ".join(BOUND_NAMES),
                  "), got ", bound[d])


def _check_shape(shape, D):
    if len(shape) != D:
        _fail("shape must have D = ", D, " entries (the output spatial size), got ", len(shape))
    for d in range(D):
        if shape[d] < 0:
            _fail("shape[", d, "] must be >= 0, got ", shape[d])


# op -> (the reference tensor, input layout, input has a trailing D, input lies at the points,
#        the second tensor's name, its layout, it has a trailing D, it lies at the points,
#        options checked before it, the op takes an output shape)
_CALLS = {
    "grid_pull": ("grid", "[B, C, *S]", False, False, None, None, False, False, True, False),
    "grid_grad": ("grid", "[B, C, *S]", False, False, None, None, False, False, True, False),
    "grid_push": ("grid", "[B, C, *O]", False, True, None, None, False, False, True, True),
    "grid_pushgrad": ("grid", "[B, C, *O, D]", True, True, None, None, False, False, True, True),
    "grid_grad_dot": ("grid", "[B, C, *S]", False, False, "weight", "[B, C, *O]", False, True,
                      True, False),
    "grid_hess_dot": ("grid", "[B, C, *S]", False, False, "weight", "[B, C, *O, D]", True, True,
                      True, False),
    "grid_pull_backward": ("grid", "[B, C, *S]", False, False, "grad", "[B, C, *O]", False, True,
                           False, False),
    "affine_pull": ("affine", "[B, C, *S]", False, False, None, None, False, False, True, True),
    "affine_push": ("affine", "[B, C, *O]", False, False, None, None, False, False, True, True),
    "affine_grad_dot": ("affine", "[B, C, *S]", False, False, "weight", "[B, C, *O]", False,
                        False, False, False),
}


def check_call(op, input, ref, order, bound, shape=None, other=None):
    """The argument checks of compiled op `op` (ref: its grid or affine matrix; other: the
    weight of the dot ops, the grad of grid_pull_backward), in C's order; returns D."""
    (ref_name, layout, with_d, at_points, oname, olayout, o_with_d, o_at_points, options_first,
     has_shape) = _CALLS[op]
    D = _check_grid(ref) if ref_name == "grid" else _check_affine(ref)
    _check_tensor(input, "input", ref, D, with_d, layout, ref_name)
    if at_points:
        _check_point_shape(input, "input", ref, D)
    if options_first:
        _check_options(order, bound, D)
    if oname is not None:
        _check_tensor(other, oname, ref, D, o_with_d, olayout, ref_name)
        if o_at_points:
            _check_point_shape(other, oname, ref, D)
        _check_channels(other, oname, input)
        if not options_first:
            _check_options(order, bound, D)
    if has_shape:
        _check_shape(shape, D)
    return D


def _empty(input, grid, S):
    return input.numel() == 0 or grid.numel() == 0 or any(n == 0 for n in S)


def grid_pull(input, grid, order, bound, extrapolate):
    """out[b, c, *O] = sum over taps of the spline weight times the folded input."""
    D = check_call("grid_pull", input, grid, order, bound)
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
    D = check_call("grid_grad", input, grid, order, bound)
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


def _push_start(op, input, grid, shape, order, bound, extrapolate, nderiv):
    """What the push ops (grid_push, grid_pushgrad) do first: check the call, zero the output
    [B, C, prod(shape)], take the taps of the points and zero the input at the points out of
    bounds. Returns (D, shape as ints, output, taps, input [B, C, P(, D)]); the taps and the
    input are None for an empty call."""
    D = check_call(op, input, grid, order, bound, shape)
    shape = [int(n) for n in shape]
    B, C, O = input.shape[0], input.shape[1], grid.shape[1:-1]
    out = input.new_zeros([B, C, math.prod(shape)])
    if _empty(input, grid, shape):
        return D, shape, out, None, None
    dims, mask = _prepare(grid, shape, order, bound, extrapolate, nderiv)
    trailing = list(input.shape[2 + len(O):])  # grid_pushgrad's D
    inp = torch.where(mask.reshape(B, 1, *O, *[1] * len(trailing)), input, 0)
    return D, shape, out, dims, inp.reshape(B, C, -1, *trailing)


def grid_push(input, grid, shape, order, bound, extrapolate):
    """Adjoint of grid_pull: out[b, c, *shape] accumulates weight * input[b, c, point]."""
    D, shape, out, dims, inp = _push_start("grid_push", input, grid, shape, order, bound,
                                           extrapolate, 0)
    if dims is None:
        return out.view(*out.shape[:2], *shape)
    B, C, P = inp.shape
    zero = _unit(D)

    def visit(lin, prods):
        out.scatter_add_(2, lin.unsqueeze(1).expand(B, C, P), _scaled(inp, prods[zero]))

    _for_each_tap(dims, [zero], visit)
    return out.view(B, C, *shape)


def grid_pushgrad(input, grid, shape, order, bound, extrapolate):
    """Adjoint of grid_grad: input [B, C, *O, D] -> out [B, C, *shape]."""
    D, shape, out, dims, inp = _push_start("grid_pushgrad", input, grid, shape, order, bound,
                                           extrapolate, 1)
    if dims is None:
        return out.view(*out.shape[:2], *shape)
    B, C, P = inp.shape[:3]
    comps = [inp[..., d] for d in range(D)]
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


def _dot_start(op, weight, input, grid, order, bound, extrapolate, nderiv):
    """What the dot ops (grid_grad_dot, grid_hess_dot) do first: check the call and take the
    taps of the points. Returns (D, taps, mask, input [B, C, N], weight [B, C, P(, D)]); all
    but D are None for an empty call."""
    D = check_call(op, input, grid, order, bound, other=weight)
    B, C, S, O = input.shape[0], input.shape[1], list(input.shape[2:]), grid.shape[1:-1]
    if _empty(input, grid, S):
        return D, None, None, None, None
    dims, mask = _prepare(grid, S, order, bound, extrapolate, nderiv)
    trailing = [D] * (nderiv - 1)  # grid_hess_dot's weight has a trailing D
    wgt = weight.expand(B, C, *O, *trailing).reshape(B, C, -1, *trailing)
    return D, dims, mask, input.reshape(B, C, -1), wgt


def _dot_output(accs, mask, input, grid, D):
    """The per-component sums of a dot op (None: no tap reached it) as [B, *O, D], zero at the
    points out of bounds."""
    B, O, P = input.shape[0], grid.shape[1:-1], mask.shape[-1]
    out = torch.stack([input.new_zeros([B, P]) if a is None else a for a in accs], -1)
    out = out.view(B, *O, D)
    return out.masked_fill_(~mask.reshape(B, *O, 1), 0)


def grid_grad_dot(weight, input, grid, order, bound, extrapolate):
    """out[b, *O, d] = sum_c weight[b, c, *O] * grid_grad(input)[b, c, *O, d]."""
    D, dims, mask, inp, wgt = _dot_start("grid_grad_dot", weight, input, grid, order, bound,
                                         extrapolate, 1)
    if dims is None:
        return input.new_zeros([input.shape[0], *grid.shape[1:-1], D])
    B, C, P = wgt.shape
    units = [_unit(D, d) for d in range(D)]
    accs = [None] * D

    def visit(lin, prods):
        val = torch.gather(inp, 2, lin.unsqueeze(1).expand(B, C, P))
        val = (val * wgt).sum(1)
        for d in range(D):
            if units[d] in prods:
                _acc(accs, d, val, prods[units[d]], channels=False)

    _for_each_tap(dims, units, visit)
    return _dot_output(accs, mask, input, grid, D)


def grid_hess_dot(weight, input, grid, order, bound, extrapolate):
    """out[b, *O, e] = sum_c sum_d weight[b, c, *O, d] * H[b, c, *O, d, e] (H: spatial Hessian)."""
    D, dims, mask, inp, wgt = _dot_start("grid_hess_dot", weight, input, grid, order, bound,
                                         extrapolate, 2)
    if dims is None:
        return input.new_zeros([input.shape[0], *grid.shape[1:-1], D])
    B, C, P = wgt.shape[:3]
    wgts = [wgt[..., d] for d in range(D)]
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
    return _dot_output(accs, mask, input, grid, D)


def grid_pull_backward(grad, input, grid, order, bound, extrapolate):
    """Both gradients of grid_pull: (grid_push(grad) into input's shape, grid_grad_dot(grad, input))."""
    check_call("grid_pull_backward", input, grid, order, bound, other=grad)
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
    Serves this twin and any backend that has only the grid ops. The arguments are checked as
    the compiled affine ops check them (check_call)."""

    def affine_pull(input, affine, shape, order, bound, extrapolate):
        """pull at affine_coords(affine, shape), chunk by chunk."""
        check_call("affine_pull", input, affine, order, bound, shape)
        shape = [int(n) for n in shape]
        if any(n == 0 for n in shape) or input.shape[1] == 0:
            return input.new_zeros([input.shape[0], input.shape[1], *shape])
        return torch.cat([pull(input, affine_coords(affine, shape, s, e), order, bound,
                               extrapolate) for s, e in _affine_chunks(shape)], dim=2)

    def affine_push(input, affine, shape, order, bound, extrapolate):
        """Adjoint of affine_pull: push at affine_coords, accumulated over chunks."""
        check_call("affine_push", input, affine, order, bound, shape)
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
        check_call("affine_grad_dot", input, affine, order, bound, other=weight)
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
