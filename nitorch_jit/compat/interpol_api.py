"""torch-interpol's public functions (``interpol``, ``interpol.api``, ``interpol.resize``,
``interpol.restrict``) with its signatures, defaults and conventions, on our kernels.

The conventions of torch-interpol 0.3.0 kept here:

- images ``[..., [C], *spatial]`` and grids ``[..., *spatial, D]`` in voxels; batch dims
  broadcast; an image with exactly D dims has no channel dim (nor has the output, unless the
  grid brings batch dims: then the output has a channel dim of 1), as has ``grid_count``'s
  output for a grid without batch dims;
- bounds as names, enum members or integers of interpol's numbering (zero 0, replicate 1,
  dct1 2, dct2 3, dst1 4, dst2 5, dft 6); per-dim lists cut to the number of spatial dims;
- ``extrapolate`` False / True or 2 (in bounds within half a voxel);
- an integer (label) image is pulled label by label: a voxel takes the label of largest
  positive weight, 0 where none is positive;
- an image and a grid of different float dtypes compute in the promoted one;
- ``spline_coeff`` takes the first value of a list;
- ``resize`` / ``restrict``: the spatial dims are the length of the longest of ``factor``,
  ``shape`` and ``anchor`` (a scalar counts 1: ``resize(x, factor=2)`` resizes the last dim
  only); sizes ``int(n * factor)`` (``int(n / factor)`` for restrict); an anchor is read by
  its first letter (``'centers'`` = ``'c'``); bound ``'nearest'`` and ``extrapolate=True``
  unless the keyword arguments say otherwise.

Where interpol is wrong, these do the right thing (README, "torch-interpol"; each case is
named in tests/compat/test_interpol.py):

- dst1: interpol gives the weight of a real voxel (index 0 and those congruent to it) a
  zero sign; here dst1 is antisymmetric about the virtual voxels -1 and n;
- ``grid_grad`` with mixed orders where a dim has order 1 (``[1, 3]``, ``[1, 0, 1]``):
  interpol's gradient disagrees with finite differences of its own pull; ours agrees;
- the spline prefilter for dst1 / dst2: interpol raises NotImplementedError, here it is the
  exact filter;
- ``grid_push(..., prefilter=True)`` and the gradient of ``spline_coeff(_nd)`` for dct1 and
  zero at orders >= 2: interpol applies the forward filter, whose matrix is not symmetric for
  dct1; here the transposed filter, so that push is the adjoint of pull;
- ``restrict`` with anchors e, f, l (``reduce_sum=False``): interpol multiplies by the number
  of values accumulated per voxel instead of dividing (``restrict(ones, 2, anchor='e')``
  gives 4); here the mean, as interpol does for anchor c;
- ``resize`` / ``restrict`` of an integer (label) image: interpol builds its sampling grid
  in the image's integer dtype (coordinates truncated); here in torch's default float dtype.
"""
import numbers

import torch

from ..ops.common import broadcast_batch
from ..ops.options import bound_codes, check_tensor, order_codes
from ..ops.pushpull import affine_grid as _affine_grid
from ..ops.pushpull import grid_count as _nj_count
from ..ops.pushpull import grid_grad as _nj_grad
from ..ops.pushpull import grid_pull as _nj_pull
from ..ops.pushpull import grid_push as _nj_push
from ..ops.pushpull import identity_grid as _identity_grid
from ..ops.resize import anchor_map, resize_codes
from ..ops.splinc import prefilter as _prefilter
from ..ops.splinc import spline_coeff as _coeff
from ..ops.splinc import spline_coeff_nd as _coeff_nd
from . import interpol_lowlevel as low


