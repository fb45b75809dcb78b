"""NI_COMPILED_BACKEND=MONAI: MONAI's compiled routines (monai._C) behind our pushpull ops.

Two groups of tests:
- without MONAI's build (always run): the fallback order C -> MONAI -> TORCH and its warnings,
  with the loaders replaced; the error when monai is installed without monai._C; the
  translation of our codes into MONAI's enums; the options MONAI's port cannot serve.
- with MONAI's build (the ``monai_own_c`` fixture of tests/conftest.py builds MONAI's own _C
  once per run, uninstalled, and CI requires it: NI_JIT_REQUIRE_MONAI=1): agreement of every pushpull op, served by monai._C through our adapter, with our
  C kernels over dims 1-3, orders 0-7, every bound, extrapolate on and off, forward and
  backward; and the public API end to end in a process with NI_COMPILED_BACKEND=MONAI.
"""
import doctest
import json
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from nitorch_jit import backends
from nitorch_jit.backends import monai as monai_backend
from nitorch_jit.jit import toolchain
from nitorch_jit.codes import BOUND_NAMES

REPO = Path(__file__).resolve().parents[2]

# MONAI's numbering, as its C++ enums define it (monai/csrc/ext.cpp, resample/bounds_common.h):
# the same as NITorch's C backend, zero = 7 (6 is the unexported sliding).
MONAI_BOUND_VALUES = {"replicate": 0, "dct1": 1, "dct2": 2, "dst1": 3, "dst2": 4, "dft": 5,
                      "zero": 7}


PLUGINS = REPO / "tests" / "compat" / "plugins"


@pytest.fixture(scope="module")
def monai_c(monai_own_c):
    """MONAI's own compiled routines, imported as ``monai._C`` in this process (the route of
    tests/compat/plugins/monai_own.py); removed again after this module."""
    finders = list(sys.meta_path)
    saved = os.environ.get("MONAI_OWN_C")
    os.environ["MONAI_OWN_C"] = monai_own_c
    sys.path.insert(0, str(PLUGINS))
    sys.modules.pop("monai._C", None)
    try:
        import monai_own  # noqa: F401  (puts its finder first on sys.meta_path)
        if monai_own._OwnC not in {type(f) for f in sys.meta_path}:
            sys.meta_path.insert(0, monai_own._OwnC())  # imported before, by another test
        C = monai_backend.load()
        assert C.__file__ == monai_own_c, C.__file__
        yield C
    finally:
        sys.meta_path[:] = finders
        sys.path.remove(str(PLUGINS))
        sys.modules.pop("monai._C", None)
        if saved is None:
            os.environ.pop("MONAI_OWN_C", None)
        else:
            os.environ["MONAI_OWN_C"] = saved


# ------------------------------------------------------------------ without MONAI's build
class _FakeEnum:
    """Stands in for a pybind11 enum: members by name, construction from an int."""

    def __init__(self, values):
        self.__members__ = {k: ("member", k, v) for k, v in values.items()}

    def __call__(self, value):
        return ("member", value)


def test_code_translation_table():
    fake = types.SimpleNamespace(BoundType=_FakeEnum(MONAI_BOUND_VALUES),
                                 InterpolationType=_FakeEnum({}))
    bounds, orders = monai_backend.to_monai(fake, list(range(8)), list(range(7)))
    # our codes 0..6 (replicate ... dft, zero 6) -> MONAI's 0..5, 7
    assert [b[2] for b in bounds] == [0, 1, 2, 3, 4, 5, 7]
    assert [b[1] for b in bounds] == BOUND_NAMES
    assert BOUND_NAMES[6] == "zero"
    assert orders == [("member", o) for o in range(8)]  # orders agree: translated by value


def test_code_translation_against_monai_enums(monai_c):
    bounds, orders = monai_backend.to_monai(monai_c, list(range(8)), list(range(7)))
    assert [int(b) for b in bounds] == [MONAI_BOUND_VALUES[n] for n in BOUND_NAMES]
    assert [b.name for b in bounds] == BOUND_NAMES
    assert [int(o) for o in orders] == list(range(8))
    assert [o.name for o in orders] == ["nearest", "linear", "quadratic", "cubic", "fourth",
                                        "fifth", "sixth", "seventh"]


