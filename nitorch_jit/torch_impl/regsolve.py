"""Regulariser kernels in plain PyTorch: the TORCH backend of module "regsolve" and the oracle
of the compiled one. The contract (tap list, Hessian packing, voxel solve, colours) is
docs/regsolve-spec.md; every function here is differentiable by autograd.
"""
import functools
import math
import types

import torch

from .bounds import DCT2, fold
from .checks import FLOATS, NUM_BOUNDS


# ----------------------------------------------------------------------------- Hessian packing
def packing(k, c, argname="hessian"):
    """'scalar', 'diag' or 'sym' for a Hessian with k values per voxel and c channels."""
    if k == 1:
        return "scalar"
    if k == c:
        return "diag"
    if k == c * (c + 1) // 2:
        return "sym"
    raise ValueError(f"{argname}: {k} values per voxel fit no packing for {c} channels; "
                     f"expected 1 (scalar), {c} (diagonal) or {c * (c + 1) // 2} (symmetric: "
                     f"the diagonal, then the upper triangle row by row)")


def upper_pairs(c):
    """(i, j), i < j, in the packed order of the off-diagonal values."""
    return [(i, j) for i in range(c) for j in range(i + 1, c)]


def sym_matvec(h, x):
    """H x for a packed Hessian h [B, K, *S] and x [B, C, *S]."""
    c = x.shape[1]
    kind = packing(h.shape[1], c)
    if kind != "sym":
        return h * x
    out = h[:, :c] * x
    for k, (i, j) in enumerate(upper_pairs(c)):
        hij = h[:, c + k]
        out[:, i] = out[:, i] + hij * x[:, j]
        out[:, j] = out[:, j] + hij * x[:, i]
    return out


def sym_outer(a, b, k):
    """The gradient of <a, H b> with respect to a packed H with k values per voxel."""
    c = a.shape[1]
    kind = packing(k, c)
    if kind == "scalar":
        return (a * b).sum(1, keepdim=True)
    if kind == "diag":
        return a * b
    off = [a[:, i] * b[:, j] + a[:, j] * b[:, i] for i, j in upper_pairs(c)]
    return torch.cat([a * b] + [o.unsqueeze(1) for o in off], dim=1)


# ----------------------------------------------------------------------------- taps
def parse_taps(taps, dim):
    """[(c_out, c_in, kind, coef, offsets, bounds)] from the flat list."""
    n = 4 + 2 * dim
    if len(taps) % n:
        raise ValueError(f"taps: expected a multiple of {n} numbers for {dim} dims, "
                         f"got {len(taps)}")
    out = []
    for t in range(0, len(taps), n):
        v = taps[t:t + n]
        out.append((int(v[0]), int(v[1]), int(v[2]), float(v[3]),
                    tuple(int(o) for o in v[4:4 + dim]), tuple(int(b) for b in v[4 + dim:])))
    return out


