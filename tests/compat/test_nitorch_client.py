"""NITorch, unchanged, on nitorch_jit's kernels: its own test suite through the plugin, its
backend report, and its public spatial API against its own TorchScript backend.

Needs NITorch installed as pure Python (scripts/install_clients.sh does it in CI, from
../shared/third_party/nitorch); skips otherwise.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.compat.clients import client_env, counts, need, run_pytest

# the quick tier leaves out: client processes (their own suites, imports of the clients)
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
# the differential cases run NITorch twice (TS, then ours) in subprocesses: slow
pytest_mark_slow = pytest.mark.slow


def _nitorch_tests():
    need("nitorch")
    need("interpol")
    spec = importlib.util.find_spec("nitorch")
    path = Path(spec.origin).parent / "tests" / "test_gradcheck_spatial.py"
    if not path.exists():
        pytest.skip(f"{path} is absent (NITorch installed without its tests)")
    return path


@pytest.mark.slow
def test_nitorch_own_gradcheck_suite(tmp_path):
    """NITorch's own tests/test_gradcheck_spatial.py: 1008 gradchecks of grid_pull / push /
    count over 7 bounds x 8 orders x 3 dims x 2 thread counts, all on our kernels, with the
    ``interpol`` that NITorch's _C/grid.py imports (its prefilter) served by us too (the
    interpol_reach plugin says where interpol's functions came from)."""
    path = _nitorch_tests()
    reach = tmp_path / "reach.txt"
    outcomes, log = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", "-p", "interpol_reach",
                                str(path)], tmp_path, client_env(INTERPOL_REACH_OUT=reach))
    assert counts(outcomes) == {"passed": 1008}, log
    served = reach.read_text().splitlines()[0]  # where interpol's functions came from
    assert served == "# interpol functions from: nitorch_jit.compat.interpol_api", served


@pytest.mark.parametrize("how", ["install", "runner", "cli"])
def test_nitorch_reports_compiled_backend(tmp_path, how):
    need("nitorch")
    probe = tmp_path / "probe.py"
    probe.write_text("import nitorch, nitorch._C.spatial as S, nitorch_jit.compat as c\n"
                     "print(nitorch.compiled_backend, c.is_compat(S))\n")
    cmd = {"install": [sys.executable, "-c", "import nitorch_jit.compat as c; c.install(); "
                       "exec(open('probe.py').read())"],
           "runner": [sys.executable, "-m", "nitorch_jit.compat", str(probe)],
           "cli": [sys.executable, "-m", "nitorch_jit.cli", "run", str(probe)]}[how]
    res = subprocess.run(cmd, cwd=tmp_path, env=client_env(), capture_output=True, text=True,
                         timeout=600)
    assert res.stdout.split()[-2:] == ["C", "True"], res.stdout + res.stderr


