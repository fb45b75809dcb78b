"""Spline resampling: grid_pull, grid_push, grid_count, grid_grad (NITorch / torch-interpol API).

Images are ``[*batch, C, *spatial]``, grids ``[*batch, *out, D]`` in voxel coordinates (channel
last, ``grid[..., d]`` indexes spatial dim ``d``). Batch dims broadcast. The kernels behind
``torch.ops.nitorch_jit.*`` are chosen by nitorch_jit.backends; autograd and fake (meta) kernels
are registered here, so the ops work under ``torch.compile(fullgraph=True)``.
"""
import torch

from .. import backends
from .common import (HALF, broadcast_batch, call, flatten_batch, restore_batch,
                     shape_arg)
from .docfill import docfill
from .options import check_tensor, resampling_options
from .splinc import prefilter as _prefilter

_ops = torch.ops.nitorch_jit
_MODULE = "pushpull"

_PLAIN_DTYPES = (torch.float32, torch.float64)


def _plain(input, grid):
    """D when a call needs no normalisation: plain tensors of one dtype (float32/64) and one
    device, one batch dim each and the same, D spatial dims, nothing empty, the backend chosen;
    else 0 (the full path then checks everything and raises its messages). Small calls are
    most of their own cost: this path skips the shape algebra, with a few attribute reads."""
    if type(input) is not torch.Tensor or type(grid) is not torch.Tensor \
            or backends.is_compiling():
        return 0
    nd = input.dim()
    dim = nd - 2
    if not 1 <= dim <= 3 or grid.dim() != nd or grid.shape[-1] != dim \
            or input.shape[0] != grid.shape[0] or input.dtype not in _PLAIN_DTYPES \
            or grid.dtype != input.dtype or not input.numel() or not grid.numel():
        return 0
    device = input.device
    if grid.device != device or backends.chosen(_MODULE, device.type) is None:
        return 0
    return dim


# ----------------------------------------------------------------------------- fake kernels
def _fake_pull(input, grid, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)  # load the real kernels while tracing
    return input.new_empty([input.shape[0], input.shape[1], *grid.shape[1:-1]])


def _fake_push(input, grid, shape, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)
    return input.new_empty([input.shape[0], input.shape[1], *shape])


def _fake_grad(input, grid, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)
    return input.new_empty([input.shape[0], input.shape[1], *grid.shape[1:]])


def _fake_dot(weight, input, grid, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)
    return grid.new_empty(grid.shape)


def _fake_pull_backward(grad, input, grid, order, bound, extrapolate):
    backends.ensure(_MODULE, input.device)
    return input.new_empty(input.shape), grid.new_empty(grid.shape)


torch.library.register_fake("nitorch_jit::grid_pull", _fake_pull)
torch.library.register_fake("nitorch_jit::grid_push", _fake_push)
torch.library.register_fake("nitorch_jit::grid_grad", _fake_grad)
torch.library.register_fake("nitorch_jit::grid_pushgrad", _fake_push)
torch.library.register_fake("nitorch_jit::grid_grad_dot", _fake_dot)
torch.library.register_fake("nitorch_jit::grid_hess_dot", _fake_dot)
torch.library.register_fake("nitorch_jit::grid_pull_backward", _fake_pull_backward)


# ----------------------------------------------------------------------------- autograd
# Each op's gradient is another op of the family: pull <-> push, grad <-> pushgrad, and the
# grid gradients contract the spline derivatives (grad_dot) or second derivatives (hess_dot).
def _setup(ctx, inputs, output):
    first, grid = inputs[0], inputs[1]
    ctx.opts = inputs[-3:]  # order, bound, extrapolate
    ctx.save_for_backward(first, grid)


def _spatial(x):
    return list(x.shape[2:])


# op -> (its gradient with respect to its input, with respect to its grid), as functions of
# (grad, input, grid, opts)
_RULES = {
    "pull": (lambda g, x, grid, o: _ops.grid_push(g, grid, _spatial(x), *o),
             lambda g, x, grid, o: _ops.grid_grad_dot(g, x, grid, *o)),
    "push": (lambda g, x, grid, o: _ops.grid_pull(g, grid, *o),
             lambda g, x, grid, o: _ops.grid_grad_dot(x, g, grid, *o)),
    "grad": (lambda g, x, grid, o: _ops.grid_pushgrad(g, grid, _spatial(x), *o),
             lambda g, x, grid, o: _ops.grid_hess_dot(g, x, grid, *o)),
    "pushgrad": (lambda g, x, grid, o: _ops.grid_grad(g, grid, *o),
                 lambda g, x, grid, o: _ops.grid_hess_dot(x, g, grid, *o)),
}