# ----------------------------------------------------------------------------- shapes
def _flatten(grid, input=None, push=False):
    """interpol's layout -> ([N, C, *in] input, [N, *out, D] grid, how to restore)."""
    check_tensor(grid, "grid")
    if grid.dim() < 2 or grid.shape[-1] not in (1, 2, 3) or grid.dim() < grid.shape[-1] + 1:
        raise ValueError(f"grid: expected [..., *spatial, D] with D = 1, 2 or 3 coordinates "
                         f"per point, got shape {tuple(grid.shape)}")
    dim = grid.shape[-1]
    gspatial, gbatch = grid.shape[-dim - 1:-1], grid.shape[:-dim - 1]
    if input is None:
        grid = grid.reshape(-1, *gspatial, dim)
        return grid, (gbatch, [1] if gbatch else [])
    check_tensor(input, "input", floating=False)
    if input.dim() < dim:
        raise ValueError(f"input: expected [..., [C], *spatial] with {dim} spatial dims (the "
                         f"grid has D = {dim}), got shape {tuple(input.shape)}")
    if input.is_complex():
        raise TypeError(f"input: complex tensors are not supported, got {input.dtype}")
    if input.device != grid.device:
        raise ValueError(f"input is on {input.device} but grid is on {grid.device}")
    if input.dim() == grid.dim() == dim + 2 and input.shape[0] == grid.shape[0] \
            and input.dtype == grid.dtype and not push:  # [N, C, *in], [N, *out, D] already
        return input, grid, None
    ispatial = input.shape[-dim:]
    channel = 0 if input.dim() == dim else input.shape[-dim - 1]
    ibatch = input.shape[:-dim - 1] if channel else ()
    if push:
        try:
            gspatial = ispatial = broadcast_batch(gspatial, ispatial)
        except ValueError:
            raise ValueError(f"input: its spatial shape {tuple(ispatial)} and the grid's "
                             f"{tuple(gspatial)} do not broadcast") from None
    batch = broadcast_batch(gbatch, ibatch)
    grid = grid.expand(*batch, *gspatial, dim).reshape(-1, *gspatial, dim)
    input = input.expand(*batch, channel or 1, *ispatial).reshape(-1, channel or 1, *ispatial)
    if input.is_floating_point() and grid.is_floating_point() and input.dtype != grid.dtype:
        dtype = torch.promote_types(input.dtype, grid.dtype)
        input, grid = input.to(dtype), grid.to(dtype)
    return input, grid, (batch, [channel] if channel else ([1] if batch else []))


def _restore(out, info):
    """[N, C, *spatial(, D)] -> interpol's [*batch, *channel, *spatial(, D)]."""
    if info is None:
        return out
    batch, channel = info
    return out.reshape(*batch, *channel, *out.shape[2:])


def _float_dtype(x):
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


# ----------------------------------------------------------------------------- resampling
def _direct(extrapolate):
    """Whether our public functions take `extrapolate` as it is (not interpol's 2, "within
    half a voxel", which the positional forms of compat._resampling serve)."""
    return isinstance(extrapolate, bool) or (isinstance(extrapolate, (int, float))
                                             and extrapolate in (0, 1))


def _pull(x, g, interpolation, bound, extrapolate, prefilter):
    dim = g.shape[-1]
    b, o = low.bound_names(bound, dim), low.orders(interpolation, dim)
    if _direct(extrapolate):
        return _nj_pull(x, g, o, b, bool(extrapolate), prefilter)
    if prefilter:
        x = _coeff_nd(x, o, b, dim)
    return low.grid_pull(x, g, b, o, extrapolate)


def _pull_labels(x, g, interpolation, bound, extrapolate, prefilter):
    """interpol's rule: each voxel takes the label of largest positive weight, else 0."""
    out = x.new_zeros([x.shape[0], x.shape[1], *g.shape[1:-1]])
    best = g.new_zeros(out.shape)
    for label in torch.unique(x):
        w = _pull((x == label).to(g.dtype), g, interpolation, bound, extrapolate, prefilter)
        out[w > best] = label
        best = torch.maximum(best, w)
    return out