def test_monai_without_C_names_build_monai(monkeypatch):
    fake = types.ModuleType("monai")  # an installed pure-Python monai: no monai._C
    fake.__version__ = "1.6.1"
    monkeypatch.setitem(sys.modules, "monai", fake)
    monkeypatch.delitem(sys.modules, "monai._C", raising=False)
    with pytest.raises(monai_backend.MonaiUnavailable) as err:
        monai_backend.load()
    msg = str(err.value)
    assert "BUILD_MONAI=1" in msg and "monai._C" in msg and "1.6.1" in msg
    assert "setup.py develop" in msg and "build_monai.sh" in msg
    assert "BUILD_MONAI=1" in err.value.short and len(err.value.short) < len(msg) / 3


def test_monai_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "monai", None)  # makes `import monai` fail
    with pytest.raises(monai_backend.MonaiUnavailable, match="MONAI is not installed") as err:
        monai_backend.load()
    assert err.value.short == "MONAI is not installed"


def test_register_refuses_modules_monai_lacks():
    for module in ("splinc", "resize", "regsolve"):
        with pytest.raises(backends.BackendError, match="no MONAI equivalent"):
            monai_backend.register(module, "cpu")
    assert not monai_backend.serves("resize") and monai_backend.serves("pushpull")


def test_options_monai_cannot_serve():
    for op in ("grid_pull", "grid_push", "grid_grad", "grid_grad_dot", "grid_pull_backward"):
        monai_backend.check_options(op, 3, [3, 2, 2])
        monai_backend.check_options(op, 3, [7, 7])
    monai_backend.check_options("grid_grad", 3, [1])
    for op in ("grid_pushgrad", "grid_hess_dot"):
        monai_backend.check_options(op, 3, [1, 1])
        monai_backend.check_options(op, 3, [0, 0, 0])
        with pytest.raises(backends.BackendError, match=r"interpolation=\[1, 0\].*nearest or "
                                                       r"linear"):
            monai_backend.check_options(op, 3, [1, 0])
        with pytest.raises(backends.BackendError, match=r"interpolation=\[3\]"):
            monai_backend.check_options(op, 3, [3])
    monai_backend.check_options("grid_pull", 5000, [1, 1, 1])  # iso linear: no channel cap
    with pytest.raises(backends.BackendError, match=r"interpolation=\[1, 3, 2\].*dim 1"):
        monai_backend.check_options("grid_pull", 1, [1, 3, 2])
    with pytest.raises(backends.BackendError, match=r"interpolation=\[2\].*1-D"):
        monai_backend.check_options("grid_grad", 1, [2])
    with pytest.raises(backends.BackendError, match="2000 channels"):
        monai_backend.check_options("grid_pull", 2000, [3, 3])


@pytest.fixture
def fresh_backend(monkeypatch):
    """backends.ensure with no state and stand-ins for the three providers' registrations."""
    monkeypatch.setattr(backends, "_STATE", {})
    monkeypatch.setattr(backends, "_WARNED", set())
    calls = []
    # an error given as a string is the provider's own BackendError; an exception instance
    # is raised as it is (a bug of ours, an ImportError)
    ways = types.SimpleNamespace(c_error=None, monai_error=None, torch_error=None, calls=calls)

    def load_module(module, device_type, archs=None):
        calls.append(("C", module))
        if ways.c_error:
            raise toolchain.ToolchainError(ways.c_error)
        return "/cache/lib.so"

    def register_monai(module, device_type):
        calls.append(("MONAI", module))
        if isinstance(ways.monai_error, BaseException):
            raise ways.monai_error
        if ways.monai_error:
            raise monai_backend.MonaiUnavailable(ways.monai_error + " and how to build it",
                                                 ways.monai_error)
        return "monai._C stand-in"

    def register_torch(module, device_type):
        calls.append(("TORCH", module))
        if ways.torch_error:
            raise ways.torch_error
        return "torch_impl stand-in"

    monkeypatch.setattr(backends.compiled, "load_module", load_module)
    monkeypatch.setattr(backends.monai, "register", register_monai)
    monkeypatch.setattr(backends.portable, "register", register_torch)
    monkeypatch.delenv("NI_COMPILED_BACKEND", raising=False)
    return ways


