"""Separable spline resizing in pure PyTorch (the TORCH twin of csrc/resize).

resize:          out = R_{D-1} ... R_0 (A_{D-1} ... A_0) in    over the last D = len(shape) dims
resize_adjoint:  out = A_0^T ... A_{D-1}^T R_0^T ... R_{D-1}^T in

R_d samples dim d at x = scale[d] * o + shift[d] (o = output index) with a B-spline of order
order[d] and bound bound[d], always extrapolating through the bound; A_d is the spline
prefilter (nitorch_jit.torch_impl.splinc) when `prefilter` is set. Per dim the taps are one
(m, order+1) table of indices and weights, computed in float64 (as the C kernels do); the
forward gathers with index_select, the adjoint scatters with index_add_.
"""
import math

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


def _passes(name, input, shape, scale, shift, order, bound, prefilter, adjoint):
    """Check the call, then yield the dims a resize (`adjoint`: its adjoint) works on, in the C
    kernels' order, less those it copies: (tensor dim d, spline dim i, its length n before the
    forward resize and m after it, whether it is prefiltered, the taps (index [m, K], weight
    [m, K] in the input's dtype))."""
    check_resize(input, shape, scale, shift, order, bound, name)
    off, dims = _dims(input, shape)
    for i in dims:
        d = off + i
        n, m = input.shape[d], int(shape[i])  # (other passes leave dim d's length as it is)
        if adjoint:
            n, m = m, n
        filt = prefilter and splinc.plan(order[i], bound[i], n) is not None
        if not filt and _skip(n, m, scale[i], shift[i], order[i]):
            continue
        idx, w = taps(order[i], bound[i], n, m, scale[i], shift[i])
        yield d, i, n, m, filt, idx, w.to(device=input.device, dtype=input.dtype)


def resize(input, shape, scale, shift, order, bound, prefilter):
    x = input
    for d, i, n, m, filt, idx, w in _passes("resize", input, shape, scale, shift, order, bound,
                                            prefilter, adjoint=False):
        if filt:
            x = splinc.coeff(x, [order[i]], [bound[i]], [d], False)
        g = x.index_select(d, idx.reshape(-1).to(x.device))
        g = g.unflatten(d, idx.shape).movedim(d + 1, -1)   # [..., m, rest..., K]
        rest = x.dim() - d - 1
        x = (g * w.reshape((m,) + (1,) * rest + (w.shape[-1],))).sum(-1)
    return x.clone(memory_format=torch.contiguous_format) if x is input else x.contiguous()


def resize_adjoint(input, shape, scale, shift, order, bound, prefilter):
    x = input
    for d, i, n, m, filt, idx, w in _passes("resize_adjoint", input, shape, scale, shift, order,
                                            bound, prefilter, adjoint=True):
        xd = x.movedim(d, -1)                               # [..., m]
        vals = (xd.unsqueeze(-1) * w).flatten(-2)           # [..., m*K]
        out = xd.new_zeros(xd.shape[:-1] + (n,))
        out.index_add_(-1, idx.reshape(-1).to(x.device), vals)
        x = out.movedim(-1, d)
        if filt:
            x = splinc.coeff(x, [order[i]], [bound[i]], [d], True)
    return x.clone(memory_format=torch.contiguous_format) if x is input else x.contiguous()


_INT32_MAX = 2 ** 31 - 1  # the tap tables hold int32 indices


def check_resize(input, shape, scale, shift, order, bound, name):
    """csrc/lines/checks.h check_resize_args, in its order and words (less the device check:
    the twin runs on any device); the dtype, order and bound rules are splinc's."""
    splinc.check_float(input, name)
    D, nd = len(shape), input.dim()
    if not 1 <= D <= nd:
        raise RuntimeError(f"{name}: got {D} spatial sizes for a {nd}-D input")
    if not len(scale) == len(shift) == len(order) == len(bound) == D:
        raise RuntimeError(f"{name}: shape, scale, shift, order and bound must have the same "
                           "length")
    for m, o, b, a, s in zip(shape, order, bound, scale, shift):
        if m < 1:
            raise RuntimeError(f"{name}: output sizes must be >= 1, got {m}")
        splinc.check_codes(o, b, name)
        if not (math.isfinite(a) and math.isfinite(s)):
            raise RuntimeError(f"{name}: scale and shift must be finite")
    sizes = input.shape[nd - D:]
    if min(sizes) < 1:
        raise RuntimeError(f"{name}: empty spatial dim in input")
    if max(max(sizes), max(shape)) >= _INT32_MAX:
        raise RuntimeError(f"{name}: spatial sizes must be below 2^31 - 1")


KERNELS = {
    "resize": resize,
    "resize_adjoint": resize_adjoint,
}