def grid_pull(input, grid, interpolation='linear', bound='zero', extrapolate=False,
              prefilter=False):
    """Sample an image at voxel coordinates: ``interpol.grid_pull``.

    Parameters
    ----------
    input : tensor [..., [C], *in]
        Floating point, or integer labels (pulled label by label).
    grid : tensor [..., *out, D]
        Voxel coordinates.
    interpolation : int, str, enum member or a list of them, default 'linear'
    bound : int (interpol's numbering), str, enum member or a list of them, default 'zero'
    extrapolate : bool or int (2: within half a voxel), default False
    prefilter : bool, default False
        Interpolate the input (apply the spline prefilter first).

    Returns
    -------
    tensor [..., [C], *out]
        The input's values at the grid points.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import grid_pull
    >>> grid_pull(torch.arange(4.), torch.tensor([[1.5], [2.25]]))  # no channel dim
    tensor([1.5000, 2.2500])
    """
    x, g, info = _flatten(grid, input)
    pull = _pull if x.is_floating_point() else _pull_labels
    return _restore(pull(x, g, interpolation, bound, extrapolate, prefilter), info)


def grid_push(input, grid, shape=None, interpolation='linear', bound='zero', extrapolate=False,
              prefilter=False):
    """Splat values at voxel coordinates: ``interpol.grid_push``, the adjoint of grid_pull.

    Parameters
    ----------
    input : tensor [..., [C], *in]
    grid : tensor [..., *in, D]
    shape : list[int], optional
        Output spatial shape (default: the input's).
    interpolation, bound, extrapolate
        As grid_pull.
    prefilter : bool, default False
        Apply the transposed spline prefilter after splatting (the adjoint of grid_pull's).

    Returns
    -------
    tensor [..., [C], *shape]
        Each input value spread over the voxels around its point, by the spline weights.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import grid_push
    >>> grid_push(torch.tensor([2.]), torch.tensor([[1.25]]), shape=[3])
    tensor([0.0000, 1.5000, 0.5000])
    """
    x, g, info = _flatten(grid, input, push=True)
    dim = g.shape[-1]
    b, o = low.bound_names(bound, dim), low.orders(interpolation, dim)
    if _direct(extrapolate):  # prefilter: the transposed filter, so push is pull's adjoint
        return _restore(_nj_push(x, g, shape, o, b, bool(extrapolate), prefilter), info)
    out = low.grid_push(x, g, list(x.shape[2:]) if shape is None else shape, b, o, extrapolate)
    if prefilter:
        out = _prefilter(out, order_codes(o, dim), bound_codes(b, dim), adjoint=True)
    return _restore(out, info)


def grid_count(grid, shape=None, interpolation='linear', bound='zero', extrapolate=False):
    """Splat ones at voxel coordinates: ``interpol.grid_count``.

    Parameters
    ----------
    grid : tensor [..., *in, D]
    shape : list[int], optional
        Output spatial shape (default: the grid's).
    interpolation, bound, extrapolate
        As grid_pull.

    Returns
    -------
    tensor [..., 1, *shape], or [*shape] for a grid without batch dims

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import grid_count
    >>> grid_count(torch.tensor([[0.5], [1.0]]), shape=[2])
    tensor([0.5000, 1.5000])
    """
    g, info = _flatten(grid)
    if _direct(extrapolate):
        dim = g.shape[-1]
        b, o = low.bound_names(bound, dim), low.orders(interpolation, dim)
        return _restore(_nj_count(g, shape, o, b, bool(extrapolate)), info)
    return _restore(low.grid_count(g, shape, bound, interpolation, extrapolate), info)


def grid_grad(input, grid, interpolation='linear', bound='zero', extrapolate=False,
              prefilter=False):
    """Spatial gradients of an image at voxel coordinates: ``interpol.grid_grad``.

    Parameters
    ----------
    input : tensor [..., [C], *in]
        Floating point.
    grid : tensor [..., *out, D]
    interpolation, bound, extrapolate, prefilter
        As grid_pull.

    Returns
    -------
    tensor [..., [C], *out, D]
        The derivatives along each spatial dim.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import grid_grad
    >>> grid_grad(torch.tensor([0., 1., 4., 9.]), torch.tensor([[1.5]]))
    tensor([[3.]])
    """
    x, g, info = _flatten(grid, input)
    dim = g.shape[-1]
    b, o = low.bound_names(bound, dim), low.orders(interpolation, dim)
    if _direct(extrapolate):
        return _restore(_nj_grad(x, g, o, b, bool(extrapolate), prefilter), info)
    if prefilter:
        x = _coeff_nd(x, o, b, dim)
    return _restore(low.grid_grad(x, g, b, o, extrapolate), info)


