"""The MONAI backend: the spline-resampling ops served by MONAI's compiled routines (monai._C).

MONAI's ``monai._C`` extension holds a port of NITorch's pull / push / count / grad kernels. It
exists only when MONAI is built from its sources with ``BUILD_MONAI=1``: the wheels and source
distributions on PyPI carry no compiled code. With ``NI_COMPILED_BACKEND=MONAI`` (or as the
fallback when our own kernels cannot be compiled) the seven ``torch.ops.nitorch_jit`` ops of the
``pushpull`` module are registered here as thin wrappers around ``monai._C``; every other
module keeps our kernels, since MONAI has no equivalent of them.

How our integer codes map onto MONAI's: orders agree (0 nearest ... 7 seventh); bounds agree
for replicate 0 ... dft 5, but our ``zero`` is 6 and MONAI's is 7 (the C++ numbering, where 6
is the unexported ``sliding``). ``monai._C`` takes its own enum objects, never integers, so
each code is translated by name (``to_monai``).

What MONAI's port gets wrong is refused with an error naming the option, never computed
(measured against our kernels, finite differences and adjointness in
tests/backends/test_monai.py, MONAI 1.5 sources built against torch 2.13):

- 3-D with a different order along dims 1 and 2: its generic kernel uses dim 1's order for
  dim 2 (a NITorch bug it inherits).
- ``grid_grad`` in 1-D at orders 2 to 7: wrong values (orders 0 and 1 and 2-D / 3-D are right).
- the gradients of ``grid_grad`` (``grid_grad_backward``: our ``grid_pushgrad`` and
  ``grid_hess_dot``, also used by the second derivatives of pull and push) unless every dim is
  nearest or linear: wrong values, varying from call to call (NaN included), and no second
  spline derivatives at orders 5 to 7.
- more than 1024 channels, except with nearest or linear interpolation in every dim (its
  generic kernel keeps the channels in a fixed stack buffer).

Everything else agrees with our C kernels to 1e-10 in float64: pull, push, count, grad and
pull's gradients in 1-3 dims, orders 0 to 7, every bound, extrapolate on and off.

Known differences that need no refusal: at ``extrapolate=False`` a point exactly at
``n - 1 + 0.05`` is outside for MONAI and inside for us; nearest interpolation rounds half
away from zero (we round half up), which differs only at negative half-integer coordinates;
with ``extrapolate=True`` a NaN coordinate gives NaN or an arbitrary voxel with MONAI, 0 with
ours.
"""
import importlib
import threading

import torch

from ..codes import BOUND_NAMES
from .errors import BackendError, MonaiUnavailable
from .schemas import register_kernels

NAME = "MONAI"
SERVED = ("pushpull",)  # the modules of ours that MONAI's routines can serve

MAX_CHANNELS = 1024  # MONAI_MAX_NUM_CHANNELS of its generic kernel

BUILD_HINT = (
    "MONAI's compiled routines exist only when MONAI is built from its sources with "
    "BUILD_MONAI=1, e.g. `BUILD_MONAI=1 pip install --no-build-isolation "
    "git+https://github.com/Project-MONAI/MONAI` or, in a MONAI checkout, `BUILD_MONAI=1 "
    "python setup.py develop` (PyPI's monai wheels and source distributions contain no "
    "compiled code, so `BUILD_MONAI=1 pip install monai` does not build it). From a source "
    "checkout of nitorch_jit, scripts/build_monai.sh builds monai._C from MONAI's csrc folder "
    "into an installed monai.")

_LOCK = threading.Lock()
_LIBS = {}  # (module, device type) -> Library("nitorch_jit", "IMPL") holding the wrappers


def load():
    """Import and return ``monai._C``; raise MonaiUnavailable saying why it cannot be used.

    Returns
    -------
    module
        MONAI's compiled extension.

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> try:
    ...     C = monai.load()
    ... except monai.MonaiUnavailable as err:
    ...     ok = "BUILD_MONAI=1" in str(err)  # the message says how to build it
    ... else:
    ...     ok = int(C.BoundType.zero) == 7
    >>> ok
    True
    """
    try:
        monai = importlib.import_module("monai")
    except ImportError as err:
        raise MonaiUnavailable(
            f"MONAI is not installed ({err}). `pip install monai` installs its Python code; "
            + BUILD_HINT, "MONAI is not installed") from err
    except Exception as err:  # a broken install must not break the fallback to TORCH
        why = f"importing monai failed ({type(err).__name__}: {err})"
        raise MonaiUnavailable(why, why) from err
    try:
        C = importlib.import_module("monai._C")
    except ImportError as err:
        if "No module named" in str(err):
            raise MonaiUnavailable(
                f"MONAI {getattr(monai, '__version__', '?')} is installed "
                f"({getattr(monai, '__file__', '?')}) but without its compiled routines "
                f"(monai._C). " + BUILD_HINT,
                "MONAI is installed without its compiled routines (monai._C, built only with "
                "BUILD_MONAI=1)") from err
        # present but unloadable, typically built against another torch
        raise MonaiUnavailable(
            f"monai._C is present but cannot be loaded ({err}); rebuild it against this torch "
            f"({torch.__version__}) with BUILD_MONAI=1. " + BUILD_HINT,
            f"monai._C cannot be loaded ({err})") from err
    if getattr(C, "__nitorch_jit_compat__", False):  # compat.MARK, without importing compat
        raise MonaiUnavailable(
            "monai._C is nitorch_jit's own compat module (nitorch_jit.compat.install() serves "
            "it), not MONAI's compiled routines: using it as a backend would call nitorch_jit "
            "itself. Unset NI_COMPILED_BACKEND (our compiled kernels) or install MONAI's own "
            "extension. " + BUILD_HINT, "monai._C is nitorch_jit's compat module")
    return C


