"""The TORCH provider: the pure-PyTorch twins of nitorch_jit/torch_impl, registered as the
kernels of the ``nitorch_jit`` ops. Always available; correct but several times slower."""
from .errors import BackendError
from .schemas import MODULES, register_kernels

NAME = "TORCH"
_LIBS = {}  # (module, device type) -> Library("nitorch_jit", "IMPL") holding the twins
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def serves(module):
    """Every module has a pure-PyTorch twin."""
    return module in MODULES


def register(module, device_type):
    """Register the twins of `module`'s ops for `device_type`; return where they come from."""
    from .. import torch_impl  # the twins import torch only; loaded when first chosen
    key = _DISPATCH_KEYS.get(device_type)
    if key is None:
        raise BackendError(f"nitorch_jit has no kernels for device type {device_type!r}")
    if (module, device_type) not in _LIBS:  # the caller (backends.ensure) holds its lock
        _LIBS[(module, device_type)] = register_kernels(module, torch_impl.KERNELS, key)
    return "the pure-PyTorch kernels (nitorch_jit.torch_impl)"


def describe(module, device_type):
    """(True, line): the twins always load."""
    if device_type not in _DISPATCH_KEYS:
        return False, f"no kernels for device type {device_type!r}"
    return True, "the pure-PyTorch kernels (nitorch_jit.torch_impl)"
