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

Inside ``torch.compile`` (NumPy code traced by dynamo, on the CPU or under
``with torch.device("cuda")``) every function traces with ``fullgraph=True``: the arguments are
checked and the result's shape and dtype found at trace time, and our kernels run inside the
graph. Arrays of other DLPack libraries (anything with ``__dlpack__``) are accepted eagerly and
come back as that library's arrays. README.md ("scipy.ndimage front end") has the rules.
"""
import math
import numbers
import warnings

import numpy as np
import torch

from ..ops.docfill import docfill, register
from . import _arrays, _engine, _modes, _routes
from ._arrays import NdimageError, NdimageTypeError

# This module checks the arguments and runs each function's pipeline; _modes holds scipy's
# mode tables (mode -> kernel bound code), _arrays the input / output arrays and their dtype
# casts (and the errors), _engine the calls into the kernels.

__all__ = ["affine_transform", "geometric_transform", "map_coordinates", "rotate", "shift",
           "spline_filter", "spline_filter1d", "zoom"]

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
    if not isinstance(mode, str) or mode not in _modes.MODES:
        raise NdimageError(f"mode: boundary mode {mode!r} not supported; expected one of "
                           f"{', '.join(repr(m) for m in _modes.MODES)}")
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


def _check_cval(cval):
    if isinstance(cval, torch.Tensor):
        cval = cval.item()
    if isinstance(cval, np.ndarray) and cval.ndim == 0:
        cval = cval.item()
    if not isinstance(cval, numbers.Number) or isinstance(cval, bool):
        raise NdimageTypeError(f"cval: expected a number, got {cval!r}")
    return complex(cval) if isinstance(cval, complex) or np.iscomplexobj(cval) else float(cval)


def _check_sampling(order, mode, cval, prefilter):
    """The checked arguments every sampling function takes: (order, mode, cval,
    prefilter)."""
    return _check_order(order), _check_mode(mode), _check_cval(cval), \
        _check_bool(prefilter, "prefilter")


def _per_axis(value, rank, argname):
    """One float per axis from a number or a sequence (an array or tensor read on the
    host), as scipy reads `shift`, `zoom` and `offset`."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return _floats(_sequence(value, rank, argname), argname)


# ============================================================================ public API
# The parameters every sampling function shares, written once in their docstrings.
register(sampled_input="""\
input : array_like
    The input array, 1 to 3 dims (real or complex).""", sampling_parameters="""\
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
    input is taken as spline coefficients. Default True.""")

# ... and those of the two spline filters
register(filter_parameters="""\
output : ndarray or dtype, optional
    The array in which to place the output, or the dtype of the returned array.
    Default is ``numpy.float64``.
mode : {'reflect', 'grid-mirror', 'constant', 'grid-constant', 'nearest', 'mirror', \
'grid-wrap', 'wrap'}, optional
    How the input is extended beyond its boundaries (see the module docstring). Default
    'mirror'.""")


@_routes.entry
@docfill
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
    %(filter_parameters)s

    Returns
    -------
    spline_filter1d : ndarray
        The array filtered along `axis` (the `output` array when one is given).

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
    inp = _arrays.Input(input)
    if inp.ndim < 1:
        out = _arrays.Output(output, inp, inp.shape)
        return out.store(inp.tensor.to(torch.float64) if not inp.is_complex else inp.tensor)
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise NdimageTypeError(f"axis: expected an int, got {axis!r}")
    if not -inp.ndim <= axis < inp.ndim:
        raise NdimageError(f"axis: {axis} is out of bounds for a {inp.ndim}-D input")
    axis = int(axis) % inp.ndim
    out = _arrays.Output(output, inp, inp.shape)
    return _engine.filter_axes(inp, out, order, mode, [axis])


@_routes.entry
@docfill
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
    %(filter_parameters)s

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
    inp = _arrays.Input(input)
    out = _arrays.Output(output, inp, inp.shape)
    return _engine.filter_axes(inp, out, order, mode, list(range(inp.ndim)))


@_routes.entry
@docfill
def map_coordinates(input, coordinates, output=None, order=3, mode="constant", cval=0.0,
                    prefilter=True):
    """Map the input array to new coordinates by interpolation.

    The value of the output at each point is the spline interpolation (of the requested
    order) of `input` at the input coordinates ``coordinates[:, point]``. Same as
    ``scipy.ndimage.map_coordinates``.

    Parameters
    ----------
    %(sampled_input)s
    coordinates : array_like
        The coordinates at which `input` is evaluated: shape ``(input.ndim, *out_shape)``.
    %(sampling_parameters)s

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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    inp = _arrays.Input(input)
    if isinstance(coordinates, torch.Tensor):
        coords = coordinates.detach()
    else:
        coords = np.asarray(coordinates)
        if coords.dtype.kind not in "biuf":
            raise NdimageTypeError(f"coordinates: expected a real numeric array, got dtype "
                                   f"{coords.dtype}")
        coords = _arrays.from_numpy(coords)
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
    _engine.check_rank(inp.ndim)
    out = _arrays.Output(output, inp, coords.shape[1:])

    def fn(x, c):
        g = coords.to(x.device)
        if not g.is_floating_point():
            g = g.double()
        g = g.movedim(0, -1)  # [*out, D], a view
        return _engine.pull(x, g, order, mode, c, prefilter)
    return _engine.run_parts(inp, out, cval, fn)


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


@_routes.entry
@docfill
def affine_transform(input, matrix, offset=0.0, output_shape=None, output=None, order=3,
                     mode="constant", cval=0.0, prefilter=True):
    """Apply an affine transformation.

    The output at output index ``o`` is the spline interpolation of `input` at
    ``np.dot(matrix, o) + offset`` (pull / backward resampling). Same as
    ``scipy.ndimage.affine_transform``.

    Parameters
    ----------
    %(sampled_input)s
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
    %(sampling_parameters)s

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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    inp = _arrays.Input(input)
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
    offset = np.asarray(_per_axis(offset, nd, "offset"), dtype=np.float64)
    out = _arrays.Output(output, inp, oshape)
    if matrix.ndim == 1:
        if len(oshape) != nd:
            raise NdimageError(f"output_shape: {oshape} must have {nd} dims for a diagonal "
                               f"matrix")
        with np.errstate(divide="ignore", invalid="ignore"):
            shifts = offset / matrix
        return _engine.separable(inp, out, oshape, list(matrix), list(shifts), order, mode,
                                 cval, prefilter, False)
    _engine.check_rank(nd)

    def fn(x, c):
        out = _engine.pull_affine(x, matrix, offset, oshape, order, mode, c, prefilter)
        if out is None:  # float32 data: coordinates in float32 too (half the memory traffic)
            grid = _engine.affine_grid(matrix, offset, oshape, x.device, x.dtype)
            out = _engine.pull(x, grid, order, mode, c, prefilter)
        return out
    return _engine.run_parts(inp, out, cval, fn)


