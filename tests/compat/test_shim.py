"""nitorch_jit.compat itself: the finder, install(), the enums the clients rely on, the
positional functions (codes, extrapolate=2, the backward convention), clear errors on bad
input, and the guard that keeps our MONAI backend from calling the shim. No client needed
(subprocesses fake the clients' packages where one is needed)."""
import subprocess
import sys
import textwrap

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit import compat
from nitorch_jit.compat import monai as cm
from nitorch_jit.compat import nitorch as cn

from tests.compat.clients import client_env, counts, run_pytest

F64 = torch.float64


def run_py(code, tmp_path, **env):
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                         env=client_env(**env), capture_output=True, text=True, timeout=600)
    return res


def fake_client(root):
    """Packages `nitorch` (with _C/grid.py importing _C.spatial) and `monai` (config)."""
    (root / "nitorch" / "_C").mkdir(parents=True)
    (root / "nitorch" / "__init__.py").write_text("")
    (root / "nitorch" / "_C" / "__init__.py").write_text("")
    (root / "nitorch" / "_C" / "grid.py").write_text("from .spatial import grid_pull\n")
    (root / "monai").mkdir()
    (root / "monai" / "__init__.py").write_text("")
    (root / "monai" / "config.py").write_text("")


# ----------------------------------------------------------------------------- activation
@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_finder_serves_modules_with_file_and_no_path(tmp_path):
    fake_client(tmp_path)
    res = run_py("""
        import sys, nitorch_jit.compat as c
        print(c.install())
        import nitorch._C.spatial as S, monai._C as M
        print(c.is_compat(S), c.is_compat(M), M.__file__.endswith('monai.py'),
              hasattr(M, '__path__'), 'nitorch_jit.ops' in sys.modules)
        import nitorch._C.grid
    """, tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    assert lines[0] == "['nitorch._C.spatial', 'monai._C']"
    assert lines[1].split() == ["True", "True", "True", "False", "True"]


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_nothing_is_imported_until_asked(tmp_path):
    res = run_py("""
        import sys, nitorch_jit.compat as c
        c.install()
        from nitorch_jit import backends
        print('nitorch_jit.compat.monai' in sys.modules, 'nitorch_jit.compat.nitorch' in sys.modules,
              backends.status())
    """, tmp_path)
    assert res.stdout.split() == ["False", "False", "{}"], res.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_real_compiled_module_wins(tmp_path):
    fake_client(tmp_path)
    (tmp_path / "nitorch" / "_C" / "spatial.py").write_text("REAL = True\n")
    res = run_py("""
        import nitorch_jit.compat as c
        c.install()
        import nitorch._C.spatial as S
        print(getattr(S, 'REAL', False), c.is_compat(S))
    """, tmp_path)
    assert res.stdout.split() == ["True", "False"], res.stderr


@pytest.mark.parametrize("client,chooser", [("nitorch", "nitorch._C.grid"),
                                            ("monai", "monai.config")])
@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_install_after_the_choice_is_an_error(tmp_path, client, chooser):
    fake_client(tmp_path)
    (tmp_path / "nitorch" / "_C" / "grid.py").write_text("")
    res = run_py(f"""
        import {chooser}, nitorch_jit.compat as c
        try:
            c.install()
        except RuntimeError as e:
            print('ERR', e)
    """, tmp_path)
    assert res.stdout.startswith("ERR"), res.stdout + res.stderr
    assert chooser in res.stdout and "before importing" in res.stdout


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_install_is_idempotent_and_uninstall(tmp_path):
    # A fresh interpreter: in this one another test module may have imported monai already,
    # and install() then rightly refuses to serve it.
    res = run_py("""
        import sys, nitorch_jit.compat as c
        assert c.install(monai=False) == ["nitorch._C.spatial"]
        assert c.install() == ["nitorch._C.spatial", "monai._C"]
        assert sum(f is c._FINDER for f in sys.meta_path) == 1
        assert sys.meta_path[-1] is c._FINDER  # after Python's own finders
        c.uninstall()
        assert c.served() == [] and c._FINDER not in sys.meta_path
        print("ok")
    """, tmp_path)
    assert res.stdout.split() == ["ok"], res.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_installing_the_package_changes_nothing(tmp_path):
    """No .pth, no auto-activation: a fresh interpreter has no compat finder."""
    res = run_py("""
        import sys, nitorch_jit
        print(any(type(f).__name__ == 'CompatFinder' for f in sys.meta_path))
    """, tmp_path)
    assert res.stdout.split() == ["False"], res.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_runner_runs_module_and_script(tmp_path):
    fake_client(tmp_path)
    (tmp_path / "prog.py").write_text(
        "import sys, nitorch._C.spatial as S, nitorch_jit.compat as c\n"
        "print(c.is_compat(S), sys.argv[1:])\n")
    for cmd in ([sys.executable, "-m", "nitorch_jit.compat", "prog.py", "a", "-b"],
                [sys.executable, "-m", "nitorch_jit.cli", "run", "prog.py", "a", "-b"],
                [sys.executable, "-m", "nitorch_jit.compat", "-m", "prog", "a", "-b"]):
        res = subprocess.run(cmd, cwd=tmp_path, env=client_env(PYTHONPATH=tmp_path),
                             capture_output=True, text=True, timeout=600)
        assert res.stdout.strip() == "True ['a', '-b']", (cmd, res.stdout, res.stderr)
    res = subprocess.run([sys.executable, "-m", "nitorch_jit.compat", "no-such-program"],
                         cwd=tmp_path, env=client_env(), capture_output=True, text=True)
    assert res.returncode != 0 and "neither a file nor a command" in res.stderr


def test_runner_finds_scripts_of_an_unactivated_venv(tmp_path, monkeypatch):
    """`/path/to/venv/bin/nitorch-jit run nitorch ...` from a job script: `nitorch` lies beside
    the interpreter, not on PATH; the interpreter's scripts folder is searched first."""
    from nitorch_jit.compat import run
    scripts, elsewhere = tmp_path / "venv-bin", tmp_path / "on-path"
    for folder in (scripts, elsewhere):
        folder.mkdir()
        (folder / "prog").write_text("#!/usr/bin/env python\nprint('hi')\n")
        (folder / "prog").chmod(0o755)
    monkeypatch.setattr(run.sysconfig, "get_path", lambda name: str(scripts))
    monkeypatch.setenv("PATH", str(elsewhere))
    assert run._script("prog") == str(scripts / "prog")  # the venv's own, before PATH's
    (scripts / "prog").unlink()
    assert run._script("prog") == str(elsewhere / "prog")
    (elsewhere / "prog").unlink()
    with pytest.raises(SystemExit, match="scripts folder or on PATH"):
        run._script("prog")


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_our_monai_backend_refuses_the_shim(tmp_path):
    """NI_COMPILED_BACKEND=MONAI with monai._C being our shim: a clear error, no recursion."""
    fake_client(tmp_path)
    res = run_py("""
        import torch, nitorch_jit.compat as c
        c.install()
        import nitorch_jit as nj
        try:
            nj.grid_pull(torch.zeros(1, 1, 4), torch.zeros(1, 2, 1))
        except Exception as e:
            print(type(e).__name__, e)
    """, tmp_path, NI_COMPILED_BACKEND="MONAI")
    assert "compat module" in res.stdout and "BackendError" in res.stdout, res.stdout + res.stderr


# ----------------------------------------------------------------------------- enums
@pytest.mark.parametrize("mod", [cn, cm])
def test_enums_behave_like_pybind(mod):
    B, I = mod.BoundType, mod.InterpolationType
    assert str(B.nearest) == "BoundType.replicate" and B.mirror.name == "dct1"
    assert [int(B[n]) for n in ("replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero")] \
        == [0, 1, 2, 3, 4, 5, 7]
    assert [int(m) for m in set(B.__members__.values())] == [0, 1, 2, 3, 4, 5, 7]
    assert hash(B.zero) == 7 and I(3) is I.cubic and str(I.cubic) == "InterpolationType.cubic"
    with pytest.raises(ValueError, match="zero 7"):
        B(6)
    assert "border" in B.__members__ if mod is cm else "border" not in B.__members__


def test_monai_extras():
    assert cm.max_compute_capability() == (0 if not torch.cuda.is_available() else
                                           cm.max_compute_capability())
    for name in ("bilateral_filter", "phl_filter", "lltm_forward", "tjbf_backward"):
        with pytest.raises(NotImplementedError, match=f"{name}.*only MONAI's spatial resampling"):
            getattr(cm, name)(torch.zeros(1))


# ----------------------------------------------------------------------------- resampling
def _case(dim=2, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, *[n] * dim, dtype=F64, generator=g)
    grid = nj.identity_grid([n] * dim, dtype=F64)[None].expand(2, *[n] * dim, dim) \
        + 3 * (torch.rand(2, *[n] * dim, dim, dtype=F64, generator=g) - 0.5)
    return x, grid


def test_positional_order_and_codes():
    x, g = _case()
    B, I = cn.BoundType, cn.InterpolationType
    want = nj.grid_pull(x, g, "cubic", "dct1", True)
    assert torch.equal(cn.grid_pull(x, g, [B.dct1], [I.cubic], 1), want)
    assert torch.equal(cn.grid_pull(x, g, [1], [3], 1), want)      # the C numbering
    want = nj.grid_pull(x, g, "linear", "zero", False)
    assert torch.equal(cm.grid_pull(x, g, [cm.BoundType.zeros], [cm.InterpolationType(1)],
                                    False), want)


def test_extrapolate_2_is_within_half_a_voxel():
    x = torch.arange(1.0, 6.0, dtype=F64).reshape(1, 1, 5)
    pts = torch.tensor([-0.6, -0.54, 2.0, 4.54, 4.56], dtype=F64).reshape(1, 5, 1)
    y = cn.grid_pull(x, pts, [cn.BoundType.replicate], [cn.InterpolationType.linear], 2)
    assert y.flatten().tolist() == [0.0, 1.0, 3.0, 5.0, 0.0]
    c = cn.grid_count(pts, [5], [cn.BoundType.replicate], [cn.InterpolationType.nearest], 2)
    assert c.flatten().tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("extrapolate", [0, 1, 2])
@pytest.mark.parametrize("op", ["pull", "push", "grad", "count"])
def test_backward_deque_matches_autograd(op, extrapolate):
    """grid_*_backward returns the gradients of the inputs that require grad, input first,
    equal to autograd over the forward (extrapolate=2 included)."""
    x, g = _case(seed=1)
    opts = ([cn.BoundType.dct2], [cn.InterpolationType.cubic], extrapolate)
    v = torch.randn(2, 3, 5, 5, dtype=F64)
    for need_x, need_g in [(True, True), (True, False), (False, True)]:
        if op == "count" and need_x:
            continue
        xi = (v if op == "push" else x).clone().requires_grad_(need_x)
        gi = g.clone().requires_grad_(need_g)
        with torch.enable_grad():
            if op == "pull":
                y = cn.grid_pull(xi, gi, *opts)
            elif op == "push":
                y = cn.grid_push(xi, gi, [5, 5], *opts)
            elif op == "grad":
                y = cn.grid_grad(xi, gi, *opts)
            else:
                y = cn.grid_count(gi, [5, 5], *opts)
            w = torch.randn_like(y)
            want = torch.autograd.grad(y, [t for t, n in ((xi, need_x), (gi, need_g)) if n], w)
        with torch.no_grad():
            if op == "count":
                got = [cn.grid_count_backward(w, gi, *opts)]
            else:
                got = getattr(cn, f"grid_{op}_backward")(w, xi, gi, *opts)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("call,match", [
    (lambda x, g: cn.grid_pull(x, g, [6], [1], 1), "bound: 6 is not a valid code"),
    (lambda x, g: cn.grid_pull(x, g, [cn.BoundType.dct2], [9], 1), "interpolation"),
    (lambda x, g: cn.grid_pull(x, g, [], [1], 1), "bound: expected a non-empty list"),
    (lambda x, g: cn.grid_pull(x, g, [0], [1], 3), "extrapolate: expected 0, 1, 2"),
    (lambda x, g: cn.grid_pull(x, g[..., :1], [0], [1], 1), "input"),
    (lambda x, g: cn.grid_pull(x.float(), g, [0], [1], 1), "dtype"),
    (lambda x, g: cn.grid_push(x, g[:, :3], [], [0], [1], 1), "spatial shape"),
    (lambda x, g: cn.regulariser(x[0, 0], None, None, None, [0], [1], [0], [1], [0]),
     "input: expected a \\[N, C, \\*spatial\\]"),
])
def test_bad_input_gets_a_clear_error(call, match):
    x, g = _case()
    with pytest.raises((ValueError, TypeError), match=match):
        call(x, g)


# ----------------------------------------------------------------------------- solvers, resize
def test_solvers_and_regularisers_against_public_api():
    torch.manual_seed(0)
    B = cn.BoundType
    g = torch.randn(1, 2, 12, 10, 8, dtype=F64)
    h = torch.rand(1, 2, 12, 10, 8, dtype=F64) + 0.5
    e = torch.Tensor()
    pen = ([0.1, 0.2], [0.5, 0.3], [0.05, 0.1], [1.0, 1.5, 2.0], [B.dct2])
    torch.testing.assert_close(cn.regulariser(g, e, e, h, *pen),
                               nj.regulariser(g, *pen[:3], 1, pen[3], "dct2", 3, None, h))
    x = cn.pcg(h, g, e, e, *pen, 30, 1e-10)
    r = g - nj.regulariser(x, *pen[:3], 1, pen[3], "dct2", 3, None, h)
    assert r.norm() / g.norm() < 1e-6
    x = cn.fmg(h, g, e, e, *pen, 2, 2, 16, True)
    r = g - nj.regulariser(x, *pen[:3], 1, pen[3], "dct2", 3, None, h)
    assert r.norm() / g.norm() < 1e-2
    out = torch.zeros_like(g)
    assert cn.relax(h, g, out, e, *pen, 4) is out and out.abs().sum() > 0
    # grids, channel first; Lamé as (shear, div) the C way
    v = torch.randn(1, 3, 10, 9, 8, dtype=F64)
    got = cn.regulariser_grid(v, e, e, e, 0.01, 0.1, 0.2, 0.05, 0.3, [1.0], [B.dft])
    want = nj.regulariser_grid(v.movedim(1, -1), 0.01, 0.1, 0.2, (0.05, 0.3), 1, 1, "dft")
    torch.testing.assert_close(got, want.movedim(-1, 1))
    x = cn.fmg_grid(e, v, e, e, 0.01, 0.1, 0.2, 0.05, 0.3, [1.0], [B.dft], 2, 2, 16, True)
    assert x.shape == v.shape
    # precond: the closed form; with a spatial penalty, a clear refusal
    x = cn.precond(h, g, e, e, [1.0, 1.0], [0, 0], [0, 0], [1.0], [B.dct2])
    torch.testing.assert_close(x, g / (h + 1))
    with pytest.raises(NotImplementedError, match="closed form"):
        cn.precond(h, g, e, e, *pen)


def test_resize_family_adjoints():
    torch.manual_seed(0)
    B, I, A = cn.BoundType, cn.InterpolationType, cn.GridAlignType
    x = torch.randn(1, 2, 9, 7, dtype=F64)
    y = cn.resize(x, torch.Tensor(), [1.6], [B.dct2], [I.cubic], [A.center], False, False)
    assert y.shape[2:] == (14, 11)
    w = torch.randn_like(y)
    xt = cn.resize_backward(w, torch.empty_like(x), [1.6], [B.dct2], [I.cubic], [A.center],
                            False, False)
    torch.testing.assert_close((y * w).sum(), (x * xt).sum())
    p = cn.prolongation(x, torch.Tensor())
    assert p.shape[2:] == (18, 14)
    q = torch.randn_like(p)
    torch.testing.assert_close((p * q).sum(), (x * cn.prolongation_backward(q, torch.empty_like(x))).sum())
    r = cn.restriction(p, torch.Tensor())
    assert r.shape[2:] == (9, 7)
    torch.testing.assert_close((r * x).sum(), (p * cn.restriction_backward(x, torch.empty_like(p))).sum())
    torch.testing.assert_close(cn.fmg_prolongation(x, torch.Tensor(), [B.dct2]),
                               nj.prolong(x, bound="dct2"))


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_the_pytest_plugin_installs_when_registered_not_when_imported(tmp_path):
    """Importing it changes nothing (``--doctest-modules nitorch_jit`` imports every module,
    and runs the examples, the compat's among them, in that process); ``-p`` installs the
    compat before the next plugin is even imported."""
    res = run_py("""
        import nitorch_jit.compat as c, nitorch_jit.compat.pytest_plugin
        print(c.served(), c.patched())
    """, tmp_path)
    assert res.stdout.split() == ["[]", "[]"], res.stderr
    (tmp_path / "later_plugin.py").write_text(
        "import nitorch_jit.compat as c\n"
        "assert c.served() == ['monai._C', 'nitorch._C.spatial'] and c.patched() == ['interpol']\n")
    (tmp_path / "test_probe.py").write_text("def test_probe():\n    pass\n")
    outcomes, log = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", "-p", "later_plugin",
                                "test_probe.py"], tmp_path, client_env(PYTHONPATH=tmp_path))
    assert counts(outcomes) == {"passed": 1}, log