pull, push, count = grid_pull, grid_push, grid_count


# ----------------------------------------------------------------------------- prefilter
def spline_coeff(input, interpolation='linear', bound='dct2', dim=-1, inplace=False):
    """Interpolating spline coefficients along one dim: ``interpol.spline_coeff``.

    Parameters
    ----------
    input : tensor
    interpolation : int, str or enum member (the first of a list), default 'linear'
    bound : int (interpol's numbering), str or enum member (the first of a list), default
        'dct2'
    dim : int, default -1
    inplace : bool, default False

    Returns
    -------
    tensor
        The coefficients along `dim`, shaped like `input` (`input` itself when
        `inplace`).

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import spline_coeff
    >>> spline_coeff(torch.tensor([0., 1., 0.], dtype=torch.float64), 'cubic')
    tensor([-0.3333,  1.6667, -0.3333], dtype=torch.float64)
    """
    return _coeff(input, low.orders(interpolation, 1), low.bound_names(bound, 1), dim, inplace)


def spline_coeff_nd(input, interpolation='linear', bound='dct2', dim=None, inplace=False):
    """Interpolating spline coefficients along the last `dim` dims:
    ``interpol.spline_coeff_nd``.

    Parameters
    ----------
    input : tensor [..., *spatial]
    interpolation, bound : one value or a list (cut to `dim` values)
    dim : int, optional
        Number of spatial dims (default: all).
    inplace : bool, default False

    Returns
    -------
    tensor
        As spline_coeff.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import spline_coeff_nd
    >>> round(spline_coeff_nd(torch.ones(2, 3, dtype=torch.float64), 3).sum().item(), 6)
    6.0
    """
    nd = input.dim() if dim is None and isinstance(input, torch.Tensor) else dim
    return _coeff_nd(input, low.orders(interpolation, nd), low.bound_names(bound, nd), dim,
                     inplace)


# ----------------------------------------------------------------------------- grids
def identity_grid(shape, dtype=None, device=None):
    """Voxel coordinates of every voxel: ``interpol.identity_grid``.

    Parameters
    ----------
    shape : list[int]
    dtype : torch.dtype, optional
    device : torch.device, optional

    Returns
    -------
    tensor [*shape, D]

    Examples
    --------
    >>> from nitorch_jit.compat.interpol_api import identity_grid
    >>> identity_grid([2, 3])[1, 2]
    tensor([1., 2.])
    """
    return _identity_grid(shape, dtype, device)


def add_identity_grid_(disp):
    """Add the identity grid to a displacement field, in place: ``interpol.add_identity_grid_``.

    Parameters
    ----------
    disp : tensor [..., *spatial, D]
        Displacements in voxels, overwritten by the coordinates.

    Returns
    -------
    tensor [..., *spatial, D]
        `disp` itself.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import add_identity_grid_
    >>> add_identity_grid_(torch.zeros(3, 1)).flatten()
    tensor([0., 1., 2.])
    """
    check_tensor(disp, "disp")
    dim = disp.shape[-1]
    return disp.add_(_identity_grid(disp.shape[-dim - 1:-1], disp.dtype, disp.device))


def add_identity_grid(disp):
    """The displacement field plus the identity grid: ``interpol.add_identity_grid``.

    Parameters
    ----------
    disp : tensor [..., *spatial, D]
        Displacements in voxels.

    Returns
    -------
    tensor [..., *spatial, D]
        A new tensor: the voxel coordinates.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import add_identity_grid
    >>> add_identity_grid(torch.ones(2, 1)).flatten()
    tensor([1., 2.])
    """
    check_tensor(disp, "disp")
    return add_identity_grid_(disp.clone())


