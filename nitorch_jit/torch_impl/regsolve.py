"""Regulariser kernels in plain PyTorch: the TORCH backend of module "regsolve" and the oracle
of the compiled one. The contract (tap list, Hessian packing, voxel solve, colours) is
docs/regsolve-spec.md; every function here is differentiable by autograd.
"""
import math

import torch

from .bounds import fold


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

    def self_mask(self, offs, bounds, dtype):
        """[*S] tensor: the sign where a tap folds back onto its own voxel, else 0."""
        m = torch.ones((), dtype=dtype, device=self.device)
        for d, (o, b) in enumerate(zip(offs, bounds)):
            if o == 0:
                continue
            j, s = self.axis(d, o, b)
            hit = (j == torch.arange(self.shape[d], device=self.device)).to(dtype)
            if s is not None:
                hit = hit * s.to(dtype)
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


# ----------------------------------------------------------------------------- kernels
def _unit_weights(weights, parsed, shape, dtype, device):
    """Weighted taps (kinds 1, 2) without weights read w = 1, as the compiled kernels do."""
    if weights is None and any(t[2] for t in parsed):
        return torch.ones([1, 1] + list(shape), dtype=dtype, device=device)
    return weights


def reg_matvec(x, hessian, weights, taps):
    """L x (+ H x): the tap list applied to x [B, C, *S] (spec §2)."""
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

    for co, ci, kind, coef, offs, bounds in parsed:
        if kind == 0:
            add(co, ci, coef * reader.self_mask(offs, bounds, dtype))
        elif kind == 1:
            wc = _weight(weights, co)
            wn = _weight(_neighbour_weight(reader, weights, offs, bounds), co)
            add(co, co, coef * 0.5 * (wc + wn) * (1 - reader.self_mask(offs, bounds, dtype)))
        else:
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
    a, diag = _precond_matrix(r.shape[2:], r.shape[0], r.dtype, r.device, hessian, weights, taps,
                              r.shape[1])
    return _precond_solve(a, diag, r)


def colour_slices(period):
    """Index tuples of the colours, in lexicographic order (the first dim slowest)."""
    out = [()]
    for p in period:
        out = [s + (slice(c, None, p),) for s in out for c in range(p)]
    return [(Ellipsis,) + s for s in out]


