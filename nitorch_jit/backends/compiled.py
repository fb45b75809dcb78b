"""The C provider: our C++/CUDA kernels of csrc/, compiled on first use by nitorch_jit.jit.

A module is one folder of csrc/ (one CPU library, one CUDA library). ``module_spec`` says how
to build it; the knowledge-free loader (nitorch_jit.jit) builds, caches and loads it.

Issue 31 splits a module where it has a binding (``BINDINGS``): the library that torch loads is
then a thin binding (one translation unit, the only one with torch headers), and the kernels
live in torch-free libraries, one per op, dtype and variant (the module's kernels.def, read by
``kernel_table``; ``kernel_names`` lists them; an op's library may also hold ops that its calls
run beside it, ``kernel_companions``), each its own cache entry, built the first time a
call needs it: the binding asks for it by name through the resolver
set here (``kernel_spec`` says how to build one). A torch upgrade rebuilds the bindings only
(keyed on torch; on the stable ABI, ``_stable_binding_spec``, in a few seconds) and reuses the
kernel libraries.
A prebuild (``nitorch-jit build``) builds bundles instead (``bundle_names``: every variant of
one op and dtype in one library), which the resolver takes when it finds them.
"""
import ctypes
import functools
import re
import threading
import warnings
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
# the device types we have kernels for; a tensor on any other (mps, xpu, ...) gets the
# pure-PyTorch twins (backends.plan), never a copy to the CPU
DEVICE_TYPES = tuple(_SUFFIX)

# (module, device type) -> the binding's translation unit, for the modules split in a binding
# and torch-free kernel libraries
BINDINGS = {("pushpull", "cpu"): "binding.cpp", ("regsolve", "cpu"): "binding.cpp",
            ("splinc", "cpu"): "binding.cpp", ("resize", "cpu"): "binding.cpp",
            ("pushpull", "cuda"): "binding.cpp", ("splinc", "cuda"): "binding.cpp",
            ("resize", "cuda"): "binding.cpp", ("regsolve", "cuda"): "binding.cpp"}
# the kernel tables: csrc/<module>/<device>/kernels.def, read here and by the C++ (variants.h)
_KERNEL_OP = re.compile(r"^NJ_KERNEL_OP\((\w+),\s*(\w+),\s*(0b[01]+|\d+)\)", re.MULTILINE)
_FLOAT64_FAST = re.compile(r"^NJ_FLOAT64_FAST\((0b[01]+|\d+)\)", re.MULTILINE)
_KERNEL_WITH = re.compile(r"^NJ_KERNEL_WITH\((\w+),\s*(\w+)\)", re.MULTILINE)
_CUDA_KERNEL = re.compile(r"^NJ_CUDA_KERNEL\((\w+),\s*(\w+),\s*(\w+),\s*(0b[01]+|\d+)\)",
                          re.MULTILINE)
# dtype names of kernel specialisations -> the C type the kernel is compiled for
KERNEL_DTYPES = {"float32": "float", "float64": "double"}
# CUDA kernel libraries: one per op and dtype (bit d of a kernels.def dtype mask: Dtype d)
CUDA_DTYPES = ["float16", "bfloat16", "float32", "float64"]
# fast-path variants: every dim of order o in d dims; "any": the generic path
FAST_VARIANTS = [(o, d) for o in range(4) for d in (2, 3)]


@functools.lru_cache(maxsize=None)
def kernel_table(module, device_type):
    """The kernels of `module` on `device_type`, from its kernels.def: (ops, float64 mask) with
    ops a dict op -> (translation unit, fast-path mask); ({}, 0) where it has none."""
    path = CSRC / module / device_type / "kernels.def"
    if not path.is_file():
        return {}, 0
    text = path.read_text()
    ops = {op: (f"{unit}.cpp", int(mask, 0)) for op, unit, mask in _KERNEL_OP.findall(text)}
    f64 = _FLOAT64_FAST.findall(text)
    return ops, int(f64[0], 0) if f64 else 0


