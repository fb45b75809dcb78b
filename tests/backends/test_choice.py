"""Backend choice (NI_COMPILED_BACKEND) and the CLI, each in a fresh process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nitorch_jit.backends import compiled

REPO = Path(__file__).resolve().parents[2]

PULL = """
import json, torch, warnings
warnings.simplefilter("always")
import nitorch_jit
x = torch.arange(24.).reshape(1, 1, 4, 6)
g = torch.tensor([[[[1.5, 2.25]]]])
print("RESULT", json.dumps([nitorch_jit.grid_pull(x, g).item(), nitorch_jit.compiled_backend]))
"""

# calls served by prebuilt bundles: fast paths (3-D order 1, 2-D order 3), the generic path
# (mixed orders) and float64; their values, to compare with the TORCH backend's
BUNDLED_CALLS = """
import json, torch
import nitorch_jit
torch.manual_seed(0)
out = {
    "pull o1d3": nitorch_jit.grid_pull(torch.randn(1, 2, 5, 6, 7), torch.rand(1, 4, 5, 3, 3) * 5,
                                       interpolation=1),
    "push o3d2": nitorch_jit.grid_push(torch.randn(1, 1, 6, 5), torch.rand(1, 6, 5, 2) * 5,
                                       interpolation=3),
    "grad mixed f64": nitorch_jit.grid_grad(torch.randn(1, 1, 5, 6, dtype=torch.double),
                                            torch.rand(1, 3, 3, 2, dtype=torch.double) * 4,
                                            interpolation=[1, 2]),
}
print("RESULT", json.dumps({k: v.flatten().tolist() for k, v in out.items()}))
"""

def run(code_or_args, root, **env):
    e = dict(os.environ, NI_JIT_CACHE_DIR=str(root), PYTHONPATH=str(REPO))
    e.pop("NI_COMPILED_BACKEND", None)
    e.update({k: str(v) for k, v in env.items()})
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run([sys.executable] + args, env=e, capture_output=True, text=True,
                          timeout=900)


def result(proc):
    assert proc.returncode == 0, proc.stderr
    return json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][7:])


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_no_compiler_unset_warns_and_uses_torch(tmp_path):
    # MONAI's compiled routines would stand in before TORCH (tests/backends/test_monai.py): hide
    # an installed monai behind one that cannot be imported
    (tmp_path / "hide" / "monai").mkdir(parents=True)
    (tmp_path / "hide" / "monai" / "__init__.py").write_text("raise ImportError('hidden')\n")
    proc = run(PULL, tmp_path / "c", CXX="/nonexistent/c++",
               PYTHONPATH=f"{tmp_path / 'hide'}{os.pathsep}{REPO}")
    value, which = result(proc)
    assert value == pytest.approx(1.5 * 6 + 2.25) and which == "TORCH"
    assert proc.stderr.count("compiled kernels are unavailable on CPU") == 1
    assert "no C++ compiler" in proc.stderr and "NI_COMPILED_BACKEND=TORCH" in proc.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_no_compiler_backend_c_raises(tmp_path):
    proc = run(PULL, tmp_path / "c", CXX="/nonexistent/c++", NI_COMPILED_BACKEND="C")
    assert proc.returncode != 0
    assert "NI_COMPILED_BACKEND=C" in proc.stderr and "no C++ compiler" in proc.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_backend_torch_and_ts_alias_compile_nothing(tmp_path):
    for name in ("TORCH", "TS"):
        proc = run(PULL, tmp_path / "c", NI_COMPILED_BACKEND=name, NI_SHOW_COMPILED_BACKEND=1)
        assert result(proc) == [pytest.approx(11.25), "TORCH"]
        assert "compiling" not in proc.stderr and "COMPILED_BACKEND" in proc.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_backend_bad_value(tmp_path):
    # NI_COMPILED_BACKEND=MONAI: tests/backends/test_monai.py
    proc = run(PULL, tmp_path / "c", NI_COMPILED_BACKEND="FAST")
    assert proc.returncode != 0 and "is not one of C, TORCH" in proc.stderr


@pytest.mark.slow  # builds in a cold cache of its own
def test_import_compiles_nothing_and_compiled_backend_builds(tmp_path):
    root = tmp_path / "c"
    proc = run("import nitorch_jit", root)
    assert proc.returncode == 0 and not root.exists()
    proc = run("import nitorch_jit; print('RESULT', '\"' + nitorch_jit.compiled_backend + '\"')", root)
    assert result(proc) == "C"
    assert "compiling the binding of 'pushpull' for CPU" in proc.stderr


@pytest.mark.slow  # builds in a cold cache of its own
def test_cli_info_build_list_clear(tmp_path):
    root = tmp_path / "c"
    cli = ["-m", "nitorch_jit"]
    info = run(cli + ["info"], root)
    assert info.returncode == 0, info.stderr
    for word in ("toolchain", "c++", "ninja", "cache", str(root), "key of this environment",
                 "backend per device", "pushpull", "compiles on first use (no cached build)"):
        assert word in info.stdout, word
    # what an upgrade of torch will do to the bindings
    assert ("CPU: torch's stable ABI 2.13 (seconds to build), keyed on this torch"
            if compiled.binding_abi() == "stable"
            else "CPU: classic headers, keyed on this torch") in info.stdout, info.stdout
    from nitorch_jit.backends import tuning  # sizes as numbers, switches as on/off
    assert f"output_cache_mb={tuning.current()['output_cache_mb']}," in info.stdout
    assert f"avx2={'on' if tuning.current()['avx2'] else 'off'}," in info.stdout
    # a module's prebuild into a cold cache: splinc's, the smallest (seconds; the suite's
    # cache was filled whole by the same command, tests/jit/test_prebuild.py)
    build = run(cli + ["build", "--no-cuda", "splinc"], root)
    assert build.returncode == 0, build.stderr
    assert "compiling the binding of 'splinc' for CPU" in build.stderr
    info = run(cli + ["info"], root)
    assert "C: cached build" in info.stdout
    assert "kernels: all " in info.stdout and "specialisations cached" in info.stdout
    # the prebuild's bundles (every path of an op and dtype) serve every call, fast paths and
    # generic alike: nothing compiles, and the results are the TORCH twin's. In the suite's
    # cache, which `build --no-cuda` prebuilt (the build here is then a check that finds
    # everything; it builds pushpull where the suite was told not to prebuild)
    suite = Path(os.environ["NI_JIT_CACHE_DIR"])
    build = run(cli + ["build", "--no-cuda", "pushpull"], suite)
    assert build.returncode == 0, build.stderr
    calls = run(BUNDLED_CALLS, suite)
    assert "compiling" not in calls.stderr, calls.stderr
    twin = result(run(BUNDLED_CALLS, suite, NI_COMPILED_BACKEND="TORCH"))
    for name, values in result(calls).items():
        assert values == pytest.approx(twin[name], rel=1e-5, abs=1e-5), name
    # a stale entry: the same library as if built by another torch (either API)
    listing = run(cli + ["cache", "list"], root)
    assert "splinc" in listing.stdout and "yes" in listing.stdout
    (entry,) = [p for p in root.iterdir() if p.name.startswith("splinc-cpu")]
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["key"]["torch"] = "0.0.1"
    stale = root / (entry.name + "-old")
    subprocess.run(["cp", "-r", str(entry), str(stale)], check=True)
    (stale / "manifest.json").write_text(json.dumps(manifest))
    listing = run(cli + ["cache", "list"], root)
    assert "no (torch)" in listing.stdout, listing.stdout
    cleared = run(cli + ["cache", "clear", "--stale"], root)
    assert "1 entry removed (stale only)" in cleared.stdout
    assert entry.exists() and not stale.exists()
    assert run(cli + ["cache", "path"], root).stdout.strip() == str(root)
    cleared = run(cli + ["cache", "clear"], root)
    assert "entries removed" in cleared.stdout and not entry.exists()
    assert not [p for p in root.iterdir() if not p.name.startswith(".")]
    assert "no entries" in run(cli + ["cache", "list"], root).stdout


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cli_bench_all_modules(tmp_path):
    # the suite's cache: the modules are built already (or built once, here)
    proc = run(["-m", "nitorch_jit", "bench", "--module", "all", "--size", "12", "--repeat", "1"],
               Path(os.environ["NI_JIT_CACHE_DIR"]))
    assert proc.returncode == 0, proc.stderr
    for row in ("pull linear", "push linear", "grid_sample linear", "spline_coeff_nd cubic",
                "resize x2 cubic -> 24^3"):
        assert row in proc.stdout, (row, proc.stdout)
    diffs = [float(w.split()[0].rstrip(",")) for w in proc.stdout.split("C-TORCH")[1:]]
    assert len(diffs) == 6 and max(diffs) < 1e-4, proc.stdout


def test_tuning_knobs_reach_every_loaded_library(knobs):
    """The knobs chosen in Python (nitorch_jit.backends.tuning) are what each compiled library holds,
    before, inside and after an override; the library's knob list matches the package's."""
    from nitorch_jit import backends
    from nitorch_jit.backends import tuning
    paths = [backends.load_module(m, "cpu") for m in ("pushpull", "regsolve", "splinc", "resize")]
    for path in paths:
        assert tuning.library_values(path) == {k: int(v) for k, v in tuning.current().items()}
    with tuning.override(push_buffer_mb=7, avx2=False, cuda_tiles=False, huge_pages=True,
                         output_cache_mb=3):
        for path in paths:
            got = tuning.library_values(path)
            assert (got["push_buffer_mb"], got["avx2"], got["cuda_tiles"], got["huge_pages"],
                    got["output_cache_mb"]) == (7, 0, 0, 1, 3)
    for path in paths:
        assert tuning.library_values(path) == {k: int(v) for k, v in tuning.current().items()}
    with pytest.raises(ValueError, match="unknown tuning knob"):
        knobs(tiles=False)
    with pytest.raises(TypeError, match="push_buffer_mb"):
        knobs(push_buffer_mb=-1)
    with pytest.raises(TypeError, match="output_cache_mb"):
        knobs(output_cache_mb=1.5)


def test_huge_page_outputs_same_values(knobs):
    """With the huge_pages knob on, large CPU outputs (>= 32 MiB) get huge pages advised before
    the kernel writes them; the advice changes no value (pull, push and the prefilter, knob on
    and off)."""
    import nitorch_jit as nj
    x = torch.randn(1, 2, 96, 96, 480)
    grid = nj.affine_grid(torch.eye(3, 4) * 0.9, [96, 96, 480])[None]
    ref = {}
    for on in (True, False):
        knobs(huge_pages=on)
        ref[on] = (nj.grid_pull(x, grid, 1), nj.grid_push(x, grid, [96, 96, 480], 1),
                   nj.spline_coeff_nd(x, 3, dim=3))
    for a, b in zip(ref[True], ref[False]):
        assert a.nbytes >= 32 << 20 and torch.equal(a, b)


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the block cache is Linux's")
def test_output_cache_reuses_blocks_and_empty_cache_returns_them(tmp_path):
    """Freed CPU outputs of >= 32 MiB are kept (output_cache_mb) and the next output of that
    size reuses the block: pull, push (zeroed first: stale data must not leak in) and the
    prefilter give the same values with the cache on and off; a cached output resizes like any
    tensor; nitorch_jit.empty_cache() gives the blocks back (RSS falls) and leaves live outputs
    alone.
    In a fresh interpreter: resident memory depends on what the process allocated before."""
    script = tmp_path / "output_cache.py"
    script.write_text(_OUTPUT_CACHE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0 and res.stdout.split()[-1:] == ["OK"], res.stderr[-3000:]


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the block cache is Linux's")
def test_one_process_state_for_every_binding(tmp_path):
    """The knobs and the block cache of large outputs are one per process (issue 31), not one
    per binding: every loaded binding uses the same state; a knob set through one library is
    what another reads; a 64 MiB output that one module freed is the block that the next
    64 MiB output of another module gets. In a fresh interpreter: the first library attached
    owns the state."""
    script = tmp_path / "process_state.py"
    script.write_text(_PROCESS_STATE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0 and res.stdout.split()[-1:] == ["OK"], res.stderr[-3000:]


_PROCESS_STATE_SCRIPT = '''\
import ctypes
import torch
import nitorch_jit as nj
from nitorch_jit import backends
from nitorch_jit.backends import tuning

paths = [backends.load_module(m, "cpu") for m in ("splinc", "pushpull", "regsolve", "resize")]
states = {tuning.process_state(p) for p in paths}
assert len(states) == 1 and None not in states, states
# a knob set through the first library alone is what every other one reads
first = ctypes.CDLL(str(paths[0])).nitorch_jit_set_tuning
first.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
values = [int(v) for v in tuning.current().values()]
k = tuning.KNOBS.index("push_buffer_mb")
values[k] = 11
first((ctypes.c_int64 * len(values))(*values), len(values))
assert [tuning.library_values(p)["push_buffer_mb"] for p in paths] == [11] * 4
tuning.set_knobs(push_buffer_mb=256, output_cache_mb=256)
# one block cache: the prefilter's freed 64 MiB output serves grid_pull's 64 MiB output, and back
a = nj.spline_coeff_nd(torch.zeros(64, 512, 512), 3, dim=3)
block = a.data_ptr()
del a
b = nj.grid_pull(torch.ones(1, 64, 4, 4), torch.zeros(1, 512, 512, 2), 1)
assert b.shape == (1, 64, 512, 512) and b.data_ptr() == block, (b.data_ptr(), block)
assert torch.equal(b, torch.ones(()).expand_as(b))
del b
c = nj.spline_coeff_nd(torch.zeros(64, 512, 512), 3, dim=3)
assert c.data_ptr() == block and not c.any()
print("OK")
'''


_OUTPUT_CACHE_SCRIPT = '''\
import os
import torch
import nitorch_jit as nj
from nitorch_jit.backends import tuning


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


x = torch.randn(1, 2, 96, 96, 480)
grid = nj.affine_grid(torch.eye(3, 4) * 0.9, [96, 96, 480])[None]


def run():
    return (nj.grid_pull(x, grid, 1), nj.grid_push(x, grid, [96, 96, 480], 1),
            nj.spline_coeff_nd(x, 3, dim=3))


tuning.set_knobs(output_cache_mb=0)
ref = run()
rss = _rss_mib()
del ref
assert _rss_mib() < rss - 60  # without the cache, freed blocks go back at once
ref = run()
tuning.set_knobs(output_cache_mb=512)
first = run()
for t in first:  # stale data in the blocks that come back
    t.fill_(7.0)
rss = _rss_mib()
del first
assert _rss_mib() > rss - 20  # kept
again = run()
# and reused: new outputs would add 101 MiB; the prefilter's transient scratch (34 MiB)
# may stay with malloc or go back to the OS, depending on the process's history
assert _rss_mib() < rss + 50
for a, b in zip(again, ref):
    assert a.nbytes >= 32 << 20 and torch.equal(a, b)
del a, b  # the loop's names would keep the last output alive
keep = again[0]
keep_ref = keep.clone()
grown = again[1]
from nitorch_jit.backends import compiled
if compiled.binding_abi() == "classic":
    grown.resize_(2 * grown.numel())  # leaves the block for the default allocator
    assert torch.equal(grown[:ref[1].numel()], ref[1].reshape(-1))
else:  # the stable ABI's outputs on a cached block cannot grow in place: like a tensor of
    # torch.from_numpy, resize_ raises (and, as there, leaves the tensor unusable)
    assert torch.equal(grown.clone().resize_(2 * grown.numel())[:ref[1].numel()],
                       ref[1].reshape(-1))
    try:
        grown.resize_(2 * grown.numel())
        raise AssertionError("a cached output of the stable binding grew in place")
    except RuntimeError as err:
        assert "not resizable" in str(err), err
del again, grown
rss = _rss_mib()
nj.empty_cache()
assert _rss_mib() < rss - 60  # the freed blocks, 34 MiB each, given back
assert torch.equal(keep, keep_ref)  # a live output is untouched
assert tuning.current()["output_cache_mb"] == 512  # the budget is back
print("OK")
'''