class _Ghosts:
    """x [B, C, *S] in a buffer with `pad` ghost voxels per side, through `bounds` (the values
    _Reader.padded gives), kept up to date colour by colour: after the points of one colour
    change, only the ghosts that copy those points are written again."""

    def __init__(self, x, bounds, pad, period):
        shape = x.shape[2:]
        self.pad, self.period, self.shape = pad, period, shape
        self.buf = _Reader(shape, x.device).padded(x, bounds, pad).contiguous()
        inner = tuple(slice(pad, pad + n) for n in shape)
        self.inner = self.buf[(Ellipsis,) + inner]
        # every padded voxel: the flat padded index of its source voxel, the sign, the colour
        src, sign, col, ghost = None, None, None, None
        for d, (n, b) in enumerate(zip(shape, bounds)):
            i = torch.arange(-pad, n + pad, device=x.device)
            j, sd = fold(i, n, b)
            view = [1] * len(shape)
            view[d] = -1
            rs = lambda t: t.reshape(view)  # noqa: E731
            size = n + 2 * pad
            src = rs(j + pad) if src is None else src * size + rs(j + pad)
            out = rs((i < 0) | (i >= n))
            ghost = out if ghost is None else ghost | out
            c = rs(j % period[d])
            col = c if col is None else col * period[d] + c
            if sd is not None:
                sign = rs(sd) if sign is None else sign * rs(sd)
        full = [n + 2 * pad for n in shape]
        sign = torch.ones(full, dtype=torch.int64, device=x.device) if sign is None else \
            sign.expand(full)
        keep = ghost.expand(full) & (sign != 0)  # sign 0: always 0, never written again
        pos = torch.arange(keep.numel(), device=x.device).reshape(full)[keep]
        src, sign, col = src.expand(full)[keep], sign[keep], col.expand(full)[keep]
        # the ghosts grouped by the colour of their source, once
        col, order = torch.sort(col, stable=True)
        counts = torch.bincount(col, minlength=math.prod(period)).tolist()
        self.by_colour = []
        for p_, s_, g_ in zip(pos[order].split(counts), src[order].split(counts),
                              sign[order].split(counts)):
            self.by_colour.append((p_, s_, None if bool((g_ == 1).all()) else g_.to(x.dtype)))

    def view(self, offs, colour):
        """The voxels at colour points + offs: a strided view of the buffer."""
        size, stride, start = list(self.buf.shape[:2]), list(self.buf.stride()[:2]), 0
        for o, c, n, p, st in zip(offs, colour, self.shape, self.period, self.buf.stride()[2:]):
            size.append(max(0, -(-(n - c) // p)))
            stride.append(st * p)
            start += (self.pad + o + c) * st
        return self.buf.as_strided(size, stride, self.buf.storage_offset() + start)

    def update(self, x, sl, index):
        """Copy x's points of colour `index` (slices sl) in, then the ghosts that copy them."""
        self.inner[sl] = x[sl]
        pos, src, sign = self.by_colour[index]
        if pos.numel():
            flat = self.buf.view(self.buf.shape[0], self.buf.shape[1], -1)
            val = flat.index_select(2, src)
            flat.index_copy_(2, pos, val if sign is None else val * sign)


def _aliases(t, x):
    return t is not None and t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def reg_relax_(x, hessian, gradient, weights, taps, period, nb_iter):
    """Coloured Gauss–Seidel sweeps on (H + L) x = g, in place (spec §3).

    Each colour computes its residual at its own points only, from strided views of a padded
    copy of x (_Ghosts), and solves its voxels with blocks made once per call, so that a sweep
    costs about one matvec rather than one per colour. The terms are those of reg_matvec,
    accumulated in place (equal to rounding); the solves those of reg_precond. Inputs that
    share x's memory are read before x changes, as the compiled kernels do."""
    nb_iter = int(nb_iter)
    if nb_iter <= 0:
        return None
    dim = x.dim() - 2
    shape = x.shape[2:]
    gradient, hessian, weights = (t.clone() if _aliases(t, x) else t
                                  for t in (gradient, hessian, weights))
    parsed = parse_taps(taps, dim)
    weights = _unit_weights(weights, parsed, shape, x.dtype, x.device)
    reader = _Reader(shape, x.device)
    chans = x.shape[1]
    pad = max([abs(o) for t in parsed for o in t[4]], default=0)
    groups = {}
    for co, ci, kind, coef, offs, bounds in parsed:
        groups.setdefault((kind, offs, bounds), []).append((co, ci, coef))
    # The terms, each one in-place op per colour. A group of plain taps that maps each channel
    # to itself is one op on all channels (coefficients as a [1, C, 1...] tensor); the
    # weighted taps carry their weights, which do not change, made once.
    ones = [1] * dim
    terms = []  # (kind, offs, bounds, co, ci, factor)
    for (kind, offs, bounds), items in groups.items():
        if kind == 0 and len({co for co, _, _ in items}) == len(items) \
                and all(co == ci for co, ci, _ in items):
            coef = torch.zeros([1, chans] + ones, dtype=x.dtype, device=x.device)
            for co, _, c in items:
                coef[0, co] = c
            terms.append((0, offs, bounds, None, None, coef))
        elif kind == 0:
            terms += [(0, offs, bounds, co, ci, c) for co, ci, c in items]
        elif kind == 1:
            wn = _neighbour_weight(reader, weights, offs, bounds)
            terms += [(1, offs, bounds, co, co,
                       c * (0.5 * (_weight(weights, co) + _weight(wn, co))))
                      for co, _, c in items]
        else:
            terms += [(2, offs, bounds, co, ci, c * _weight(weights, co)) for co, ci, c in items]
    a, diag = _precond_matrix(shape, x.shape[0], x.dtype, x.device, hessian, weights, taps,
                              chans)
    ghosts = {}  # one padded copy per bounds tuple (all taps share one, as a rule)
    for kind, _, b, *_ in terms:
        if kind != 2 and b not in ghosts:
            ghosts[b] = _Ghosts(x, b, pad, period)
    colours = colour_slices(period)
    starts = [()]
    for p in period:  # the first index of each colour along each dim, in colour_slices' order
        starts = [c + (k,) for c in starts for k in range(p)]
    views = {}  # (bounds, offs, colour) -> strided view of the padded copy (the same buffer)
    for _ in range(nb_iter):
        for index, (sl, start) in enumerate(zip(colours, starts)):
            xs = x[sl]
            lx = torch.zeros_like(xs)
            for kind, offs, bounds, co, ci, f in terms:
                if kind == 2:
                    lx[:, co].addcmul_(f[sl], xs[:, ci])
                    continue
                key = (bounds, offs, index)
                if key not in views:
                    views[key] = ghosts[bounds].view(offs, start)
                xn = views[key]
                if co is None:
                    lx.addcmul_(f, xn)
                elif kind == 0:
                    lx[:, co].add_(xn[:, ci], alpha=f)
                else:
                    lx[:, co].addcmul_(f[sl], xs[:, co] - xn[:, co])
            if hessian is not None:
                lx += sym_matvec(hessian[sl], xs)
            x[sl] += _precond_solve(a[sl], diag, gradient[sl] - lx)
            for g in ghosts.values():
                g.update(x, sl, index)
    return None


KERNELS = {
    "reg_matvec": reg_matvec,
    "reg_precond": reg_precond,
    "reg_relax_": reg_relax_,
}