@functools.lru_cache(maxsize=None)
def kernel_companions(module, device_type):
    """The ops whose kernel library also holds others, from kernels.def (``NJ_KERNEL_WITH``):
    a dict op -> tuple of the ops its library holds besides it (reg_precond's and reg_relax_'s
    hold reg_matvec, which their calls run too). Only between ops of one translation unit
    without fast paths (a library is one compile of one unit, with one variant).

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.kernel_companions("regsolve", "cpu")["reg_precond"]
    ('reg_matvec',)
    """
    path = CSRC / module / device_type / "kernels.def"
    if not path.is_file():
        return {}
    ops = kernel_table(module, device_type)[0]
    with_ = {}
    for op, other in _KERNEL_WITH.findall(path.read_text()):
        if op not in ops or other not in ops or other == op or ops[op][0] != ops[other][0] \
                or ops[op][1] or ops[other][1]:
            raise BackendError(f"{path}: NJ_KERNEL_WITH({op}, {other}): expected two ops of "
                               f"NJ_KERNEL_OP in one translation unit, without fast paths")
        with_.setdefault(op, ())
        with_[op] += (other,)
    return with_


@functools.lru_cache(maxsize=None)
def cuda_kernel_table(module):
    """The CUDA kernels of `module`, from csrc/<module>/cuda/kernels.def: a dict op ->
    (translation unit, dtype mask); empty where the module's CUDA library is not split."""
    path = CSRC / module / "cuda" / "kernels.def"
    if not path.is_file():
        return {}
    return {op: (f"{unit}.cu", int(mask, 0))
            for op, unit, _, mask in _CUDA_KERNEL.findall(path.read_text())}


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
    """Every kernel specialisation of `module` on `device_type`,
    ``'<module>.<op>.<dtype>.<variant>'`` with variant ``'any'`` (the generic path) or ``'o1d3'``
    (every dim of order 1 in 3-D), or ``'cuda'`` for a CUDA kernel library (every path of that
    op and dtype), as the binding asks for them; empty where the module has no kernel table.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.kernel_names("pushpull", "cpu")[:2]
    ['pushpull.grid_pull.float32.any', 'pushpull.grid_pull.float32.o0d2']
    """
    if device_type == "cuda":
        return [f"{module}.{op}.{dt}.cuda" for op, (_, mask) in cuda_kernel_table(module).items()
                for d, dt in enumerate(CUDA_DTYPES) if mask >> d & 1]
    ops, f64_mask = kernel_table(module, device_type)
    names = []
    for op, (_, mask) in ops.items():
        for dt in KERNEL_DTYPES:
            m = _fast_mask(mask, f64_mask, dt)
            names.append(f"{module}.{op}.{dt}.any")
            names += [f"{module}.{op}.{dt}.o{o}d{d}" for o, d in FAST_VARIANTS if m >> o & 1]
    return names


def bundle_names(module, device_type):
    """The kernel libraries that ``nitorch-jit build`` prebuilds for `module` on `device_type`:
    on CPU one per op and dtype, ``'<module>.<op>.<dtype>.all'``, that serves every variant of
    that op and dtype (its fast paths and the generic path, chosen per call as before the
    split), or the generic library ``'...any'`` where the op and dtype have no fast path; on
    CUDA the kernel libraries themselves (one per op and dtype already). A bundle parses its
    headers once for all its variants: the prebuild costs about a third of what building every
    specialisation would.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.bundle_names("pushpull", "cpu")[:2]
    ['pushpull.grid_pull.float32.all', 'pushpull.grid_pull.float64.all']
    >>> compiled.bundle_names("splinc", "cpu")
    ['splinc.spline_coeff.float32.any', 'splinc.spline_coeff.float64.any']
    """
    if device_type == "cuda":
        return kernel_names(module, device_type)
    ops, f64_mask = kernel_table(module, device_type)
    return [f"{module}.{op}.{dt}.{'all' if _fast_mask(mask, f64_mask, dt) else 'any'}"
            for op, (_, mask) in ops.items() for dt in KERNEL_DTYPES]


def bundle_of(name):
    """The name of the bundle (``bundle_names``) that serves kernel `name`: itself for a CUDA
    kernel or a generic path without fast paths.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.bundle_of("pushpull.grid_pull.float32.o1d3")
    'pushpull.grid_pull.float32.all'
    """
    module, op, dtype, variant = name.split(".")
    if variant == "cuda":
        return name
    mask = kernel_table(module, "cpu")[0].get(op, (None, 0))[1]
    fast = _fast_mask(mask, kernel_table(module, "cpu")[1], dtype)
    return f"{module}.{op}.{dtype}.{'all' if fast else 'any'}"


