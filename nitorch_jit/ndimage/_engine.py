"""The calls into the kernels: scipy's sampling rules (cval outside the input, the coordinate
mappings, the padding before the prefilter) around the code-level entries of the ops families
(``pull_codes``, ``affine_pull_codes``, ``resize_codes``, ``prefilter``), on real tensors
[C, *S]; complex data and the output dtype are handled by ``run_parts`` and ``_arrays``.
"""
import math

import numpy as np
import torch

from ._arrays import NdimageError, is_planning, unaliased
from ._modes import coefficients, map_coordinate, mode_code

MAX_DIM = 3


def check_rank(ndim, argname="input"):
    """Refuse the ranks our kernels do not sample: 0, and more than MAX_DIM spatial dims."""
    if ndim < 1:
        raise NdimageError(f"{argname}: input and output rank must be > 0")
    if ndim > MAX_DIM:
        raise NdimageError(f"{argname}: {ndim}-D arrays are not supported (our kernels have "
                           f"at most {MAX_DIM} spatial dims)")


def prefiltered(x, order, mode, cval, prefilter, dim):
    """x [C, *S] -> (what the taps read, npad): ``coefficients`` and the prefilter run."""
    from ..ops.splinc import prefilter as _pf
    x, npad, run = coefficients(x, order, mode, cval, prefilter, dim)
    if run:
        x = _pf(x, [order] * dim, [mode_code(mode)] * dim)
    return x, npad


def pull(x, grid, order, mode, cval, prefilter):
    """Sample x [C, *S] (D = len(S) spatial dims, float) at grid [*P, D] (voxel coordinates,
    any float dtype, computed by the caller in float64 where scipy does). Returns [C, *P]."""
    dim = x.dim() - 1
    coef, npad = prefiltered(x, order, mode, cval, prefilter, dim)
    pshape = tuple(grid.shape[:-1])
    g = grid.reshape(-1, dim)
    bad = None
    if mode == "constant":  # cval outside [0, n-1] (NaN included: both tests fail)
        bad = torch.ge(g[:, 0], 0)
        tmp = torch.empty_like(bad)
        for d in range(dim):
            if d:
                bad.logical_and_(torch.ge(g[:, d], 0, out=tmp))
            bad.logical_and_(torch.le(g[:, d], x.shape[1 + d] - 1, out=tmp))
        bad.logical_not_()
    elif g.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(g))).all()):
        # (min and max are NaN when any value is, and +-inf when one is: one pass over the
        # grid, where isfinite(g).all() takes five, 7x slower at 128^3 here)
        bad = ~torch.isfinite(g).all(-1)
    if mode == "wrap" or (order == 0 and mode in ("mirror", "reflect", "grid-mirror",
                                                   "grid-wrap")):
        g = torch.stack([map_coordinate(g[:, d].double(), coef.shape[1 + d], mode)
                         for d in range(dim)], -1)
    if npad:
        g = g + npad
    g = g.to(coef.dtype)
    npts = g.shape[0]
    # the points as one row along the last point dim: the kernels' vector paths take rows
    g = g.reshape((1,) * (dim - 1) + (npts, dim))
    from ..ops.pushpull import pull_codes
    # 'constant' overwrites every point outside [0, n - 1] below: the kernels may skip them
    # (extrapolate off zeroes points beyond a small tolerance, and computes the rest as before)
    out = pull_codes(coef, g, [order] * dim, [mode_code(mode)] * dim,
                     extrapolate=mode != "constant")
    out = out.reshape((x.shape[0], npts))
    if mode == "grid-constant" and cval != 0:
        out = out + cval
    if bad is not None:  # out is a new tensor of ours: fill in place
        out.masked_fill_(bad, cval)
    return out.reshape((x.shape[0],) + pshape)