def to_monai(C, order, bound):
    """Our per-dim order and bound codes -> lists of MONAI's enum objects.

    Parameters
    ----------
    C : module
        ``monai._C`` (from `load`).
    order : list of int
        Spline orders 0..7, one per spatial dim.
    bound : list of int
        Our bound codes (nitorch_jit.ops.options: replicate 0 ... dft 5, zero 6).

    Returns
    -------
    bounds, orders : list, list
        ``C.BoundType`` and ``C.InterpolationType`` members, in the order ``monai._C`` takes them.

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> try:
    ...     C = monai.load()
    ... except monai.MonaiUnavailable:
    ...     codes = [2, 7]  # what MONAI's enums say, when it is built
    ... else:
    ...     bounds, orders = monai.to_monai(C, [3, 1], [2, 6])
    ...     codes = [int(b) for b in bounds]
    >>> codes  # our dct2 (2) and zero (6)
    [2, 7]
    """
    # bounds by name (MONAI's integers differ from ours), orders by value (they agree)
    return ([C.BoundType.__members__[BOUND_NAMES[b]] for b in bound],
            [C.InterpolationType(o) for o in order])


def check_options(op, channels, order):
    """Raise BackendError when MONAI's port would compute `op` wrong with these options.

    Parameters
    ----------
    op : str
        The ``torch.ops.nitorch_jit`` op name.
    channels : int
        Number of channels of the image.
    order : list of int
        Spline orders, one per spatial dim.

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> monai.check_options("grid_pull", 1, [3, 1, 1])
    >>> try:
    ...     monai.check_options("grid_pull", 1, [3, 1, 3])
    ... except monai.BackendError as err:
    ...     print("interpolation" in str(err))
    True
    """
    where = "with NI_COMPILED_BACKEND=MONAI; our C or TORCH backend serves any orders"
    linear_everywhere = len(set(order)) == 1 and order[0] <= 1
    if len(order) == 3 and order[2] != order[1]:
        raise BackendError(
            f"interpolation={list(order)}: MONAI's compiled routines use the order of dim 1 for "
            f"dim 2 in 3-D (a bug of the NITorch port), so dims 1 and 2 need the same order "
            f"{where}")
    if op == "grid_grad" and len(order) == 1 and order[0] >= 2:
        raise BackendError(
            f"interpolation={list(order)}: MONAI's compiled grid_grad is wrong in 1-D at orders "
            f"2 to 7; use order 0 or 1 {where}")
    if op in ("grid_pushgrad", "grid_hess_dot") and not linear_everywhere:
        raise BackendError(
            f"interpolation={list(order)}: MONAI's compiled gradients of grid_grad "
            f"(grid_grad_backward, also behind the second derivatives of grid_pull and "
            f"grid_push) are wrong unless every dim is nearest or linear: they return values "
            f"that change from call to call; use interpolation 0 or 1 in every dim {where}")
    if channels > MAX_CHANNELS and not linear_everywhere:
        raise BackendError(
            f"input has {channels} channels: MONAI's compiled routines take at most "
            f"{MAX_CHANNELS} except with nearest or linear interpolation in every dim; split "
            f"the channels, or use our C or TORCH backend")


def _flags(x, needs_grad):
    # MONAI's backward routines compute the gradient of each tensor that requires one
    return x.detach().requires_grad_(needs_grad)