def _fast_mask(mask, f64_mask, dtype):
    return mask & f64_mask if dtype == "float64" else mask


def kernel_spec(name, device_type=None, archs=None):
    """Describe the torch-free library of one kernel specialisation.

    Parameters
    ----------
    name : str
        ``'<module>.<op>.<dtype>.<variant>'``, as ``kernel_names`` lists and the binding asks,
        or a bundle of ``bundle_names`` (variant ``'all'``).
    device_type : {'cpu', 'cuda'}, optional
        Default: 'cuda' for a name of variant ``'cuda'``, else 'cpu'.
    archs : str or list of str, optional
        CUDA only: the architectures (default: ``TORCH_CUDA_ARCH_LIST``, else the visible GPU).

    Returns
    -------
    nitorch_jit.jit.ModuleSpec
        A torch-free library (``torch_free``), for ``jit.load``.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> spec = compiled.kernel_spec("pushpull.grid_pull.float32.o1d3")
    >>> spec.torch_free, spec.sources[0].name, spec.label
    (True, 'pull.cpp', 'grid_pull for 3-D order-1 float32 (CPU)')
    """
    parts = name.split(".")
    module = parts[0]
    if device_type is None:
        device_type = "cuda" if parts[-1] == "cuda" else "cpu"
    if name not in kernel_names(module, device_type) \
            and name not in bundle_names(module, device_type):
        raise BackendError(f"no kernel {name!r} for {device_type}: expected a name of "
                           f"kernel_names(module, {device_type!r}) or bundle_names, like "
                           f"'pushpull.grid_pull.float32.o1d3'")
    _, op, dtype, variant = parts
    if device_type == "cuda":
        return _cuda_kernel_spec(module, op, dtype, archs)
    source = kernel_table(module, device_type)[0][op][0]
    held = kernel_companions(module, device_type).get(op, ())
    flags = ["-O3", "-std=c++17", "-DNJ_KERNEL_LIB", f"-DNJ_KERNEL_{op}"] \
        + [f"-DNJ_KERNEL_{other}" for other in held] + [f"-DNJ_KERNEL_T={KERNEL_DTYPES[dtype]}"] \
        + toolchain.sanitizer_flags()  # NI_JIT_SANITIZE: keyed like any flag
    ops = " and ".join((op,) + held)
    if variant == "all":  # no NJ_KERNEL_ORDER: every variant, chosen per call
        what = f"{op} for {dtype} (every path, {device_type.upper()})"
    elif variant == "any":
        flags.append("-DNJ_KERNEL_ORDER=-1")
        generic = "generic path, " if kernel_table(module, device_type)[0][op][1] else ""
        what = f"{ops} for {dtype} ({generic}{device_type.upper()})"
    else:
        order, dim = int(variant[1]), int(variant[3])
        flags += [f"-DNJ_KERNEL_ORDER={order}", f"-DNJ_KERNEL_DIM={dim}"]
        what = f"{op} for {dim}-D order-{order} {dtype} ({device_type.upper()})"
    return jit.ModuleSpec(name, device_type, [CSRC / module / device_type / source], [CSRC],
                          cflags=flags, torch_free=True, direct=True, label=what)


def _cuda_kernel_spec(module, op, dtype, archs):
    """A CUDA kernel library: one op for one dtype, compiled by nvcc for `archs`; keyed on the
    toolkit, the archs, the host compiler and the sources, not on torch."""
    if not toolchain.cuda_enabled():
        raise toolchain.ToolchainError("CUDA builds are off (NI_USE_CUDA=0)")
    archs = toolchain.parse_arch_list(archs)
    source = CSRC / module / "cuda" / cuda_kernel_table(module)[op][0]
    # -std=c++17: no torch header here, so no standard of torch's to follow
    flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-DNJ_KERNEL_LIB",
             f"-DNJ_KERNEL_{op}", f"-DNJ_KERNEL_DTYPE={CUDA_DTYPES.index(dtype)}"]
    return jit.ModuleSpec(f"{module}.{op}.{dtype}.cuda", "cuda", [source], [CSRC], cflags=flags,
                          archs=archs, torch_free=True, direct=True,
                          label=f"{op} for {dtype} (CUDA)")


