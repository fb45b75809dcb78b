"""Who serves each op: our compiled kernels (C), MONAI's compiled routines (MONAI) or the
pure-PyTorch twins (TORCH).

Chosen once per (module, device type) in a process, on the first call that needs it, by one
ordered walk over the providers (``plan``): ``NI_COMPILED_BACKEND`` = C (compiled; errors
raise), TORCH (alias TS) or MONAI (MONAI's routines for the modules it serves, our C kernels
for the others). Unset means C when it can be built; else MONAI where it serves the module
and ``monai._C`` loads; else TORCH. Each fallback comes with one warning saying why. Never a
silent fallback. ``nitorch-jit info`` previews the same walk with each provider's
``describe`` (which never builds).

Every provider (compiled, monai, portable) has ``NAME``, ``serves(module)``,
``register(module, device_type) -> where`` (raises BackendError saying why not) and
``describe(module, device_type) -> (ok, line)``. Only this module imports the providers;
nothing under backends/ imports ops/.
"""
import os
import threading
import warnings

import torch

from ..jit import progress
from . import compiled, monai, portable
from .errors import BackendError, MonaiUnavailable
from .schemas import MODULES

__all__ = ["BACKENDS", "BackendError", "MODULES", "MonaiUnavailable", "chosen", "ensure",
           "ensure_eager", "is_compiling", "plan", "preview", "requested", "status"]

BACKENDS = ("C", "TORCH", "MONAI")
_ALIASES = {"C": "C", "TORCH": "TORCH", "TS": "TORCH", "MONAI": "MONAI"}

_LOCK = threading.RLock()
_STATE = {}    # (module, device type) -> (backend, reason)
_WARNED = set()


def requested():
    """The backend asked for by ``NI_COMPILED_BACKEND``, or None when unset.

    Returns
    -------
    {'C', 'TORCH', 'MONAI'} or None

    Examples
    --------
    >>> import os
    >>> from nitorch_jit import backends
    >>> backends.requested() == (os.environ.get("NI_COMPILED_BACKEND", "").upper() or None)
    True
    """
    value = os.environ.get("NI_COMPILED_BACKEND", "").strip()
    if not value:
        return None
    if value.upper() not in _ALIASES:
        raise BackendError(f"NI_COMPILED_BACKEND={value!r} is not one of C, TORCH (or TS), MONAI")
    return _ALIASES[value.upper()]


def plan(module, want, device_type=None):
    """The providers to try for `module`, in order: the policy, written once.

    Parameters
    ----------
    module : str
        A module of ``MODULES``.
    want : {'C', 'TORCH', 'MONAI'} or None
        What ``NI_COMPILED_BACKEND`` asks for (``requested()``).
    device_type : str, optional
        The tensors' device type. One we have no compiled kernels for (``mps``, ``xpu``,
        anything but ``compiled.DEVICE_TYPES``) gets the pure-PyTorch twins, which run on
        that device (never a copy to the CPU): no compiler is asked and no fallback warned
        about, as there is nothing to fix. Asked for C or MONAI by name there, the one
        provider's error says that the device has no such kernels.

    Returns
    -------
    list of provider modules
        One provider when the user named it (its failure is an error), else the fallbacks.

    Examples
    --------
    >>> from nitorch_jit import backends
    >>> [p.NAME for p in backends.plan("pushpull", None)]
    ['C', 'MONAI', 'TORCH']
    >>> [p.NAME for p in backends.plan("resize", "MONAI")]  # MONAI has no resize
    ['C', 'TORCH']
    >>> [p.NAME for p in backends.plan("pushpull", None, "mps")]
    ['TORCH']
    >>> [p.NAME for p in backends.plan("pushpull", "C", "mps")]  # its error names the device
    ['C']
    """
    if want == "TORCH" or (want is None and device_type is not None
                           and device_type not in compiled.DEVICE_TYPES):
        return [portable]
    if want == "MONAI" and monai.serves(module):
        return [monai]
    if want == "C":
        return [compiled]
    # C, unset, or MONAI for a module MONAI has no equivalent of: ours, then the fallbacks
    # (MONAI's only when nothing was asked for)
    fallbacks = (compiled, monai, portable) if want is None else (compiled, portable)
    return [p for p in fallbacks if p.serves(module)]


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
        f"('nitorch-jit info' explains what it finds).", RuntimeWarning, stacklevel=5)


