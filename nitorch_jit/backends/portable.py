"""The TORCH provider: the pure-PyTorch twins of nitorch_jit/torch_impl, registered as the
kernels of the ``nitorch_jit`` ops. Always available; correct but several times slower."""
import warnings

import torch

from .errors import BackendError
from .schemas import MODULES, register_kernels

NAME = "TORCH"
_LIBS = {}  # (module, device type) -> Library("nitorch_jit", "IMPL") holding the twins
# the twins are plain PyTorch: they run where torch runs, on the tensors' own device (never a
# copy to the CPU). Device types with a dispatch key of their own in torch:
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU", "hpu": "HPU",
                  "mtia": "MTIA", "xla": "XLA", "ipu": "IPU", "ve": "VE", "lazy": "Lazy",
                  "hip": "HIP", "maia": "MAIA"}


def dispatch_key(device_type):
    """The dispatch key that the twins register for on `device_type`, or None where torch has
    none we know ('meta' takes the ops' fake kernels instead).

    Parameters
    ----------
    device_type : str
        'cpu', 'cuda', 'mps', 'xpu', ..., or the name a PrivateUse1 backend was renamed to.

    Returns
    -------
    str or None
        A dispatch key's name, as torch.library takes it ('CPU', 'PrivateUse1', ...).

    Examples
    --------
    >>> from nitorch_jit.backends import portable
    >>> portable.dispatch_key("mps"), portable.dispatch_key("privateuseone")
    ('MPS', 'PrivateUse1')
    """
    if device_type in _DISPATCH_KEYS:
        return _DISPATCH_KEYS[device_type]
    try:
        renamed = torch._C._get_privateuse1_backend_name()
    except AttributeError:  # an old torch
        renamed = "privateuseone"
    return "PrivateUse1" if device_type in ("privateuseone", renamed) else None


def serves(module):
    """Every module has a pure-PyTorch twin."""
    return module in MODULES


def register(module, device_type):
    """Register the twins of `module`'s ops for `device_type`; return where they come from."""
    from .. import torch_impl  # the twins import torch only; loaded when first chosen
    key = dispatch_key(device_type)
    if key is None:
        raise BackendError(f"nitorch_jit has no kernels for device type {device_type!r}: "
                           f"torch has no dispatch key for it that nitorch_jit knows; move "
                           f"the tensors to a device of cpu, cuda, mps, xpu")
    if (module, device_type) not in _LIBS:  # the caller (backends.ensure) holds its lock
        with warnings.catch_warnings():
            # a compiled library that loaded but whose kernels do not build registered first
            # (compiled.register): the twins replace its kernels, which torch warns about;
            # our fallback warning already says why
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered")
            _LIBS[(module, device_type)] = register_kernels(module, torch_impl.KERNELS, key)
    return "the pure-PyTorch kernels (nitorch_jit.torch_impl)"


def describe(module, device_type):
    """(True, line): the twins load on every device type with a dispatch key."""
    if dispatch_key(device_type) is None:
        return False, f"no kernels for device type {device_type!r}"
    return True, "the pure-PyTorch kernels (nitorch_jit.torch_impl)"