# The first torch whose stable ABI has all that a binding uses (empty, from_blob with a deleter,
# parallel_for, the thread count, narrow, contiguous, zero_); below it, the classic headers.
STABLE_ABI_FROM = (2, 13)


def binding_abi(asked=None):
    """Which torch API the bindings are built on here: ``'stable'`` (the LibTorch stable ABI,
    torch >= 2.13: a binding compiles in a few seconds, so a torch upgrade's rebuild is cheap) or
    ``'classic'`` (the ATen headers). ``NI_JIT_BINDING=classic`` asks for the classic headers
    on any torch.

    Parameters
    ----------
    asked : {'stable', 'classic'}, optional
        Ask for one instead of ``NI_JIT_BINDING`` (an error if this torch cannot have it).

    Returns
    -------
    str
        ``'stable'`` or ``'classic'``.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.binding_abi() in ("stable", "classic")
    True
    """
    import os
    if asked is None:
        asked = os.environ.get("NI_JIT_BINDING", "").strip().lower()
        if asked not in ("", "stable", "classic"):
            raise BackendError(f"NI_JIT_BINDING must be 'stable' or 'classic', got {asked!r}")
    elif asked not in ("stable", "classic"):
        raise BackendError(f"asked must be 'stable' or 'classic', got {asked!r}")
    version = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if asked == "classic" or version < STABLE_ABI_FROM:
        if asked == "stable":
            raise BackendError(f"NI_JIT_BINDING=stable needs torch >= "
                               f"{'.'.join(map(str, STABLE_ABI_FROM))}, this is {torch.__version__}")
        return "classic"
    return "stable"


def _stable_binding_spec(module, device_type, sources_):
    """A binding on the stable ABI of STABLE_ABI_FROM: one compiler call, no worker process
    (the loader adds torch's headers and libraries); keyed on this torch like a classic one,
    so an upgrade rebuilds it, in seconds."""
    # -O0: a binding is glue (checks, outputs, one call into a kernel library), and a torch
    # upgrade waits for its rebuild. Measured here for pushpull's: 2.2 s at -O0, 2.9 s at -Og
    # (4.2 s at -O3; 1.2 s of it parsing headers); a one-point pull's call took 16 us either
    # way, the noise of this machine
    return jit.ModuleSpec(module, device_type, sources_, [CSRC],
                          cflags=["-O0", "-std=c++20", "-DNJ_STABLE_ABI"]
                          + toolchain.sanitizer_flags(), direct=True,
                          stable_abi=".".join(map(str, STABLE_ABI_FROM)),
                          label=f"the binding of '{module}' for {device_type.upper()} "
                                f"(stable ABI)")


def _stable_cuda_binding_spec(module, sources_):
    """A CUDA binding on the stable ABI: host code only (csrc/<module>/cuda/binding.cpp, the
    current device and stream through core/torch_api_cuda.h), one nvcc call that compiles it
    with the host compiler, no arch (the loader adds the CUDA include folder, the shared CUDA
    runtime that torch loaded, and torch's headers and libraries); keyed on this torch and the
    toolkit, so a torch upgrade rebuilds it, in seconds. The host compiler gets the -O0 of the
    CPU binding (``_stable_binding_spec``)."""
    return jit.ModuleSpec(module, "cuda", sources_, [CSRC],
                          cflags=["-Xcompiler=-O0", "-std=c++20", "-DNJ_STABLE_ABI"],
                          direct=True, stable_abi=".".join(map(str, STABLE_ABI_FROM)),
                          label=f"the binding of '{module}' for CUDA (stable ABI)")


