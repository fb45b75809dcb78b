"""The C provider: our C++/CUDA kernels of csrc/, compiled on first use by nitorch_jit.jit.

A module is one folder of csrc/ (one CPU library, one CUDA library). ``module_spec`` says how
to build it; the knowledge-free loader (nitorch_jit.jit) builds, caches and loads it.

Issue 31 splits a module where it has a binding (``BINDINGS``): the library that torch loads is
then a thin binding (one translation unit, the only one with torch headers), and the kernels
live in torch-free libraries, one per op and dtype (``KERNELS``), each its own cache entry,
built the first time a call needs it: the binding asks for it by name through the resolver
set here (``kernel_spec`` says how to build one). A torch upgrade rebuilds the binding only.
"""
import ctypes
import threading
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

# (module, device type) -> the binding's translation unit, for the modules split in a binding
# and torch-free kernel libraries
BINDINGS = {("pushpull", "cpu"): "binding.cpp"}
# module -> device type -> op -> the translation unit that holds its kernel (NJ_KERNEL_<op>)
KERNELS = {
    "pushpull": {"cpu": {
        "grid_pull": "pull.cpp", "grid_grad": "pull.cpp", "affine_pull": "pull.cpp",
        "grid_push": "push.cpp", "grid_pushgrad": "push.cpp", "affine_push": "push.cpp",
        "grid_pull_backward": "push.cpp", "grid_grad_dot": "dot.cpp",
        "grid_hess_dot": "dot.cpp", "affine_grad_dot": "dot.cpp",
    }},
}
# dtype names of kernel specialisations -> the C type the kernel is compiled for
KERNEL_DTYPES = {"float32": "float", "float64": "double"}


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
    if device_type not in _SUFFIX:
        return []
    binding = BINDINGS.get((module, device_type))
    if binding is not None:
        return [folder / binding]
    return sorted(folder.glob(_SUFFIX[device_type]))


def kernel_names(module, device_type):
    """Every kernel specialisation of `module` on `device_type`, ``'<module>.<op>.<dtype>'``
    (empty where the module has no binding).

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.kernel_names("pushpull", "cpu")[0]
    'pushpull.grid_pull.float32'
    """
    ops = KERNELS.get(module, {}).get(device_type, {})
    return [f"{module}.{op}.{dt}" for op in ops for dt in KERNEL_DTYPES]


def kernel_spec(name, device_type="cpu"):
    """Describe the torch-free library of one kernel specialisation.

    Parameters
    ----------
    name : str
        ``'<module>.<op>.<dtype>'``, as ``kernel_names`` lists and the binding asks.
    device_type : {'cpu'}

    Returns
    -------
    nitorch_jit.jit.ModuleSpec

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> spec = compiled.kernel_spec("pushpull.grid_pull.float32")
    >>> spec.torch_free, spec.sources[0].name
    (True, 'pull.cpp')
    """
    try:
        module, op, dtype = name.split(".")
        source = KERNELS[module][device_type][op]
        ctype = KERNEL_DTYPES[dtype]
    except (ValueError, KeyError):
        raise BackendError(f"no kernel {name!r} for {device_type}: expected one of "
                           f"'<module>.<op>.<dtype>' in {kernel_names('pushpull', 'cpu')[:2]}"
                           f"...") from None
    flags = ["-O3", "-DNJ_KERNEL_LIB", f"-DNJ_KERNEL_{op}", f"-DNJ_KERNEL_T={ctype}"]
    return jit.ModuleSpec(name, device_type, [CSRC / module / device_type / source], [CSRC],
                          cflags=flags, torch_free=True,
                          label=f"{op} for {dtype} ({device_type.upper()} kernel of '{module}')")


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


_RESOLVE_LOCK = threading.Lock()
_BINDINGS = {}   # binding path -> its ctypes handle (kept open), for load_kernel
_RESOLVERS = {}  # binding path -> the ctypes callback it holds (kept alive)


def load_kernel(binding, name, device_type="cpu"):
    """Build (if needed) and load the kernel library `name`, and bind its entry in the binding
    loaded from path `binding`. Returns the kernel library's path."""
    spec = kernel_spec(name, device_type)
    path = jit.load(spec)
    entry = "nj_" + name.rsplit(".", 1)[0].replace(".", "_")  # nj_pushpull_grid_pull
    address = ctypes.cast(getattr(jit.handle(path), entry), ctypes.c_void_p)
    _BINDINGS[str(binding)].nitorch_jit_bind_kernel(name.encode(), address)
    return path


_RESOLVER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                  ctypes.c_int64)


def _attach_binding(path, device_type):
    """Hand the binding at `path` its resolver: a call that finds no kernel for its
    specialisation asks here, and we build or load it (core/binding.h)."""
    with _RESOLVE_LOCK:
        if str(path) in _BINDINGS:
            return
        lib = ctypes.CDLL(str(path))
        lib.nitorch_jit_bind_kernel.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.nitorch_jit_bind_kernel.restype = ctypes.c_int64
        lib.nitorch_jit_set_resolver.argtypes = [ctypes.c_void_p]
        lib.nitorch_jit_set_resolver.restype = ctypes.c_int64

        def resolve(name, err, err_len):
            try:
                with _RESOLVE_LOCK:
                    load_kernel(path, name.decode(), device_type)
                return 0
            except BaseException as e:  # noqa: BLE001 -- nothing may unwind into C++
                text = (f"{type(e).__name__}: {e}" if not isinstance(e, BUILD_ERRORS)
                        else str(e)).encode()[: max(0, err_len - 1)]
                ctypes.memmove(err, text + b"\0", len(text) + 1)
                return 1

        callback = _RESOLVER_TYPE(resolve)
        _BINDINGS[str(path)] = lib
        _RESOLVERS[str(path)] = callback
        lib.nitorch_jit_set_resolver(ctypes.cast(callback, ctypes.c_void_p))


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
    if (module, device_type) in BINDINGS:
        _attach_binding(path, device_type)
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