def _ensure(module):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        which = backends.ensure(module, "cpu")
    return which, [str(w.message) for w in caught]


def test_fallback_order_c_first(fresh_backend):
    assert _ensure("pushpull") == ("C", [])
    assert fresh_backend.calls == [("C", "pushpull")]


def test_fallback_order_monai_second(fresh_backend):
    fresh_backend.c_error = "no C++ compiler found"
    which, msgs = _ensure("pushpull")
    assert which == "MONAI" and len(msgs) == 1
    assert "no C++ compiler found" in msgs[0] and "MONAI's compiled routines" in msgs[0]
    assert fresh_backend.calls == [("C", "pushpull"), ("MONAI", "pushpull")]
    # MONAI has no resize: our pure-PyTorch kernels, with their own single warning
    which, msgs = _ensure("resize")
    assert which == "TORCH" and len(msgs) == 1 and "pure-PyTorch" in msgs[0]
    assert ("MONAI", "resize") not in fresh_backend.calls
    assert _ensure("splinc") == ("TORCH", [])  # warned once per device already


def test_fallback_order_torch_last(fresh_backend):
    fresh_backend.c_error = "no C++ compiler found"
    fresh_backend.monai_error = "MONAI 1.6.1 is installed but without monai._C; BUILD_MONAI=1"
    which, msgs = _ensure("pushpull")
    assert which == "TORCH" and len(msgs) == 1
    assert "no C++ compiler found" in msgs[0] and "BUILD_MONAI=1" in msgs[0]
    assert "how to build it" not in msgs[0]  # the short reason
    assert fresh_backend.calls == [("C", "pushpull"), ("MONAI", "pushpull"),
                                   ("TORCH", "pushpull")]


def test_backend_monai_requested(fresh_backend, monkeypatch):
    monkeypatch.setenv("NI_COMPILED_BACKEND", "MONAI")
    assert _ensure("pushpull") == ("MONAI", [])
    assert _ensure("resize") == ("C", [])  # no MONAI equivalent: our compiled kernels
    assert "no MONAI equivalent" in backends.status()[("resize", "cpu")][1]
    assert fresh_backend.calls == [("MONAI", "pushpull"), ("C", "resize")]


def test_backend_monai_requested_but_unavailable_raises(fresh_backend, monkeypatch):
    monkeypatch.setenv("NI_COMPILED_BACKEND", "monai")
    fresh_backend.monai_error = "MONAI is installed but without monai._C. BUILD_MONAI=1 ..."
    with pytest.raises(backends.BackendError, match="NI_COMPILED_BACKEND=MONAI but .*BUILD_MONAI=1"):
        backends.ensure("pushpull", "cpu")
    assert ("C", "pushpull") not in fresh_backend.calls and ("TORCH", "pushpull") not in \
        fresh_backend.calls


def _bug():
    try:  # raised, so that it carries a traceback as a real one does
        from nitorch_jit.backends.no_such_module import x  # noqa: F401
    except ImportError as err:
        return err


def test_walk_survives_a_provider_bug(fresh_backend):
    """Unset: a provider failing with anything but BackendError (here the ImportError of a
    wrong import path, issue #32) hands over to the next one, with the one warning."""
    fresh_backend.c_error = "no C++ compiler found"
    fresh_backend.monai_error = _bug()
    which, msgs = _ensure("pushpull")
    assert which == "TORCH" and len(msgs) == 1, msgs
    assert "no C++ compiler found" in msgs[0]
    assert "MONAI provider failed unexpectedly with ModuleNotFoundError" in msgs[0]
    assert "no_such_module" in msgs[0]
    assert fresh_backend.calls == [("C", "pushpull"), ("MONAI", "pushpull"),
                                   ("TORCH", "pushpull")]
    # and when our compiled provider is the one with the bug, MONAI stands in
    fresh_backend.c_error, fresh_backend.monai_error = None, None
    backends._STATE.clear()
    backends._WARNED.clear()
    backends.compiled.load_module = lambda *a, **k: {}["a bug"]
    which, msgs = _ensure("pushpull")
    assert which == "MONAI" and len(msgs) == 1
    assert "C provider failed unexpectedly with KeyError: 'a bug'" in msgs[0]