def _grads(op, grad, input, grid, opts, need_input, need_grid):
    if op == "pull" and need_input and need_grid and not torch.is_grad_enabled():
        # both gradients in one pass over the points (grid_pull_backward has no autograd of
        # its own: with create_graph=True the differentiable pair is used instead)
        return _ops.grid_pull_backward(grad, input, grid, *opts)
    to_input, to_grid = _RULES[op]
    return (to_input(grad, input, grid, opts) if need_input else None,
            to_grid(grad, input, grid, opts) if need_grid else None)


def _autograd(op, nopts):
    """The backward of `op` from its gradient rule (None for its `nopts` option inputs)."""
    def backward(ctx, grad):
        input, grid = ctx.saved_tensors
        return _grads(op, grad, input, grid, ctx.opts, *ctx.needs_input_grad[:2]) \
            + (None,) * nopts
    return backward


_pull_backward = _autograd("pull", 3)
_push_backward = _autograd("push", 4)
_grad_backward = _autograd("grad", 3)
_pushgrad_backward = _autograd("pushgrad", 4)


def _setup_dot(ctx, inputs, output):
    ctx.opts = inputs[-3:]
    ctx.save_for_backward(*inputs[:3])  # weight, input, grid


def _grad_dot_backward(ctx, grad):
    # out[b,o,d] = sum_c w[b,c,o] grad(x)[b,c,o,d]: the weight gets grad(x) . grad, the image
    # and the grid get pushgrad / hess_dot of w * grad (double backward of grid_pull)
    weight, input, grid = ctx.saved_tensors
    gw = gi = gg = None
    if ctx.needs_input_grad[0]:
        gw = (_ops.grid_grad(input, grid, *ctx.opts) * grad.unsqueeze(1)).sum(-1)
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        wg = (weight.unsqueeze(-1) * grad.unsqueeze(1)).to(input.dtype)
        if ctx.needs_input_grad[1]:
            gi = _ops.grid_pushgrad(wg, grid, list(input.shape[2:]), *ctx.opts)
        if ctx.needs_input_grad[2]:
            gg = _ops.grid_hess_dot(wg, input, grid, *ctx.opts)
    return gw, gi, gg, None, None, None


torch.library.register_autograd("nitorch_jit::grid_pull", _pull_backward, setup_context=_setup)
torch.library.register_autograd("nitorch_jit::grid_push", _push_backward, setup_context=_setup)
torch.library.register_autograd("nitorch_jit::grid_grad", _grad_backward, setup_context=_setup)
torch.library.register_autograd("nitorch_jit::grid_pushgrad", _pushgrad_backward,
                                setup_context=_setup)
torch.library.register_autograd("nitorch_jit::grid_grad_dot", _grad_dot_backward,
                                setup_context=_setup_dot)


# ----------------------------------------------------------------------------- arguments
def _grid_dim(grid):
    check_tensor(grid, "grid")
    if grid.dim() < 2:
        raise ValueError(f"grid: expected shape [*batch, *spatial, D], got {tuple(grid.shape)}")
    dim = grid.shape[-1]
    if dim not in (1, 2, 3):
        raise ValueError(f"grid: the last dimension holds the D = 1, 2 or 3 coordinates of "
                         f"each point, got {dim} (shape {tuple(grid.shape)})")
    if grid.dim() < dim + 1:
        raise ValueError(f"grid: expected shape [*batch, *spatial({dim} dims), {dim}], "
                         f"got {tuple(grid.shape)}")
    return dim


