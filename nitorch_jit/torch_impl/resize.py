"""Separable spline resizing in pure PyTorch (the TORCH twin of csrc/resize).

resize:          out = R_{D-1} ... R_0 (A_{D-1} ... A_0) in    over the last D = len(shape) dims
resize_adjoint:  out = A_0^T ... A_{D-1}^T R_0^T ... R_{D-1}^T in

R_d samples dim d at x = scale[d] * o + shift[d] (o = output index) with a B-spline of order
order[d] and bound bound[d], always extrapolating through the bound; A_d is the spline
prefilter (nitorch_jit.torch_impl.splinc) when `prefilter` is set. Per dim the taps are one
(m, order+1) table of indices and weights, computed in float64 (as the C kernels do); the
forward gathers with index_select, the adjoint scatters with index_add_.
"""
import torch

from . import splinc
from .bounds import fold
from .splines import spline_taps


def taps(order, bound, n, m, scale, shift):
    """(idx [m, K] int64, weight [m, K] float64) of the m outputs over an input of length n."""
    x = torch.arange(m, dtype=torch.float64) * scale + shift
    i0, weights = spline_taps(x, order)
    idx, wts = [], []
    for k, w in enumerate(weights[0]):
        j, s = fold(i0 + k, n, bound)
        w = w if isinstance(w, torch.Tensor) else torch.full_like(x, float(w or 0.0))
        if s is not None:
            w = w * s
            j = torch.where(s != 0, j, torch.zeros_like(j))
        idx.append(j)
        wts.append(w)
    return torch.stack(idx, -1), torch.stack(wts, -1)


def _dims(input, shape):
    D = len(shape)
    off = input.dim() - D
    # shrink first (same order as the C kernels)
    order = sorted(range(D), key=lambda i: shape[i] / input.shape[off + i])
    return off, order


def _skip(n, m, scale, shift, order):
    return n == m and scale == 1.0 and shift == 0.0 and order <= 1


def resize(input, shape, scale, shift, order, bound, prefilter):
    _check(input, shape, scale, shift, order, bound)
    x = input
    off, dims = _dims(input, shape)
    for i in dims:
        d = off + i
        n, m = x.shape[d], int(shape[i])
        filt = prefilter and splinc.plan(order[i], bound[i], n) is not None
        if not filt and _skip(n, m, scale[i], shift[i], order[i]):
            continue
        if filt:
            x = splinc.spline_coeff_nd(x, [order[i]], [bound[i]], [d], False)
        idx, w = taps(order[i], bound[i], n, m, scale[i], shift[i])
        w = w.to(device=x.device, dtype=x.dtype)
        g = x.index_select(d, idx.reshape(-1).to(x.device))
        g = g.unflatten(d, idx.shape).movedim(d + 1, -1)   # [..., m, rest..., K]
        rest = x.dim() - d - 1
        x = (g * w.reshape((m,) + (1,) * rest + (w.shape[-1],))).sum(-1)
    return x.clone(memory_format=torch.contiguous_format) if x is input else x.contiguous()


def resize_adjoint(input, shape, scale, shift, order, bound, prefilter):
    _check(input, shape, scale, shift, order, bound)
    x = input
    off, dims = _dims(input, shape)
    for i in dims:
        d = off + i
        m, n = x.shape[d], int(shape[i])
        filt = prefilter and splinc.plan(order[i], bound[i], n) is not None
        if not filt and _skip(n, m, scale[i], shift[i], order[i]):
            continue
        idx, w = taps(order[i], bound[i], n, m, scale[i], shift[i])
        w = w.to(device=x.device, dtype=x.dtype)
        xd = x.movedim(d, -1)                               # [..., m]
        vals = (xd.unsqueeze(-1) * w).flatten(-2)           # [..., m*K]
        out = xd.new_zeros(xd.shape[:-1] + (n,))
        out.index_add_(-1, idx.reshape(-1).to(x.device), vals)
        x = out.movedim(-1, d)
        if filt:
            x = splinc.spline_coeff_nd(x, [order[i]], [bound[i]], [d], True)
    return x.clone(memory_format=torch.contiguous_format) if x is input else x.contiguous()


def _check(input, shape, scale, shift, order, bound):
    D = len(shape)
    if not (len(scale) == len(shift) == len(order) == len(bound) == D) or not 1 <= D <= input.dim():
        raise ValueError("resize: shape, scale, shift, order and bound must have the same length")
    if input.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"resize: expected float32 or float64, got {input.dtype}")


KERNELS = {
    "resize": resize,
    "resize_adjoint": resize_adjoint,
}
