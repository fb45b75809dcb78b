"""scipy.ndimage-compatible spline interpolation on NumPy arrays, with nitorch_jit's kernels.

Drop-in replacements for ``scipy.ndimage.map_coordinates``, ``spline_filter``,
``spline_filter1d``, ``zoom``, ``shift``, ``rotate``, ``affine_transform`` and
``geometric_transform``: same signatures, defaults and results, computed by the compiled,
multithreaded kernels of nitorch_jit (``grid_pull``, ``resize``, ``spline_coeff_nd``)::

    from nitorch_jit import ndimage          # instead of: from scipy import ndimage
    out = ndimage.zoom(volume, 2, order=3)

How scipy's modes map onto our bounds (scipy's own rules, read from its documentation and
sources; none is approximated):

==================  ==================  ===============  ======================================
mode                taps (bound)        prefilter bound  extra rule
==================  ==================  ===============  ======================================
'reflect',          dct2                dct2
'grid-mirror'
'mirror'            dct1                dct1
'grid-wrap'         dft                 dft
'grid-constant'     zero, on input-cval dct1             input padded by 12 samples of cval
                                                         before the prefilter; cval added back
'nearest'           replicate           dct2             input padded by 12 edge samples
                                                         before the prefilter
'constant'          dct1                dct1             cval wherever a coordinate is outside
                                                         [0, n-1] (or not finite)
'wrap'              dct1                dct1             coordinates first wrapped into
                                                         [0, n-1] with period n-1
==================  ==================  ===============  ======================================

The padding by 12 for 'nearest' and 'grid-constant' is scipy's (it only happens when the
prefilter runs: ``prefilter=True`` and ``order > 1``). Non-finite coordinates give ``cval`` in
every mode.

**Prefilter: exact where scipy's is approximate.** scipy initialises its recursive filter for
'reflect' / 'grid-mirror' (and 'nearest', whose padded line it filters as 'reflect') with a
truncated sum, which is inexact on short lines: a cubic interpolation of 5 samples is 1e-4
off the samples, order 5 on 5 samples 2e-2 off, and still 1e-9 off on 12 samples; it converges
from about 30 samples. Our filter is the exact inverse of the interpolation matrix (1e-16 on
any length), so on short lines with those modes our results differ from scipy's by scipy's
error. All other modes agree to rounding.

Inputs and outputs: NumPy arrays or array-likes of any real or complex dtype (complex is
interpolated as two real arrays, like scipy does); ``output`` follows scipy (an array to write
into, or a dtype, or a dtype string; integer outputs are rounded half away from zero and
clipped to the dtype's range). float64 data is computed in float64; float32 data with a float32
(or float16) output is computed in float32; anything else in float64. Arrays reach the kernels
without copies where their layout allows. torch tensors are accepted too (CPU or CUDA) and
give tensors back. Orders 0-5 as in scipy, plus 6 and 7. Our kernels have at most 3 spatial
dims: inputs with more dims raise a ValueError, except that ``rotate`` (any number of dims) and
``spline_filter`` / ``spline_filter1d`` (any number) work on every rank, and ``zoom`` /
``shift`` / 1-D ``affine_transform`` accept more dims when the extra ones are left unchanged.
"""
import math
import numbers
import warnings

import numpy as np
import torch

from ..codes import BoundType

__all__ = ["affine_transform", "geometric_transform", "map_coordinates", "rotate", "shift",
           "spline_filter", "spline_filter1d", "zoom"]

_MODES = ("constant", "nearest", "reflect", "grid-mirror", "mirror", "wrap", "grid-wrap",
          "grid-constant")
# bound codes of nitorch_jit (docs/pushpull-spec.md): 0 replicate, 1 dct1, 2 dct2, 5 dft, 6 zero
_TAPS = {"constant": 1, "nearest": 0, "reflect": 2, "grid-mirror": 2, "mirror": 1, "wrap": 1,
         "grid-wrap": 5, "grid-constant": 6}
# spline_filter's mode -> bound of the filter (scipy: mirror initialisation for constant,
# grid-constant, mirror and wrap; reflect for nearest and reflect; periodic for grid-wrap)
_FILTER = {"constant": 1, "nearest": 2, "reflect": 2, "grid-mirror": 2, "mirror": 1, "wrap": 1,
           "grid-wrap": 5, "grid-constant": 1}
_NPAD = 12  # scipy's padding before the prefilter for 'nearest' and 'grid-constant'
_MAX_DIM = 3
_HALF = (torch.float16, torch.bfloat16)


class NdimageError(ValueError, RuntimeError):
    """Bad argument. Both a ValueError and a RuntimeError (scipy raises RuntimeError)."""


class NdimageTypeError(TypeError, RuntimeError):
    """Argument of the wrong type. Both a TypeError and a RuntimeError."""


# ============================================================================ arguments
def _check_order(order, lo=0):
    if isinstance(order, (bool, np.bool_)) or not isinstance(order, numbers.Integral):
        raise NdimageTypeError(f"order: expected an int spline order {lo}..7, got {order!r}")
    order = int(order)
    if not lo <= order <= 7:
        raise NdimageError(f"order: spline order {order} not supported; expected {lo}..7 "
                           f"(scipy supports {lo}..5, 6 and 7 are an extension)")
    return order


def _check_mode(mode):
    if not isinstance(mode, str) or mode not in _MODES:
        raise NdimageError(f"mode: boundary mode {mode!r} not supported; expected one of "
                           f"{', '.join(repr(m) for m in _MODES)}")
    return mode


def _check_bool(value, argname):
    if not isinstance(value, (bool, np.bool_, int)):
        raise NdimageTypeError(f"{argname}: expected True or False, got {value!r}")
    return bool(value)


