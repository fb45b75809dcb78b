"""Resizing: resize, restrict (its adjoint), prolong (multigrid) and resize_grid.

Images are ``[*batch, C, *spatial]``; only the spatial dims are resized. The number of spatial
dims D is the length of any list given for factor / shape / anchor / interpolation / bound,
else ``image.dim() - 2``; a scalar applies to every spatial dim.

Anchors (per dim; n input voxels, m output voxels, f the factor; output voxel o samples the
input at x = scale * o + shift, in voxels):

- ``'c'`` centres: the centres of the first and last voxels are aligned:
  scale = (n-1)/(m-1), shift = 0. With n == 1 or m == 1 this is undefined; edges are used.
- ``'e'`` edges: the outer edges are aligned (scipy.ndimage.zoom(grid_mode=True),
  torch interpolate(align_corners=False)): scale = n/m, shift = (scale-1)/2.
- ``'f'`` first: the first voxel centre is kept and the voxel size divided by f:
  scale = 1/f, shift = 0 (an integer factor subsamples like ``x[::f]`` when f < 1).
- ``'l'`` last: the last voxel centre is kept: scale = 1/f, shift = (n-1) - (m-1)/f.

The output shape is ``shape`` when given, else floor(n * f). For 'f' and 'l' without a
factor, f = m/n. The kernels are separable 1-D passes (no dense sampling grid); see
csrc/resize and nitorch_jit/torch_impl/resize.py. Differences from NITorch's C resize
(§7.5 of the reference notes): no NaN for size-1 dims with centre anchors, normalisation by
the product of the per-dim scales (not its powers), one formula for 'last' everywhere.
"""
import math

import torch

from .. import backends
from .common import HALF
from .docfill import docfill
from .options import (bound_codes, check_tensor, checked_per_dim, order_codes, per_dim,
                      positive_floats)

_ops = torch.ops.nitorch_jit
_MODULE = "resize"
_ANCHORS = {"c": "c", "center": "c", "centers": "c", "centre": "c", "centres": "c",
            "e": "e", "edge": "e", "edges": "e",
            "f": "f", "first": "f",
            "l": "l", "last": "l"}

# ----------------------------------------------------------------------------- fake kernels
def _fake(input, shape, scale, shift, order, bound, prefilter):
    backends.ensure(_MODULE, input.device)
    return input.new_empty(list(input.shape[:input.dim() - len(shape)]) + list(shape))


torch.library.register_fake("nitorch_jit::resize", _fake)
torch.library.register_fake("nitorch_jit::resize_adjoint", _fake)


# ----------------------------------------------------------------------------- autograd
def _setup(ctx, inputs, output):
    input, shape = inputs[0], inputs[1]
    ctx.in_shape = list(input.shape[input.dim() - len(shape):])
    ctx.opts = inputs[2:]  # scale, shift, order, bound, prefilter


def _resize_backward(ctx, grad):
    return _ops.resize_adjoint(grad, ctx.in_shape, *ctx.opts), None, None, None, None, None, None


def _adjoint_backward(ctx, grad):
    return _ops.resize(grad, ctx.in_shape, *ctx.opts), None, None, None, None, None, None


torch.library.register_autograd("nitorch_jit::resize", _resize_backward, setup_context=_setup)
torch.library.register_autograd("nitorch_jit::resize_adjoint", _adjoint_backward,
                                setup_context=_setup)


# ----------------------------------------------------------------------------- arguments
def _listlen(*values):
    lengths = [len(v) for v in values if isinstance(v, (list, tuple, torch.Size))]
    return max(lengths) if lengths else None


def _spatial_dim(image, *lists):
    check_tensor(image, "image", floating=False)
    if not image.is_floating_point() or image.is_complex():
        raise TypeError(f"image: expected a floating-point tensor, got {image.dtype}")
    dim = _listlen(*lists)
    if dim is None:
        dim = image.dim() - 2
        if dim < 1:
            raise ValueError(f"image: expected [*batch, C, *spatial], got shape "
                             f"{tuple(image.shape)}; pass shape or factor as a list to say how "
                             f"many spatial dims there are")
    if dim > image.dim():
        raise ValueError(f"image: {dim} spatial dims requested but image has shape "
                         f"{tuple(image.shape)}")
    return dim


def _factors(factor, dim):
    return None if factor is None else positive_floats(factor, dim, "factor")


def _shapes(shape, dim):
    if shape is None:
        return None
    return checked_per_dim(shape, dim, "shape", int, lambda s: isinstance(s, int),
                           lambda s: s >= 1, "expected positive ints", "expected positive ints")


