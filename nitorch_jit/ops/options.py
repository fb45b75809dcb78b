"""Parse user-facing option names (interpolation orders, bounds, anchors) into kernel codes."""
import math
import numbers

import torch

# the codes are defined once, in nitorch_jit.codes
from ..codes import BOUND_CODES, ORDER_CODES, bound_code, integer_bound_message, order_code


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


def checked_per_dim(value, dim, argname, kind, is_kind, is_valid, kind_text, valid_text):
    """`dim` values from a value or a list (per_dim), each checked and converted by `kind`.

    A value that is a bool or fails `is_kind` raises TypeError("`argname`: `kind_text`, got
    <value>"); one that fails `is_valid` raises ValueError("`argname`: `valid_text`, got
    <value>").
    """
    out = []
    for v in per_dim(value, dim, argname):
        if isinstance(v, bool) or not is_kind(v):
            raise TypeError(f"{argname}: {kind_text}, got {v!r}")
        if not is_valid(v):
            raise ValueError(f"{argname}: {valid_text}, got {v!r}")
        out.append(kind(v))
    return out


def is_real(v):
    """Whether `v` is a Python int or float (the numbers the options take)."""
    return isinstance(v, (int, float))


def positive_floats(value, dim, argname):
    """`dim` finite positive floats from a number or a list (per_dim)."""
    return checked_per_dim(value, dim, argname, float, is_real,
                           lambda v: v > 0 and math.isfinite(v), "expected positive numbers",
                           "expected positive numbers")


def bound_codes(bound, dim, argname="bound"):
    """One kernel code per spatial dim from a name, a BoundType member (nitorch_jit's or a
    peer package's, by its name), or a list of them. Plain integers are refused: the
    packages number their bounds differently (see nitorch_jit.codes)."""
    out = []
    for b in per_dim(bound, dim, argname):
        code = bound_code(b)
        if code is not None:
            out.append(code)
        elif isinstance(b, numbers.Integral) and not isinstance(b, bool):
            raise TypeError(integer_bound_message(int(b), argname))
        else:
            raise ValueError(f"{argname}: unknown bound {b!r}; expected a member of "
                             f"nitorch_jit.BoundType or one of {', '.join(sorted(BOUND_CODES))}")
    return out


def order_codes(interpolation, dim, argname="interpolation"):
    """One spline order (0..7) per spatial dim from an int, a name, an InterpolationType
    member (nitorch_jit's or a peer package's, by its name), or a list of them."""
    out = []
    for o in per_dim(interpolation, dim, argname):
        code = order_code(o)
        if code is None:
            raise ValueError(f"{argname}: unknown interpolation {o!r}; expected an order 0..7, "
                             f"a member of nitorch_jit.InterpolationType or one of "
                             f"{', '.join(sorted(ORDER_CODES))}")
        out.append(code)
    return out


def _key(value):
    """A key for an option value that tells apart values that compare equal but parse
    differently (True and 1, 1 and 1.0, an IntEnum member and its int): each item goes with
    its type."""
    if isinstance(value, (list, tuple, torch.Size)):
        return (type(value),) + tuple((type(v), v) for v in value)
    return (type(value), value)


_PARSED = {}  # key -> (orders, bounds, extrapolate), for resampling_options


def resampling_options(dim, interpolation, bound, extrapolate):
    """(orders, bounds, extrapolate) for the resampling ops: tuples of kernel codes, one per
    dim, and a bool. Parsed once per distinct argument tuple (registration loops and
    DataLoader workers repeat the same few); an invalid one raises every time."""
    key = (dim, _key(interpolation), _key(bound), _key(extrapolate))
    try:
        return _PARSED[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value: parsed, not cached
        key = None
    if not isinstance(extrapolate, (bool, int)):
        raise TypeError(f"extrapolate: expected True or False, got {extrapolate!r}")
    out = (tuple(order_codes(interpolation, dim)), tuple(bound_codes(bound, dim)),
           bool(extrapolate))
    if key is not None:
        if len(_PARSED) >= 4096:  # bounded, whatever the callers pass
            _PARSED.clear()
        _PARSED[key] = out
    return out


def check_tensor(x, argname, *, floating=True):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{argname}: expected a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{argname}: expected a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{argname}: expected a non-empty tensor, got shape {tuple(x.shape)}")
    return x