def _check_input(input, dim, grid, argname="input", label_ok=False):
    check_tensor(input, argname, floating=False)
    if not (input.is_floating_point() or (label_ok and not input.is_complex()
                                          and input.dtype != torch.bool)):
        raise TypeError(f"{argname}: expected a floating-point tensor, got {input.dtype}")
    if input.dim() < dim + 1:
        raise ValueError(f"{argname}: expected shape [*batch, C, *spatial] with {dim} spatial "
                         f"dims (grid has D = {dim}), got {tuple(input.shape)}")
    if input.device != grid.device:
        raise ValueError(f"{argname} is on {input.device} but grid is on {grid.device}")
    if input.is_floating_point() and input.dtype != grid.dtype \
            and not (input.dtype in HALF or grid.dtype in HALF):
        raise TypeError(f"{argname} is {input.dtype} but grid is {grid.dtype}; use the same dtype")


def _prepare(input, grid, dim, input_core):
    """Broadcast batch dims; return flattened input, grid, the batch shape and the dtype."""
    if (input.dim() == input_core + 1 and grid.dim() == dim + 2
            and input.shape[0] == grid.shape[0] and input.dtype not in HALF
            and grid.dtype not in HALF):  # one batch dim each, the same: nothing to do
        return input, grid, input.shape[:1], input.dtype
    ibatch = input.shape[:input.dim() - input_core]
    gbatch = grid.shape[:grid.dim() - dim - 1]
    batch = broadcast_batch(ibatch, gbatch)
    out_dtype = input.dtype
    if _half_kernels(input):  # half data, computed in float32 by the kernels
        if grid.dtype != input.dtype:
            grid = grid.float()
    elif input.dtype in HALF or grid.dtype in HALF:  # computed in float32, cast back
        input, grid = input.float(), grid.float()
        out_dtype = out_dtype if out_dtype in HALF else torch.float32
    return flatten_batch(input, ibatch, batch), flatten_batch(grid, gbatch, batch), batch, out_dtype


def _half_kernels(input):
    """The compiled CUDA kernels take float16/bfloat16 data (with a grid of the same dtype or
    float32); the CPU kernels and the pure-PyTorch ones get float32 copies."""
    return (input.dtype in HALF and not backends.is_compiling()
            and input.device.type == "cuda" and backends.ensure(_MODULE, input.device) == "C")


# ----------------------------------------------------------------------------- public API
@docfill
def grid_pull(input, grid, interpolation="linear", bound="zero", extrapolate=False,
              prefilter=False):
    """Sample an image at voxel coordinates by spline interpolation.

    Parameters
    ----------
    input : tensor [*batch, C, *in]
        Image (its spline coefficients when ``prefilter=False``). Floating point; an integer
        tensor is taken as a label map: each label is pulled as a mask and each output
        voxel keeps the most likely label.
    grid : tensor [*batch, *out, D]
        Voxel coordinates, D = 1, 2 or 3: ``grid[..., d]`` indexes spatial dim ``d`` of
        `input`, voxel centres at 0 ... n - 1. Batch dims broadcast with those of `input`.
    %(resampling_options)s
    prefilter : bool, default False
        %(prefilter)s

    Returns
    -------
    output : tensor [*batch, C, *out]
        The image at the points of `grid`, with the dtype of `input`.

    See Also
    --------
    grid_push : its adjoint.
    grid_grad : the spatial gradient at the same points.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import grid_pull
    >>> img = torch.arange(6.).reshape(1, 1, 2, 3)     # one 2 x 3 image: img[i, j] = 3 i + j
    >>> grid = torch.tensor([[[[0.5, 1.0], [1.0, 1.5]]]])  # two points (i, j)
    >>> grid_pull(img, grid)
    tensor([[[[2.5000, 4.5000]]]])

    With ``prefilter=True`` a cubic spline interpolates the samples (the same values as
    ``scipy.ndimage.map_coordinates(x, [[1, 2, 2.5]], order=3, mode='reflect')``):

    >>> x = torch.tensor([[[0., 1., 4., 9., 16.]]])
    >>> at = torch.tensor([[[1.], [2.], [2.5]]])
    >>> grid_pull(x, at, 'cubic', 'dct2', prefilter=True).round(decimals=4)
    tensor([[[1.0000, 4.0000, 6.1142]]])
    """
    dim = _plain(input, grid)
    if dim and not prefilter:
        return call(_ops.grid_pull.default, input, grid,
                     *resampling_options(dim, interpolation, bound, extrapolate))
    dim = _grid_dim(grid)
    _check_input(input, dim, grid, label_ok=True)
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    return _pull(input, grid, dim, opts, prefilter)