def pull_affine(x, matrix, offset, oshape, order, mode, cval, prefilter):
    """pull at the coordinates ``matrix @ o + offset`` of the output voxels o of `oshape`,
    without a grid: affine_pull computes them in its kernels with scipy's summation order
    ((offset + m_0 o_0) + m_1 o_1) + m_2 o_2, so float64 coordinates are scipy's, bit for bit.
    Returns [C, *oshape], or None where only the grid path is exact: the legacy 'wrap' and
    order 0 with a mirrored / wrapped mode (their coordinates are remapped in float64 first),
    order 0 of float32 data (ties of the rounding need float64 coordinates), a matrix that is
    not square, non-finite or huge coordinates."""
    dim = x.dim() - 1
    mat = np.asarray(matrix, dtype=np.float64)
    off = np.asarray(offset, dtype=np.float64)
    if mode == "wrap" or (order == 0 and (mode in ("mirror", "reflect", "grid-mirror",
                                                   "grid-wrap") or x.dtype != torch.float64)):
        return None
    if mat.shape != (dim, dim) or len(oshape) != dim or off.shape != (dim,):
        return None
    if not (np.isfinite(mat).all() and np.isfinite(off).all()) or \
            (np.abs(mat).sum(1) * max(oshape) + np.abs(off)).max() > 1e30:
        return None
    coef, npad = prefiltered(x, order, mode, cval, prefilter, dim)
    A = np.concatenate([mat, (off + npad)[:, None]], 1)
    from ..ops.affine import affine_pull_codes
    out = affine_pull_codes(coef, torch.from_numpy(A).to(coef.device), list(oshape),
                            [order] * dim, [mode_code(mode)] * dim,
                            extrapolate=mode != "constant")  # as in pull
    if mode == "grid-constant" and cval != 0:
        out = out + cval
    if mode == "constant":  # cval outside [0, n-1]
        lo, hi = inside_intervals(mat, off, oshape, x.shape[1:])
        idx = outside_indices(lo, hi, oshape[-1])
        if idx.size:
            out.view(out.shape[0], -1).index_fill_(1, torch.from_numpy(idx).to(out.device), cval)
    return out


def outside_indices(lo, hi, m):
    """Flat indices of the points outside the intervals [lo[r], hi[r]] of rows r of length m
    (the two end segments of each row), built segment-wise: the cost is that of the points
    filled, not of a mask over the whole output."""
    lo = np.clip(lo, 0, m)
    hi = np.clip(np.asarray(hi) + 1, lo, m)  # inside: [lo, hi)
    first = np.arange(lo.size, dtype=np.int64) * m
    starts = np.concatenate([first, first + hi])
    lens = np.concatenate([lo, m - hi]).astype(np.int64)
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    if not lens.size:
        return np.empty(0, np.int64)
    return np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(lens.sum())


def inside_intervals(mat, off, oshape, ishape):
    """scipy's 'constant' rule without a grid: output voxel o is inside iff every coordinate
    ((off_d + m_d0 o_0) + m_d1 o_1) + m_d2 o_2 (float64, scipy's order) lies in [0, n_d - 1].
    Rounding is monotone, so along the last output axis each coordinate is monotone and the
    inside voxels of a row (the outer indices fixed) form one interval. Returns (lo, hi), int64
    [rows] (rows = prod(oshape[:-1]); lo > hi: none inside): estimates from the exact line,
    corrected by evaluating scipy's expression at the ends. (NumPy: one thread, small arrays.)"""
    dim, m = len(oshape), int(oshape[-1])
    rows = int(np.prod(oshape[:-1], dtype=np.int64))
    lo = np.zeros(rows, dtype=np.int64)
    hi = np.full(rows, m - 1, dtype=np.int64)
    for d in range(dim):
        base = np.float64(off[d])
        for j, n in enumerate(oshape[:-1]):
            o = np.arange(n, dtype=np.float64).reshape((1,) * j + (-1,) + (1,) * (dim - j - 2))
            base = base + o * mat[d, j]
        base = np.broadcast_to(base, tuple(oshape[:-1])).reshape(rows)
        s, top = float(mat[d, -1]), float(ishape[d] - 1)

        def inside(k):
            c = base + k.astype(np.float64) * s
            return (c >= 0) & (c <= top)
        if s == 0:
            lo = np.where(inside(lo), lo, m)
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            ka, kb = (0 - base) / s, (top - base) / s
        first, last = (ka, kb) if s > 0 else (kb, ka)
        klo = np.clip(np.ceil(first), -2, m + 1).astype(np.int64)
        khi = np.clip(np.floor(last), -2, m + 1).astype(np.int64)
        for _ in range(2):  # the estimates are at most a step off: move them onto the rule
            klo = np.where(inside(klo - 1), klo - 1, klo)
            khi = np.where(inside(khi + 1), khi + 1, khi)
        for _ in range(2):
            klo = np.where(~inside(klo) & (klo <= khi), klo + 1, klo)
            khi = np.where(~inside(khi) & (khi >= klo), khi - 1, khi)
        lo, hi = np.maximum(lo, klo), np.minimum(hi, khi)
    return lo, hi