def _anchors(anchor, dim):
    out = []
    for a in per_dim(anchor, dim, "anchor"):
        if not isinstance(a, str) or a.lower() not in _ANCHORS:
            raise ValueError(f"anchor: unknown anchor {a!r}; expected one of 'c' (centers), "
                             f"'e' (edges), 'f' (first), 'l' (last)")
        out.append(_ANCHORS[a.lower()])
    return out


def anchor_map(anchor, n, m, f=None):
    """(scale, shift) of the map output index o -> input coordinate x = scale * o + shift.

    The code-level entry of the resize family for front ends (the NITorch compat module
    derives its normalisations from it): one dim, n input and m output voxels.

    Parameters
    ----------
    anchor : {'c', 'e', 'f', 'l'}
        Parsed anchor (see the module docstring).
    n, m : int
        Input and output sizes.
    f : float, optional
        The factor ('f' and 'l'; default m / n).

    Returns
    -------
    scale, shift : float

    Examples
    --------
    >>> from nitorch_jit.ops.resize import anchor_map
    >>> anchor_map('e', 4, 8)
    (0.5, -0.25)
    """
    if anchor == "c" and (n == 1 or m == 1):
        anchor = "e"
    if anchor == "c":
        return (n - 1) / (m - 1), 0.0
    if anchor == "e":
        scale = n / m
        return scale, 0.5 * (scale - 1)
    f = f if f is not None else m / n
    if anchor == "f":
        return 1 / f, 0.0
    return 1 / f, (n - 1) - (m - 1) / f


def _out_shape(nin, factor, shape, enlarge):
    """Output sizes: `shape`, else floor(n * f) (enlarge) or floor(n / f) (restrict), >= 1.

    The floor forgives a relative rounding error of 1e-7 (so 3 * (1/3) gives 1)."""
    if factor is None and shape is None:
        raise ValueError("one of factor or shape must be given")
    if shape is not None:
        return shape
    out = []
    for n, f in zip(nin, factor):
        v = n * f if enlarge else n / f
        out.append(max(1, int(math.floor(v + 1e-7 * max(1.0, v)))))
    return out


def _arguments(image, factor, shape, anchor, interpolation, bound, **flag):
    """The checked arguments of resize and restrict, in their order (the one flag of each,
    prefilter or reduce_sum, last): (input spatial shape, factors or None, shapes or None,
    anchors, order codes, bound codes)."""
    dim = _spatial_dim(image, factor, shape, anchor, interpolation, bound)
    factors, shapes = _factors(factor, dim), _shapes(shape, dim)
    anchors = _anchors(anchor, dim)
    order, bounds = order_codes(interpolation, dim), bound_codes(bound, dim)
    [(name, value)] = flag.items()
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return list(image.shape[image.dim() - dim:]), factors, shapes, anchors, order, bounds


def _anchor_maps(nin, factors, shapes, anchors, enlarge):
    """The output spatial shape and the per-dim (scale, shift) of the maps of anchor_map, for
    `nin` input voxels resized (`enlarge`) or restricted: a restriction's maps are those of
    the resize it transposes, from the coarse grid (the output) onto the fine one."""
    shapes = _out_shape(nin, factors, shapes, enlarge)
    fs = factors or [None] * len(nin)
    if enlarge:
        return shapes, [anchor_map(a, n, m, f) for a, n, m, f in zip(anchors, nin, shapes, fs)]
    return shapes, [anchor_map(a, m, n, f) for a, n, m, f in zip(anchors, nin, shapes, fs)]


def _run(op, image, shape, scale, shift, order, bound, prefilter):
    dtype = image.dtype
    x = image.float() if dtype in HALF else image
    backends.ensure_eager(_MODULE, x.device, (op, x.dtype, order))
    out = op(x, list(shape), [float(s) for s in scale], [float(s) for s in shift],
             list(order), list(bound), bool(prefilter))
    return out.to(dtype)


def resize_codes(input, shape, scale, shift, order, bound, prefilter, adjoint=False):
    """Resize the last len(shape) dims of `input` along the map ``x = scale * o + shift``.

    The code-level entry of the family, for the front ends: every option is already per dim
    and parsed (orders 0..7, bound codes of nitorch_jit.codes). Output index ``o`` of dim
    ``d`` samples the (prefiltered) input at ``scale[d] * o + shift[d]``; ``adjoint=True``
    applies the transpose (input: the forward's output, `shape`: the forward's input shape).

    Parameters
    ----------
    input : tensor [..., *spatial]
    shape : list[int]
    scale, shift : list[float]
    order, bound : list[int]
    prefilter : bool
        Apply the spline prefilter (fused; orders >= 2).
    adjoint : bool, default False

    Returns
    -------
    tensor [..., *shape], differentiable.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.ops.resize import resize_codes
    >>> x = torch.arange(4.).reshape(1, 4)
    >>> resize_codes(x, [2], [2.0], [0.5], [1], [3], False)  # linear, dct2: the mean of pairs
    tensor([[0.5000, 2.5000]])
    """
    return _run(_ops.resize_adjoint if adjoint else _ops.resize, input, shape, scale, shift,
                order, bound, prefilter)


