"""Tuning knobs of the compiled kernels: chosen here, handed to each library when it loads.

The kernels never read the environment. The defaults come from these variables, read once
when this module is imported (README, "Environment variables"):

=========================  ==================  ===============================================
knob                       variable            meaning
=========================  ==================  ===============================================
``avx2``                   NI_JIT_DISABLE_AVX2 CPU AVX2+FMA paths allowed (=1 turns them off)
``regsolve_generic``       NI_JIT_REGSOLVE_GENERIC  CPU regularisers through the generic code
``cuda_tiles``             NI_JIT_CUDA_TILES   CUDA block-tiled scatter (=0 turns it off)
``cuda_index32``           NI_JIT_CUDA_INDEX   CUDA 32-bit offsets where they fit (=64: never)
``push_buffer_mb``         NI_JIT_PUSH_BUFFER_MB  CPU push: MiB of per-thread outputs
``huge_pages``             NI_JIT_HUGE_PAGES   CPU huge pages for outputs >= 32 MiB (=1: on)
``output_cache_mb``        NI_JIT_OUTPUT_CACHE_MB  CPU: MiB of freed outputs >= 32 MiB kept for
                                               reuse, per process (default 256; 0: off)
``parallel_min_work``      NI_JIT_PARALLEL_MIN_WORK  CPU: least work per thread (multiply-adds)
                                               for a kernel to go parallel (default 2^19;
                                               csrc/core/parallel.h)
=========================  ==================  ===============================================

Tests and benchmarks switch them with ``override(...)``, which reaches every loaded library.
The knobs and the block cache of large outputs are process-wide state (csrc/core/process.h):
the first library attached here keeps them, and every later one adopts its state.
"""
import contextlib
import ctypes
import os
import threading

# The order of csrc/core/tuning.h's Knob enum.
KNOBS = (
    "avx2", "regsolve_generic", "cuda_tiles", "cuda_index32", "push_buffer_mb", "huge_pages",
    "output_cache_mb", "parallel_min_work",
)
_SIZES = ("push_buffer_mb", "output_cache_mb", "parallel_min_work")  # whole numbers >= 0

# Least work per thread of a parallel region, in multiply-adds (~1 ns each): measured on a
# 2-core VM, where a region costs ~20 us idle and 4-20 ms at p95 with the other core busy
# (csrc/core/parallel.h says how the kernels use it).
PARALLEL_MIN_WORK = 1 << 19

_LOCK = threading.Lock()
_SETTERS = {}  # library path -> its nitorch_jit_set_tuning, for every library loaded
_PROCESS_STATE = []  # the address of the process state (the first library's), once known


def _flag(name, default, on_value=None):
    """A boolean from the environment: unset/empty -> default; else '0' is False, any other
    value True (or, with on_value, True exactly when the value equals it)."""
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    return v == on_value if on_value is not None else v != "0"


def _mib(name, default, unit="MiB"):
    v = os.environ.get(name, "").strip()
    try:
        return min(max(int(v), 0), 1 << 30) if v else default
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected a whole number of {unit}") from None


def _from_environment():
    return {
        "avx2": not _flag("NI_JIT_DISABLE_AVX2", False),
        "regsolve_generic": _flag("NI_JIT_REGSOLVE_GENERIC", False),
        "cuda_tiles": _flag("NI_JIT_CUDA_TILES", True),
        "cuda_index32": not _flag("NI_JIT_CUDA_INDEX", False, on_value="64"),
        "push_buffer_mb": _mib("NI_JIT_PUSH_BUFFER_MB", 256),
        "huge_pages": _flag("NI_JIT_HUGE_PAGES", False),
        "output_cache_mb": _mib("NI_JIT_OUTPUT_CACHE_MB", 256),
        "parallel_min_work": _mib("NI_JIT_PARALLEL_MIN_WORK", PARALLEL_MIN_WORK,
                                  "multiply-adds"),
    }


_VALUES = _from_environment()


def current():
    """The knobs in force, as a dict."""
    return dict(_VALUES)


def _push(setter):
    arr = (ctypes.c_int64 * len(KNOBS))(*[int(_VALUES[k]) for k in KNOBS])
    setter(arr, len(KNOBS))