def test_provider_bug_when_asked_by_name(fresh_backend, monkeypatch):
    monkeypatch.setenv("NI_COMPILED_BACKEND", "MONAI")
    bug = fresh_backend.monai_error = _bug()
    with pytest.raises(backends.BackendError, match="NI_COMPILED_BACKEND=MONAI but the MONAI "
                                                    "provider failed unexpectedly") as err:
        backends.ensure("pushpull", "cpu")
    causes = []
    e = err.value
    while e is not None:
        causes.append(e)
        e = e.__cause__
    assert causes[-1] is bug  # the original, with its traceback, ends the chain
    assert fresh_backend.calls == [("MONAI", "pushpull")]
    assert backends.status() == {}  # nothing chosen: the next call tries again


def test_every_provider_fails(fresh_backend):
    """The user gets the first provider's error, the others chained as its causes."""
    fresh_backend.c_error = "no C++ compiler found"
    fresh_backend.monai_error = "MONAI is not installed"
    fresh_backend.torch_error = RuntimeError("the twins are broken")
    with pytest.raises(backends.BackendError) as err:
        _ensure("pushpull")
    assert str(err.value) == "no backend can serve pushpull on CPU: no C++ compiler found"
    monai_cause = err.value.__cause__
    assert str(monai_cause).startswith("MONAI could not serve it either: MONAI is not installed")
    torch_cause = monai_cause.__cause__
    assert str(torch_cause) == ("TORCH could not serve it either: the TORCH provider failed "
                                "unexpectedly with RuntimeError: the twins are broken (a bug of "
                                "nitorch_jit or a broken install: please report it)")
    assert torch_cause.__traceback__ is not None  # where it was raised


# A provider that fails halfway through its registrations leaves none behind: the next one
# registers on a clean slate (on torch 2.13 an override would print "Overriding a previously
# registered kernel"; a torch that forbids overrides would raise).
HALFWAY = r"""
import json, sys, warnings, torch
warnings.simplefilter("always")
from nitorch_jit.backends import compiled, monai
from nitorch_jit.backends.schemas import MODULES
from nitorch_jit.jit import toolchain
import nitorch_jit as nj

def no_compiler(*args, **kwargs):
    raise toolchain.ToolchainError("no C++ compiler (stand-in)")

compiled.load_module = no_compiler
monai.load = lambda: "a stand-in for monai._C"

def wrong(*args):
    raise AssertionError("a half-registered MONAI kernel ran")

class Halfway(dict):  # a kernel table that raises at its third op
    def __getitem__(self, op):
        if op == "grid_grad":
            raise KeyError(op)
        return wrong

if sys.argv[1] == "table":
    monai._kernels = lambda C: Halfway()
else:  # the dispatcher refuses the third registration
    impl, seen = torch.library.Library.impl, []
    def failing_impl(self, name, fn, *args, **kwargs):
        seen.append(name)
        if len(seen) == 3 and fn is not None and "torch_impl" not in fn.__module__:
            raise RuntimeError("refused registration (stand-in)")
        return impl(self, name, fn, *args, **kwargs)
    torch.library.Library.impl = failing_impl
    monai._kernels = lambda C: {op: wrong for op in MODULES["pushpull"]}
with warnings.catch_warnings(record=True) as caught:
    x = torch.arange(24.).reshape(1, 1, 4, 6)
    g = torch.tensor([[[[1.5, 2.25]]]])
    out = [nj.grid_pull(x, g).item(), nj.grid_push(x, nj.identity_grid([4, 6])[None]).sum().item(),
           nj.compiled_backend]
print("RESULT", json.dumps([out, [str(w.message) for w in caught]]))
"""


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
@pytest.mark.parametrize("where", ["table", "impl"])
def test_provider_failing_halfway_leaves_nothing_registered(tmp_path, where):
    proc = subprocess.run([sys.executable, "-c", HALFWAY, where], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=PYTHONPATH,
                                                NI_JIT_CACHE_DIR=str(tmp_path / "c")))
    assert proc.returncode == 0, proc.stderr
    (pulled, pushed, which), msgs = json.loads(
        [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][7:])
    assert which == "TORCH" and pulled == 1.5 * 6 + 2.25 and pushed == sum(range(24))
    assert len(msgs) == 1, msgs  # the fallback warning, and no "Overriding ..." one
    why = "KeyError: 'grid_grad'" if where == "table" else "refused registration (stand-in)"
    assert "no C++ compiler (stand-in)" in msgs[0] and why in msgs[0], msgs
    assert "Overriding" not in proc.stderr, proc.stderr


