"""The TORCH provider: the pure-PyTorch twins of nitorch_jit/torch_impl, registered as the
kernels of the ``nitorch_jit`` ops. Always available; correct but several times slower."""
import torch

from .errors import BackendError
from .schemas import MODULES

NAME = "TORCH"
_LIB = None  # Library("nitorch_jit", "IMPL") holding the pure-PyTorch registrations
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def serves(module):
    """Every module has a pure-PyTorch twin."""
    return module in MODULES


def register(module, device_type):
    """Register the twins of `module`'s ops for `device_type`; return where they come from."""
    global _LIB
    from .. import torch_impl  # the twins import torch only; loaded when first chosen
    key = _DISPATCH_KEYS.get(device_type)
    if key is None:
        raise BackendError(f"nitorch_jit has no kernels for device type {device_type!r}")
    if _LIB is None:
        _LIB = torch.library.Library("nitorch_jit", "IMPL")
    for op in MODULES[module]:
        _LIB.impl(op, torch_impl.KERNELS[op], key)
    return "the pure-PyTorch kernels (nitorch_jit.torch_impl)"


def describe(module, device_type):
    """(True, line): the twins always load."""
    if device_type not in _DISPATCH_KEYS:
        return False, f"no kernels for device type {device_type!r}"
    return True, "the pure-PyTorch kernels (nitorch_jit.torch_impl)"
