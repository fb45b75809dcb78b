"""What the pure-PyTorch kernels' argument checks share, written once: the dtypes they take,
the ranges of the order and bound codes, and c10's names of dtypes (what the compiled kernels'
messages print). Each family's checks (pushpull.py, splinc.py, resize.py, regsolve.py) mirror
its C++ counterpart (csrc/pushpull/checks.h, csrc/lines/checks.h, csrc/regsolve/host.h) in its
order and words; the tests hold each pair to one list of bad calls."""
import functools

import torch

from ..codes import BOUND_NAMES
from .splines import MAX_ORDER

FLOATS = (torch.float32, torch.float64)
NUM_BOUNDS = len(BOUND_NAMES)  # bound codes are 0 .. NUM_BOUNDS - 1
__all__ = ["FLOATS", "MAX_ORDER", "NUM_BOUNDS", "dtype_name"]


@functools.lru_cache(maxsize=None)
def dtype_name(dtype):
    """c10's name of a dtype, as the compiled kernels' messages print it (Float, Int, Half...).

    Parameters
    ----------
    dtype : torch.dtype

    Returns
    -------
    str

    Examples
    --------
    >>> import torch
    >>> dtype_name(torch.int32), dtype_name(torch.float64)
    ('Int', 'Double')
    """
    try:  # the legacy type names are c10's: torch.IntTensor, torch.cuda.HalfTensor, ...
        return torch.empty(0, dtype=dtype).type().rsplit(".", 1)[-1][:-len("Tensor")]
    except Exception:  # noqa: BLE001 -- a dtype without a legacy type name
        return str(dtype).replace("torch.", "")