# the caller's PYTHONPATH is kept: it may hide or provide a monai
PYTHONPATH = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def _run(code, tmp_path, own_c=None, **env):
    """`code` in a fresh interpreter; with `own_c`, MONAI's own build serves ``monai._C``
    there by the route tests/compat uses (tests/compat/plugins/monai_own.py)."""
    e = dict(os.environ, NI_JIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=PYTHONPATH)
    e.pop("NI_COMPILED_BACKEND", None)
    e.update(env)
    if own_c is not None:
        e["MONAI_OWN_C"] = own_c
        e["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), e["PYTHONPATH"]])
        code = "import monai_own\n" + code
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_monai_without_C_end_to_end(tmp_path):
    # a pure-Python monai first on the path, as `pip install monai` leaves it
    fake = tmp_path / "site" / "monai"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '1.6.1'\n")
    code = ("import torch, nitorch_jit as nj\n"
            "nj.grid_pull(torch.ones(1, 1, 3), torch.zeros(1, 2, 1))\n")
    proc = _run(code, tmp_path, NI_COMPILED_BACKEND="MONAI",
                PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{REPO}")
    assert proc.returncode != 0
    assert "NI_COMPILED_BACKEND=MONAI but MONAI 1.6.1 is installed" in proc.stderr
    assert "without its compiled routines (monai._C)" in proc.stderr
    assert "BUILD_MONAI=1" in proc.stderr
    assert not (tmp_path / "cache").exists()  # nothing was compiled


INFO = "import sys; from nitorch_jit.cli import main; sys.exit(main(['info']))"


def _info_lines(proc):
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "MONAI (NI_COMPILED_BACKEND=MONAI" in out
    assert "splinc, resize, regsolve: no MONAI equivalent, our kernels serve them" in out
    resize_line = next(x for x in out.splitlines() if x.strip().startswith("cpu   resize"))
    assert resize_line.split()[2] == "C:"
    return next(x for x in out.splitlines() if x.strip().startswith("cpu   pushpull"))


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cli_info_says_what_monai_serves(tmp_path):
    """Without monai._C (PyPI's monai): pushpull is an error that says how to build it."""
    line = _info_lines(_run(INFO, tmp_path, NI_COMPILED_BACKEND="MONAI"))
    assert line.split()[2] == "error:" and "BUILD_MONAI=1" in line


def test_cli_info_with_monai_built(tmp_path, monai_own_c):
    line = _info_lines(_run(INFO, tmp_path, own_c=monai_own_c, NI_COMPILED_BACKEND="MONAI"))
    assert line.split()[2] == "MONAI:" and monai_own_c in line


def test_docstring_examples():
    result = doctest.testmod(monai_backend)
    assert result.attempted > 0 and result.failed == 0, result
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(backends.plan, "plan", globs={}):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0 and attempted >= 3, (failed, attempted)


# ------------------------------------------------------------------ with MONAI's build
SHAPES = {1: [7], 2: [6, 5], 3: [5, 4, 3]}


def _case(dim, channels=2, seed=0):
    g = torch.Generator().manual_seed(seed + dim)
    shape = SHAPES[dim]
    x = torch.randn([2, channels, *shape], generator=g, dtype=torch.float64)
    out = [4, 3, 2][:dim]
    lo = torch.tensor([-2.5] * dim, dtype=torch.float64)
    hi = torch.tensor([n + 1.5 for n in shape], dtype=torch.float64)
    # points well outside, near and inside the field of view, on no knot
    grid = lo + (hi - lo) * torch.rand([2, *out, dim], generator=g, dtype=torch.float64)
    return x, grid


def _ours(op):
    return getattr(torch.ops.nitorch_jit, op)


def _served(op, dim, order):
    """Whether MONAI serves `op` at this isotropic order (the refusals of monai_backend,
    restated here from the measurements in test_monai_still_gets_refused_options_wrong)."""
    if op in ("grid_pushgrad", "grid_hess_dot"):
        return order <= 1
    if op == "grid_grad":
        return dim > 1 or order <= 1
    return True


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("bound", range(7), ids=BOUND_NAMES)
def test_agrees_with_our_c_kernels(dim, bound, monai_c):
    assert backends.ensure("pushpull", "cpu") == "C"
    theirs = monai_backend._kernels(monai_c)
    x, grid = _case(dim)
    shape = list(x.shape[2:])
    g = torch.Generator().manual_seed(7)
    w_pull = torch.randn([2, 2, *grid.shape[1:-1]], generator=g, dtype=torch.float64)
    w_grad = torch.randn([2, 2, *grid.shape[1:]], generator=g, dtype=torch.float64)
    checked = refused = 0
    for order in range(8):
        for extrapolate in (False, True):
            opts = ([order] * dim, [bound] * dim, extrapolate)
            calls = {
                "grid_pull": (x, grid, *opts),
                "grid_push": (w_pull, grid, shape, *opts),
                "grid_grad": (x, grid, *opts),
                "grid_pushgrad": (w_grad, grid, shape, *opts),
                "grid_grad_dot": (w_pull, x, grid, *opts),
                "grid_hess_dot": (w_grad, x, grid, *opts),
                "grid_pull_backward": (w_pull, x, grid, *opts),
            }
            for op, args in calls.items():
                if not _served(op, dim, order):
                    with pytest.raises(backends.BackendError, match="interpolation"):
                        theirs[op](*args)
                    refused += 1
                    continue
                want, got = _ours(op)(*args), theirs[op](*args)
                for a, b in zip(want if isinstance(want, tuple) else [want],
                                got if isinstance(got, tuple) else [got]):
                    assert a.shape == b.shape, (op, order, extrapolate)
                    torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10,
                                               msg=lambda m: f"{op} order {order} extrapolate "
                                                             f"{extrapolate}: {m}")
                    checked += 1
    # per extrapolate value: pull, push, grad_dot and pull_backward's two tensors at 8 orders,
    # grad at 8 orders (2 in 1-D), pushgrad and hess_dot at orders 0 and 1
    assert checked == 2 * (5 * 8 + (8 if dim > 1 else 2) + 2 * 2)
    assert refused == 2 * ((0 if dim > 1 else 6) + 2 * 6)


def test_monai_still_gets_refused_options_wrong(monai_c):
    # What the refusals rest on, with MONAI's routines called as MONAI calls them. If a MONAI
    # release fixes one, this fails: lift that refusal in monai_backend.check_options.
    x, grid = _case(1)
    bound, order = monai_backend.to_monai(monai_c, [2], [2])
    # 1-D grid_grad at order 2 is not the derivative of grid_pull (ours is, to 1e-9)
    eps = 1e-6
    fd = (monai_c.grid_pull(x, grid + eps, bound, order, True)
          - monai_c.grid_pull(x, grid - eps, bound, order, True)) / (2 * eps)
    assert (monai_c.grid_grad(x, grid, bound, order, True)[..., 0] - fd).abs().max() > 1e-2
    assert (_ours("grid_grad")(x, grid, [2], [2], True)[..., 0] - fd).abs().max() < 1e-8
    # 2-D, order 3: the image gradient of grid_grad is not its adjoint (ours is)
    x, grid = _case(2)
    w = torch.randn([2, 2, *grid.shape[1:]], dtype=torch.float64)
    bound, order = monai_backend.to_monai(monai_c, [3, 3], [2, 2])
    gx, = monai_c.grid_grad_backward(w, x.detach().requires_grad_(), grid, bound, order, True)
    lhs = (monai_c.grid_grad(x, grid, bound, order, True) * w).sum()
    assert not torch.isclose(lhs, (x * gx).sum(), rtol=1e-6)
    ours = _ours("grid_pushgrad")(w, grid, [6, 5], [3, 3], [2, 2], True)
    assert torch.isclose(lhs, (x * ours).sum(), rtol=1e-10)


@pytest.mark.parametrize("dim", [2, 3])
def test_agrees_per_dim_options_and_float32(dim, monai_c):
    theirs = monai_backend._kernels(monai_c)
    x, grid = _case(dim, channels=3, seed=1)
    shape = list(x.shape[2:])
    w_pull = torch.randn([2, 3, *grid.shape[1:-1]], dtype=torch.float64)
    for order in ([3, 1, 1][:dim], [0, 2, 2][:dim]):  # dims 1 and 2 share an order in 3-D
        for bound in ([2, 6, 3][:dim], [5, 0, 1][:dim]):
            for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
                xs, gs, ws = x.to(dtype), grid.to(dtype), w_pull.to(dtype)
                for op, args in (("grid_pull", (xs, gs)), ("grid_grad", (xs, gs)),
                                 ("grid_push", (ws, gs, shape)),
                                 ("grid_pull_backward", (ws, xs, gs))):
                    want = _ours(op)(*args, order, bound, False)
                    got = theirs[op](*args, order, bound, False)
                    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_refused_options_raise_through_the_kernels(monai_c):
    theirs = monai_backend._kernels(monai_c)
    x, grid = _case(3)
    with pytest.raises(backends.BackendError, match="interpolation"):
        theirs["grid_pull"](x, grid, [1, 3, 1], [0] * 3, True)
    w = torch.ones([2, 2, *grid.shape[1:]], dtype=torch.float64)
    with pytest.raises(backends.BackendError, match="nearest or linear"):
        theirs["grid_hess_dot"](w, x, grid, [2] * 3, [0] * 3, True)


# The public API in a process whose pushpull ops are MONAI's: values and gradients saved for
# comparison with our C kernels in this process.
API = r"""
import json, sys, torch, warnings
warnings.simplefilter("error")  # an explicit choice: no fallback warning
import nitorch_jit as nj
torch.manual_seed(0)
x = torch.randn(2, 3, 6, 5, 4, dtype=torch.float64, requires_grad=True)
grid = (torch.rand(2, 4, 3, 5, 3, dtype=torch.float64) * 7 - 1).requires_grad_()
out = {}
for order in (0, 1, 2, 3):
    for bound in ("dct2", "zero", "dft"):
        kw = dict(interpolation=order, bound=bound, extrapolate=order % 2 == 0)
        y = nj.grid_pull(x, grid, **kw)
        gx, gg = torch.autograd.grad((y * y).sum(), [x, grid])
        out[f"pull {order} {bound}"] = y.tolist()
        out[f"pull input gradient {order} {bound}"] = gx.tolist()
        out[f"pull grid gradient {order} {bound}"] = gg.tolist()
        out[f"push {order} {bound}"] = nj.grid_push(y.detach(), grid.detach(), [6, 5, 4],
                                                    **kw).tolist()
        out[f"count {order} {bound}"] = nj.grid_count(grid.detach(), [6, 5, 4], **kw).tolist()
        out[f"grad {order} {bound}"] = nj.grid_grad(x.detach(), grid.detach(), **kw).tolist()
out["prefilter"] = nj.grid_pull(x.detach(), grid.detach(), interpolation=3, bound="dct2",
                                prefilter=True).tolist()
# batch dims broadcast (expanded with stride 0 before the kernels): one image, two grids
y = nj.grid_pull(x[:1], grid, interpolation=2, bound="dst1")
gx, gg = torch.autograd.grad(y.square().sum(), [x, grid])
out["broadcast"], out["broadcast gradients"] = y.tolist(), [gx.tolist(), gg.tolist()]
# the affine ops (the twin's chunked wrappers over MONAI's grid ops), with their gradients
A = torch.tensor([[[0.9, 0.1, 0.0, 0.3], [0.0, 1.1, 0.2, -0.4], [0.1, 0.0, 0.8, 0.5]]],
                 dtype=torch.float64, requires_grad=True)
y = nj.affine_pull(x, A, [5, 4, 3], interpolation=3, bound="dct2", extrapolate=True)
gx, gA = torch.autograd.grad(y.square().sum(), [x, A])
out["affine_pull"], out["affine_pull gradients"] = y.tolist(), [gx.tolist(), gA.tolist()]
out["affine_push"] = nj.affine_push(y.detach(), A.detach(), [6, 5, 4], interpolation=1,
                                    bound="dft").tolist()
out["backend"] = nj.compiled_backend
print("RESULT", json.dumps(out))
"""


def test_public_api_with_backend_monai(tmp_path, monai_own_c):
    proc = _run(API, tmp_path, own_c=monai_own_c, NI_COMPILED_BACKEND="MONAI",
                NI_JIT_CACHE_DIR=os.environ["NI_JIT_CACHE_DIR"])  # the suite's splinc build
    assert proc.returncode == 0, proc.stderr
    got = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][7:])
    assert got.pop("backend") == "MONAI"
    assert backends.ensure("pushpull", "cpu") == "C"
    namespace = {}
    ours = API.replace('warnings.simplefilter("error")', "").replace(
        'print("RESULT", json.dumps(out))', "")
    exec(ours, namespace)  # the same calls, served by our C kernels
    want = namespace["out"]
    want.pop("backend")
    assert want.keys() == got.keys()
    for key in want:
        pairs = zip(got[key], want[key]) if key.endswith("gradients") else [(got[key], want[key])]
        for a, b in pairs:
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-10, atol=1e-10,
                                       msg=lambda m: f"{key}: {m}")