@docfill
def pull_codes(input, grid, order, bound, extrapolate, prefilter=False):
    """grid_pull with its options already parsed: the code-level entry, for the front ends.

    Parameters
    ----------
    input : tensor [*batch, C, *spatial]
        Floating point, or integer labels (the most likely label is pulled, as grid_pull).
    grid : tensor [*batch, *out, D]
        Voxel coordinates. Batch dims broadcast.
    %(code_options)s

    Returns
    -------
    tensor [*batch, C, *out]
        As grid_pull: differentiable with respect to `input` and `grid`.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.codes import bound_code
    >>> from nitorch_jit.ops.pushpull import pull_codes
    >>> grid = torch.tensor([[[0.5], [2.25]]])
    >>> pull_codes(torch.arange(4.).reshape(1, 1, 4), grid, [1], [bound_code("dct2")], False)
    tensor([[[0.5000, 2.2500]]])
    """
    dim = _grid_dim(grid)
    _check_input(input, dim, grid, label_ok=True)
    if len(order) != dim or len(bound) != dim:
        raise ValueError(f"order and bound: expected {dim} codes each (grid has D = {dim}), "
                         f"got {list(order)} and {list(bound)}")
    return _pull(input, grid, dim, (tuple(order), tuple(bound), bool(extrapolate)), prefilter)


def _pull(input, grid, dim, opts, prefilter):
    if not input.is_floating_point():
        return _pull_labels(input, grid, dim, opts, prefilter)
    if prefilter:  # interpolate the samples rather than use them as spline coefficients
        input = _prefilter(input, *opts[:2])
    x, g, batch, dtype = _prepare(input, grid, dim, dim + 1)
    backends.ensure_eager(_MODULE, x.device, ("grid_pull", x.dtype, opts[0]))
    return restore_batch(call(_ops.grid_pull.default, x, g, *opts), batch, dtype)


def _pull_labels(input, grid, dim, opts, prefilter):
    labels = torch.unique(input)
    best = out = None
    for label in labels:
        w = _pull((input == label).to(grid.dtype), grid, dim, opts, prefilter)
        if out is None:
            best, out = w, torch.full_like(w, label.item(), dtype=input.dtype)
        else:
            better = w > best
            out = torch.where(better, label.to(input.dtype), out)
            best = torch.where(better, w, best)
    return out


@docfill
def grid_push(input, grid, shape=None, interpolation="linear", bound="zero", extrapolate=False,
              prefilter=False):
    """Splat values at voxel coordinates onto an image: the adjoint of grid_pull.

    Parameters
    ----------
    input : tensor [*batch, C, *out]
        The values to push, one per point of `grid`.
    grid : tensor [*batch, *out, D]
        Voxel coordinates, D = 1, 2 or 3 (see grid_pull). Batch dims broadcast.
    shape : list[int], optional
        Spatial shape of the output image (default: the spatial shape of `input`).
    %(resampling_options)s
    prefilter : bool, default False
        If True, the transposed spline prefilter is applied after splatting, so that push
        stays the exact adjoint of ``grid_pull(..., prefilter=True)``.

    Returns
    -------
    output : tensor [*batch, C, *shape]
        Each voxel receives the values of the points weighted by the spline weights.

    See Also
    --------
    grid_pull : its adjoint.
    grid_count : the push of ones.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import grid_push
    >>> grid_push(torch.tensor([[[2.]]]), torch.tensor([[[1.25]]]), shape=[4])
    tensor([[[0.0000, 1.5000, 0.5000, 0.0000]]])
    """
    dim = _plain(input, grid)
    if dim and input.shape[2:] == grid.shape[1:-1]:
        shape = shape_arg(shape, dim, input.shape[2:])
        opts = resampling_options(dim, interpolation, bound, extrapolate)
        out = call(_ops.grid_push.default, input, grid, shape, *opts)
        # the transposed filter, so that push stays the adjoint of pull
        return _prefilter(out, *opts[:2], adjoint=True) if prefilter else out
    dim = _grid_dim(grid)
    _check_input(input, dim, grid)
    if tuple(input.shape[-dim:]) != tuple(grid.shape[-dim - 1:-1]):
        raise ValueError(f"input: its spatial shape {tuple(input.shape[-dim:])} must equal the "
                         f"grid's {tuple(grid.shape[-dim - 1:-1])}")
    shape = shape_arg(shape, dim, input.shape[-dim:])
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    x, g, batch, dtype = _prepare(input, grid, dim, dim + 1)
    backends.ensure_eager(_MODULE, x.device, ("grid_push", x.dtype, opts[0]))
    out = call(_ops.grid_push.default, x, g, shape, *opts)
    if prefilter:  # the transposed filter, so that push stays the adjoint of pull
        out = _prefilter(out, *opts[:2], adjoint=True)
    return restore_batch(out, batch, dtype)


