"""Portable pure-PyTorch kernels (the TORCH backend).

``KERNELS`` maps an op name of the ``nitorch_jit`` namespace to its function; it is the
plain merge of the per-module ``KERNELS`` dicts.
"""
from . import pushpull, regsolve, resize, splinc

KERNELS = {
    **pushpull.KERNELS,
    **splinc.KERNELS,
    **resize.KERNELS,
    **regsolve.KERNELS,
}