def _axis_coordinates(m, zoom, shift, grid_mode, npad):
    """scipy's NI_ZoomShift coordinates of one axis (float64): ((k + shift) * zoom) + npad."""
    cc = np.arange(m, dtype=np.float64)
    if shift is not None:
        cc = cc + shift
    if zoom is not None:
        cc = (cc + 0.5) * zoom - 0.5 if grid_mode else cc * zoom
    return cc + npad


def _zoom_shift(x, out_shape, zooms, shifts, order, mode, cval, prefilter, grid_mode):
    """scipy's zoom_shift on x [C, *S]: separable per-axis coordinates. Returns [C, *out]."""
    dim = x.dim() - 1
    coef, npad, run = coefficients(x, order, mode, cval, prefilter, dim)
    ins = coef.shape[1:]
    coords, valid, affine = [], [], True
    for d in range(dim):
        z = None if zooms is None else zooms[d]
        s = None if shifts is None else shifts[d]
        cc = _axis_coordinates(out_shape[d], z, s, grid_mode, npad)
        n = ins[d]
        with np.errstate(invalid="ignore"):
            if mode == "constant":
                valid.append((cc >= 0) & (cc <= n - 1))
            else:
                valid.append(np.isfinite(cc))
        if order == 0:  # ties of the rounding follow scipy's coordinates exactly
            affine = False
        if mode == "wrap" or order == 0:
            mapped = map_coordinate(torch.from_numpy(cc), n, mode).numpy()
            if not np.array_equal(mapped[valid[-1]], cc[valid[-1]]):
                affine = False
            cc = mapped
        if not np.isfinite(cc[valid[-1]]).all():
            affine = False
        coords.append(cc)
    if affine:
        scales, offs = [], []
        for d in range(dim):
            cc, m = coords[d], out_shape[d]
            z = None if zooms is None else zooms[d]
            if m == 1 or z is None:
                scale = 1.0 if z is None else float(z)
            else:
                scale = float(z)
            scales.append(scale)
            ok = np.isfinite(cc)
            offs.append(float(cc[0]) if ok[0] else 0.0)
            if not (math.isfinite(scale) and math.isfinite(offs[-1])):
                affine = False
    if affine:
        from ..ops.resize import resize_codes
        out = resize_codes(coef, list(out_shape), scales, offs, [order] * dim,
                           [mode_code(mode)] * dim, run)
    else:  # legacy 'wrap' leaving [0, n-1] (or non-finite): one point per output voxel
        from ..ops.splinc import prefilter as _pf
        if run:
            coef = _pf(coef, [order] * dim, [mode_code(mode)] * dim)
        axes = [torch.from_numpy(np.where(np.isfinite(c), c, 0.0)) for c in coords]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).to(coef.dtype)
        from ..ops.pushpull import pull_codes
        out = pull_codes(coef, grid, [order] * dim, [mode_code(mode)] * dim,
                         extrapolate=True)
    if mode == "grid-constant" and cval != 0:
        out = out + cval
    if not all(v.all() for v in valid):
        bad = None
        for d, v in enumerate(valid):
            t = torch.from_numpy(~v).to(out.device).reshape(
                (1,) + (1,) * d + (-1,) + (1,) * (dim - d - 1))
            bad = t if bad is None else bad | t
        out = out.masked_fill(bad, cval)
    return out


