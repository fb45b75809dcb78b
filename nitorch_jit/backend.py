"""Which kernels serve each op: compiled (C), pure PyTorch (TORCH) or MONAI.

Chosen once per (module, device type) in a process, on the first call that needs it:
``NI_COMPILED_BACKEND`` = C (compiled; errors raise), TORCH (alias TS) or MONAI (MONAI's compiled
routines for the modules it can serve, see monai_backend; our C kernels for the others).
Unset means C when it can be built; else MONAI where it serves the module and ``monai._C``
loads; else TORCH. Each fallback comes with one warning saying why. Never a silent fallback.
"""
import os
import sys
import threading
import warnings
from pathlib import Path

import torch

from . import jit
from .jit import toolchain
from .ops import tuning
from .ops.library import MODULES

_PKG = Path(__file__).resolve().parent
# installed wheel: nitorch_jit/csrc; source checkout / editable install: <repo>/csrc
CSRC = _PKG / "csrc" if (_PKG / "csrc" / "core").is_dir() else _PKG.parent / "csrc"

BACKENDS = ("C", "TORCH", "MONAI")
_ALIASES = {"C": "C", "TORCH": "TORCH", "TS": "TORCH", "MONAI": "MONAI"}

_LOCK = threading.RLock()
_STATE = {}    # (module, device type) -> (backend, reason)
_WARNED = set()
_TORCH_LIB = None  # Library("nitorch_jit", "IMPL") holding the pure-PyTorch registrations


class BackendError(RuntimeError):
    """The requested backend cannot serve this call."""


def requested():
    """The backend asked for by NI_COMPILED_BACKEND, or None when unset."""
    value = os.environ.get("NI_COMPILED_BACKEND", "").strip()
    if not value:
        return None
    if value.upper() not in _ALIASES:
        raise BackendError(f"NI_COMPILED_BACKEND={value!r} is not one of C, TORCH (or TS), MONAI")
    return _ALIASES[value.upper()]


def module_spec(module, device_type, archs=None):
    """Describe the library of `module` for `device_type` ('cpu' or 'cuda'): the sources of
    csrc/<module>/cpu/*.cpp or csrc/<module>/cuda/*.cu; headers are included from csrc/
    ("core/bounds.h", "<module>/point.h")."""
    folder = CSRC / module
    if not folder.is_dir():
        raise BackendError(f"no sources for module {module!r} in {CSRC}")
    if device_type == "cpu":
        sources = sorted((folder / "cpu").glob("*.cpp"))
        omp = toolchain.openmp_flags()
        # no -std flag: torch adds the standard its headers need (c++17 up to 2.x, c++20 later)
        return jit.ModuleSpec(module, "cpu", sources, [CSRC],
                              cflags=["-O3"] + omp, ldflags=list(omp))
    if device_type == "cuda":
        if not toolchain.cuda_enabled():
            raise toolchain.ToolchainError("CUDA builds are off (NI_USE_CUDA=0)")
        sources = sorted((folder / "cuda").glob("*.cu"))
        if not sources:
            raise BackendError(f"module {module!r} has no CUDA sources yet")
        archs = toolchain.parse_arch_list(archs)
        # no -std for nvcc: torch.utils.cpp_extension adds the standard its torch needs
        # (c++17, or c++20 from torch 2.14 on, whose headers reject c++17)
        return jit.ModuleSpec(module, "cuda", sources, [CSRC],
                              cflags=["-O3"],
                              cuda_cflags=["-O3", "--expt-relaxed-constexpr"]
                              + toolchain.arch_flags(archs),
                              archs=archs)
    raise BackendError(f"no compiled kernels for device type {device_type!r}")


def load_module(module, device_type, archs=None):
    """Build (if needed) and load the compiled library of `module`; return its path."""
    if device_type == "cuda":
        home, _ = toolchain.find_cuda_home()
        toolchain.check_cuda_versions(toolchain.nvcc_version(home), torch.version.cuda)
    path = jit.load(module_spec(module, device_type, archs))
    tuning.attach(path)  # the kernels' knobs, chosen in Python
    return path


def _register_torch(module, device_type):
    global _TORCH_LIB
    from . import torch_impl
    if _TORCH_LIB is None:
        _TORCH_LIB = torch.library.Library("nitorch_jit", "IMPL")
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(device_type)
    if key is None:
        raise BackendError(f"nitorch_jit has no kernels for device type {device_type!r}")
    for op in MODULES[module]:
        _TORCH_LIB.impl(op, torch_impl.KERNELS[op], key)