def affine_grid(mat, shape):
    """A dense grid from an affine matrix: ``interpol.affine_grid``.

    Parameters
    ----------
    mat : tensor or array-like [..., D[+1], D+1]
    shape : list[int]

    Returns
    -------
    tensor [..., *shape, D]

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import affine_grid
    >>> affine_grid(torch.tensor([[2., 1.], [0., 1.]]), [3]).flatten()
    tensor([1., 3., 5.])
    """
    return _affine_grid(torch.as_tensor(mat), shape)


# ----------------------------------------------------------------------------- resize
def _listed(value):
    return list(value) if isinstance(value, (list, tuple, torch.Size)) else [value]


def _geometry(image, factor, shape, anchor, restrict):
    """interpol's resize / restrict geometry: (dim, output shape, per-dim (scale, shift) of
    the map fine index -> coarse coordinate (restrict) or output -> input (resize), and
    restrict's normalisation)."""
    check_tensor(image, "image", floating=False)
    factor = _listed(factor) if factor else []
    shape = _listed(shape) if shape else []
    anchor = _listed(anchor)
    dim = max(len(factor), len(shape), len(anchor))
    if dim > image.dim():
        raise ValueError(f"image: {dim} spatial dims asked for (factor, shape or anchor) but "
                         f"the image has shape {tuple(image.shape)}")
    pad = lambda v: v + v[-1:] * (dim - len(v))  # noqa: E731 (interpol's make_list)
    anchors = []
    for a in pad(anchor):
        if not isinstance(a, str) or not a or a[0].lower() not in "cefl":
            raise ValueError(f"anchor: unknown anchor {a!r}; expected 'c' (centers), 'e' "
                             f"(edges), 'f' (first) or 'l' (last), or a list of them")
        anchors.append(a[0].lower())
    nin = list(image.shape[-dim:])
    if not factor and not shape:
        raise ValueError("one of factor or shape must be given")
    for f in factor:
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not f > 0:
            raise ValueError(f"factor: expected positive numbers, got {factor}")
    factor = pad(factor) if factor else []
    if shape:
        shape = pad(shape)
        if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1
               for s in shape):
            raise ValueError(f"shape: expected positive ints, got {shape}")
        shape = [int(s) for s in shape]
    else:
        shape = [int(n / f) if restrict else int(n * f) for n, f in zip(nin, factor)]
        if min(shape) < 1:
            raise ValueError(f"factor: {factor} gives the output shape {shape} for the input "
                             f"shape {nin}")
    if not factor:
        factor = [n / m if restrict else m / n for n, m in zip(nin, shape)]
    maps, norm = [], 1.0
    for a, f, n, m in zip(anchors, factor, nin, shape):
        src, dst = (m, n) if restrict else (n, m)  # coordinates in src, one per dst voxel
        if a == "c" and restrict and min(n, m) < 2:
            raise ValueError(f"anchor: 'c' (centers) restricts from and to at least 2 "
                             f"voxels per dim, got {n} -> {m}; use 'e' (edges)")
        if a == "c" and min(src, dst) == 1:
            scale, shift = 0.0, 0.0  # interpol's centers of a size-1 dim: all at the first
        else:  # (where anchor_map would take edges instead)
            scale, shift = anchor_map(a, src, dst, f)
        maps.append((scale, shift))
        norm *= scale
    return dim, shape, maps, norm


def _options(kwargs, prefilter_default):
    opts = dict(bound="nearest", extrapolate=True, prefilter=prefilter_default)
    unknown = sorted(set(kwargs) - set(opts))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; the keyword arguments "
                        f"passed on are bound, extrapolate and prefilter")
    opts.update(kwargs)
    return opts