# ----------------------------------------------------------------------------- public API
@docfill
def resize(image, factor=None, shape=None, anchor="c", interpolation=1, prefilter=True,
           bound="dct2"):
    """Resize the spatial dims of an image by a factor or to a shape (spline interpolation).

    Parameters
    ----------
    image : tensor [*batch, C, *spatial]
        Floating point. D, the number of spatial dims, is the length of any list given for
        `factor`, `shape`, `anchor`, `interpolation` or `bound`, else ``image.dim() - 2``.
    factor : float or list[float], optional
        Ratio of output to input voxels per dim (> 1 enlarges, i.e. smaller voxels).
    shape : int or list[int], optional
        Output spatial shape (default ``floor(n * factor)``). One of `factor` and `shape`
        is needed.
    anchor : {'c', 'e', 'f', 'l'} or list of them, default 'c'
        What stays aligned: the centres of the corner voxels ('c'), their outer edges ('e',
        as ``scipy.ndimage.zoom(grid_mode=True)`` and ``align_corners=False``), the first
        voxel ('f') or the last one ('l'); the module docstring gives the formulas.
    interpolation : int, str or InterpolationType, or a list of them, default 1
        %(interpolation)s
    prefilter : bool, default True
        Apply the spline prefilter first, so that orders >= 2 interpolate the input.
    bound : str or BoundType, or a list of them, default 'dct2'
        %(bound)s

    Returns
    -------
    output : tensor [*batch, C, *shape]
        With the dtype of `image`.

    See Also
    --------
    restrict : its adjoint.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import resize
    >>> x = torch.tensor([[[0., 1., 2., 3.]]])
    >>> resize(x, shape=7)                          # corner centres aligned: steps of 1/2
    tensor([[[0.0000, 0.5000, 1.0000, 1.5000, 2.0000, 2.5000, 3.0000]]])
    >>> resize(x, factor=2, anchor='e', interpolation='nearest')
    tensor([[[0., 0., 1., 1., 2., 2., 3., 3.]]])
    """
    nin, factors, shapes, anchors, order, bounds = _arguments(
        image, factor, shape, anchor, interpolation, bound, prefilter=prefilter)
    shapes, aff = _anchor_maps(nin, factors, shapes, anchors, enlarge=True)
    return _run(_ops.resize, image, shapes, [a[0] for a in aff], [a[1] for a in aff],
                order, bounds, prefilter)


@docfill
def restrict(image, factor=None, shape=None, anchor="c", interpolation=1, reduce_sum=False,
             bound="dct2"):
    """Restrict an image to a coarser grid: the adjoint of resize.

    With ``reduce_sum=True``, ``restrict(y, factor=f, shape=m)`` is exactly the transpose of
    ``resize(x, factor=f, shape=n, prefilter=False)`` mapping m voxels to n (same anchor,
    interpolation and bound): ``<resize(x), y> == <x, restrict(y)>``. Otherwise the result
    is normalised (multiplied by the product of the per-dim scales) so that a constant image
    stays about constant. The multigrid restriction matching ``prolong`` is
    ``restrict(x, 2, anchor='e')``.

    Parameters
    ----------
    image : tensor [*batch, C, *spatial]
        Floating point; D as in resize.
    factor : float or list[float], optional
        Ratio of input to output voxels per dim (> 1 shrinks). The default output shape is
        ``floor(n / factor)``.
    shape : int or list[int], optional
        Output spatial shape. One of `factor` and `shape` is needed.
    anchor : {'c', 'e', 'f', 'l'} or list of them, default 'c'
        As in resize.
    interpolation : int, str or InterpolationType, or a list of them, default 1
        %(interpolation)s
    reduce_sum : bool, default False
        Return the plain transpose (a sum) instead of the normalised one (a mean).
    bound : str or BoundType, or a list of them, default 'dct2'
        %(bound)s

    Returns
    -------
    output : tensor [*batch, C, *shape]
        The mean (or, with `reduce_sum`, the sum) of what each voxel receives; the
        dtype of `image`.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import restrict
    >>> restrict(torch.tensor([[[1., 3., 5., 7.]]]), factor=2, anchor='e')
    tensor([[[2.2500, 5.7500]]])
    >>> restrict(torch.ones(1, 1, 8), factor=2, anchor='e', reduce_sum=True)
    tensor([[[2., 2., 2., 2.]]])
    """
    nfine, factors, shapes, anchors, order, bounds = _arguments(
        image, factor, shape, anchor, interpolation, bound, reduce_sum=reduce_sum)
    shapes, aff = _anchor_maps(nfine, factors, shapes, anchors, enlarge=False)
    out = _run(_ops.resize_adjoint, image, shapes, [a[0] for a in aff], [a[1] for a in aff],
               order, bounds, False)
    if not reduce_sum:
        norm = 1.0
        for a in aff:
            norm *= a[0]
        out = out * norm
    return out