@_routes.entry
@docfill
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
    %(sampling_parameters)s

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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    inp = _arrays.Input(input)
    if inp.ndim < 1:
        raise NdimageError("input: input and output rank must be > 0")
    shifts = [-s for s in _per_axis(shift, inp.ndim, "shift")]
    out = _arrays.Output(output, inp, inp.shape)
    return _engine.separable(inp, out, inp.shape, None, shifts, order, mode, cval, prefilter,
                             False)


@_routes.entry
@docfill
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
    %(sampling_parameters)s
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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    grid_mode = _check_bool(grid_mode, "grid_mode")
    inp = _arrays.Input(input)
    if inp.ndim < 1:
        raise NdimageError("input: input and output rank must be > 0")
    zooms = _per_axis(zoom, inp.ndim, "zoom")
    oshape = tuple(int(round(n * z)) for n, z in zip(inp.shape, zooms))
    out = _arrays.Output(output, inp, oshape)
    if all(z == 1 for z in zooms) and prefilter:
        return out.store(_arrays.unaliased(inp.tensor, inp))
    if grid_mode and mode in ("constant", "wrap"):
        suggest = "grid-constant" if mode == "constant" else "grid-wrap"
        warnings.warn(f"It is recommended to use mode = {suggest} instead of {mode} when "
                      f"grid_mode is True.", stacklevel=2)
    factors = []
    for n, m in zip(inp.shape, oshape):
        num, div = (n, m) if grid_mode else (n - 1, m - 1)
        factors.append(num / div if div != 0 else 1.0)
    return _engine.separable(inp, out, oshape, factors, None, order, mode, cval, prefilter,
                             grid_mode)


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


@_routes.entry
@docfill
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
    %(sampling_parameters)s

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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    reshape = _check_bool(reshape, "reshape")
    inp = _arrays.Input(input)
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
    out = _arrays.Output(output, inp, oshape)
    others = [d for d in range(nd) if d not in axes]
    perm = others + axes

    def fn(x, cv):
        y = x[0].permute(perm)
        kshape = tuple(y.shape[:nd - 2])
        y = y.reshape((-1,) + tuple(y.shape[nd - 2:]))
        plane = tuple(int(v) for v in out_plane)
        r = _engine.pull_affine(y, rot, offset, plane, order, mode, cv, prefilter)
        if r is None:
            grid = _engine.affine_grid(rot, offset, plane, y.device)
            r = _engine.pull(y, grid, order, mode, cv, prefilter)
        r = r.reshape(kshape + tuple(int(v) for v in out_plane))
        return r.permute([perm.index(d) for d in range(nd)])[None]
    return _engine.run_parts(inp, out, cval, fn)


@_routes.entry
@docfill
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
    %(sampled_input)s
    mapping : callable
        ``mapping(output_index_tuple, *extra_arguments, **extra_keywords)`` -> input
        coordinates. scipy's ``LowLevelCallable`` is not supported (TypeError).
    output_shape : tuple of ints, optional
        Shape of the output. Default: the input's shape.
    %(sampling_parameters)s
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
    order, mode, cval, prefilter = _check_sampling(order, mode, cval, prefilter)
    if not callable(mapping):
        raise NdimageTypeError(f"mapping: expected a Python callable, got "
                               f"{type(mapping).__name__} (scipy's LowLevelCallable is not "
                               f"supported)")
    if not isinstance(extra_arguments, tuple):
        raise NdimageTypeError("extra_arguments: must be a tuple")
    if not isinstance(extra_keywords, dict):
        raise NdimageTypeError("extra_keywords: must be a dictionary")
    inp = _arrays.Input(input)
    oshape = inp.shape if output_shape is None else _output_shape_arg(output_shape, None, inp)
    if inp.ndim < 1 or len(oshape) < 1:
        raise NdimageError("input: input and output rank must be > 0")
    _engine.check_rank(inp.ndim)
    out = _arrays.Output(output, inp, oshape)
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
        return _engine.pull(x, gt.to(x.device), order, mode, c, prefilter)
    return _engine.run_parts(inp, out, cval, fn)