def _monai_warning(module, device_type, err):
    if ("MONAI", device_type) in _WARNED:
        return
    _WARNED.add(("MONAI", device_type))
    warnings.warn(
        f"nitorch_jit: compiled kernels are unavailable on {device_type.upper()}, so MONAI's "
        f"compiled routines (monai._C) serve {module} there. Why: {err} Fix that and restart "
        f"Python to use our compiled kernels, or set NI_COMPILED_BACKEND=MONAI to choose MONAI "
        f"and silence this warning ('nitorch-jit info' explains what it finds).",
        RuntimeWarning, stacklevel=5)


def _asked_error(want, module, device_type, err):
    if want == "C":
        return BackendError(f"NI_COMPILED_BACKEND=C but module {module!r} cannot be compiled "
                            f"for {device_type.upper()}: {err}")
    return BackendError(f"NI_COMPILED_BACKEND={want} but {err}")


def _provider_error(provider, err):
    """A provider's failure as a BackendError: its own, or any other exception (an ImportError,
    a bug of ours) wrapped so that the walk goes on and the cause keeps its traceback."""
    if isinstance(err, BackendError):
        return err
    wrapped = BackendError(f"the {provider.NAME} provider failed unexpectedly with "
                           f"{type(err).__name__}: {err} (a bug of nitorch_jit or a broken "
                           f"install: please report it)")
    wrapped = wrapped.with_traceback(err.__traceback__)  # where it was raised
    wrapped.__cause__ = err
    wrapped.short = str(wrapped)  # the fallback warning's short reason (see MonaiUnavailable)
    return wrapped


def _all_failed(module, device_type, failed):
    """No provider could serve: the first provider's error, the others chained as its causes
    (each with the traceback of where it was raised)."""
    first = failed[0][1]
    err = BackendError(f"no backend can serve {module} on {device_type.upper()}: {first}")
    link = err
    for provider, other in failed[1:]:
        cause = BackendError(f"{provider.NAME} could not serve it either: {other}")
        cause = cause.with_traceback(other.__traceback__)
        link.__cause__, link = cause, cause
    return err


def _choose(module, device_type, want):
    """Walk plan(): the first provider that registers wins; returns (name, reason)."""
    failed = []  # (provider, error) of those tried before
    for provider in plan(module, want, device_type):
        try:
            where = provider.register(module, device_type)
        except Exception as err:  # anything: a provider's failure never ends the walk here
            err = _provider_error(provider, err)
            if want == provider.NAME:  # asked for by name: no fallback
                raise _asked_error(want, module, device_type, err) from err
            failed.append((provider, err))
            continue
        if not failed:
            if want == provider.NAME and provider is not compiled:
                return provider.NAME, f"NI_COMPILED_BACKEND={want}: {where}"
            note = " (no MONAI equivalent)" if want == "MONAI" else ""
            if device_type not in compiled.DEVICE_TYPES:
                note += f" (no compiled kernels for {device_type.upper()})"
            return provider.NAME, where + note
        first = failed[0][1]  # why our compiled kernels could not serve
        if provider is monai:
            _monai_warning(module, device_type, first)
        else:
            _fallback_warning(device_type, first, failed[1][1] if len(failed) > 1 else None)
        return provider.NAME, f"fallback: {first}; {where}"
    raise _all_failed(module, device_type, failed)


def ensure(module, device):
    """Make sure kernels of `module` are registered for `device`; return who serves them.

    Cheap after the first call (one dict lookup). The first call may compile (progress goes
    to stderr).

    Parameters
    ----------
    module : str
        A module of ``MODULES``: 'pushpull', 'splinc', 'resize' or 'regsolve'.
    device : torch.device or str

    Returns
    -------
    {'C', 'TORCH', 'MONAI'}

    Examples
    --------
    >>> from nitorch_jit import backends
    >>> backends.ensure("splinc", "cpu") in backends.BACKENDS
    True
    """
    device_type = device.type if isinstance(device, torch.device) else torch.device(device).type
    state = _STATE.get((module, device_type))  # the hot path: one dict lookup
    if state is not None:
        return state[0]
    if device_type == "meta":
        return "C"
    with _LOCK:
        state = _STATE.get((module, device_type))
        if state is None:
            state = _choose(module, device_type, requested())
            _STATE[(module, device_type)] = state
            if os.environ.get("NI_SHOW_COMPILED_BACKEND", "0") not in ("", "0"):
                # whole, beside the lines of a library still building in another thread
                progress.say(f"COMPILED_BACKEND for {module} on {device_type.upper()}: "
                             f"{state[0]} ({state[1]})")
        return state[0]