@docfill
def prolong(image, factor=2, shape=None, bound="dct2"):
    """Multigrid prolongation: quadratic B-spline, edge-aligned, no prefilter (smoothing).

    Its restriction partner is ``restrict(x, factor, anchor='e')`` (linear, averaging).

    Parameters
    ----------
    image : tensor [*batch, C, *spatial]
        Floating point; D as in resize.
    factor : float or list[float], default 2
        Ratio of output to input voxels per dim.
    shape : int or list[int], optional
        Output spatial shape (default ``floor(n * factor)``).
    bound : str or BoundType, or a list of them, default 'dct2'
        %(bound)s

    Returns
    -------
    output : tensor [*batch, C, *shape]
        The image on the finer grid, with the dtype of `image`.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import prolong
    >>> prolong(torch.ones(1, 1, 3))                # a constant stays constant
    tensor([[[1., 1., 1., 1., 1., 1.]]])
    """
    return resize(image, factor=factor, shape=shape, anchor="e", interpolation=2,
                  prefilter=False, bound=bound)


def resize_grid(grid, factor=None, shape=None, anchor="c", interpolation=1, prefilter=True,
                bound="dct2", type="displacement"):
    """Resize a displacement field (or a transformation grid) and rescale its vectors.

    The field is resized like an image (its D components as channels) and each component is
    rescaled to the voxel size of the output: component d is divided by the scale of dim d
    (input voxels per output voxel).

    Parameters
    ----------
    grid : tensor [*batch, *spatial, D]
        Displacements in voxels, or voxel coordinates when ``type='grid'``.
    factor, shape, anchor, interpolation, prefilter, bound
        As in resize (the default bound is 'dct2').
    type : {'displacement', 'grid'}, default 'displacement'
        'grid' takes absolute voxel coordinates: the identity is removed before resizing and
        the output identity added after.

    Returns
    -------
    output : tensor [*batch, *shape, D]

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import resize_grid
    >>> disp = torch.ones(4, 1)                     # one voxel to the right, 4 voxels
    >>> resize_grid(disp, factor=2, anchor='e').flatten()   # two half-size voxels
    tensor([2., 2., 2., 2., 2., 2., 2., 2.])
    """
    check_tensor(grid, "grid")
    if grid.dim() < 2:
        raise ValueError(f"grid: expected [*batch, *spatial, D], got shape {tuple(grid.shape)}")
    dim = grid.shape[-1]
    if grid.dim() < dim + 1:
        raise ValueError(f"grid: expected [*batch, *spatial({dim} dims), {dim}], got shape "
                         f"{tuple(grid.shape)}")
    if type not in ("displacement", "grid"):
        raise ValueError(f"type: expected 'displacement' or 'grid', got {type!r}")
    for name, v in (("factor", factor), ("shape", shape), ("anchor", anchor),
                    ("interpolation", interpolation), ("bound", bound)):
        if isinstance(v, (list, tuple)) and len(v) > dim:
            raise ValueError(f"{name}: got {len(v)} values for a {dim}-D grid")
    factors, shapes = _factors(factor, dim), _shapes(shape, dim)
    anchors = _anchors(anchor, dim)
    nin = list(grid.shape[-dim - 1:-1])
    shapes, aff = _anchor_maps(nin, factors, shapes, anchors, enlarge=True)
    disp = grid
    if type == "grid":
        disp = grid - _identity(nin, grid)
    img = disp.movedim(-1, -dim - 1)
    if not isinstance(prefilter, bool):
        raise TypeError(f"prefilter: expected True or False, got {prefilter!r}")
    out = _run(_ops.resize, img, shapes, [a[0] for a in aff], [a[1] for a in aff],
               order_codes(interpolation, dim), bound_codes(bound, dim), prefilter)
    out = out.movedim(-dim - 1, -1)
    inv = torch.tensor([1.0 / a[0] for a in aff], dtype=out.dtype, device=out.device)
    out = out * inv
    if type == "grid":
        out = out + _identity(shapes, out)
    return out


def _identity(shape, like):
    axes = [torch.arange(s, dtype=like.dtype, device=like.device) for s in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