class _Reader:
    """Reads a [B, C, *S] tensor at voxel + offsets through per-axis bounds (cached folds)."""

    def __init__(self, shape, device):
        self.shape, self.device, self.cache = shape, device, {}

    def axis(self, d, off, bound):
        key = (d, off, bound)
        if key not in self.cache:
            n = self.shape[d]
            self.cache[key] = fold(torch.arange(n, device=self.device) + off, n, bound)
        return self.cache[key]

    def padded(self, x, bounds, pad=2):
        """x extended by `pad` ghost voxels on each side of every axis, through the bounds."""
        key = ("pad", id(x), bounds, pad)
        if key not in self.cache:
            for d, b in enumerate(bounds):
                n = self.shape[d]
                j, s = fold(torch.arange(-pad, n + pad, device=self.device), n, b)
                x = x.index_select(2 + d, j)
                if s is not None:
                    x = x * s.to(x.dtype).reshape([-1] + [1] * (len(bounds) - d - 1))
            self.cache[key] = x
        return self.cache[key]

    def shifted(self, x, offs, bounds, pad=2):
        """x read at voxel + offs through the bounds (a view of the padded tensor)."""
        xp = self.padded(x, bounds, pad)
        sl = tuple(slice(pad + o, pad + o + n) for o, n in zip(offs, self.shape))
        return xp[(Ellipsis,) + sl]

    def read(self, x, offs, bounds, signed=True):
        """Values (and the product of signs, or None when all are +1) at the folded taps."""
        sign = None
        for d, (o, b) in enumerate(zip(offs, bounds)):
            if o == 0:
                continue
            j, s = self.axis(d, o, b)
            x = x.index_select(2 + d, j)
            if s is not None:
                s = s.to(x.dtype).reshape([-1] + [1] * (len(offs) - d - 1))
                sign = s if sign is None else sign * s
        if signed and sign is not None:
            x = x * sign
        return x, sign

    def self_hits(self, offs, bounds, dtype):
        """{d: [n_d] tensor} for each dim d the tap moves along: the sign where its fold along
        d lands on the voxel's own index, else 0. Their outer product is the tap's self mask."""
        out = {}
        for d, (o, b) in enumerate(zip(offs, bounds)):
            if o == 0:
                continue
            j, s = self.axis(d, o, b)
            hit = (j == torch.arange(self.shape[d], device=self.device)).to(dtype)
            out[d] = hit if s is None else hit * s.to(dtype)
        return out

    def self_mask(self, offs, bounds, dtype):
        """[*S] tensor: the sign where a tap folds back onto its own voxel, else 0."""
        m = torch.ones((), dtype=dtype, device=self.device)
        for d, hit in self.self_hits(offs, bounds, dtype).items():
            m = m * hit.reshape([-1] + [1] * (len(offs) - d - 1))
        return m


def _weight(w, c):
    return w[:, c if w.shape[1] > 1 else 0]


def _neighbour_weight(reader, w, offs, bounds):
    """w~ at the folded neighbour: its weight, or the voxel's own where the bound reads 0."""
    wn, sign = reader.read(w, offs, bounds, signed=False)
    if sign is not None:
        wn = torch.where(sign == 0, w, wn)
    return wn


# ----------------------------------------------------------------------------- arguments
# The compiled kernels' argument checks, with their messages (csrc/regsolve/host.h): the TORCH
# backend refuses what C refuses, in the same words (tests/ops/regsolve/test_torch.py holds
# the two to the same list of bad calls). The device is whatever x's is.
_MAX_OFFSET = 2


def _is_int_in(v, lo, hi):
    return math.isfinite(v) and v == math.floor(v) and lo <= v <= hi


def _check_field(x, op, arg):
    if x.dtype not in FLOATS:
        raise RuntimeError(f"{op}: {arg} must be float32 or float64")
    if not 3 <= x.dim() <= 5:
        raise RuntimeError(f"{op}: {arg} must have shape [B, C, *S] with 1 to 3 spatial dims, "
                           f"got {x.dim()} dims")


def _check_aux(t, x, op, arg):
    """A tensor that goes with x (device, dtype, batch and spatial sizes): its channels."""
    where = f"{op}: {arg}"
    if t.device != x.device:
        raise RuntimeError(f"{where} must be on the device of the field")
    if t.dtype != x.dtype:
        raise RuntimeError(f"{where} must have the dtype of the field")
    if t.dim() != x.dim() or t.shape[0] != x.shape[0] or t.shape[2:] != x.shape[2:]:
        raise RuntimeError(f"{where} must have the batch size and spatial shape of the field "
                           "([B, *, *S])")
    return t.shape[1]