def preview(module, device_type):
    """What the first call of `module` on `device_type` would use, and why; builds nothing.

    The walk of ``ensure`` with each provider's ``describe`` in place of ``register``.

    Returns
    -------
    (str, str)
        'C', 'MONAI', 'TORCH' or 'error', and a line saying why.

    Examples
    --------
    >>> from nitorch_jit import backends
    >>> backends.preview("resize", "cpu")[0] in ("C", "TORCH", "error")
    True
    """
    try:
        want = requested()
    except BackendError as err:
        return "error", str(err)
    failed = []
    providers = plan(module, want, device_type)
    for provider in providers:
        ok, line = provider.describe(module, device_type)
        if ok:
            if provider.NAME == want and provider is not compiled:
                return provider.NAME, f"NI_COMPILED_BACKEND={want}: {line}"
            if device_type not in compiled.DEVICE_TYPES:
                line += f" (no compiled kernels for {device_type.upper()})"
            return provider.NAME, "; ".join(failed + [line]) if failed else line
        if len(providers) == 1:
            return "error", line
        # the compiled provider's reason in full; a fallback's in a word (info's MONAI
        # section has its long one)
        failed.append(line if provider is compiled else f"{provider.NAME} unavailable")
    return "error", "; ".join(failed)


def chosen(module, device_type):
    """(backend, reason) once `module` is chosen on `device_type` in this process, else None.

    Examples
    --------
    >>> from nitorch_jit import backends
    >>> backends.chosen("resize", "meta") is None
    True
    """
    return _STATE.get((module, device_type))


try:
    is_compiling = torch.compiler.is_compiling
except AttributeError:  # torch < 2.3
    is_compiling = torch._dynamo.is_compiling


def ensure_eager(module, device, kernel=None):
    """ensure() for the Python entry points. Under torch.compile it does nothing: the ops'
    fake kernels call ensure() at trace time instead, so dynamo never traces the loader.

    `kernel`, optional: (op, dtype, orders) of the call (op: a name or a ``torch.ops`` op, or
    a tuple of those: every op the call runs), so that on the first call the C provider can build those kernels while it
    builds the module's binding (``compiled.prefetch``)."""
    if is_compiling():
        return
    if kernel is not None:
        prefetch(module, device, kernel)
    ensure(module, device)


def prefetch(module, device, kernel):
    """Start building, in the background, the kernels that a coming call of `module` runs,
    where `module` is not loaded on `device` yet (nothing otherwise, and nothing under
    torch.compile): for a function that will call a second module later (full multigrid:
    resize's), so that its kernels build beside the first module's.

    Parameters
    ----------
    module : str
    device : torch.device or str
    kernel : tuple
        (op, dtype, orders), as ``ensure_eager`` takes it.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit import backends
    >>> backends.prefetch("resize", "cpu", ("resize", torch.float32, [1, 1]))  # doctest: +SKIP
    """
    if is_compiling() or (module, _device_type(device)) in _STATE:
        return
    _prefetch(module, _device_type(device), kernel)


def _device_type(device):
    return device.type if isinstance(device, torch.device) else torch.device(device).type


def _prefetch(module, device_type, kernel):
    """Start the build of the kernel a first call needs, where the C provider is in the plan."""
    try:
        if compiled not in plan(module, requested(), device_type):
            return
    except BackendError:
        return  # ensure() says why
    ops, dtype, order = kernel
    names = [op if isinstance(op, str) else op.__name__.split(".")[0]  # an op of torch.ops
             for op in (ops if isinstance(ops, (tuple, list)) else (ops,))]
    compiled.prefetch(module, device_type,
                      [compiled.likely_kernel(module, device_type, name, dtype, order)
                       for name in names])


def status():
    """{(module, device type): (backend, reason)} for what this process has loaded so far.

    Examples
    --------
    >>> from nitorch_jit import backends
    >>> isinstance(backends.status(), dict)
    True
    """
    return dict(_STATE)


# what tests, scripts and the CLI use by name
CSRC, module_spec, load_module, tuning = compiled.CSRC, compiled.module_spec, \
    compiled.load_module, compiled.tuning
