"""The resampling part of MONAI's compiled module ``monai._C``, served by nitorch_jit's kernels.

MONAI's PyPI wheels ship no ``monai._C``; without it, ``BUILD_MONAI=1`` cannot turn on the
compiled paths of ``monai.networks.layers.grid_pull`` (and push / count / grad), ``Warp`` /
``DVF2DDF`` and ``Resample`` (Affine, RandAffine, Rand2D/3DElastic, Spacing, Zoom, Rotate, ...).
This module gives those paths the names they use, with MONAI's positional order
``(bound, interpolation, extrapolate)``, its enums (``BoundType`` numbers replicate 0 ... dft 5,
zero 7, with MONAI's aliases ``border`` and ``zeros``) and the C++ backward convention (the
gradients of the inputs that require grad, input first): see ``compat._resampling``.

``monai._C`` is all-or-nothing for MONAI: its filtering (bilateral, permutohedral, trainable
bilateral), LLTM and CRF layers look for their functions in the same module. Those are not
served here; calling one raises a NotImplementedError that says so.
"""
import torch

from . import _enums
from ._resampling import (NAMES as _RESAMPLING, grid_count, grid_count_backward,  # noqa: F401
                          grid_grad, grid_grad_backward, grid_pull, grid_pull_backward,
                          grid_push, grid_push_backward)

BoundType = _enums.bound_type(__name__, _enums.MONAI_BOUND_ALIASES)
InterpolationType = _enums.interpolation_type(__name__)


def max_compute_capability():
    """The newest compute capability served (major * 100 + minor), as MONAI 1.6 asks.

    nitorch_jit compiles its CUDA kernels on first use for the GPUs it sees, so every visible
    device is served: the answer is the largest of theirs, or 0 without CUDA.
    """
    if not torch.cuda.is_available():
        return 0
    caps = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    return max(major * 100 + minor for major, minor in caps)


def _unserved(name, layer):
    def fn(*args, **kwargs):
        raise NotImplementedError(
            f"monai._C.{name} ({layer}) is not available: monai._C here is nitorch_jit's compat "
            f"module, which serves only MONAI's spatial resampling (grid_pull, grid_push, "
            f"grid_count, grid_grad and their backwards). Build MONAI's own extension "
            f"(BUILD_MONAI=1, from MONAI's sources) for its filtering, LLTM and CRF layers, or "
            f"do not install the compat for MONAI (nitorch_jit.compat.install(monai=False)).")
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


_UNSERVED = {"bilateral_filter": "BilateralFilter", "phl_filter": "PHLFilter",
             "tbf_forward": "TrainableBilateralFilter", "tbf_backward": "TrainableBilateralFilter",
             "tjbf_forward": "TrainableJointBilateralFilter",
             "tjbf_backward": "TrainableJointBilateralFilter",
             "lltm_forward": "LLTM", "lltm_backward": "LLTM"}
for _name, _layer in _UNSERVED.items():
    globals()[_name] = _unserved(_name, _layer)

__all__ = _RESAMPLING + ["BoundType", "InterpolationType", "max_compute_capability"] \
    + list(_UNSERVED)