def module_spec(module, device_type, archs=None, abi=None):
    """Describe the library of `module` for `device_type` ('cpu' or 'cuda'): its sources
    (``sources``); headers are included from csrc/ ("core/bounds.h", "<module>/point.h").

    Parameters
    ----------
    module : str
        A module of ``nitorch_jit.backends.schemas.MODULES`` (a folder of csrc/).
    device_type : {'cpu', 'cuda'}
    archs : str or list of str, optional
        CUDA architectures (default: ``TORCH_CUDA_ARCH_LIST``, else the visible GPU).
    abi : {'stable', 'classic'}, optional
        The API of a binding, CPU or CUDA (default: ``binding_abi()``).

    Returns
    -------
    nitorch_jit.jit.ModuleSpec
        What ``load_module`` builds and loads.

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
        if (module, device_type) in BINDINGS and binding_abi(abi) == "stable":
            return _stable_binding_spec(module, device_type, sources(module, "cpu"))
        # at::parallel_for of the classic headers is inline OpenMP: the flags of the runtime
        # torch loaded, or none (one thread) where that would be a second runtime (toolchain)
        omp = toolchain.openmp()
        # no -std flag: torch adds the standard its headers need (c++17 up to 2.x, c++20 later)
        san = toolchain.sanitizer_flags()  # compiled and linked with them
        label = f"the binding of '{module}' for CPU (classic headers)" \
            if (module, device_type) in BINDINGS else ""
        return jit.ModuleSpec(module, "cpu", sources(module, "cpu"), [CSRC],
                              cflags=["-O3"] + list(omp.cflags) + san,
                              ldflags=list(omp.ldflags) + san, label=label)
    if device_type == "cuda":
        if not toolchain.cuda_enabled():
            raise toolchain.ToolchainError("CUDA builds are off (NI_USE_CUDA=0)")
        units = sources(module, "cuda")
        if not units:
            raise BackendError(f"module {module!r} has no CUDA sources yet")
        # every module's CUDA library is a binding (BINDINGS): no device code, so no arch, and
        # one binding serves every GPU. The flag only keeps cpp_extension from asking torch for
        # a GPU (none is needed here). The archs are read all the same: the kernel libraries
        # the binding asks for will need them, and a bad list falls back now rather than fail
        # a call later
        toolchain.parse_arch_list(archs)
        if binding_abi(abi) == "stable":
            return _stable_cuda_binding_spec(module, units)
        return jit.ModuleSpec(module, "cuda", units, [CSRC], cflags=["-Og"],
                              cuda_cflags=["-arch=sm_90"],
                              label=f"the binding of '{module}' for CUDA (classic headers)")
    raise BackendError(f"no compiled kernels for device type {device_type!r} (only for "
                       f"{', '.join(DEVICE_TYPES)}); the pure-PyTorch kernels run there "
                       f"(NI_COMPILED_BACKEND unset or TORCH)")


def threads(module, device_type, abi=None):
    """How the CPU kernels of `module` run threads here, in one line (``nitorch-jit info``);
    compiles nothing but, on the classic headers, OpenMP's probe (``toolchain.openmp``).

    Parameters
    ----------
    module : str
    device_type : {'cpu', 'cuda'}
    abi : {'stable', 'classic'}, optional
        Default: ``binding_abi()``.

    Returns
    -------
    str
        Whether they run threads, on whose pool, and why.

    Examples
    --------
    >>> from nitorch_jit.backends import compiled
    >>> compiled.threads("resize", "cpu", abi="stable")  # doctest: +ELLIPSIS
    "on, torch's own: the binding calls torch's parallel_for ...
    """
    if device_type != "cpu":
        return "not applicable (GPU)"
    if binding_abi(abi) == "stable" and (module, device_type) in BINDINGS:
        runtime = toolchain.torch_openmp_runtime()
        return (f"on, torch's own: the binding calls torch's parallel_for (its stable ABI; "
                f"torch's runtime: {runtime or 'not OpenMP'}); OpenMP is off in what we "
                f"compile, with any compiler, so no second OpenMP runtime is loaded")
    omp = toolchain.openmp()
    return ("on: " if omp.on else "") + omp.why


_OMP_WARNED = []


def _warn_openmp(module, device_type):
    """One warning per process when a classic binding is built without the OpenMP it would
    want (toolchain.openmp says why): it runs on one thread. Never a failed build."""
    if device_type != "cpu" or _OMP_WARNED or binding_abi() == "stable":
        return
    omp = toolchain.openmp()
    if omp.warn:
        _OMP_WARNED.append(module)
        # at the op's call, as the fallback warning (register, _choose, ensure, ensure_eager)
        warnings.warn(f"nitorch_jit: OpenMP {omp.why}", RuntimeWarning, stacklevel=6)


def likely_kernel(module, device_type, op, dtype, order):
    """The kernel specialisation a call of `op` will most likely ask for: a prediction, from the
    module's kernels.def, of the rule the binding applies (pushpull/cpu/variants.h: a fast path
    when every dim has the same order, that order has one for the op and dtype, and D is 2 or 3;
    else the generic path; on CUDA, the library of the op, or else of the module's first
    kernel, for the dtype). Used only to build that kernel while the binding builds; a wrong
    guess costs a build, never a wrong result (the binding asks for what it needs).

    Parameters
    ----------
    module, device_type, op : str
    dtype : torch.dtype
    order : sequence of int
        The interpolation order of each spatial dim.

    Returns
    -------
    str or None
        A name of ``kernel_names``, or None when the module has no such kernel.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.backends import compiled
    >>> compiled.likely_kernel("pushpull", "cpu", "grid_pull", torch.float32, [1, 1, 1])
    'pushpull.grid_pull.float32.o1d3'
    """
    if device_type == "cuda":
        table = cuda_kernel_table(module)
        dt = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
              torch.float64: "float64"}.get(dtype)
        # a kernel of that op's name; else the module's first (splinc and resize name their
        # kernels by launcher: filter, gather)
        kernel = op if op in table else next(iter(table), None)
        if kernel is None or dt is None or not table[kernel][1] >> CUDA_DTYPES.index(dt) & 1:
            return None
        return f"{module}.{kernel}.{dt}.cuda"
    ops, f64_mask = kernel_table(module, device_type)
    dt = {torch.float32: "float32", torch.float64: "float64"}.get(dtype)
    if op not in ops or dt is None:
        return None
    mask = ops[op][1] & (f64_mask if dt == "float64" else ~0)
    order = [int(o) for o in order]
    if len(order) in (2, 3) and len(set(order)) == 1 and 0 <= order[0] <= 3 \
            and mask >> order[0] & 1:
        return f"{module}.{op}.{dt}.o{order[0]}d{len(order)}"
    return f"{module}.{op}.{dt}.any"


def prefetch(module, device_type, names):
    """Start building the kernels `names` (a list; None entries are skipped), a thread each,
    when the binding of `module` is not loaded yet (its build runs meanwhile): a cold first call
    waits for the longest of them, not their sum. A name that the library of another of `names`
    holds (``kernel_companions``) is not built on its own: the call finds it in that library.
    Returns the threads started."""
    if (module, device_type) not in BINDINGS:
        return []
    names = [n for n in dict.fromkeys(names) if n is not None]
    names = [n for n in names if not any(_holds(other, n) for other in names)]
    started = []
    for name in names:
        with _RESOLVE_LOCK:
            if name in _PREFETCHED:
                continue
            _PREFETCHED.add(name)

        def build(name=name):
            try:
                _kernel_library(name, device_type)
            except jit.BuildError as err:  # the compiler fails on our kernels: register()
                _PREFETCH_FAILED[name] = err  # falls back, rather than the user's call failing
            except BUILD_ERRORS:
                pass  # the call that needs it builds it again and says why

        thread = threading.Thread(target=build, name=f"nitorch_jit prefetch {name}",
                                  daemon=True)
        thread.start()
        started.append(thread)
        _PREFETCH_THREADS.setdefault((module, device_type), []).append(thread)
    return started


def _holds(carrier, name):
    """Whether the library of kernel `carrier` holds kernel `name` too (a CPU kernel of the
    same module, dtype and variant that kernels.def lists with it)."""
    return carrier in _carriers(name)


_PREFETCHED = set()  # kernels whose build a first call started (compiled.prefetch)
_PREFETCH_THREADS = {}  # (module, device type) -> the threads of those builds
_PREFETCH_FAILED = {}   # kernel -> the BuildError of its prefetched build
_HELD = set()        # kernels whose library this process has loaded
_RESOLVE_LOCK = threading.Lock()
_BINDINGS = {}   # binding path -> its ctypes handle (kept open), for load_kernel
_RESOLVERS = {}  # binding path -> the ctypes callback it holds (kept alive)


def load_kernel(binding, name, device_type=None, archs=None):
    """Build (if needed) and load the kernel library `name` (for `archs`, CUDA only), and bind
    its entry in the binding loaded from path `binding`. Returns the kernel library's path."""
    path = _kernel_library(name, device_type, archs)
    entry = "nj_" + "_".join(name.split(".")[:2])  # nj_pushpull_grid_pull
    address = ctypes.cast(getattr(jit.handle(path), entry), ctypes.c_void_p)
    _BINDINGS[str(binding)].nitorch_jit_bind_kernel(name.encode(), address)
    return path