def attach(path):
    """Hand the process state (knobs and block cache, csrc/core/process.h) to the library at
    `path` (already loaded): the first library's own, adopted by every later one; then the
    knobs, and again on every later change. A library without the entry points (built by an
    older version) is ignored."""
    if str(path) in _SETTERS:
        return
    try:
        lib = ctypes.CDLL(str(path))
        setter = lib.nitorch_jit_set_tuning
        state, adopt = lib.nitorch_jit_process_state, lib.nitorch_jit_adopt_process_state
    except (OSError, AttributeError):
        return
    setter.restype = ctypes.c_int64
    setter.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
    state.restype, state.argtypes = ctypes.c_void_p, []
    adopt.restype, adopt.argtypes = ctypes.c_int64, [ctypes.c_void_p]
    with _LOCK:
        if not _PROCESS_STATE:
            _PROCESS_STATE.append(state())
        else:
            rc = adopt(_PROCESS_STATE[0])
            if rc != 0:
                raise RuntimeError(f"{path} was built for process interface {rc}, unlike the "
                                   f"libraries loaded before it: a build from another version; "
                                   f"clear the cache (nitorch-jit cache clear)")
        _SETTERS[str(path)] = setter
        _push(setter)


def process_state(path):
    """The address of the process state that the library at `path` uses (tests): the same for
    every library attached; None if it has none."""
    try:
        state = ctypes.CDLL(str(path)).nitorch_jit_process_state
    except (OSError, AttributeError):
        return None
    state.restype, state.argtypes = ctypes.c_void_p, []
    return state()


def library_values(path):
    """The knobs as the library at `path` holds them (tests): dict, or None if it has none."""
    try:
        getter = ctypes.CDLL(str(path)).nitorch_jit_get_tuning
    except (OSError, AttributeError):
        return None
    getter.restype = ctypes.c_int64
    arr = (ctypes.c_int64 * len(KNOBS))()
    n = getter(arr, len(KNOBS))
    if n != len(KNOBS):
        raise RuntimeError(f"{path} has {n} tuning knobs, this package {len(KNOBS)}: a build "
                           f"from another version; clear the cache (nitorch-jit cache clear)")
    return dict(zip(KNOBS, arr))


def set_knobs(**knobs):
    """Set knobs (names of KNOBS) in every loaded library; returns the previous values."""
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown tuning knob(s) {sorted(unknown)}; expected some of {KNOBS}")
    with _LOCK:
        old = dict(_VALUES)
        for k, v in knobs.items():
            if k in _SIZES:
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise TypeError(f"{k}: expected a whole number >= 0, got {v!r}")
            elif not isinstance(v, bool):
                raise TypeError(f"{k}: expected True or False, got {v!r}")
            _VALUES[k] = v
        for setter in _SETTERS.values():
            _push(setter)
    return old


@contextlib.contextmanager
def override(**knobs):
    """``with override(cuda_tiles=False): ...`` sets knobs for the block, then restores them."""
    old = set_knobs(**knobs)
    try:
        yield
    finally:
        set_knobs(**{k: old[k] for k in knobs})


def empty_cache():
    """Give the freed large CPU outputs that the compiled libraries keep back to the OS.

    The compiled CPU libraries keep the blocks of their freed outputs of 32 MiB or more, in one
    cache per process, up to ``output_cache_mb`` MiB (``NI_JIT_OUTPUT_CACHE_MB``, default 256),
    so that the next output
    of the same size skips the page faults of fresh memory (about 11 ms per 46 MB on a 2-core
    VM). Like ``torch.cuda.empty_cache``, this returns them; outputs still in use are not
    touched, and later calls fill the cache again. The pure-PyTorch relaxation's cached grid
    layouts (index tensors on the grid's device, a few per grid size) are dropped too.

    Parameters
    ----------
    None

    Returns
    -------
    None

    Examples
    --------
    >>> import torch, nitorch_jit as nj
    >>> out = nj.spline_coeff_nd(torch.zeros(64, 512, 512), 3, dim=3)  # 64 MiB
    >>> del out  # its block is kept for the next output of that size
    >>> nj.empty_cache()  # and now given back
    """
    from ..torch_impl import regsolve  # noqa: PLC0415 -- the twin, only when asked
    regsolve.clear_caches()
    with _LOCK:
        budget = _VALUES["output_cache_mb"]
        _VALUES["output_cache_mb"] = 0
        try:
            for setter in _SETTERS.values():
                _push(setter)  # a budget of 0 trims the cache at once
        finally:
            _VALUES["output_cache_mb"] = budget
            for setter in _SETTERS.values():
                _push(setter)