def run_parts(inp, out, cval, fn):
    """Compute fn(real tensor [1, *S], real cval) -> [1, *out] per real part, and store."""
    if is_planning():
        return out.store(None)
    if out.empty():
        return out.store(torch.zeros(out.shape, dtype=torch.float64))
    dtype = inp.compute_dtype(out.torch_dtype)
    parts = [fn(x[None], c)[0] for x, c in inp.real_parts(dtype, cval)]
    res = parts[0] if len(parts) == 1 else torch.complex(parts[0], parts[1])
    return out.store(unaliased(res, inp))


def filter_axes(inp, out, order, mode, axes):
    """spline_filter / spline_filter1d: the spline filter of `mode` along `axes`, stored."""
    if is_planning():
        return out.store(None)
    if out.empty():
        return out.store(torch.zeros(out.shape, dtype=torch.float64))
    dtype = inp.compute_dtype(out.torch_dtype)
    res = []
    for x, _ in inp.real_parts(dtype, 0.0):
        if order > 1 and axes:
            from ..ops.splinc import prefilter as _pf
            x = _pf(x, [order] * len(axes), [mode_code(mode, spline_filter=True)] * len(axes),
                    dims=axes)
        res.append(x)
    return out.store(unaliased(res[0] if len(res) == 1 else torch.complex(res[0], res[1]),
                               inp))


def affine_grid(matrix, offset, oshape, device, dtype=torch.float64):
    """[*oshape, D] coordinates matrix @ o + offset, one full-size allocation (the per-axis
    terms are computed in float64 and summed in `dtype`)."""
    mat = torch.as_tensor(matrix, dtype=torch.float64, device=device)
    off = torch.as_tensor(offset, dtype=torch.float64, device=device)
    ond = len(oshape)
    grid = None
    for j, m in enumerate(oshape):  # summed in scipy's order: ((offset + t0) + t1) + t2
        idx = torch.arange(m, dtype=torch.float64, device=device)
        term = idx[:, None] * mat[:, j]  # [m, D]
        if j == 0:
            term = off + term
        term = term.to(dtype).reshape((1,) * j + (m,) + (1,) * (ond - j - 1)
                                      + (mat.shape[0],))
        grid = term if grid is None else grid + term
    return grid.expand(tuple(oshape) + (mat.shape[0],))


def separable(inp, out, oshape, zooms, shifts, order, mode, cval, prefilter, grid_mode):
    """zoom / shift / diagonal affine: unchanged axes become channels (any rank)."""
    nd = inp.ndim
    # an axis sampled at its own integers is the identity when the samples are interpolated
    # (prefilter, or order <= 1); without prefilter a spline of order > 1 smooths it
    ident = [oshape[d] == inp.shape[d] and (zooms is None or zooms[d] == 1)
             and (shifts is None or shifts[d] == 0) and (prefilter or order <= 1)
             for d in range(nd)]
    moving = [d for d in range(nd) if not ident[d]]
    if not moving:
        moving = [nd - 1]
    check_rank(len(moving))
    keep = [d for d in range(nd) if d not in moving]
    perm = keep + moving
    zs = None if zooms is None else [zooms[d] for d in moving]
    ss = None if shifts is None else [shifts[d] for d in moving]
    mshape = [oshape[d] for d in moving]

    def fn(x, c):
        y = x[0].permute(perm)
        kshape = y.shape[:len(keep)]
        y = y.reshape((-1,) + tuple(y.shape[len(keep):]))
        r = _zoom_shift(y, mshape, zs, ss, order, mode, c, prefilter, grid_mode)
        r = r.reshape(tuple(kshape) + tuple(mshape))
        inv = [perm.index(d) for d in range(nd)]
        return r.permute(inv)[None]
    return run_parts(inp, out, cval, fn)
