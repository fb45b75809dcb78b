"""nitorch_jit: spline resampling and friends, compiled on first use, with a pure-PyTorch twin.

``nitorch_jit.compiled_backend`` is 'C', 'TORCH' or 'MONAI'; reading it builds or loads the
core module for the CPU, so it tells the truth.
"""
from ._version import __version__  # noqa: E402,F401

from .codes import BoundType, InterpolationType  # noqa: E402
from .ops.affine import affine_pull, affine_push  # noqa: E402
from .ops.pushpull import (  # noqa: E402
    affine_grid, count, grid_count, grid_grad, grid_pull, grid_push, identity_grid, pull, push,
)
from .ops.regularisers import regulariser, regulariser_grid  # noqa: E402
from .ops.resize import prolong, resize, resize_grid, restrict  # noqa: E402
from .ops.solvers import (  # noqa: E402
    solve_field, solve_field_closedform, solve_field_fmg, solve_grid, solve_grid_closedform,
    solve_grid_fmg,
)
from .ops.splinc import spline_coeff, spline_coeff_nd  # noqa: E402
from .backends.tuning import empty_cache  # noqa: E402

__all__ = ["BoundType", "InterpolationType", "affine_grid", "affine_pull", "affine_push",
           "compiled_backend", "count", "empty_cache", "grid_count", "grid_grad", "grid_pull",
           "grid_push", "identity_grid", "prolong", "pull", "push", "regulariser",
           "regulariser_grid", "reslice", "resize", "resize_grid", "restrict", "solve_field",
           "solve_field_closedform", "solve_field_fmg", "solve_grid", "solve_grid_closedform",
           "solve_grid_fmg", "spline_coeff", "spline_coeff_nd"]


def __getattr__(name):
    if name == "ndimage":  # scipy.ndimage front end, imported on first use
        import importlib
        return importlib.import_module(".ndimage", __name__)
    if name == "reslice":  # needs nibabel (the io extra) only when called
        from .io.reslice import reslice
        return reslice
    if name == "compiled_backend":
        from . import backends
        return backends.ensure("pushpull", "cpu")
    raise AttributeError(f"module 'nitorch_jit' has no attribute {name!r}")