def _grid(maps, shape, dtype, device):
    axes = [torch.arange(m, dtype=dtype, device=device) * s + t
            for (s, t), m in zip(maps, shape)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def _fused(image, opts):
    """Whether the separable resize kernels serve the call (else a grid is pulled / pushed)."""
    return image.is_floating_point() and opts["extrapolate"] in (True, 1)


def resize(image, factor=None, shape=None, anchor='c', interpolation=1, prefilter=True,
           **kwargs):
    """Resize an image by a factor or to a shape: ``interpol.resize``.

    Parameters
    ----------
    image : tensor [..., *spatial]
        The last D dims are resized, D the length of the longest of `factor`, `shape` and
        `anchor` (a scalar counts 1).
    factor : float or list[float], optional
    shape : int or list[int], optional
    anchor : str or list[str], default 'c'
        'c' / 'centers', 'e' / 'edges', 'f' / 'first', 'l' / 'last'.
    interpolation : int, str, enum member or a list of them, default 1
    prefilter : bool, default True
    **kwargs
        bound (default 'nearest'), extrapolate (default True), passed to grid_pull.

    Returns
    -------
    tensor [..., *shape]
        The image resampled on the output grid.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import resize
    >>> resize(torch.tensor([[0., 1., 2.]]), shape=5)
    tensor([[0.0000, 0.5000, 1.0000, 1.5000, 2.0000]])
    """
    opts = _options(kwargs, prefilter)
    dim, shape, maps, _ = _geometry(image, factor, shape, anchor, restrict=False)
    b, o = low.bound_names(opts["bound"], dim), low.orders(interpolation, dim)
    if _fused(image, opts):
        return resize_codes(image, shape, [s for s, _ in maps], [t for _, t in maps],
                            order_codes(o, dim), bound_codes(b, dim), bool(opts["prefilter"]))
    grid = _grid(maps, shape, _float_dtype(image), image.device)
    return grid_pull(image, grid, o, b, opts["extrapolate"], opts["prefilter"])


def restrict(image, factor=None, shape=None, anchor='c', interpolation=1, reduce_sum=False,
             **kwargs):
    """Restrict an image to a coarser grid (the adjoint of resize): ``interpol.restrict``.

    Parameters
    ----------
    image : tensor [..., *spatial]
        The last D dims are restricted (D as in resize).
    factor : float or list[float], optional
        Ratio of input to output voxels (the default shape is ``int(n / factor)``).
    shape : int or list[int], optional
    anchor : str or list[str], default 'c'
    interpolation : int, str, enum member or a list of them, default 1
    reduce_sum : bool, default False
        Return the sum of the pushed values; else their mean.
    **kwargs
        bound (default 'nearest'), extrapolate (default True), prefilter (default False),
        passed to grid_push.

    Returns
    -------
    tensor [..., *shape]
        The image on the coarser grid: the mean (or, with `reduce_sum`, the sum) of the
        values pushed to each voxel.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.compat.interpol_api import restrict
    >>> restrict(torch.ones(1, 8), factor=2, anchor='e')
    tensor([[1., 1., 1., 1.]])
    """
    opts = _options(kwargs, False)
    dim, shape, maps, norm = _geometry(image, factor, shape, anchor, restrict=True)
    b, o = low.bound_names(opts["bound"], dim), low.orders(interpolation, dim)
    if _fused(image, opts):
        out = resize_codes(image, shape, [s for s, _ in maps], [t for _, t in maps],
                           order_codes(o, dim), bound_codes(b, dim), False, adjoint=True)
        if opts["prefilter"]:
            out = _prefilter(out, order_codes(o, dim), bound_codes(b, dim), adjoint=True)
    else:
        grid = _grid(maps, image.shape[-dim:], _float_dtype(image), image.device)
        out = grid_push(image, grid, shape, o, b, opts["extrapolate"], opts["prefilter"])
    return out if reduce_sum else out * norm


API = ["pull", "push", "count", "grid_pull", "grid_push", "grid_count", "grid_grad",
       "spline_coeff", "spline_coeff_nd", "identity_grid", "add_identity_grid",
       "add_identity_grid_", "affine_grid"]
__all__ = API + ["resize", "restrict"]