def _fallback_warning(device_type, err, monai_err=None):
    if device_type in _WARNED:
        return
    _WARNED.add(device_type)
    # the short reason: most users never asked for MONAI ('nitorch-jit info' has the long one)
    also = (f" MONAI's compiled routines cannot stand in either: "
            f"{getattr(monai_err, 'short', monai_err)}." if monai_err else "")
    warnings.warn(
        f"nitorch_jit: compiled kernels are unavailable on {device_type.upper()}, so the "
        f"pure-PyTorch backend is used there (correct but several times slower). Why: {err}"
        f"{also} Fix that and restart Python to use the compiled kernels, or set "
        f"NI_COMPILED_BACKEND=TORCH to choose the pure-PyTorch backend and silence this warning "
        f"('nitorch-jit info' explains what it finds).", RuntimeWarning, stacklevel=4)


def _monai_warning(module, device_type, err):
    if ("MONAI", device_type) in _WARNED:
        return
    _WARNED.add(("MONAI", device_type))
    warnings.warn(
        f"nitorch_jit: compiled kernels are unavailable on {device_type.upper()}, so MONAI's "
        f"compiled routines (monai._C) serve {module} there. Why: {err} Fix that and restart "
        f"Python to use our compiled kernels, or set NI_COMPILED_BACKEND=MONAI to choose MONAI "
        f"and silence this warning ('nitorch-jit info' explains what it finds).",
        RuntimeWarning, stacklevel=4)


def _register_monai(module, device_type):
    from . import monai_backend  # imports MONAI only when it is asked for or fallen back on
    return monai_backend.register(module, device_type)


def monai_serves(module):
    """Whether MONAI's compiled routines can serve `module` (its other modules keep ours).

    Parameters
    ----------
    module : str
        A module of nitorch_jit.ops.library.MODULES.

    Returns
    -------
    bool

    Examples
    --------
    >>> from nitorch_jit import backend
    >>> backend.monai_serves("pushpull"), backend.monai_serves("resize")
    (True, False)
    """
    from . import monai_backend
    return module in monai_backend.SERVED


def ensure(module, device):
    """Make sure kernels of `module` are registered for `device`; return 'C'/'TORCH'/'MONAI'.

    Cheap after the first call. The first call may compile (progress goes to stderr).
    """
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    state = _STATE.get((module, device_type))  # the hot path: one dict lookup
    if state is not None:
        return state[0]
    if device_type == "meta":
        return "C"
    with _LOCK:
        state = _STATE.get((module, device_type))
        if state is not None:
            return state[0]
        want = requested()
        if want == "TORCH":
            _register_torch(module, device_type)
            state = ("TORCH", "NI_COMPILED_BACKEND=TORCH")
        elif want == "MONAI" and monai_serves(module):
            try:
                where = _register_monai(module, device_type)
            except BackendError as err:
                raise BackendError(f"NI_COMPILED_BACKEND=MONAI but {err}") from err
            state = ("MONAI", f"NI_COMPILED_BACKEND=MONAI: {where}")
        else:
            # C, unset, or MONAI for a module MONAI has no equivalent of (ours serve it)
            try:
                path = load_module(module, device_type)
                state = ("C", f"compiled library {path}"
                         + (" (no MONAI equivalent)" if want == "MONAI" else ""))
            except (toolchain.ToolchainError, jit.BuildError, jit.CacheError, BackendError) as err:
                if want == "C":
                    raise BackendError(
                        f"NI_COMPILED_BACKEND=C but module {module!r} cannot be compiled for "
                        f"{device_type.upper()}: {err}") from err
                state = None
                monai_err = None
                if want is None and monai_serves(module):
                    try:
                        where = _register_monai(module, device_type)
                        _monai_warning(module, device_type, err)
                        state = ("MONAI", f"fallback: {err}; {where}")
                    except BackendError as merr:
                        monai_err = merr
                if state is None:
                    _fallback_warning(device_type, err, monai_err)
                    _register_torch(module, device_type)
                    state = ("TORCH", f"fallback: {err}")
        _STATE[(module, device_type)] = state
        if os.environ.get("NI_SHOW_COMPILED_BACKEND", "0") not in ("", "0"):
            print(f"nitorch_jit: COMPILED_BACKEND for {module} on {device_type.upper()}: "
                  f"{state[0]} ({state[1]})", file=sys.stderr)
        return state[0]


try:
    _is_compiling = torch.compiler.is_compiling
except AttributeError:  # torch < 2.3
    _is_compiling = torch._dynamo.is_compiling


def ensure_eager(module, device):
    """ensure() for the Python entry points. Under torch.compile it does nothing: the ops'
    fake kernels call ensure() at trace time instead, so dynamo never traces the loader."""
    if not _is_compiling():
        ensure(module, device)


def status():
    """{(module, device type): (backend, reason)} for what this process has loaded so far."""
    return dict(_STATE)