def _kernel_library(name, device_type=None, archs=None):
    """Load the library that serves kernel `name`, building nothing that a cached library
    already holds: the library of another kernel that holds it (``kernel_companions``) where
    this process has loaded or started building that one (waiting for its build); else a
    cached library that holds it: a prebuilt bundle, its own, or another kernel's; else its
    own library, built."""
    with _RESOLVE_LOCK:
        carrier = next((c for c in sorted(_HELD | _PREFETCHED) if _holds(c, name)), None)
    if carrier is not None:
        return _kernel_library(carrier, device_type, archs)
    bundle = bundle_of(name)
    for other in dict.fromkeys([bundle, name] + _carriers(name)):
        try:
            path = jit.load(kernel_spec(other, device_type, archs), build=False)
        except BUILD_ERRORS:
            path = None  # one that does not load: the call's own library serves it
        if path is not None:
            break
    else:
        other, path = name, jit.load(kernel_spec(name, device_type, archs))
    with _RESOLVE_LOCK:
        _HELD.add(other)
    return path


def _carriers(name):
    """The kernels whose libraries hold kernel `name` besides their own op."""
    module, op, dtype, variant = name.split(".")
    if variant == "cuda":
        return []
    return [f"{module}.{other}.{dtype}.{variant}"
            for other, held in kernel_companions(module, "cpu").items() if op in held]