OPCHECK = r"""
import torch, nitorch_jit as nj
torch.manual_seed(0)
x = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
grid = (torch.rand(2, 4, 3, 2, dtype=torch.float64) * 7 - 1).requires_grad_()
pull = torch.compile(lambda a, b: nj.grid_pull(a, b, interpolation=3, bound="dft"),
                     fullgraph=True, backend="aot_eager")
y = pull(x, grid)
gx, gg = torch.autograd.grad(y.square().sum(), [x, grid])
y0 = nj.grid_pull(x, grid, 3, "dft")
gx0, gg0 = torch.autograd.grad(y0.square().sum(), [x, grid])
for a, b in ((y, y0), (gx, gx0), (gg, gg0)):
    torch.testing.assert_close(a, b, rtol=0, atol=0)
assert nj.compiled_backend == "MONAI"
ops = torch.ops.nitorch_jit
x, grid = x.detach(), grid.detach()
w = torch.randn(2, 3, 4, 3, dtype=torch.float64)
wg = torch.randn(2, 3, 4, 3, 2, dtype=torch.float64)
opts = ([1, 1], [2, 6], True)
for op, args in [(ops.grid_pull, (x, grid, *opts)), (ops.grid_push, (w, grid, [6, 5], *opts)),
                 (ops.grid_grad, (x, grid, *opts)), (ops.grid_pushgrad, (wg, grid, [6, 5], *opts)),
                 (ops.grid_grad_dot, (w, x, grid, *opts)),
                 (ops.grid_hess_dot, (wg, x, grid, *opts)),
                 (ops.grid_pull_backward, (w, x, grid, *opts))]:
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))
print("OK")
"""


