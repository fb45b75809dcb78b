"""Parse user-facing option names (interpolation orders, bounds, anchors) into kernel codes."""
import math

import torch

BOUND_CODES = {
    "replicate": 0, "nearest": 0, "border": 0, "repeat": 0,
    "dct1": 1, "mirror": 1,
    "dct2": 2, "reflect": 2, "reflection": 2, "neumann": 2,
    "dst1": 3, "antimirror": 3,
    "dst2": 4, "antireflect": 4, "dirichlet": 4,
    "dft": 5, "wrap": 5, "circular": 5,
    "zero": 6, "zeros": 6, "constant": 6,
}
BOUND_NAMES = ["replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero"]

ORDER_CODES = {
    "nearest": 0, "zeroth": 0, "linear": 1, "first": 1, "quadratic": 2, "second": 2,
    "cubic": 3, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
}


def per_dim(value, dim, argname):
    """A value or a list of up to `dim` values -> `dim` values (the last one repeated)."""
    if isinstance(value, (list, tuple, torch.Size)):
        values = list(value)
        if not values:
            raise ValueError(f"{argname}: expected a value or a list of up to {dim} values, got []")
        if len(values) > dim:
            raise ValueError(f"{argname}: got {len(values)} values for {dim} spatial dimensions")
        return values + values[-1:] * (dim - len(values))
    return [value] * dim


def positive_floats(value, dim, argname):
    """`dim` finite positive floats from a number or a list (per_dim)."""
    out = []
    for v in per_dim(value, dim, argname):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{argname}: expected positive numbers, got {v!r}")
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{argname}: expected positive numbers, got {v!r}")
        out.append(float(v))
    return out


def bound_codes(bound, dim, argname="bound"):
    """One kernel code per spatial dim from a name, a code, or a list of them."""
    out = []
    for b in per_dim(bound, dim, argname):
        if isinstance(b, str) and b.lower() in BOUND_CODES:
            out.append(BOUND_CODES[b.lower()])
        elif isinstance(b, int) and not isinstance(b, bool) and 0 <= b < len(BOUND_NAMES):
            out.append(b)
        else:
            raise ValueError(f"{argname}: unknown bound {b!r}; expected one of "
                             f"{', '.join(sorted(BOUND_CODES))}")
    return out


def order_codes(interpolation, dim, argname="interpolation"):
    """One spline order (0..7) per spatial dim from a name, an int, or a list of them."""
    out = []
    for o in per_dim(interpolation, dim, argname):
        if isinstance(o, str) and o.lower() in ORDER_CODES:
            out.append(ORDER_CODES[o.lower()])
        elif isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= 7:
            out.append(int(o))
        else:
            raise ValueError(f"{argname}: unknown interpolation {o!r}; expected an order 0..7 or "
                             f"one of {', '.join(sorted(ORDER_CODES))}")
    return out


def check_tensor(x, argname, *, floating=True):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{argname}: expected a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{argname}: expected a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{argname}: expected a non-empty tensor, got shape {tuple(x.shape)}")
    return x