@docfill
def grid_count(grid, shape=None, interpolation="linear", bound="zero", extrapolate=False):
    """How much each voxel receives when a one is pushed from every point of a grid.

    Parameters
    ----------
    grid : tensor [*batch, *out, D]
        Voxel coordinates, D = 1, 2 or 3 (see grid_pull).
    shape : list[int], optional
        Spatial shape of the output (default: the spatial shape of `grid`).
    %(resampling_options)s

    Returns
    -------
    count : tensor [*batch, 1, *shape]
        ``grid_push`` of an image of ones.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import grid_count
    >>> grid_count(torch.tensor([[[0.5], [1.0], [1.75]]]), shape=[3])
    tensor([[[0.5000, 1.7500, 0.7500]]])
    """
    dim = _grid_dim(grid)
    ones = grid.new_ones(()).expand(grid.shape[:-dim - 1] + (1,) + grid.shape[-dim - 1:-1])
    return grid_push(ones, grid, shape, interpolation, bound, extrapolate)


@docfill
def grid_grad(input, grid, interpolation="linear", bound="zero", extrapolate=False,
              prefilter=False):
    """Spatial gradient of the spline-interpolated image at voxel coordinates.

    Parameters
    ----------
    input : floating-point tensor [*batch, C, *in]
        Image (its spline coefficients when ``prefilter=False``).
    grid : tensor [*batch, *out, D]
        Voxel coordinates, D = 1, 2 or 3 (see grid_pull). Batch dims broadcast.
    %(resampling_options)s
    prefilter : bool, default False
        %(prefilter)s

    Returns
    -------
    output : tensor [*batch, C, *out, D]
        ``output[..., d]`` is the derivative along spatial dim ``d``, per voxel step.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import grid_grad
    >>> x = torch.tensor([[[0., 1., 4., 9.]]])
    >>> grid_grad(x, torch.tensor([[[1.5], [2.25]]]))
    tensor([[[[3.],
              [5.]]]])
    """
    dim = _plain(input, grid)
    if dim and not prefilter:
        return call(_ops.grid_grad.default, input, grid,
                     *resampling_options(dim, interpolation, bound, extrapolate))
    dim = _grid_dim(grid)
    _check_input(input, dim, grid)
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    if prefilter:
        input = _prefilter(input, *opts[:2])
    x, g, batch, dtype = _prepare(input, grid, dim, dim + 1)
    backends.ensure_eager(_MODULE, x.device, ("grid_grad", x.dtype, opts[0]))
    return restore_batch(call(_ops.grid_grad.default, x, g, *opts), batch, dtype)


pull, push, count = grid_pull, grid_push, grid_count