@pytest.mark.slow
def test_opcheck_and_torch_compile_with_backend_monai(tmp_path, monai_own_c):
    proc = _run(OPCHECK, tmp_path, own_c=monai_own_c, NI_COMPILED_BACKEND="MONAI")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr


def test_preview_walks_the_same_plan(monkeypatch):
    """`nitorch-jit info`'s preview: the providers' describe along plan(), building nothing."""
    monkeypatch.delenv("NI_COMPILED_BACKEND", raising=False)
    monkeypatch.setattr(backends.compiled, "describe", lambda m, d: (False, "cannot compile: X"))
    monkeypatch.setattr(backends.monai, "describe", lambda m="pushpull", d="cpu":
                        (False, "MONAI is not installed, and a long how-to"))
    which, why = backends.preview("pushpull", "cpu")
    assert which == "TORCH" and why.startswith("cannot compile: X; MONAI unavailable; ")
    assert backends.preview("resize", "cpu")[1].startswith("cannot compile: X; the pure")
    monkeypatch.setenv("NI_COMPILED_BACKEND", "MONAI")  # asked for: its error, in full
    assert backends.preview("pushpull", "cpu") == ("error", "MONAI is not installed, and a "
                                                            "long how-to")
    # resize has no MONAI equivalent: ours, and TORCH when ours cannot be compiled
    assert backends.preview("resize", "cpu") == (
        "TORCH", "cannot compile: X; the pure-PyTorch kernels (nitorch_jit.torch_impl)")
    monkeypatch.setenv("NI_COMPILED_BACKEND", "C")
    assert backends.preview("pushpull", "cpu") == ("error", "cannot compile: X")
    monkeypatch.setenv("NI_COMPILED_BACKEND", "bogus")
    assert backends.preview("pushpull", "cpu")[0] == "error"