def _kernels(C):
    def opts(order, bound, extrapolate):
        b, o = to_monai(C, order, bound)
        return b, o, bool(extrapolate)

    def pull(input, grid, order, bound, extrapolate):
        check_options("grid_pull", input.shape[1], order)
        return C.grid_pull(input, grid, *opts(order, bound, extrapolate))

    def push(input, grid, shape, order, bound, extrapolate):
        check_options("grid_push", input.shape[1], order)
        return C.grid_push(input, grid, list(shape), *opts(order, bound, extrapolate))

    def grad(input, grid, order, bound, extrapolate):
        check_options("grid_grad", input.shape[1], order)
        return C.grid_grad(input, grid, *opts(order, bound, extrapolate))

    def pushgrad(input, grid, shape, order, bound, extrapolate):
        # the image gradient of grid_grad; MONAI reads only the shape of the image it is given
        check_options("grid_pushgrad", input.shape[1], order)
        image = input.new_zeros(()).expand([input.shape[0], input.shape[1], *shape])
        out, = C.grid_grad_backward(input, _flags(image, True), _flags(grid, False),
                                    *opts(order, bound, extrapolate))
        return out

    def grad_dot(weight, input, grid, order, bound, extrapolate):
        # the grid gradient of grid_pull with incoming gradient `weight`
        check_options("grid_grad_dot", input.shape[1], order)
        out, = C.grid_pull_backward(weight, _flags(input, False), _flags(grid, True),
                                    *opts(order, bound, extrapolate))
        return out

    def hess_dot(weight, input, grid, order, bound, extrapolate):
        # the grid gradient of grid_grad with incoming gradient `weight`
        check_options("grid_hess_dot", input.shape[1], order)
        out, = C.grid_grad_backward(weight, _flags(input, False), _flags(grid, True),
                                    *opts(order, bound, extrapolate))
        return out

    def pull_backward(grad, input, grid, order, bound, extrapolate):
        check_options("grid_pull_backward", input.shape[1], order)
        gi, gg = C.grid_pull_backward(grad, _flags(input, True), _flags(grid, True),
                                      *opts(order, bound, extrapolate))
        return gi, gg

    from ..torch_impl.pushpull import affine_kernels  # affine ops: MONAI's grid ops by chunks
    return {"grid_pull": pull, "grid_push": push, "grid_grad": grad, "grid_pushgrad": pushgrad,
            "grid_grad_dot": grad_dot, "grid_hess_dot": hess_dot,
            "grid_pull_backward": pull_backward, **affine_kernels(pull, push, grad_dot)}


def register(module, device_type):
    """Register MONAI's routines as the kernels of `module`'s ops on `device_type`.

    Parameters
    ----------
    module : str
        One of `SERVED`.
    device_type : {'cpu', 'cuda'}

    Returns
    -------
    str
        Where the routines come from (for ``NI_SHOW_COMPILED_BACKEND`` and ``nitorch-jit info``).

    Raises
    ------
    MonaiUnavailable
        MONAI or ``monai._C`` is missing or unusable (the message says how to build it).
    BackendError
        `module` has no MONAI equivalent, or ``monai._C`` was built without CUDA.

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> try:
    ...     monai.register("resize", "cpu")
    ... except monai.BackendError as err:
    ...     print("no MONAI equivalent" in str(err))
    True
    """
    if module not in SERVED:
        raise BackendError(f"module {module!r} has no MONAI equivalent; MONAI serves "
                           f"{', '.join(SERVED)}")
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(device_type)
    if key is None:
        raise BackendError(f"MONAI's compiled routines have no kernels for device type "
                           f"{device_type!r}")
    C = load()
    if device_type == "cuda":
        _probe_cuda(C)
    with _LOCK:
        if (module, device_type) not in _LIBS:
            _LIBS[(module, device_type)] = register_kernels(module, _kernels(C), key)
    return f"MONAI's compiled routines, {C.__file__}"


def _probe_cuda(C):
    """A one-point pull on the GPU: monai._C built without CUDA says so only when called."""
    if not torch.cuda.is_available():  # a CPU build of torch, or no GPU: nothing to probe
        raise BackendError("MONAI's compiled routines cannot serve CUDA: torch sees no CUDA "
                           "device here")
    x = torch.zeros(1, 1, 2, device="cuda")
    b, o = to_monai(C, [1], [0])
    try:
        C.grid_pull(x, x.new_zeros(1, 1, 1), b, o, False)
    except RuntimeError as err:
        raise BackendError(f"monai._C cannot run on CUDA ({err}); build it with CUDA "
                           f"(BUILD_MONAI=1 FORCE_CUDA=1)") from err


def serves(module):
    """Whether MONAI's compiled routines have an equivalent of `module` (its others keep ours).

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> monai.serves("pushpull"), monai.serves("resize")
    (True, False)
    """
    return module in SERVED


def describe(module="pushpull", device_type="cpu"):
    """Whether MONAI's compiled routines load here, and one line saying what was found.

    Used by ``nitorch-jit info``; imports MONAI but runs nothing.

    Parameters
    ----------
    module : str, default 'pushpull'
    device_type : str, default 'cpu'

    Returns
    -------
    available : bool
    line : str

    Examples
    --------
    >>> from nitorch_jit.backends import monai
    >>> available, line = monai.describe()
    >>> ("BUILD_MONAI=1" in line) != available
    True
    """
    if module not in SERVED:
        return False, f"module {module!r} has no MONAI equivalent"
    try:
        C = load()
    except MonaiUnavailable as err:
        return False, str(err)
    monai = importlib.import_module("monai")
    return True, f"MONAI {getattr(monai, '__version__', '?')}, compiled routines {C.__file__}"