def _sequence(value, rank, argname):
    """scipy's _normalize_sequence: a scalar repeated, or a sequence of length `rank`."""
    if not isinstance(value, str) and np.iterable(value):
        out = list(value)
        if len(out) != rank:
            raise NdimageError(f"{argname}: sequence argument must have length equal to input "
                               f"rank ({rank}), got {len(out)}")
        return out
    return [value] * rank


def _floats(values, argname):
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise NdimageTypeError(f"{argname}: expected numbers, got {values!r}") from None


class _Input:
    """The input as a torch tensor (no copy where possible) and how to give results back."""

    def __init__(self, input, argname="input"):
        self.is_torch = isinstance(input, torch.Tensor)
        if self.is_torch:
            self.tensor = input.detach()
            self.np_dtype = None
            self.device = input.device
        else:
            arr = np.asarray(input)
            if arr.dtype.kind not in "biufc":
                raise NdimageTypeError(f"{argname}: expected a numeric array, got dtype "
                                       f"{arr.dtype}")
            self.np_dtype = arr.dtype
            self.tensor = _from_numpy(arr)
            self.device = torch.device("cpu")
        self.shape = tuple(self.tensor.shape)
        self.ndim = len(self.shape)
        self.is_complex = self.tensor.is_complex()

    def compute_dtype(self, out_dtype):
        """float32 when both the data and the output are float32 or narrower, else float64."""
        narrow = (torch.float32, torch.float16, torch.bfloat16, torch.complex64)
        return torch.float32 if (self.tensor.dtype in narrow and out_dtype in narrow) \
            else torch.float64

    def real_parts(self, dtype, cval):
        """[(real tensor in `dtype`, real cval)] for the real part, and the imaginary one."""
        x = self.tensor
        if not self.is_complex:
            if isinstance(cval, complex):
                cval = cval.real
            return [(x.to(dtype), float(cval))]
        cval = complex(cval)
        return [(x.real.to(dtype), cval.real), (x.imag.to(dtype), cval.imag)]