@docfill
def resample_backward(op, grad, input, grid, interpolation="linear", bound="zero",
                      extrapolate=False, input_grad=True, grid_grad=True):
    """The gradients of grid_pull, grid_push or grid_grad, computed by the fused backward
    kernels: the code-level entry for front ends that bring their own autograd (the NITorch
    and MONAI compat modules).

    Parameters
    ----------
    op : {'pull', 'push', 'grad'}
        The forward op (a count is the push of ones).
    grad : tensor [N, C, *out] (pull), [N, C, *shape] (push) or [N, C, *out, D] (grad)
        Gradient with respect to the op's output.
    input : tensor [N, C, *in] (pull, grad) or [N, C, *out] (push)
        The forward's input (values to push, for a push).
    grid : tensor [N, *out, D]
        The forward's grid, same batch size N.
    %(resampling_options)s
    input_grad, grid_grad : bool, default True
        Which gradients to compute.

    Returns
    -------
    grad_input : tensor like `input`, or None when ``input_grad=False``
    grad_grid : tensor like `grid`, or None when ``grid_grad=False``

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.ops.pushpull import resample_backward
    >>> x = torch.tensor([[[0., 1., 4., 9.]]])
    >>> g = torch.tensor([[[1.5]]])
    >>> gi, gg = resample_backward('pull', torch.ones(1, 1, 1), x, g)
    >>> gi, gg
    (tensor([[[0.0000, 0.5000, 0.5000, 0.0000]]]), tensor([[[3.]]]))
    """
    if op not in ("pull", "push", "grad"):
        raise ValueError(f"op: expected 'pull', 'push' or 'grad', got {op!r}")
    dim = _grid_dim(grid)
    _check_input(input, dim, grid)
    check_tensor(grad, "grad")
    if input.dim() != dim + 2 or grid.dim() != dim + 2 or input.shape[0] != grid.shape[0]:
        raise ValueError(f"input {tuple(input.shape)} and grid {tuple(grid.shape)}: expected "
                         f"[N, C, *spatial] and [N, *spatial, D] with the same N")
    opts = resampling_options(dim, interpolation, bound, extrapolate)
    dtype, gdtype = input.dtype, grid.dtype
    if dtype in HALF or gdtype in HALF or grad.dtype in HALF:
        input, grid, grad = input.float(), grid.float(), grad.float()
    backends.ensure_eager(_MODULE, input.device)
    gi, gg = _grads(op, grad.to(input.dtype), input, grid, opts, bool(input_grad),
                    bool(grid_grad))
    return (None if gi is None else gi.to(dtype)), (None if gg is None else gg.to(gdtype))



def identity_grid(shape, dtype=None, device=None):
    """Voxel coordinates of every voxel of a shape: the grid that pulls an image unchanged.

    Parameters
    ----------
    shape : list[int]
        Spatial shape, D = len(shape) dims.
    dtype : torch.dtype, optional
        Default: torch's default dtype.
    device : torch.device, optional

    Returns
    -------
    grid : tensor [*shape, D]
        ``grid[i, j, ...] = (i, j, ...)``.

    Examples
    --------
    >>> from nitorch_jit import identity_grid
    >>> identity_grid([2, 3])[1, 2]
    tensor([1., 2.])
    >>> identity_grid([2, 3]).shape
    torch.Size([2, 3, 2])
    """
    shape = [int(s) for s in shape]
    dtype = dtype or torch.get_default_dtype()
    axes = [torch.arange(s, dtype=dtype, device=device) for s in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def affine_grid(mat, shape):
    """Voxel coordinates of an affine map applied to every voxel of a shape.

    Parameters
    ----------
    mat : tensor [*batch, D+1, D+1] or [*batch, D, D+1]
        Voxel-to-voxel affine matrix (output voxel -> input voxel); the last row of a square
        matrix is ignored.
    shape : list[int]
        Spatial shape of the output, D = len(shape) dims.

    Returns
    -------
    grid : tensor [*batch, *shape, D]
        ``grid[..., :] = mat[:D, :D] @ v + mat[:D, D]`` at each voxel ``v``; pass it to
        grid_pull to resample an image. Coordinate d is computed as
        ``((mat[d,D] + mat[d,0] v_0) + mat[d,1] v_1) + mat[d,2] v_2``, in this order with one
        rounding per operation: the rule affine_pull follows in its kernels, so
        ``grid_pull(x, affine_grid(mat, shape))`` equals ``affine_pull(x, mat, shape)``.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import affine_grid
    >>> mat = torch.tensor([[2., 0., 1.], [0., 1., -1.], [0., 0., 1.]])
    >>> affine_grid(mat, [2, 2])[1, 1]
    tensor([3., 0.])
    """
    check_tensor(mat, "mat")
    dim = len(shape)
    if mat.dim() < 2 or mat.shape[-1] != dim + 1 or mat.shape[-2] not in (dim, dim + 1):
        raise ValueError(f"mat: expected [*batch, {dim + 1}, {dim + 1}] or [*batch, {dim}, "
                         f"{dim + 1}] for a {dim}-D shape, got {tuple(mat.shape)}")
    from ..torch_impl.pushpull import affine_coords
    return affine_coords(mat[..., :dim, :], [int(s) for s in shape])