_RESOLVER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                  ctypes.c_int64)


def _attach_binding(path, device_type, archs=None):
    """Hand the binding at `path` its resolver: a call that finds no kernel for its
    specialisation asks here, and we build or load it (core/binding.h), for the `archs` that
    the binding was loaded for (CUDA)."""
    with _RESOLVE_LOCK:
        if str(path) in _BINDINGS:
            return
        lib = ctypes.CDLL(str(path))
        lib.nitorch_jit_bind_kernel.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.nitorch_jit_bind_kernel.restype = ctypes.c_int64
        lib.nitorch_jit_set_resolver.argtypes = [ctypes.c_void_p]
        lib.nitorch_jit_set_resolver.restype = ctypes.c_int64

        def resolve(name, err, err_len):
            try:  # no lock of ours: jit.load locks per entry, so threads build side by side
                load_kernel(path, name.decode(), device_type, archs)
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
        _attach_binding(path, device_type, archs)
    return path


def serves(module):
    """Every module has compiled sources (for CUDA, ``module_spec`` says when it has none)."""
    return module in MODULES


def register(module, device_type):
    """Build or load `module`'s library; its TORCH_LIBRARY_IMPL blocks register the kernels.

    Raises BackendError saying why the module cannot be compiled (the cause chained): a tool
    is missing, the binding does not build, or the compiler fails on a kernel that the first
    call started building beside it (``prefetch``): then the walk goes on to the next provider
    rather than the user's call failing."""
    try:
        path = load_module(module, device_type)
    except BUILD_ERRORS as err:
        raise BackendError(err) from err
    _warn_openmp(module, device_type)
    # the kernels the first call needs: it would wait for them anyway (the resolver's lock)
    for thread in _PREFETCH_THREADS.pop((module, device_type), []):
        thread.join()
    failed = [err for name, err in list(_PREFETCH_FAILED.items()) if name.split(".")[0] == module
              and name.endswith(".cuda") == (device_type == "cuda")]
    if failed:
        raise BackendError(failed[0]) from failed[0]
    return f"compiled library {path}"


def describe(module, device_type):
    """(ok, line): whether a build can be keyed here and whether one is cached; builds nothing."""
    try:
        key = jit.compute_key(module_spec(module, device_type))
    except BUILD_ERRORS as err:
        return False, f"cannot compile: {err}"
    return True, jit.explain(key)