def _from_numpy(arr):
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype == np.float16 or arr.dtype.kind == "b" or arr.dtype in (
            np.float32, np.float64, np.complex64, np.complex128, np.int8, np.uint8, np.int16,
            np.int32, np.int64):
        pass
    elif arr.dtype.kind == "c":
        arr = arr.astype(np.complex128)
    else:  # uint16/32/64, longdouble: computed in float64 anyway
        arr = arr.astype(np.float64)
    if any(s < 0 for s in arr.strides) or any(s % arr.itemsize for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    with warnings.catch_warnings():  # read-only arrays: we never write into the input
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


_TORCH_OF_NP = {np.dtype(k): v for k, v in [
    ("float16", torch.float16), ("float32", torch.float32), ("float64", torch.float64),
    ("complex64", torch.complex64), ("complex128", torch.complex128), ("bool", torch.bool),
    ("int8", torch.int8), ("uint8", torch.uint8), ("int16", torch.int16),
    ("int32", torch.int32), ("int64", torch.int64)]}


def _torch_dtype(np_dtype):
    """The torch dtype that stands for a NumPy dtype in the compute-dtype choice."""
    return _TORCH_OF_NP.get(np.dtype(np_dtype), torch.int64)


class _Output:
    """scipy's `output` argument: None, an array (or tensor) to fill, a dtype or a string."""

    def __init__(self, output, inp, shape):
        shape = tuple(int(s) for s in shape)
        self.shape, self.target, self.is_torch = shape, None, inp.is_torch
        if inp.is_torch:
            self._init_torch(output, inp, shape)
        else:
            self._init_numpy(output, inp, shape)

    def _init_numpy(self, output, inp, shape):
        cplx = inp.is_complex
        if output is None:
            dtype = np.promote_types(inp.np_dtype, np.complex64) if cplx else inp.np_dtype
        elif isinstance(output, (type, np.dtype)):
            dtype = np.dtype(output)
            if cplx and dtype.kind != "c":
                warnings.warn("promoting specified output dtype to complex", stacklevel=4)
                dtype = np.promote_types(dtype, np.complex64)
        elif isinstance(output, str):
            try:
                dtype = np.dtype(output)
            except TypeError:
                raise NdimageTypeError(f"output: {output!r} is not a dtype") from None
            if cplx and dtype.kind != "c":
                raise NdimageError("output: must have a complex dtype for complex input")
            if not issubclass(dtype.type, np.number):
                raise NdimageError(f"output: must have a numeric dtype, got {dtype}")
        elif isinstance(output, np.ndarray):
            if output.shape != shape:
                raise NdimageError(f"output: output shape not correct: expected {shape}, "
                                   f"got {output.shape}")
            if cplx and output.dtype.kind != "c":
                raise NdimageError("output: must have a complex dtype for complex input")
            self.target = output
            dtype = output.dtype
        else:
            raise NdimageTypeError(f"output: expected None, a NumPy array, a dtype or a dtype "
                                   f"string, got {type(output).__name__}")
        if dtype.kind not in "biufc":
            raise NdimageTypeError(f"output: unsupported dtype {dtype}")
        self.np_dtype = dtype
        self.kind = dtype.kind
        self.torch_dtype = _torch_dtype(dtype)

    def _init_torch(self, output, inp, shape):
        x = inp.tensor
        if output is None:
            dtype = x.dtype
        elif isinstance(output, torch.dtype):
            dtype = output
        elif isinstance(output, torch.Tensor):
            if tuple(output.shape) != shape:
                raise NdimageError(f"output: output shape not correct: expected {shape}, "
                                   f"got {tuple(output.shape)}")
            self.target, dtype = output, output.dtype
        elif isinstance(output, (type, np.dtype, str)):
            dtype = _TORCH_OF_NP.get(np.dtype(output))
            if dtype is None:
                raise NdimageTypeError(f"output: dtype {output!r} has no torch equivalent")
        else:
            raise NdimageTypeError(f"output: expected None, a tensor or a dtype, got "
                                   f"{type(output).__name__}")
        if inp.is_complex and not dtype.is_complex:
            raise NdimageError("output: must have a complex dtype for complex input")
        self.torch_dtype = dtype
        self.kind = ("c" if dtype.is_complex else "f" if dtype.is_floating_point
                     else "b" if dtype == torch.bool else "u" if dtype == torch.uint8 else "i")

    def empty(self):
        return math.prod(self.shape) == 0

    def store(self, result):
        """Round / clip / cast a float (or complex) result like scipy, into the target."""
        if self.is_torch:
            out = _cast_torch(result, self.torch_dtype, self.kind)
            if self.target is not None:
                self.target.copy_(out.reshape(self.shape))
                return self.target
            return out.reshape(self.shape)
        res = result.reshape(self.shape)
        res = res.cpu().numpy() if res.device.type != "cpu" else res.numpy()
        out = _cast_numpy(res, self.np_dtype)
        if self.target is not None:
            np.copyto(self.target, out, casting="unsafe")
            return self.target
        return out


def _cast_numpy(res, dtype):
    if dtype.kind in "fc":
        return res if res.dtype == dtype else res.astype(dtype)
    if dtype.kind == "b":  # scipy: (npy_bool)t, a cast to unsigned char (truncation)
        with np.errstate(invalid="ignore"):
            t = np.trunc(np.nan_to_num(res, nan=0.0, posinf=0.0, neginf=0.0))
            return np.asarray(np.fmod(t, 256.0) != 0)
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        if dtype.kind == "u":
            t = np.where(res > 0, res + 0.5, 0.0)
        else:
            t = np.where(res > 0, res + 0.5, res - 0.5)
        t = np.clip(t, float(info.min), float(info.max))
        if dtype.itemsize == 8:  # 2**63 / 2**64 are not representable: saturate exactly
            big = t >= float(info.max)
            return np.asarray(np.where(big, info.max, np.trunc(t).astype(dtype)), dtype=dtype)
        return np.asarray(np.trunc(t).astype(dtype))


def _cast_torch(res, dtype, kind):
    if kind in "fc":
        return res.to(dtype)
    if kind == "b":  # scipy: (npy_bool)t, a cast to unsigned char (truncation)
        t = torch.nan_to_num(res, nan=0.0, posinf=0.0, neginf=0.0).trunc()
        return torch.fmod(t, 256.0) != 0
    info = torch.iinfo(dtype)
    if kind == "u":
        t = torch.where(res > 0, res + 0.5, torch.zeros_like(res))
    else:
        t = torch.where(res > 0, res + 0.5, res - 0.5)
    return t.clamp(float(info.min), float(info.max)).trunc().to(dtype)


def _check_rank(ndim, argname="input"):
    if ndim < 1:
        raise NdimageError(f"{argname}: input and output rank must be > 0")
    if ndim > _MAX_DIM:
        raise NdimageError(f"{argname}: {ndim}-D arrays are not supported (our kernels have "
                           f"at most {_MAX_DIM} spatial dims)")


# ============================================================================ the engine
def _ops():
    from ..ops import pushpull, resize, splinc  # noqa: F401  (load on first use)
    return torch.ops.nitorch_jit


def _coefficients(x, order, mode, cval, prefilter, dim):
    """x [C, *S] -> (what the taps read, npad, whether to run the prefilter).

    The prefilter itself runs in the caller (grid_pull path) or fused in resize."""
    if mode == "grid-constant" and cval != 0:
        x = x - cval
    npad = 0
    run = bool(prefilter) and order > 1
    if run and mode in ("nearest", "grid-constant"):
        npad = _NPAD
        pad = (npad,) * (2 * dim)
        if mode == "nearest":
            x = torch.nn.functional.pad(x[None], pad, mode="replicate")[0]
        else:
            x = torch.nn.functional.pad(x, pad)
    return x, npad, run


def _prefiltered(x, order, mode, cval, prefilter, dim):
    from ..ops.splinc import prefilter as _pf
    x, npad, run = _coefficients(x, order, mode, cval, prefilter, dim)
    if run:
        x = _pf(x, [order] * dim, [_TAPS[mode]] * dim)
    return x, npad


def _wrap_coordinate(c, n):
    """scipy's legacy 'wrap' mapping of a coordinate into [0, n-1], period n-1 (float64)."""
    if n <= 1:
        return torch.where(torch.isfinite(c), torch.zeros_like(c), c)
    sz = float(n - 1)
    lo = c + sz * (torch.trunc(-c / sz) + 1)
    hi = c - sz * torch.trunc(c / sz)
    return torch.where(c < 0, lo, torch.where(c > sz, hi, c))


def _map_coordinate(c, n, mode):
    """scipy's map_coordinate (float64): a coordinate outside [0, n-1] mapped inside by the
    mode. Continuous splines do not need it (the bound folds the taps), but order 0 rounds
    the mapped coordinate, so its ties follow this mapping."""
    if mode == "wrap":
        return _wrap_coordinate(c, n)
    if mode not in ("mirror", "reflect", "grid-mirror", "grid-wrap"):
        return c
    if n <= 1:
        return torch.where(torch.isfinite(c), torch.zeros_like(c), c)
    if mode == "mirror":
        sz2 = float(2 * n - 2)
        lo = sz2 * torch.trunc(-c / sz2) + c
        lo = torch.where(lo <= 1 - n, lo + sz2, -lo)
        hi = c - sz2 * torch.trunc(c / sz2)
        hi = torch.where(hi >= n, sz2 - hi, hi)
    elif mode == "grid-wrap":
        lo = c + n * (torch.trunc((-1 - c) / n) + 1)
        hi = c - n * torch.trunc(c / n)
    else:
        sz2 = float(2 * n)
        lo = torch.where(c < -sz2, sz2 * torch.trunc(-c / sz2) + c, c)
        lo = torch.where(lo < -n, lo + sz2,
                         torch.where(lo > -1e-15, torch.full_like(lo, 1e-15), -lo) - 1)
        hi = c - sz2 * torch.trunc(c / sz2)
        hi = torch.where(hi >= n, sz2 - hi - 1, hi)
    return torch.where(c < 0, lo, torch.where(c > n - 1, hi, c))


def _pull(x, grid, order, mode, cval, prefilter):
    """Sample x [C, *S] (D = len(S) spatial dims, float) at grid [*P, D] (voxel coordinates,
    any float dtype, computed by the caller in float64 where scipy does). Returns [C, *P]."""
    dim = x.dim() - 1
    coef, npad = _prefiltered(x, order, mode, cval, prefilter, dim)
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
    elif not bool(torch.isfinite(g).all()):
        bad = ~torch.isfinite(g).all(-1)
    if mode == "wrap" or (order == 0 and mode in ("mirror", "reflect", "grid-mirror",
                                                   "grid-wrap")):
        g = torch.stack([_map_coordinate(g[:, d].double(), coef.shape[1 + d], mode)
                         for d in range(dim)], -1)
    if npad:
        g = g + npad
    g = g.to(coef.dtype)
    npts = g.shape[0]
    # the points as one row along the last point dim: the kernels' vector paths take rows
    g = g.reshape((1,) * (dim - 1) + (npts, dim))
    from ..ops.pushpull import grid_pull
    # 'constant' overwrites every point outside [0, n - 1] below: the kernels may skip them
    # (extrapolate off zeroes points beyond a small tolerance, and computes the rest as before)
    out = grid_pull(coef, g, interpolation=order, bound=BoundType(_TAPS[mode]),
                    extrapolate=mode != "constant")
    out = out.reshape((x.shape[0], npts))
    if mode == "grid-constant" and cval != 0:
        out = out + cval
    if bad is not None:  # out is a new tensor of ours: fill in place
        out.masked_fill_(bad, cval)
    return out.reshape((x.shape[0],) + pshape)


def _pull_affine(x, matrix, offset, oshape, order, mode, cval, prefilter):
    """_pull at the coordinates ``matrix @ o + offset`` of the output voxels o of `oshape`,
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
    coef, npad = _prefiltered(x, order, mode, cval, prefilter, dim)
    A = np.concatenate([mat, (off + npad)[:, None]], 1)
    from ..ops.affine import affine_pull
    out = affine_pull(coef, torch.from_numpy(A).to(coef.device), list(oshape),
                      interpolation=order, bound=BoundType(_TAPS[mode]),
                      extrapolate=mode != "constant")  # as in _pull
    if mode == "grid-constant" and cval != 0:
        out = out + cval
    if mode == "constant":  # cval outside [0, n-1]
        lo, hi = _inside_intervals(mat, off, oshape, x.shape[1:])
        idx = _outside_indices(lo, hi, oshape[-1])
        if idx.size:
            out.view(out.shape[0], -1).index_fill_(1, torch.from_numpy(idx).to(out.device), cval)
    return out


def _outside_indices(lo, hi, m):
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


def _inside_intervals(mat, off, oshape, ishape):
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
    coef, npad, run = _coefficients(x, order, mode, cval, prefilter, dim)
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
            mapped = _map_coordinate(torch.from_numpy(cc), n, mode).numpy()
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
        from ..ops.resize import _run
        out = _run(_ops().resize, coef, list(out_shape), scales, offs, [order] * dim,
                   [_TAPS[mode]] * dim, run)
    else:  # legacy 'wrap' leaving [0, n-1] (or non-finite): one point per output voxel
        from ..ops.splinc import prefilter as _pf
        if run:
            coef = _pf(coef, [order] * dim, [_TAPS[mode]] * dim)
        axes = [torch.from_numpy(np.where(np.isfinite(c), c, 0.0)) for c in coords]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).to(coef.dtype)
        from ..ops.pushpull import grid_pull
        out = grid_pull(coef, grid, interpolation=order, bound=BoundType(_TAPS[mode]),
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


def _run_parts(inp, out, cval, fn):
    """Compute fn(real tensor [1, *S], real cval) -> [1, *out] per real part, and store."""
    if out.empty():
        return out.store(torch.zeros(out.shape, dtype=torch.float64))
    dtype = inp.compute_dtype(out.torch_dtype)
    parts = [fn(x[None], c)[0] for x, c in inp.real_parts(dtype, cval)]
    res = parts[0] if len(parts) == 1 else torch.complex(parts[0], parts[1])
    return out.store(_unaliased(res, inp))


def _unaliased(res, inp):
    """A result that may share memory with the input (identity cases) is copied."""
    if res.untyped_storage().data_ptr() == inp.tensor.untyped_storage().data_ptr():
        return res.clone()
    return res


def _check_cval(cval):
    if isinstance(cval, torch.Tensor):
        cval = cval.item()
    if isinstance(cval, np.ndarray) and cval.ndim == 0:
        cval = cval.item()
    if not isinstance(cval, numbers.Number) or isinstance(cval, bool):
        raise NdimageTypeError(f"cval: expected a number, got {cval!r}")
    return complex(cval) if isinstance(cval, complex) or np.iscomplexobj(cval) else float(cval)


# ============================================================================ public API
# The parameters every sampling function shares, written once in their docstrings.
_SAMPLING_PARAMS = """    output : ndarray or dtype, optional
        The array in which to place the output, or the dtype of the returned array.
    order : int, optional
        The order of the spline interpolation, 0 to 5 (6, 7 as an extension). Default 3.
    mode : {'reflect', 'grid-mirror', 'constant', 'grid-constant', 'nearest', 'mirror', \
'grid-wrap', 'wrap'}, optional
        How the input is extended beyond its boundaries. Default 'constant'.
    cval : scalar, optional
        Value used outside the input in the 'constant' and 'grid-constant' modes. Default 0.
    prefilter : bool, optional
        Whether to spline-filter the input first. Default True.
"""


def _sampling_doc(fn):
    """Put the shared sampling parameters where the docstring says <sampling parameters>."""
    fn.__doc__ = fn.__doc__.replace("    <sampling parameters>\n", _SAMPLING_PARAMS)
    return fn


def spline_filter1d(input, order=3, axis=-1, output=np.float64, mode="mirror"):
    """Calculate a 1-D spline filter along the given axis.

    The lines of the array along the given axis are filtered by a spline filter (the
    interpolating B-spline coefficients, exact on any length). Same as
    ``scipy.ndimage.spline_filter1d``.

    Parameters
    ----------
    input : array_like
        The input array (any rank, real or complex).
    order : int, optional
        The order of the spline, 0 to 5 (6 and 7 as an extension). Default 3. Orders 0 and 1
        copy the input.
    axis : int, optional
        The axis along which the spline filter is applied. Default is the last axis.
    output : ndarray or dtype, optional
        The array in which to place the output, or the dtype of the returned array.
        Default is ``numpy.float64``.
    mode : {'reflect', 'grid-mirror', 'constant', 'grid-constant', 'nearest', 'mirror', \
'grid-wrap', 'wrap'}, optional
        How the input is extended beyond its boundaries (see the module docstring). Default
        'mirror'.

    Returns
    -------
    spline_filter1d : ndarray
        The filtered array (the `output` array when one is given).

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> c = ndimage.spline_filter1d(np.array([0., 1., 0., 0.]), order=3)
    >>> np.round(c, 3)
    array([-0.933,  1.867, -0.533,  0.267])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    inp = _Input(input)
    if inp.ndim < 1:
        return _Output(output, inp, inp.shape).store(inp.tensor.to(torch.float64)
                                                      if not inp.is_complex else inp.tensor)
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise NdimageTypeError(f"axis: expected an int, got {axis!r}")
    if not -inp.ndim <= axis < inp.ndim:
        raise NdimageError(f"axis: {axis} is out of bounds for a {inp.ndim}-D input")
    axis = int(axis) % inp.ndim
    out = _Output(output, inp, inp.shape)
    return _filter(inp, out, order, mode, [axis])


def _filter(inp, out, order, mode, axes):
    if out.empty():
        return out.store(torch.zeros(out.shape, dtype=torch.float64))
    dtype = inp.compute_dtype(out.torch_dtype)
    res = []
    for x, _ in inp.real_parts(dtype, 0.0):
        if order > 1 and axes:
            from ..ops.splinc import _run
            _ops()
            x = _run(x, [order] * len(axes), [_FILTER[mode]] * len(axes), axes, False,
                     inplace=False)
        res.append(x)
    return out.store(_unaliased(res[0] if len(res) == 1 else torch.complex(res[0], res[1]),
                                inp))


def spline_filter(input, order=3, output=np.float64, mode="mirror"):
    """Multidimensional spline filter.

    Interpolating B-spline coefficients of `input` along every axis (exact on any length).
    Same as ``scipy.ndimage.spline_filter``.

    Parameters
    ----------
    input : array_like
        The input array (any rank, real or complex).
    order : int, optional
        The order of the spline, 2 to 5 (6 and 7 as an extension). Default 3.
    output : ndarray or dtype, optional
        The array in which to place the output, or the dtype of the returned array.
        Default is ``numpy.float64``.
    mode : {'reflect', 'grid-mirror', 'constant', 'grid-constant', 'nearest', 'mirror', \
'grid-wrap', 'wrap'}, optional
        How the input is extended beyond its boundaries. Default 'mirror'.

    Returns
    -------
    spline_filter : ndarray
        The filtered array (the `output` array when one is given).

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> x = np.full((4, 4), 2.0)
    >>> np.allclose(ndimage.spline_filter(x), x)   # a constant is its own spline
    True
    """
    order = _check_order(order, lo=2)
    mode = _check_mode(mode)
    inp = _Input(input)
    out = _Output(output, inp, inp.shape)
    return _filter(inp, out, order, mode, list(range(inp.ndim)))


def map_coordinates(input, coordinates, output=None, order=3, mode="constant", cval=0.0,
                    prefilter=True):
    """Map the input array to new coordinates by interpolation.

    The value of the output at each point is the spline interpolation (of the requested
    order) of `input` at the input coordinates ``coordinates[:, point]``. Same as
    ``scipy.ndimage.map_coordinates``.

    Parameters
    ----------
    input : array_like
        The input array, 1 to 3 dims (real or complex).
    coordinates : array_like
        The coordinates at which `input` is evaluated: shape ``(input.ndim, *out_shape)``.
    output : ndarray or dtype, optional
        The array in which to place the output, or the dtype of the returned array. By
        default an array of the same dtype as `input` is created.
    order : int, optional
        The order of the spline interpolation, 0 to 5 (6, 7 as an extension). Default 3.
    mode : {'reflect', 'grid-mirror', 'constant', 'grid-constant', 'nearest', 'mirror', \
'grid-wrap', 'wrap'}, optional
        How the input is extended beyond its boundaries. Default 'constant'.
    cval : scalar, optional
        Value used outside the input in the 'constant' and 'grid-constant' modes. Default 0.
    prefilter : bool, optional
        Whether to spline-filter the input first (interpolate the samples); with False the
        input is taken as spline coefficients. Default True.

    Returns
    -------
    map_coordinates : ndarray
        The result of transforming the input, of shape ``coordinates.shape[1:]``.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> a = np.arange(12.).reshape((4, 3))
    >>> ndimage.map_coordinates(a, [[0.5, 2], [0.5, 1]], order=1)
    array([2., 7.])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    inp = _Input(input)
    if isinstance(coordinates, torch.Tensor):
        coords = coordinates.detach()
    else:
        coords = np.asarray(coordinates)
        if coords.dtype.kind not in "biuf":
            raise NdimageTypeError(f"coordinates: expected a real numeric array, got dtype "
                                   f"{coords.dtype}")
        coords = _from_numpy(coords)
    if coords.is_complex():
        raise NdimageTypeError("coordinates: complex type not supported")
    if coords.dim() < 2:
        raise NdimageError(f"coordinates: input and output rank must be > 0 (coordinates of "
                           f"shape (input.ndim, *out_shape) expected, got "
                           f"{tuple(coords.shape)})")
    if inp.ndim < 1:
        raise NdimageError("input: input and output rank must be > 0")
    if coords.shape[0] != inp.ndim:
        raise NdimageError(f"coordinates: invalid shape for coordinate array: "
                           f"{tuple(coords.shape)}, the first dim must be input.ndim = "
                           f"{inp.ndim}")
    _check_rank(inp.ndim)
    out = _Output(output, inp, coords.shape[1:])

    def fn(x, c):
        g = coords.to(x.device)
        if not g.is_floating_point():
            g = g.double()
        g = g.movedim(0, -1)  # [*out, D], a view
        return _pull(x, g, order, mode, c, prefilter)
    return _run_parts(inp, out, cval, fn)


def _output_shape_arg(output_shape, output, inp):
    if output_shape is None:
        if isinstance(output, (np.ndarray, torch.Tensor)):
            return tuple(output.shape)
        return inp.shape
    try:
        return tuple(int(s) for s in output_shape)
    except (TypeError, ValueError):
        raise NdimageTypeError(f"output_shape: expected a tuple of ints, got "
                               f"{output_shape!r}") from None


@_sampling_doc
def affine_transform(input, matrix, offset=0.0, output_shape=None, output=None, order=3,
                     mode="constant", cval=0.0, prefilter=True):
    """Apply an affine transformation.

    The output at output index ``o`` is the spline interpolation of `input` at
    ``np.dot(matrix, o) + offset`` (pull / backward resampling). Same as
    ``scipy.ndimage.affine_transform``.

    Parameters
    ----------
    input : array_like
        The input array, 1 to 3 dims (real or complex).
    matrix : ndarray
        The inverse coordinate transformation matrix, mapping output coordinates to input
        coordinates. For an ``ndim``-D input: ``(ndim, ndim)`` linear part (or
        ``(ndim, out_ndim)``); ``(ndim + 1, ndim + 1)`` homogeneous (bottom row
        ``[0, ..., 0, 1]``; `offset` is then ignored); ``(ndim, ndim + 1)`` (the last column is
        the offset); ``(ndim,)`` a diagonal (separable, faster).
    offset : float or sequence, optional
        The offset into the array where the transform is applied. Default 0.
    output_shape : tuple of ints, optional
        Shape of the output. Default: the shape of `output` when it is an array, else the
        input's shape.
    <sampling parameters>

    Returns
    -------
    affine_transform : ndarray
        The transformed input.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> a = np.arange(9.).reshape(3, 3)
    >>> ndimage.affine_transform(a, [[0, 1], [1, 0]], order=1)   # transpose
    array([[0., 3., 6.],
           [1., 4., 7.],
           [2., 5., 8.]])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    inp = _Input(input)
    oshape = _output_shape_arg(output_shape, output, inp)
    if inp.ndim < 1 or len(oshape) < 1:
        raise NdimageError("input: input and output rank must be > 0")
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().numpy()
    try:
        matrix = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise NdimageTypeError(f"matrix: expected a real array, got {matrix!r}") from None
    if matrix.ndim not in (1, 2) or matrix.shape[0] < 1:
        raise NdimageError(f"matrix: no proper affine matrix provided (shape {matrix.shape})")
    nd = inp.ndim
    if matrix.ndim == 2 and matrix.shape[1] == nd + 1 and matrix.shape[0] in (nd, nd + 1):
        if matrix.shape[0] == nd + 1:
            expected = [0] * nd + [1]
            if not np.all(matrix[nd] == expected):
                raise NdimageError(f"matrix: expected a homogeneous transformation matrix "
                                   f"with shape {matrix.shape} for image shape {inp.shape}, "
                                   f"but bottom row was not equal to {expected}")
        offset = matrix[:nd, nd]
        matrix = matrix[:nd, :nd]
    if matrix.shape[0] != nd:
        raise NdimageError(f"matrix: affine matrix has wrong number of rows ({matrix.shape[0]}"
                           f" for a {nd}-D input)")
    if matrix.ndim == 2 and matrix.shape[1] != len(oshape):
        raise NdimageError(f"matrix: affine matrix has wrong number of columns "
                           f"({matrix.shape[1]} for a {len(oshape)}-D output)")
    if isinstance(offset, torch.Tensor):
        offset = offset.detach().cpu().numpy()
    offset = np.asarray(_floats(_sequence(offset, nd, "offset"), "offset"), dtype=np.float64)
    out = _Output(output, inp, oshape)
    if matrix.ndim == 1:
        if len(oshape) != nd:
            raise NdimageError(f"output_shape: {oshape} must have {nd} dims for a diagonal "
                               f"matrix")
        with np.errstate(divide="ignore", invalid="ignore"):
            shifts = offset / matrix
        return _separable(inp, out, oshape, list(matrix), list(shifts), order, mode, cval,
                          prefilter, False)
    _check_rank(nd)

    def fn(x, c):
        out = _pull_affine(x, matrix, offset, oshape, order, mode, c, prefilter)
        if out is None:  # float32 data: coordinates in float32 too (half the memory traffic)
            out = _pull(x, _affine_grid(matrix, offset, oshape, x.device, x.dtype), order,
                        mode, c, prefilter)
        return out
    return _run_parts(inp, out, cval, fn)


def _affine_grid(matrix, offset, oshape, device, dtype=torch.float64):
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


def _separable(inp, out, oshape, zooms, shifts, order, mode, cval, prefilter, grid_mode):
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
    _check_rank(len(moving))
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
    return _run_parts(inp, out, cval, fn)


@_sampling_doc
def shift(input, shift, output=None, order=3, mode="constant", cval=0.0, prefilter=True):
    """Shift an array.

    The output at index ``o`` is the spline interpolation of `input` at ``o - shift``. Same
    as ``scipy.ndimage.shift``.

    Parameters
    ----------
    input : array_like
        The input array (real or complex; at most 3 axes with a non-zero shift).
    shift : float or sequence
        The shift along the axes; a single number applies to every axis.
    <sampling parameters>

    Returns
    -------
    shift : ndarray
        The shifted input.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> ndimage.shift(np.array([1., 2., 3., 4.]), 1, order=1)
    array([0., 1., 2., 3.])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    inp = _Input(input)
    if inp.ndim < 1:
        raise NdimageError("input: input and output rank must be > 0")
    if isinstance(shift, torch.Tensor):
        shift = shift.detach().cpu().numpy()
    shifts = [-s for s in _floats(_sequence(shift, inp.ndim, "shift"), "shift")]
    out = _Output(output, inp, inp.shape)
    return _separable(inp, out, inp.shape, None, shifts, order, mode, cval, prefilter, False)


@_sampling_doc
def zoom(input, zoom, output=None, order=3, mode="constant", cval=0.0, prefilter=True, *,
         grid_mode=False):
    """Zoom an array.

    The array is resampled with spline interpolation of the requested order onto
    ``round(input.shape * zoom)`` samples. Same as ``scipy.ndimage.zoom``.

    Parameters
    ----------
    input : array_like
        The input array (real or complex; at most 3 axes that change).
    zoom : float or sequence
        The zoom factor along the axes; a single number applies to every axis.
    <sampling parameters>
    grid_mode : bool, optional
        False (default): the centres of the first and last samples are aligned. True: the
        outer edges of the first and last samples are aligned (pixel-grid zoom; use the
        'grid-*' modes with it).

    Returns
    -------
    zoom : ndarray
        The zoomed input.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> ndimage.zoom(np.array([0., 1., 2.]), 5 / 3, order=1)
    array([0. , 0.5, 1. , 1.5, 2. ])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    grid_mode = _check_bool(grid_mode, "grid_mode")
    inp = _Input(input)
    if inp.ndim < 1:
        raise NdimageError("input: input and output rank must be > 0")
    if isinstance(zoom, torch.Tensor):
        zoom = zoom.detach().cpu().numpy()
    zooms = _floats(_sequence(zoom, inp.ndim, "zoom"), "zoom")
    oshape = tuple(int(round(n * z)) for n, z in zip(inp.shape, zooms))
    out = _Output(output, inp, oshape)
    if all(z == 1 for z in zooms) and prefilter:
        return out.store(_unaliased(inp.tensor, inp))
    if grid_mode and mode in ("constant", "wrap"):
        suggest = "grid-constant" if mode == "constant" else "grid-wrap"
        warnings.warn(f"It is recommended to use mode = {suggest} instead of {mode} when "
                      f"grid_mode is True.", stacklevel=2)
    factors = []
    for n, m in zip(inp.shape, oshape):
        num, div = (n, m) if grid_mode else (n - 1, m - 1)
        factors.append(num / div if div != 0 else 1.0)
    return _separable(inp, out, oshape, factors, None, order, mode, cval, prefilter, grid_mode)


def _cosdg_sindg(angle):
    try:
        from scipy import special
        return float(special.cosdg(angle)), float(special.sindg(angle))
    except ImportError:
        a = math.fmod(float(angle), 360.0)
        exact = {0.0: (1.0, 0.0), 90.0: (0.0, 1.0), 180.0: (-1.0, 0.0), 270.0: (0.0, -1.0)}
        key = a % 360.0
        if key in exact:
            return exact[key]
        r = math.radians(a)
        return math.cos(r), math.sin(r)


@_sampling_doc
def rotate(input, angle, axes=(1, 0), reshape=True, output=None, order=3, mode="constant",
           cval=0.0, prefilter=True):
    """Rotate an array.

    The array is rotated by `angle` degrees in the plane of the two `axes`, about the centre
    of that plane, with spline interpolation. Every plane is rotated the same way (any rank).
    Same as ``scipy.ndimage.rotate``.

    Parameters
    ----------
    input : array_like
        The input array, at least 2-D (real or complex).
    angle : float
        The rotation angle in degrees.
    axes : tuple of 2 ints, optional
        The two axes that define the plane of rotation. Default (1, 0).
    reshape : bool, optional
        If True (default), the output shape is adapted so that the whole rotated input fits.
    <sampling parameters>

    Returns
    -------
    rotate : ndarray
        The rotated input.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> np.round(ndimage.rotate(np.arange(6.).reshape(2, 3), 90), 12) + 0.0
    array([[2., 5.],
           [1., 4.],
           [0., 3.]])
    """
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    reshape = _check_bool(reshape, "reshape")
    inp = _Input(input)
    nd = inp.ndim
    if nd < 2:
        raise NdimageError("input: input array should be at least 2D")
    axes = list(axes)
    if len(axes) != 2:
        raise NdimageError("axes: should contain exactly two values")
    if not all(float(ax).is_integer() for ax in axes):
        raise NdimageError("axes: should contain only integer values")
    axes = [int(ax) + nd if ax < 0 else int(ax) for ax in axes]
    if any(ax < 0 or ax >= nd for ax in axes):
        raise NdimageError(f"axes: invalid rotation plane specified: {axes} for {nd}-D input")
    axes.sort()
    c, s = _cosdg_sindg(angle)
    rot = np.array([[c, s], [-s, c]])
    img_shape = np.asarray(inp.shape)
    in_plane = img_shape[axes]
    if reshape:
        iy, ix = in_plane
        bounds = rot @ [[0, 0, iy, iy], [0, ix, 0, ix]]
        out_plane = (np.ptp(bounds, axis=1) + 0.5).astype(int)
    else:
        out_plane = img_shape[axes]
    out_center = rot @ ((out_plane - 1) / 2)
    in_center = (in_plane - 1) / 2
    offset = in_center - out_center
    oshape = img_shape.copy()
    oshape[axes] = out_plane
    oshape = tuple(int(v) for v in oshape)
    out = _Output(output, inp, oshape)
    others = [d for d in range(nd) if d not in axes]
    perm = others + axes

    def fn(x, cv):
        y = x[0].permute(perm)
        kshape = tuple(y.shape[:nd - 2])
        y = y.reshape((-1,) + tuple(y.shape[nd - 2:]))
        plane = tuple(int(v) for v in out_plane)
        r = _pull_affine(y, rot, offset, plane, order, mode, cv, prefilter)
        if r is None:
            r = _pull(y, _affine_grid(rot, offset, plane, y.device), order, mode, cv, prefilter)
        r = r.reshape(kshape + tuple(int(v) for v in out_plane))
        return r.permute([perm.index(d) for d in range(nd)])[None]
    return _run_parts(inp, out, cval, fn)


@_sampling_doc
def geometric_transform(input, mapping, output_shape=None, output=None, order=3,
                        mode="constant", cval=0.0, prefilter=True, extra_arguments=(),
                        extra_keywords=None):
    """Apply an arbitrary geometric transform.

    For each output index ``o`` (in C order), ``mapping(o, *extra_arguments,
    **extra_keywords)`` is called with the index as a tuple of ints and returns the input
    coordinates (a sequence of ``input.ndim`` numbers), where `input` is then interpolated
    by our kernels. Same as ``scipy.ndimage.geometric_transform`` (the Python calls cost as
    much as in scipy; use ``map_coordinates`` with precomputed coordinates for speed).

    Parameters
    ----------
    input : array_like
        The input array, 1 to 3 dims (real or complex).
    mapping : callable
        ``mapping(output_index_tuple, *extra_arguments, **extra_keywords)`` -> input
        coordinates. scipy's ``LowLevelCallable`` is not supported (TypeError).
    output_shape : tuple of ints, optional
        Shape of the output. Default: the input's shape.
    <sampling parameters>
    extra_arguments : tuple, optional
        Extra positional arguments passed to `mapping`.
    extra_keywords : dict, optional
        Extra keyword arguments passed to `mapping`.

    Returns
    -------
    geometric_transform : ndarray
        The transformed input.

    Examples
    --------
    >>> import numpy as np
    >>> from nitorch_jit import ndimage
    >>> a = np.arange(12.).reshape((4, 3))
    >>> ndimage.geometric_transform(a, lambda o: (o[0] - 0.5, o[1] - 0.5), order=1)
    array([[0., 0., 0.],
           [0., 2., 3.],
           [0., 5., 6.],
           [0., 8., 9.]])
    """
    if extra_keywords is None:
        extra_keywords = {}
    order = _check_order(order)
    mode = _check_mode(mode)
    cval = _check_cval(cval)
    prefilter = _check_bool(prefilter, "prefilter")
    if not callable(mapping):
        raise NdimageTypeError(f"mapping: expected a Python callable, got "
                               f"{type(mapping).__name__} (scipy's LowLevelCallable is not "
                               f"supported)")
    if not isinstance(extra_arguments, tuple):
        raise NdimageTypeError("extra_arguments: must be a tuple")
    if not isinstance(extra_keywords, dict):
        raise NdimageTypeError("extra_keywords: must be a dictionary")
    inp = _Input(input)
    oshape = inp.shape if output_shape is None else _output_shape_arg(output_shape, None, inp)
    if inp.ndim < 1 or len(oshape) < 1:
        raise NdimageError("input: input and output rank must be > 0")
    _check_rank(inp.ndim)
    out = _Output(output, inp, oshape)
    nd = inp.ndim
    grid = np.empty(tuple(oshape) + (nd,), dtype=np.float64)
    flat = grid.reshape(-1, nd)
    for k, idx in enumerate(np.ndindex(*oshape)):
        res = mapping(idx, *extra_arguments, **extra_keywords)
        try:
            n = len(res)
        except TypeError:
            raise NdimageTypeError(f"mapping: must return a sequence of {nd} coordinates, "
                                   f"got {res!r}") from None
        if n != nd:
            raise NdimageError(f"mapping: must return a sequence of {nd} coordinates, got "
                               f"{n}")
        flat[k] = res
    gt = torch.from_numpy(grid)

    def fn(x, c):
        return _pull(x, gt.to(x.device), order, mode, c, prefilter)
    return _run_parts(inp, out, cval, fn)
