"""What the ops of several families share: batch broadcasting, the half dtypes, the shape
argument, and the call below autograd. Names are parsed to codes in options.py."""
import math

import torch

from .. import backends

HALF = (torch.float16, torch.bfloat16)

# a private torch guard: where a torch version lacks it, the op is called plainly
_BELOW_AUTOGRAD = getattr(torch._C, "_AutoDispatchBelowAutograd", None)


def call(op, x, g, *args):
    """op(x, g, *args). When no gradient can flow (grad mode off, or neither tensor requires
    one) it enters the dispatcher below autograd, as torch.library's autograd kernel itself
    does then: that skips the Python autograd layer, most of a small call's cost."""
    if (torch.is_grad_enabled() and (x.requires_grad or g.requires_grad)) \
            or _BELOW_AUTOGRAD is None or backends.is_compiling():
        return op(x, g, *args)
    with _BELOW_AUTOGRAD():
        return op(x, g, *args)


def restore_batch(out, batch, dtype):
    """The kernels' [B, ...] output with the caller's batch dims and dtype."""
    if len(batch) != 1:
        out = out.reshape(tuple(batch) + out.shape[1:])
    return out if out.dtype == dtype else out.to(dtype)


def flatten_batch(x, xbatch, batch):
    """[*xbatch, *core] -> [prod(batch), *core] with no copy when x has no batch of its own."""
    core = x.shape[len(xbatch):]
    n = math.prod(batch)
    if all(s == 1 for s in xbatch):
        return x.reshape((1,) + tuple(core)).expand((n,) + tuple(core))
    return x.expand(tuple(batch) + tuple(core)).reshape((n,) + tuple(core))


def broadcast_batch(a, b):
    # torch.broadcast_shapes would import sympy (over 1 s) on the first call
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
        raise ValueError(f"input batch dims {a} and grid batch dims {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def shape_arg(shape, dim, default):
    if shape is None:
        return list(default)
    if isinstance(shape, torch.Size):
        shape = list(shape)
    if isinstance(shape, int):
        shape = [shape]
    try:
        shape = [int(s) for s in shape]
    except (TypeError, ValueError):
        raise TypeError(f"shape: expected a list of {dim} ints, got {shape!r}") from None
    if len(shape) != dim or any(s <= 0 for s in shape):
        raise ValueError(f"shape: expected {dim} positive sizes, got {shape}")
    return shape
