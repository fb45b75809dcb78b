"""torch-interpol's dependents, unchanged, on nitorch_jit's kernels (nitorch_jit.compat serving
``interpol``): their own tests give the same pass/fail set with the compat as with interpol
0.3.0 itself, and NITorch's spline prefilter (which it takes from ``interpol.coeff`` whatever its
compiled backend) runs on our kernels.

- cornucopia 0.5.1: its own geometric, intensity, labels and synth test files (they ship in
  its wheel);
- TorchIO 2.0.0a2 (from ../shared/third_party/torchio): its whole suite runs once on interpol
  itself, recording which tests call it (tests/compat/plugins/interpol_reach.py: test_spatial's
  high orders and the cornucopia adapter), then the files holding those tests run through the
  compat;
- NITorch: spline_coeff, spline_coeff_nd and grid_pull(..., prefilter=True) through
  ``nitorch.spatial`` (nitorch_prefilter_calls.py); its gradcheck suite through the plugin is
  test_nitorch_client.py's.

Each side of an A/B is a pytest subprocess (tests/compat/clients.py run_pytest); the time of each
side is printed and recorded in the junit report (``record_property``). The clients are
installed by scripts/install_clients.sh (CI); without them, or without ../shared, these skip.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nitorch_jit.bench import stopwatch
from tests.compat.clients import client_env, counts, need, need_shared, run_pytest

# the quick tier leaves out: client processes (their own suites, imports of the clients)
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
COMPAT = ["-p", "nitorch_jit.compat.pytest_plugin"]
REACH = ["-p", "interpol_reach"]  # after the compat plugin: it wraps whichever interpol is served
CORNUCOPIA_FILES = ["test_geometric.py", "test_intensity.py", "test_run_geometric.py",
                    "test_run_intensity.py", "test_run_labels.py", "test_run_synth.py",
                    "test_backward_geometric.py", "test_backward_intensity.py",
                    "test_backward_synth.py"]


def _run_side(args, cwd, tmp_path, name, **env):
    """One side of an A/B: (outcomes, log, tests that reached interpol, the modules that
    defined interpol's public functions in that run, seconds)."""
    reach = tmp_path / f"reach-{name}.txt"
    with stopwatch() as sw:
        outcomes, log = run_pytest([*args], cwd, client_env(INTERPOL_REACH_OUT=reach, **env))
    assert reach.exists(), f"the interpol_reach plugin wrote nothing\n{log}"
    lines = reach.read_text().splitlines()
    return outcomes, log, set(lines[1:]), lines[0].split(": ", 1)[1].split(", "), \
        sw.wall_ms / 1e3


def _same_outcomes(base, ours, log_ours):
    assert set(base) == set(ours), sorted(set(base) ^ set(ours))[:20]
    changed = sorted(f"{k}: {base[k]} -> {ours[k]}" for k in base if base[k] != ours[k])
    assert not changed, f"{len(changed)} outcomes change with the compat: {changed[:20]}\n" \
                        f"{log_ours}"


def _served(modules, by_us, log):
    """Every public function of interpol was ours (by_us) or interpol's own (not by_us)."""
    ours = [m.startswith("nitorch_jit.") for m in modules]
    assert all(ours) if by_us else not any(ours), f"interpol's functions from {modules}\n{log}"


@pytest.mark.slow
def test_cornucopia_own_tests_same_with_compat(tmp_path, record_property):
    """cornucopia 0.5.1's geometric, intensity, labels and synth files (1237 cases, 469 of which
    call interpol): the same outcome for every case with the compat as with interpol 0.3.0,
    and the same cases call interpol (then ours)."""
    need("cornucopia")
    import importlib.util
    tests = Path(importlib.util.find_spec("cornucopia").origin).parent / "tests"
    files = [str(tests / f) for f in CORNUCOPIA_FILES]
    if not all(Path(f).exists() for f in files):
        pytest.skip(f"cornucopia's tests are not all in {tests}")
    base, log_base, reach_base, from_base, s_base = _run_side([*REACH, *files], tmp_path,
                                                              tmp_path, "base")
    ours, log, reach_ours, from_ours, s_ours = _run_side([*COMPAT, *REACH, *files], tmp_path,
                                                         tmp_path, "ours")
    print(f"\ncornucopia: interpol 0.3.0 {s_base:.0f} s {counts(base)}, "
          f"compat {s_ours:.0f} s {counts(ours)}; {len(reach_base)} cases call interpol")
    record_property("seconds_interpol", round(s_base, 1))
    record_property("seconds_compat", round(s_ours, 1))
    _served(from_base, False, log_base)
    _served(from_ours, True, log)
    assert len(base) >= 1200 and counts(base).get("passed", 0) >= 1200, counts(base)
    _same_outcomes(base, ours, log)
    # 469 of the 1237 cases call interpol (the others take order 1 or no spline)
    assert len(reach_base) >= 400 and reach_ours == reach_base, \
        (len(reach_base), sorted(reach_base ^ reach_ours)[:20])


@pytest.fixture(scope="module")
def torchio_tree(tmp_path_factory):
    """A writable copy of TorchIO's tests/ and its pyproject.toml (its pytest settings:
    xfail_strict, markers), as TorchIO runs them."""
    import shutil
    need("torchio")
    src = need_shared("third_party", "torchio")
    root = tmp_path_factory.mktemp("torchio")
    shutil.copytree(src / "tests", root / "tests")
    shutil.copy(src / "pyproject.toml", root / "pyproject.toml")
    for path in root.rglob("*"):  # ../shared is read-only in CI
        path.chmod(path.stat().st_mode | 0o200)
    return root


@pytest.mark.slow
def test_torchio_tests_that_reach_interpol_same_with_compat(torchio_tree, tmp_path,
                                                           record_property):
    """TorchIO's whole suite on interpol 0.3.0 finds the tests that call interpol (orders >= 2
    in test_spatial, the cornucopia adapter); the files holding them give the same outcome for
    every case with the compat, and the same cases call interpol (then ours)."""
    need("cornucopia")  # test_cornucopia_adapter reaches interpol through cornucopia
    everything, log_base, reach_base, from_base, s_all = _run_side(
        # (a file whose optional dependency is missing here, matplotlib in CI's venv, must not
        # stop the search; such a file runs on neither side)
        [*REACH, "--continue-on-collection-errors", "tests"], torchio_tree, tmp_path, "all")
    files = sorted({t.split("::")[0] for t in reach_base})
    assert "tests/test_spatial.py" in files and len(reach_base) >= 8, sorted(reach_base)
    _served(from_base, False, log_base)
    mods = tuple(f[:-3].replace("/", ".") for f in files)  # junit names: tests.test_x.Class
    base = {k: v for k, v in everything.items()
            if any(k.startswith(m + ".") or k.startswith(m + "::") for m in mods)}
    ours, log, reach_ours, from_ours, s_ours = _run_side(
        [*COMPAT, *REACH, *files], torchio_tree, tmp_path, "ours")
    print(f"\nTorchIO: whole suite on interpol 0.3.0 {s_all:.0f} s {counts(everything)}; "
          f"{files} ({len(reach_base)} cases call interpol) with the compat {s_ours:.0f} s "
          f"{counts(ours)}")
    record_property("seconds_interpol_whole_suite", round(s_all, 1))
    record_property("seconds_compat", round(s_ours, 1))
    _served(from_ours, True, log)
    assert len(base) >= 100, counts(base)
    _same_outcomes(base, ours, log)
    assert reach_ours == reach_base, sorted(reach_base ^ reach_ours)


@pytest.fixture(scope="module")
def nitorch_prefilter(tmp_path_factory):
    """nitorch_prefilter_calls.py run on torch-interpol itself (NITorch's TS backend) and
    through the compat."""
    need("nitorch")
    need("interpol")
    root = tmp_path_factory.mktemp("nitorch_prefilter")
    runs = {}
    for name, flag, env in [("interpol", [], {"NI_COMPILED_BACKEND": "TS"}),
                            ("ours", ["--compat"], {})]:
        out = root / f"{name}.pt"
        res = subprocess.run([sys.executable, str(HERE / "nitorch_prefilter_calls.py"),
                              str(out), *flag], cwd=root, env=client_env(**env),
                             capture_output=True, text=True, timeout=1200)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        runs[name] = torch.load(out)
    return runs["interpol"], runs["ours"]


def test_nitorch_prefilter_runs_on_our_kernels(nitorch_prefilter):
    """NITorch's _C/grid.py holds nitorch_jit's spline_coeff / spline_coeff_nd and calls them
    (cProfile), and no function of torch-interpol's files runs (on interpol itself, thousands
    do)."""
    ref, ours = nitorch_prefilter
    assert ours["backend"] == "C" and ref["backend"] == "TS"
    assert all(m.startswith("nitorch_jit.") for m in ours["grid_py_prefilter"]), \
        ours["grid_py_prefilter"]
    assert not any(m.startswith("nitorch_jit.") for m in ref["grid_py_prefilter"])
    called = ours["ours_called_by_grid_py"]
    assert any(f.endswith(":spline_coeff_nd") for f in called), called
    assert any(f.endswith(":spline_coeff") for f in called), called
    assert ours["original_interpol_calls"] == 0
    assert ref["original_interpol_calls"] > 1000 and not ref["ours_called_by_grid_py"]


def test_nitorch_prefilter_same_as_interpol(nitorch_prefilter):
    """spline_coeff, spline_coeff_nd, grid_pull(prefilter=True) and its input gradient, in
    2-D and 3-D, orders 2-7, the bounds interpol's prefilter has: to 1e-6 of the range."""
    ref, ours = nitorch_prefilter
    keys = [k for k in ref if k.split("-")[0] in ("coeff", "coeff_nd", "pull")]
    assert len(keys) == 240
    bad = []
    for k in keys:
        err = (ref[k] - ours[k]).abs().max().item()
        if not err <= 1e-6 * max(1.0, ref[k].abs().max().item()):
            bad.append(f"{k}: {err:.1e}")
    assert not bad, f"{len(bad)} of {len(keys)} differ: " + "; ".join(bad[:20])