@functools.lru_cache(maxsize=256)
def _check_taps(flat, dim, chans, op):
    """flat: the tap list as a tuple (a solver checks the same list at every call: once)."""
    n = 4 + 2 * dim
    if len(flat) % n:
        raise RuntimeError(f"{op}: taps: expected a multiple of 4 + 2D = {n} numbers for {dim} "
                           f"spatial dims, got {len(flat)}")
    for t in range(len(flat) // n):
        v = [float(a) for a in flat[t * n:(t + 1) * n]]
        which = f"{op}: taps: tap {t}: "
        if not (_is_int_in(v[0], 0, chans - 1) and _is_int_in(v[1], 0, chans - 1)):
            raise RuntimeError(which + f"channel indices must be integers in [0, {chans})")
        if not _is_int_in(v[2], 0, 2):
            raise RuntimeError(which + "kind must be 0, 1 or 2")
        if not math.isfinite(v[3]):
            raise RuntimeError(which + "coefficient must be finite")
        for d in range(dim):
            if not _is_int_in(v[4 + d], -_MAX_OFFSET, _MAX_OFFSET):
                raise RuntimeError(which + "offsets must be integers in [-2, 2]")
            if not _is_int_in(v[4 + dim + d], 0, NUM_BOUNDS - 1):
                raise RuntimeError(which + "bound codes must be integers in [0, 6]")
        if v[2] == 1 and v[0] != v[1]:
            raise RuntimeError(which + "kind 1 (weighted difference) needs c_in == c_out")
        if v[2] == 2 and any(v[4:4 + dim]):
            raise RuntimeError(which + "kind 2 (weighted identity) needs offsets 0")


def check_call(op, x, hessian, weights, taps, xname="x"):
    """The checks every regsolve op makes of x, the Hessian, the weights and the taps."""
    _check_field(x, op, xname)
    chans = x.shape[1]
    if hessian is not None:
        k = _check_aux(hessian, x, op, "hessian")
        if k not in (1, chans, chans * (chans + 1) // 2):
            raise RuntimeError(
                f"{op}: hessian: {k} values per voxel fit no packing for {chans} channels; "
                f"expected 1 (scalar), {chans} (diagonal) or {chans * (chans + 1) // 2} "
                "(symmetric)")
    if weights is not None:
        k = _check_aux(weights, x, op, "weights")
        if k not in (1, chans):
            raise RuntimeError(f"{op}: weights must have 1 or {chans} channels, got {k}")
    _check_taps(tuple(taps), x.dim() - 2, chans, op)


@functools.lru_cache(maxsize=64)
def _colour_clash(taps, shape, period):
    """The first tap that couples two voxels of one colour, or None (host.h's check_colours:
    per axis, whether the tap can land on its own colour, and whether on another voxel)."""
    for t, (_, _, kind, coef, offs, bounds) in enumerate(parse_taps(list(taps), len(shape))):
        if kind == 2 or coef == 0:
            continue
        same, moved = True, False
        for d, (o, b, n, p) in enumerate(zip(offs, bounds, shape, period)):
            if not same:
                break
            if o == 0:
                continue
            i = torch.arange(n)
            j, sign = fold(i + o, n, b)
            hit = (j - i) % p == 0
            if sign is not None:
                hit &= sign != 0
            same = bool(hit.any())
            moved = moved or bool((hit & (j != i)).any())
        if same and moved:
            return t
    return None


def check_relax(x, gradient, taps, period, nb_iter, op="reg_relax_"):
    """reg_relax_'s further checks; False when there is nothing to do."""
    if _check_aux(gradient, x, op, "gradient") != x.shape[1]:
        raise RuntimeError(f"{op}: gradient must have the shape of x")
    dim = x.dim() - 2
    if len(period) != dim:
        raise RuntimeError(f"{op}: period must have one value per spatial dim ({dim}), got "
                           f"{len(period)}")
    if any(int(p) < 1 for p in period):
        raise RuntimeError(f"{op}: period values must be >= 1")
    if int(nb_iter) < 0:
        raise RuntimeError(f"{op}: nb_iter must be >= 0, got {int(nb_iter)}")
    if x.numel() == 0 or int(nb_iter) == 0:
        return False
    t = _colour_clash(tuple(float(v) for v in taps), tuple(x.shape[2:]),
                      tuple(int(p) for p in period))
    if t is not None:
        raise RuntimeError(f"{op}: period: tap {t} couples two voxels of one colour; the periods "
                           "must exceed the taps' reach (and avoid wrapped neighbours with dft)")
    return True


# ----------------------------------------------------------------------------- kernels
def _unit_weights(weights, parsed, shape, dtype, device):
    """Weighted taps (kinds 1, 2) without weights read w = 1, as the compiled kernels do."""
    if weights is None and any(t[2] for t in parsed):
        return torch.ones([1, 1] + list(shape), dtype=dtype, device=device)
    return weights


def reg_matvec(x, hessian, weights, taps):
    """L x (+ H x): the tap list applied to x [B, C, *S] (spec §2)."""
    check_call("reg_matvec", x, hessian, weights, taps)
    dim = x.dim() - 2
    reader = _Reader(x.shape[2:], x.device)
    chans = x.shape[1]
    parsed = parse_taps(taps, dim)
    weights = _unit_weights(weights, parsed, x.shape[2:], x.dtype, x.device)
    out = [None] * chans  # per output channel, accumulated out of place (autograd-safe)

    def acc(co, term):
        out[co] = term if out[co] is None else out[co] + term

    groups = {}
    for co, ci, kind, coef, offs, bounds in parsed:
        groups.setdefault((kind, offs, bounds), []).append((co, ci, coef))
    for (kind, offs, bounds), items in groups.items():
        if kind == 0:
            xn = reader.shifted(x, offs, bounds)
            for co, ci, c in items:
                acc(co, c * xn[:, ci])
        elif kind == 1:
            xn, _ = reader.read(x, offs, bounds)
            wn = _neighbour_weight(reader, weights, offs, bounds)
            for co, _, c in items:
                omega = 0.5 * (_weight(weights, co) + _weight(wn, co))
                acc(co, c * omega * (x[:, co] - xn[:, co]))
        else:
            for co, ci, c in items:
                acc(co, c * _weight(weights, co) * x[:, ci])
    zero = torch.zeros_like(x[:, 0])
    out = torch.stack([zero if o is None else o.expand_as(zero) for o in out], 1)
    if hessian is not None:
        out = out + sym_matvec(hessian, x)
    return out


def self_block(shape, dtype, device, weights, taps, chans):
    """L_vv: [B|1, C, *S] (diagonal) when no tap crosses channels, else [B|1, C, C, *S]."""
    dim = len(shape)
    reader = _Reader(shape, device)
    parsed = parse_taps(taps, dim)
    weights = _unit_weights(weights, parsed, shape, dtype, device)
    diag = all(co == ci for co, ci, *_ in parsed)
    bsz = 1 if weights is None else weights.shape[0]
    blk = torch.zeros([bsz, chans] + ([] if diag else [chans]) + list(shape), dtype=dtype,
                      device=device)

    def add(co, ci, value):
        idx = (slice(None), co) if diag else (slice(None), co, ci)
        blk[idx] = blk[idx] + value

    # plain taps: one coefficient per channel (pair) for each offset
    plain = {}
    for co, ci, kind, coef, offs, bounds in parsed:
        if kind == 0:
            c = plain.setdefault((offs, bounds), [0.0] * (chans if diag else chans * chans))
            c[co if diag else co * chans + ci] += coef
    # A plain tap's self mask is the outer product of its per-dim hits: the taps that move
    # along the same dims are summed in the space of those dims first, so that each set of
    # dims costs one full-size add (at most 2^dim of them, not one per tap).
    chan = [chans] + ([] if diag else [chans])
    by_dims = {}
    for (offs, bounds), c in plain.items():
        m = torch.tensor(c, dtype=dtype, device=device).reshape(chan)
        hits = reader.self_hits(offs, bounds, dtype)
        for d in sorted(hits):
            m = m[..., None] * hits[d]
        key = tuple(sorted(hits))
        by_dims[key] = m if key not in by_dims else by_dims[key] + m
    for dims, m in by_dims.items():
        blk = blk + m.reshape([1] + chan + [n if d in dims else 1 for d, n in enumerate(shape)])
    for co, ci, kind, coef, offs, bounds in parsed:
        if kind == 1:
            wc = _weight(weights, co)
            wn = _weight(_neighbour_weight(reader, weights, offs, bounds), co)
            add(co, co, coef * 0.5 * (wc + wn) * (1 - reader.self_mask(offs, bounds, dtype)))
        elif kind == 2:
            add(co, ci, coef * _weight(weights, co))
    return blk, diag


def _voxel_solve(a, r):
    """z = A⁻¹ r per voxel, A [B, C, C, *S] symmetric: Cholesky, a pivot <= 0 zeroes."""
    c = r.shape[1]
    low = [[None] * c for _ in range(c)]
    piv = [None] * c
    for j in range(c):
        d = a[:, j, j]
        for k in range(j):
            d = d - low[j][k] ** 2
        ok = d > 0
        piv[j] = (ok, torch.where(ok, d, torch.ones_like(d)).sqrt())
        for i in range(j + 1, c):
            v = a[:, i, j]
            for k in range(j):
                v = v - low[i][k] * low[j][k]
            low[i][j] = torch.where(ok, v / piv[j][1], torch.zeros_like(v))
    y = [None] * c
    for j in range(c):
        v = r[:, j]
        for k in range(j):
            v = v - low[j][k] * y[k]
        y[j] = torch.where(piv[j][0], v / piv[j][1], torch.zeros_like(v))
    z = [None] * c
    for j in reversed(range(c)):
        v = y[j]
        for k in range(j + 1, c):
            v = v - low[k][j] * z[k]
        z[j] = torch.where(piv[j][0], v / piv[j][1], torch.zeros_like(v))
    return torch.stack(z, 1)


def _precond_matrix(shape, batch, dtype, device, hessian, weights, taps, chans):
    """(a, diag): the voxel blocks H_v + L_vv that reg_precond inverts, [B|1, C, *S] when
    diag (no tap crosses channels and H is not 'sym'), else [B, C, C, *S]."""
    blk, diag = self_block(shape, dtype, device, weights, taps, chans)
    kind = "scalar" if hessian is None else packing(hessian.shape[1], chans)
    if diag and kind != "sym":
        return blk + (0 if hessian is None else hessian), True
    if diag:
        blk = torch.diag_embed(blk.movedim(1, -1)).movedim(-1, 1).movedim(-1, 1)
    a = blk.expand([batch] + list(blk.shape[1:]))
    if hessian is not None:
        hfull = torch.zeros_like(a)
        for i in range(chans):
            hfull[:, i, i] = hessian[:, 0 if kind == "scalar" else i]
        if kind == "sym":
            for k, (i, j) in enumerate(upper_pairs(chans)):
                hfull[:, i, j] = hessian[:, chans + k]
                hfull[:, j, i] = hessian[:, chans + k]
        a = a + hfull
    return a, False


def _precond_solve(a, diag, r):
    """z = a⁻¹ r per voxel (a from _precond_matrix, or a view of the same voxels of it)."""
    if diag:
        a = a.expand_as(r)
        ok = a > 0
        return torch.where(ok, r / torch.where(ok, a, torch.ones_like(a)), torch.zeros_like(r))
    return _voxel_solve(a, r)


def reg_precond(r, hessian, weights, taps):
    """z = (H_v + L_vv)⁻¹ r_v at every voxel (spec §3)."""
    check_call("reg_precond", r, hessian, weights, taps, "r")
    a, diag = _precond_matrix(r.shape[2:], r.shape[0], r.dtype, r.device, hessian, weights, taps,
                              r.shape[1])
    return _precond_solve(a, diag, r)


def colour_starts(period):
    """The colours, each as its first index along every dim, in lexicographic order (the first
    dim slowest): the order of the sweeps (spec §3)."""
    out = [()]
    for p in period:
        out = [c + (k,) for c in out for k in range(p)]
    return out


def colour_slices(period):
    """Index tuples of the colours, in colour_starts' order."""
    return [(Ellipsis,) + tuple(slice(c, None, p) for c, p in zip(start, period))
            for start in colour_starts(period)]


def clear_caches():
    """Drop the cached layouts of reg_relax_'s buffers (nitorch_jit.empty_cache calls this).

    Returns
    -------
    None

    Examples
    --------
    >>> clear_caches()
    """
    _colour_layout.cache_clear()


@functools.lru_cache(maxsize=8)
def _colour_layout(batch, chans, shape, bounds, pad, period, reads, dtype, device):
    """The geometry of a _ColourBuffer, the same for every call on one grid (so cached).

    Returns a namespace: `split`, `order`, `back` and `grow` (the reshapes and pads between x's
    layout and the buffer's), `shape` (the buffer's), for each colour in colour_starts' order
    its `boxes` (the as_strided arguments of its reads, in `reads`' order) and `ghosts` (places
    in one plane of the buffer, flat, of the ghosts whose sources have that colour, of those
    sources, and their signs, or None where all are +1; per plane, so that the cache holds
    the ghost shell once whatever the batch and channel counts)."""
    dim = len(shape)
    full = [n + 2 * pad for n in shape]
    blocks = [-(-f // p) for f, p in zip(full, period)]  # padded size / period, up
    out = types.SimpleNamespace(grow=[], split=[batch, chans], order=[0, 1], back=[0, 1])
    for f, p, m in zip(reversed(full), reversed(period), reversed(blocks)):
        out.grow += [0, m * p - f]
    for p, m in zip(period, blocks):
        out.split += [m, p]
    # [B, C, m_0, p_0, m_1, p_1, ...] <-> [B, C, p_0, p_1, ..., m_0, m_1, ...]
    out.order += [2 + 2 * d + 1 for d in range(dim)] + [2 + 2 * d for d in range(dim)]
    for d in range(dim):
        out.back += [2 + dim + d, 2 + d]
    out.shape = [batch, chans] + list(period) + blocks
    st = [1] * len(out.shape)
    for d in reversed(range(len(st) - 1)):
        st[d] = st[d + 1] * out.shape[d + 1]
    # the boxes: colour points + offset, as (size, stride, storage offset)
    out.boxes = []
    for colour in colour_starts(period):
        size = [batch, chans] + [max(0, -(-(n - c) // p))
                                 for n, c, p in zip(shape, colour, period)]
        boxes = []
        for offs in reads:
            at = 0
            for d, (o, c, p) in enumerate(zip(offs, colour, period)):
                i = pad + o + c
                at += (i % p) * st[2 + d] + (i // p) * st[2 + dim + d]
            boxes.append((size, st[:2] + st[2 + dim:], at))
        out.boxes.append(boxes)
    # where each padded voxel sits in the buffer (flat, one batch and channel)
    space = math.prod(out.shape[2:])
    where = torch.arange(space, device=device).reshape(out.shape[2:])
    where = where.permute([b - 2 for b in out.back[2:]]).reshape([m * p for m, p in
                                                                   zip(blocks, period)])
    where = where[tuple(slice(0, f) for f in full)].reshape(-1)
    # every ghost: its place, its source's place, the sign, the colour of its source
    src, sign, col, ghost = None, None, None, None
    for d, (n, b) in enumerate(zip(shape, bounds)):
        i = torch.arange(-pad, n + pad, device=device)
        j, sd = fold(i, n, b)
        view = [1] * dim
        view[d] = -1
        rs = lambda t: t.reshape(view)  # noqa: E731
        src = rs(j + pad) if src is None else src * full[d] + rs(j + pad)
        outside = rs((i < 0) | (i >= n))
        ghost = outside if ghost is None else ghost | outside
        c = rs(j % period[d])
        col = c if col is None else col * period[d] + c
        if sd is not None:
            sign = rs(sd) if sign is None else sign * rs(sd)
    sign = torch.ones(full, dtype=torch.int64, device=device) if sign is None else \
        sign.expand(full)
    keep = ghost.expand(full) & (sign != 0)  # sign 0: always 0, never written again
    pos = torch.arange(keep.numel(), device=device).reshape(full)[keep]
    src, sign, col = src.expand(full)[keep], sign[keep], col.expand(full)[keep]
    col, order = torch.sort(col, stable=True)
    counts = torch.bincount(col, minlength=math.prod(period)).tolist()
    out.ghosts = [(p_, s_, None if bool((g_ == 1).all()) else g_.to(dtype))
                  for p_, s_, g_ in zip(where[pos[order]].split(counts),
                                        where[src[order]].split(counts),
                                        sign[order].split(counts))]
    return out


class _ColourBuffer:
    """x [B, C, *S] with `pad` ghost voxels per side through `bounds` (the values
    _Reader.padded gives), stored colour by colour: padded index i of dim d sits at
    (i mod p_d, i div p_d), the residues first. The points of one colour read at one tap
    offset are then a box of the buffer whose rows are contiguous, so that the taps of a
    colour are gathered by one torch.stack of boxes. After a colour changes, the ghosts that
    copy its points are written again from their sources."""

    def __init__(self, x, bounds, pad, period, reads):
        shape = tuple(x.shape[2:])
        self.pad, self.shape = pad, shape
        self.layout = lay = _colour_layout(x.shape[0], x.shape[1], shape, tuple(bounds), pad,
                                           tuple(period), tuple(reads), x.dtype, x.device)
        padded = _Reader(shape, x.device).padded(x, bounds, pad)
        padded = torch.nn.functional.pad(padded, lay.grow) if any(lay.grow) else padded
        self.buf = padded.reshape(lay.split).permute(lay.order).contiguous()
        self.flat = self.buf.view(-1)
        # the ghosts' places over every batch and channel: index_select on a 1-D tensor is the
        # fast one (on a [B, C, space] view it costs about 5x more for these sizes)
        planes = x.shape[0] * x.shape[1]
        first = (torch.arange(planes, device=x.device) * self.flat.numel() // planes)[:, None]
        self.ghosts = [((first + p).reshape(-1), (first + s).reshape(-1),
                        None if g is None else g.repeat(planes))
                       for p, s, g in lay.ghosts]

    def boxes(self, index):
        """The colour's points at each of `reads`: views of the buffer, [B, C, *colour shape]."""
        return [self.buf.as_strided(*b) for b in self.layout.boxes[index]]

    def refresh(self, index):
        """Write again the ghosts whose sources have colour `index`."""
        pos, src, sign = self.ghosts[index]
        if pos.numel():
            val = self.flat.index_select(0, src)
            self.flat.index_copy_(0, pos, val if sign is None else val * sign)

    def inner(self):
        """The buffer's values at x's voxels, in x's layout (a view of a new tensor)."""
        lay = self.layout
        padded = self.buf.permute(lay.back).reshape(lay.split[:2] + [
            m * p for m, p in zip(lay.split[2::2], lay.split[3::2])])
        return padded[(Ellipsis,) + tuple(slice(self.pad, self.pad + n) for n in self.shape)]


def _tap_matrix(items, offsets, chans, dtype, device):
    """The plain taps of one bounds tuple as a matrix on the stacked neighbours: [C, 1, T] when
    every tap maps a channel to itself (a batched matmul per channel), else [C, C * T]."""
    diag = all(co == ci for co, ci, _, _ in items)
    t = len(offsets)
    at = {o: i for i, o in enumerate(offsets)}
    k = [[0.0] * (t if diag else chans * t) for _ in range(chans)]
    for co, ci, coef, offs in items:
        k[co][at[offs] if diag else ci * t + at[offs]] += coef
    k = torch.tensor(k, dtype=dtype, device=device)
    return (k[:, None] if diag else k), diag


def _subtract_taps(r, k, diag, stack, size):
    """r -= the plain taps (_tap_matrix) applied to the stacked neighbours [B, C, T, *cshape]:
    one matrix-vector product per batch and channel (per batch when taps cross channels).
    A batched matmul of the same size is split among threads, which on a busy machine cost
    it more than it saves (measured: 2 ms more per sweep with a core kept busy)."""
    rr = r.view(r.shape[0], r.shape[1], size)
    xg = stack.view(r.shape[0], r.shape[1], -1, size)
    for b in range(r.shape[0]):
        if diag:
            for c in range(r.shape[1]):
                rr[b, c].addmv_(xg[b, c].t(), k[c, 0], alpha=-1)
        else:
            rr[b].addmm_(k, xg[b].reshape(-1, size), alpha=-1)


def reg_relax_(x, hessian, gradient, weights, taps, period, nb_iter):
    """Coloured Gauss–Seidel sweeps on (H + L) x = g, in place (spec §3).

    x lives in one padded buffer per bounds tuple, stored colour by colour (_ColourBuffer), so
    that a colour reads all its taps with one stack of boxes and applies the plain ones with
    one matrix-vector product per channel; the weighted taps add one op each. What does not
    change between sweeps (per-colour gradient, Hessian, weights and voxel blocks, as
    contiguous copies) is made once per call, so that a sweep costs about one to two matvecs.
    The terms are those of reg_matvec (equal to rounding), the solves those of reg_precond.
    All inputs are read before x changes, so inputs that share x's memory see the old x, as
    in the compiled kernels."""
    check_call("reg_relax_", x, hessian, weights, taps)
    if not check_relax(x, gradient, taps, period, nb_iter):
        return None
    nb_iter = int(nb_iter)
    dim = x.dim() - 2
    shape = x.shape[2:]
    batch, chans = x.shape[:2]
    dtype, device = x.dtype, x.device
    parsed = parse_taps(taps, dim)
    weights = _unit_weights(weights, parsed, shape, dtype, device)
    reader = _Reader(shape, device)
    pad = max([abs(o) for t in parsed for o in t[4]], default=0)
    # per bounds tuple: its plain taps (kind 0) and the offsets its taps read (kinds 0 and 1)
    plain, reads, weighted = {}, {}, []  # weighted: (kind, offs, bounds, co, ci, factor)
    for co, ci, kind, coef, offs, bounds in parsed:
        if kind == 0:
            plain.setdefault(bounds, []).append((co, ci, coef, offs))
        elif kind == 1:
            wn = _neighbour_weight(reader, weights, offs, bounds)
            weighted.append((1, offs, bounds, co, co,
                             coef * (0.5 * (_weight(weights, co) + _weight(wn, co)))))
        else:
            weighted.append((2, offs, bounds, co, ci, coef * _weight(weights, co)))
        if kind != 2:
            reads.setdefault(bounds, set()).add(offs)
    if not reads:  # only voxel-wise taps: x still needs a home
        reads[parsed[0][5] if parsed else (DCT2,) * dim] = {(0,) * dim}
    for b in reads:
        reads[b] = sorted(reads[b] | {(0,) * dim})
    buffers = {b: _ColourBuffer(x, b, pad, period, reads[b]) for b in reads}
    home = next(iter(buffers))  # the buffer whose centre box gives x at a colour's points
    matrices = {b: _tap_matrix(items, reads[b], chans, dtype, device)
                for b, items in plain.items()}
    a, diag = _precond_matrix(shape, batch, dtype, device, hessian, weights, taps, chans)
    if diag:  # the voxel solve is one multiply; a pivot <= 0 zeroes, as in reg_precond
        a = a.expand(x.shape).reciprocal().masked_fill_(a.expand(x.shape) <= 0, 0)
    centre = {b: r.index((0,) * dim) for b, r in reads.items()}
    colours = []  # the colours with points: what each reads, made once per call
    for index, sl in enumerate(colour_slices(period)):
        cshape = list(x[sl].shape)
        if not all(cshape):
            continue
        c = types.SimpleNamespace(index=index, shape=cshape, size=math.prod(cshape[2:]))
        c.boxes = {b: buf.boxes(index) for b, buf in buffers.items()}
        c.gradient = gradient[sl].contiguous()
        c.hessian = None if hessian is None else hessian[sl].contiguous()
        c.solve = a[sl].contiguous()
        c.weighted = [(kind, bounds, reads[bounds].index(offs) if kind == 1 else None, co, ci,
                       f[sl].contiguous())
                      for kind, offs, bounds, co, ci, f in weighted]
        colours.append(c)
    for _ in range(nb_iter):
        for c in colours:
            stacks = {b: torch.stack(boxes, 2) for b, boxes in c.boxes.items()}
            xs = stacks[home][:, :, centre[home]]
            r = c.gradient.clone()
            for b, (k, kdiag) in matrices.items():
                _subtract_taps(r, k, kdiag, stacks[b], c.size)
            for kind, b, t, co, ci, f in c.weighted:
                if kind == 1:
                    r[:, co].addcmul_(f, xs[:, co] - stacks[b][:, co, t], value=-1)
                else:
                    r[:, co].addcmul_(f, xs[:, ci], value=-1)
            if c.hessian is not None:
                r -= sym_matvec(c.hessian, xs)
            dx = c.solve * r if diag else _voxel_solve(c.solve, r)
            for b, buf in buffers.items():
                c.boxes[b][centre[b]].add_(dx)
                buf.refresh(c.index)
    x.copy_(buffers[home].inner())
    return None


KERNELS = {
    "reg_matvec": reg_matvec,
    "reg_precond": reg_precond,
    "reg_relax_": reg_relax_,
}
