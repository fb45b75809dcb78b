"""The C provider: our C++/CUDA kernels of csrc/, compiled on first use by nitorch_jit.jit.

A module is one folder of csrc/ (one CPU library, one CUDA library). ``module_spec`` says how
to build it; the knowledge-free loader (nitorch_jit.jit) builds, caches and loads it.
"""
from pathlib import Path

import torch

from .. import jit
from ..jit import toolchain
from . import tuning
from .errors import BackendError
from .schemas import MODULES

NAME = "C"
_PKG = Path(__file__).resolve().parent.parent
# installed wheel: nitorch_jit/csrc; source checkout / editable install: <repo>/csrc
CSRC = _PKG / "csrc" if (_PKG / "csrc" / "core").is_dir() else _PKG.parent / "csrc"
# what makes a build fail here (a missing tool, a compile error, an unusable cache)
BUILD_ERRORS = (toolchain.ToolchainError, jit.BuildError, jit.CacheError, BackendError)


_SUFFIX = {"cpu": "*.cpp", "cuda": "*.cu"}


def sources(module, device_type):
    """The translation units of `module`'s library for `device_type`: csrc/<module>/cpu/*.cpp
    or csrc/<module>/cuda/*.cu (empty if it has none).

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> all(p.suffix == ".cpp" for p in compiled.sources("resize", "cpu"))
    True
    """
    folder = CSRC / module / device_type
    return sorted(folder.glob(_SUFFIX[device_type])) if device_type in _SUFFIX else []


def module_spec(module, device_type, archs=None):
    """Describe the library of `module` for `device_type` ('cpu' or 'cuda'): its sources
    (``sources``); headers are included from csrc/ ("core/bounds.h", "<module>/point.h").

    Parameters
    ----------
    module : str
        A module of ``nitorch_jit.backends.schemas.MODULES`` (a folder of csrc/).
    device_type : {'cpu', 'cuda'}
    archs : str or list of str, optional
        CUDA architectures (default: ``TORCH_CUDA_ARCH_LIST``, else the visible GPU).

    Returns
    -------
    nitorch_jit.jit.ModuleSpec

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> spec = compiled.module_spec("splinc", "cpu")
    >>> spec.name, spec.device
    ('splinc', 'cpu')
    """
    folder = CSRC / module
    if not folder.is_dir():
        raise BackendError(f"no sources for module {module!r} in {CSRC}")
    if device_type == "cpu":
        omp = toolchain.openmp_flags()
        # no -std flag: torch adds the standard its headers need (c++17 up to 2.x, c++20 later)
        return jit.ModuleSpec(module, "cpu", sources(module, "cpu"), [CSRC],
                              cflags=["-O3"] + omp, ldflags=list(omp))
    if device_type == "cuda":
        if not toolchain.cuda_enabled():
            raise toolchain.ToolchainError("CUDA builds are off (NI_USE_CUDA=0)")
        units = sources(module, "cuda")
        if not units:
            raise BackendError(f"module {module!r} has no CUDA sources yet")
        archs = toolchain.parse_arch_list(archs)
        # no -std for nvcc: torch.utils.cpp_extension adds the standard its torch needs
        # (c++17, or c++20 from torch 2.14 on, whose headers reject c++17)
        return jit.ModuleSpec(module, "cuda", units, [CSRC],
                              cflags=["-O3"],
                              cuda_cflags=["-O3", "--expt-relaxed-constexpr"]
                              + toolchain.arch_flags(archs),
                              archs=archs)
    raise BackendError(f"no compiled kernels for device type {device_type!r}")


def load_module(module, device_type, archs=None):
    """Build (if needed) and load the compiled library of `module`; return its path.

    Parameters
    ----------
    module : str
    device_type : {'cpu', 'cuda'}
    archs : str or list of str, optional

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.load_module("splinc", "cpu").suffix   # doctest: +SKIP
    '.so'
    """
    if device_type == "cuda":
        home, _ = toolchain.find_cuda_home()
        toolchain.check_cuda_versions(toolchain.nvcc_version(home), torch.version.cuda)
    path = jit.load(module_spec(module, device_type, archs))
    tuning.attach(path)  # the kernels' knobs, chosen in Python
    return path


def serves(module):
    """Every module has compiled sources (for CUDA, ``module_spec`` says when it has none)."""
    return module in MODULES


def register(module, device_type):
    """Build or load `module`'s library; its TORCH_LIBRARY_IMPL blocks register the kernels.

    Raises BackendError saying why the module cannot be compiled (the cause chained)."""
    try:
        return f"compiled library {load_module(module, device_type)}"
    except BUILD_ERRORS as err:
        raise BackendError(err) from err


def describe(module, device_type):
    """(ok, line): whether a build can be keyed here and whether one is cached; builds nothing."""
    try:
        key = jit.compute_key(module_spec(module, device_type))
    except BUILD_ERRORS as err:
        return False, f"cannot compile: {err}"
    return True, jit.explain(key)