def test_ts_variable_keeps_nitorch_torchscript(tmp_path):
    """NI_COMPILED_BACKEND=TS: NITorch's own TorchScript, even with the compat installed."""
    need("nitorch")
    res = subprocess.run([sys.executable, "-m", "nitorch_jit.compat", "-c"], cwd=tmp_path,
                         env=client_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode != 0  # -c is not a program: a usage error, not a crash
    res = subprocess.run(
        [sys.executable, "-c", "import nitorch_jit.compat as c; c.install(); import nitorch; "
         "print(nitorch.compiled_backend)"], cwd=tmp_path,
        env=client_env(NI_COMPILED_BACKEND="TS"), capture_output=True, text=True, timeout=600)
    assert res.stdout.split()[-1:] == ["TS"], res.stdout + res.stderr


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    need("nitorch")
    root = tmp_path_factory.mktemp("nitorch_calls")
    runs = {}
    for name, flag, env in [("ts", [], {"NI_COMPILED_BACKEND": "TS"}), ("ours", ["--compat"], {})]:
        out = root / f"{name}.pt"
        res = subprocess.run([sys.executable, str(HERE / "nitorch_calls.py"), str(out), *flag],
                             cwd=root, env=client_env(**env), capture_output=True, text=True,
                             timeout=1800)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        runs[name] = torch.load(out)
    return runs["ts"], runs["ours"]


@pytest_mark_slow
def test_differential_backends(differential):
    ts, ours = differential
    assert ts["backend"] == "TS" and ours["backend"] == "C"


def _interpol(key, ts):
    """torch-interpol's answers for one case (the oracle where NITorch's TS is wrong)."""
    import interpol
    kind, rest = key.split("-", 1)
    case = rest.split("-", 1)[1] if kind == "pull" and rest[:3] in ("dx-", "dg-") else rest
    what = rest[:2] if kind == "pull" and rest[:3] in ("dx-", "dg-") else kind
    x, g, w = ts[f"in-{case}"]
    _, order, bound, ext = case.split("-")
    opt = dict(interpolation=int(order[1:]), bound=bound, extrapolate=ext == "ext")
    shape = list(x.shape[2:])
    if kind == "push":
        return interpol.grid_push(ts[f"in-push-{case}"], g, shape, **opt)
    if kind == "count":
        return interpol.grid_count(g, shape, **opt)
    if kind == "grad":
        return interpol.grid_grad(x, g, **opt)
    xi, gi = x.clone().requires_grad_(), g.clone().requires_grad_()
    y = interpol.grid_pull(xi, gi, **opt)
    if what == "pull":
        return y.detach()
    (y * w).sum().backward()
    return xi.grad if what == "dx" else gi.grad


@pytest_mark_slow
def test_differential_resampling(differential):
    """grid_pull / push / count / grad and pull's gradients (input and grid) agree with
    NITorch's TorchScript to 1e-6 on every dim, order, bound and extrapolate, the exceptions
    named in nitorch_calls.py aside. TS's 1-D orders >= 2 are wrong: there the oracle is
    torch-interpol, which ``test_ts_1d_high_orders_are_wrong`` shows."""
    need("interpol")
    ts, ours = differential
    keys = [k for k in ts if k.split("-")[0] in ("pull", "push", "count", "grad")]
    assert len(keys) > 800
    bad = []
    for k in keys:
        ts_wrong = "-1d-o" in k and int(k.split("-1d-o")[1][0]) >= 2
        want = _interpol(k, ts) if ts_wrong else ts[k]
        err = (want - ours[k]).abs().max().item()
        scale = max(1.0, want.abs().max().item())
        if not err <= 1e-6 * scale:
            bad.append(f"{k}: {err:.2e}")
    assert not bad, f"{len(bad)} of {len(keys)} differ: " + "; ".join(bad[:20])


@pytest_mark_slow
def test_ts_1d_high_orders_are_wrong(differential):
    """The exception is real: NITorch's TS disagrees with torch-interpol in 1-D at order 2."""
    need("interpol")
    ts, _ = differential
    k = "pull-1d-o2-dct2-ext"
    assert (ts[k] - _interpol(k, ts)).abs().max() > 1e-2


@pytest_mark_slow
def test_differential_resize_and_regularisers(differential):
    ts, ours = differential
    for k in ("resize", "regulariser", "regulariser_membrane", "regulariser_grid"):
        assert torch.allclose(ts[k], ours[k], rtol=1e-6, atol=1e-6), k


@pytest_mark_slow
def test_differential_solvers_reach_nitorch_residual(differential):
    """Each solve through the compat reaches at least the residual NITorch's TS solve reaches
    (residuals measured with our regulariser, NITorch's C semantics)."""
    import nitorch_jit as nj
    ts, ours = differential
    p = ts["problem"]
    def field_res(x):
        r = p["g"] - (p["h"] * x + nj.regulariser(x, membrane=0.5, bending=0.1, bound="dct2",
                                                  dim=3))
        return (r.norm() / p["g"].norm()).item()
    def grid_res(x):
        r = p["gg"] - nj.regulariser_grid(x, absolute=0.01, membrane=0.1, bending=0.2,
                                          bound="dft", hessian=p["hh"])
        return (r.norm() / p["gg"].norm()).item()
    for k, res in [("solve_field", field_res), ("solve_field_fmg", field_res),
                   ("solve_grid_fmg", grid_res)]:
        assert res(ours[k]) <= res(ts[k]) * 1.05 + 1e-12, (k, res(ours[k]), res(ts[k]))
