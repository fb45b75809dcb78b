"""Issue 31: a first call builds only what it needs (a thin binding and one torch-free kernel
library), each specialisation is its own cache entry, and a broken one breaks no other.

Every case runs in fresh processes with a cache root of its own (what a user's first call does);
the modules here build in seconds (a binding and a kernel library or two), so they are slow
tests, still run in CI.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nitorch_jit.backends import compiled
from nitorch_jit.codes import bound_code
from nitorch_jit.torch_impl import KERNELS as TWIN

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

# one call of an op in a fresh process: prints RESULT <json>; stderr holds the build lines
CALL = """
import json, sys, torch, nitorch_jit as nj
op, dim, order = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
x = torch.randn(1, 2, *[7] * dim, dtype=torch.float64 if 'f64' in sys.argv else torch.float32)
g = (torch.rand(1, *[5] * dim, dim, dtype=x.dtype) * 8 - 0.5)
if op == 'grid_pull':
    y = nj.grid_pull(x, g, order, 'dct2')
elif op == 'grid_push':
    y = nj.grid_push(torch.randn(1, 2, *[5] * dim, dtype=x.dtype), g, [7] * dim, order, 'dct2')
elif op in ('cg', 'relax'):  # a solver (order: unused)
    y = nj.solve_field(torch.rand(1, 1, *[7] * dim, dtype=x.dtype) + 1, x, membrane=0.1,
                       optim=op)
elif op == 'fmg':
    y = nj.solve_field_fmg(torch.rand(1, 1, *[7] * dim, dtype=x.dtype) + 1, x, membrane=0.1)
elif op == 'regulariser':
    y = nj.regulariser(x, membrane=0.1)
elif op == 'raw_grad':  # the op itself, without the front end: the binding asks for its kernel
    from nitorch_jit import backends
    backends.ensure('pushpull', 'cpu')
    y = torch.ops.nitorch_jit.grid_grad(x, g, [order] * dim, [2] * dim, False)
print('RESULT', json.dumps({'backend': nj.compiled_backend, 'sum': float(y.double().sum())}))
"""


def run(root, *args, env=None, timeout=600):
    full = dict(os.environ, NI_JIT_CACHE_DIR=str(root), PYTHONPATH=str(REPO),
                NI_COMPILED_BACKEND="C", NI_USE_CUDA="0")
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", CALL, *map(str, args)], env=full,
                          capture_output=True, text=True, timeout=timeout)


def result(proc):
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line.split(" ", 1)[1])


def entries(root):
    """{folder name: manifest} of the published entries under root."""
    out = {}
    for d in Path(root).iterdir():
        if (d / "manifest.json").is_file():
            out[d.name] = json.loads((d / "manifest.json").read_text())
    return out


def kernels(root, module="pushpull"):
    return sorted(n.split("-cpu-")[0] for n in entries(root) if n.startswith(f"{module}."))


def bindings(root):
    return sorted(n for n in entries(root) if n.startswith("pushpull-cpu-"))


def twin_sum(op, dim, order):
    torch.manual_seed(0)
    x = torch.randn(1, 2, *[7] * dim)
    g = torch.rand(1, *[5] * dim, dim) * 8 - 0.5
    codes = ([order] * dim, [bound_code("dct2")] * dim, False)
    if op == "grid_pull":
        return float(TWIN["grid_pull"](x, g, *codes).double().sum())
    v = torch.randn(1, 2, *[5] * dim)
    return float(TWIN["grid_push"](v, g, [7] * dim, *codes).double().sum())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("first_use")


def test_cold_first_call_builds_only_what_it_needs(root):
    proc = run(root, "grid_pull", 3, 1)
    out = result(proc)
    assert out["backend"] == "C"
    assert out["sum"] == pytest.approx(twin_sum("grid_pull", 3, 1), rel=1e-5)
    assert kernels(root) == ["pushpull.grid_pull.float32.o1d3"], proc.stderr
    assert len(bindings(root)) == 1
    # the progress lines say what is built, in a few words, with a few-second estimate
    assert "compiling grid_pull for 3-D order-1 float32" in proc.stderr
    assert "compiling the binding of 'pushpull'" in proc.stderr


def test_second_op_builds_its_own_entry_and_leaves_the_first(root):
    before = entries(root)
    proc = run(root, "grid_push", 2, 3)
    out = result(proc)
    assert out["sum"] == pytest.approx(twin_sum("grid_push", 2, 3), rel=1e-5)
    assert kernels(root) == ["pushpull.grid_pull.float32.o1d3", "pushpull.grid_push.float32.o3d2"]
    after = entries(root)
    for name, manifest in before.items():  # untouched: same library, same build
        assert after[name]["sha256"] == manifest["sha256"]
        assert after[name]["built_at_epoch"] == manifest["built_at_epoch"]
    assert "compiling the binding" not in proc.stderr
    # a warm process builds nothing and says nothing
    again = run(root, "grid_pull", 3, 1)
    assert result(again)["sum"] == pytest.approx(twin_sum("grid_pull", 3, 1), rel=1e-5)
    assert "compiling" not in again.stderr


def test_call_without_the_front_end_builds_its_kernel(root):
    # torch.ops.nitorch_jit.* straight from the dispatcher (as inductor's code and opcheck do):
    # no prefetch, the binding asks for the specialisation it lacks
    proc = run(root, "raw_grad", 2, 3, "f64")
    result(proc)
    assert "pushpull.grid_grad.float64.o3d2" in kernels(root), proc.stderr
    assert "compiling grid_grad for 2-D order-3 float64" in proc.stderr


def test_corrupted_kernel_entry_is_rebuilt_alone(root):
    name = [n for n in entries(root) if n.startswith("pushpull.grid_pull.float32.o1d3")][0]
    lib = next((Path(root) / name).glob("*.so"))
    lib.write_bytes(lib.read_bytes()[:1000])  # truncated
    proc = run(root, "grid_pull", 3, 1)
    assert result(proc)["sum"] == pytest.approx(twin_sum("grid_pull", 3, 1), rel=1e-5)
    assert "failed verification" in proc.stderr
    assert proc.stderr.count("compiling") == 1, proc.stderr  # that kernel only
    assert "compiling grid_pull for 3-D order-1 float32" in proc.stderr


def test_killed_kernel_build_blocks_no_other(root):
    full = dict(os.environ, NI_JIT_CACHE_DIR=str(root), PYTHONPATH=str(REPO),
                NI_COMPILED_BACKEND="C", NI_USE_CUDA="0")
    victim = subprocess.Popen([sys.executable, "-c", CALL, "grid_pull", "2", "1"], env=full,
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen = ""
    deadline = time.monotonic() + 300
    while "compiling grid_pull for 2-D order-1" not in seen and time.monotonic() < deadline:
        line = victim.stderr.readline()
        if not line and victim.poll() is not None:
            break
        seen += line
    assert "compiling grid_pull for 2-D order-1" in seen, seen
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # another specialisation loads at once, with no wait on the dead build's lock
    other = run(root, "grid_push", 2, 3, timeout=120)
    result(other)
    assert "compiling" not in other.stderr and "waiting" not in other.stderr
    # and the killed one builds again, completely
    again = run(root, "grid_pull", 2, 1)
    assert result(again)["backend"] == "C"
    assert "pushpull.grid_pull.float32.o1d2" in kernels(root)


def test_a_bundle_that_does_not_load_is_passed_over(tmp_path):
    """A prebuilt bundle (nitorch-jit build) serves a call when it loads; one that is intact
    but does not load (here: not a library at all) gives way to the call's own library."""
    from nitorch_jit import jit
    from nitorch_jit.jit import cache
    key = jit.compute_key(compiled.kernel_spec("pushpull.grid_pull.float32.all"))
    folder = tmp_path / jit.entry_name(key)
    folder.mkdir()
    (folder / "lib.so").write_bytes(b"not a shared library")
    (folder / "manifest.json").write_text(json.dumps({
        "key": key, "library": "lib.so", "sha256": cache.sha256_file(folder / "lib.so"),
        "build_seconds": 1.0, "built_at_epoch": time.time()}))
    proc = run(tmp_path, "grid_pull", 3, 1)
    assert result(proc)["sum"] == pytest.approx(twin_sum("grid_pull", 3, 1), rel=1e-5)
    assert "compiling grid_pull for 3-D order-1 float32" in proc.stderr, proc.stderr
    assert "pushpull.grid_pull.float32.o1d3" in kernels(tmp_path)


@pytest.mark.skipif(compiled.binding_abi() != "stable",
                    reason="this torch has no stable ABI binding: the classic one is the default")
def test_classic_binding_from_the_same_source(tmp_path):
    # the classic headers build the same binding source (the default below torch 2.13); the
    # kernels are the same entries whichever binding calls them
    stable_root, classic_root = tmp_path / "stable", tmp_path / "classic"
    a = result(run(stable_root, "grid_pull", 3, 1))
    proc = run(classic_root, "grid_pull", 3, 1, env={"NI_JIT_BINDING": "classic"})
    b = result(proc)
    assert a["sum"] == b["sum"]
    assert "(stable ABI)" not in proc.stderr and "compiling" in proc.stderr
    assert kernels(stable_root) == kernels(classic_root)
    assert {n.split("-cpu-")[1] for n in entries(stable_root) if n.startswith("pushpull.")} == \
        {n.split("-cpu-")[1] for n in entries(classic_root) if n.startswith("pushpull.")}
    assert bindings(stable_root) != bindings(classic_root)


def test_a_solver_builds_one_kernel_library_that_holds_the_matvec(tmp_path):
    # CG runs reg_precond and reg_matvec, relaxation reg_relax_ and reg_matvec: the library of
    # the first holds the second too (kernels.def NJ_KERNEL_WITH), so a first call builds one
    # kernel library beside the binding, and a later call of the matvec alone builds nothing
    twin = {op: result(run(tmp_path / "twin", op, 3, 0, "f64", env={"NI_COMPILED_BACKEND":
                                                                     "TORCH"}))["sum"]
            for op in ("cg", "relax", "regulariser")}
    proc = run(tmp_path, "cg", 3, 0, "f64")
    assert result(proc)["sum"] == pytest.approx(twin["cg"], rel=1e-10)
    assert kernels(tmp_path, "regsolve") == ["regsolve.reg_precond.float64.any"], proc.stderr
    assert "compiling reg_precond and reg_matvec for float64" in proc.stderr
    proc = run(tmp_path, "regulariser", 3, 0, "f64")
    assert result(proc)["sum"] == pytest.approx(twin["regulariser"], rel=1e-10)
    assert "compiling" not in proc.stderr
    proc = run(tmp_path, "relax", 3, 0, "f64")
    assert result(proc)["sum"] == pytest.approx(twin["relax"], rel=1e-10)
    assert kernels(tmp_path, "regsolve") == ["regsolve.reg_precond.float64.any",
                                             "regsolve.reg_relax_.float64.any"], proc.stderr
    assert proc.stderr.count("compiling") == 1, proc.stderr


def test_full_multigrid_builds_one_library_per_module_side_by_side(tmp_path):
    # its restrictions (resize_adjoint) and prolongations (resize) come from one library of
    # resize's module, started with the solver's own (backends.prefetch); CG smooths
    twin = result(run(tmp_path / "twin", "fmg", 3, 0, "f64",
                      env={"NI_COMPILED_BACKEND": "TORCH"}))["sum"]
    proc = run(tmp_path, "fmg", 3, 0, "f64")
    assert result(proc)["sum"] == pytest.approx(twin, rel=1e-10)
    assert kernels(tmp_path, "regsolve") == ["regsolve.reg_precond.float64.any"], proc.stderr
    assert kernels(tmp_path, "resize") == ["resize.resize_adjoint.float64.any"], proc.stderr
    assert "compiling resize_adjoint and resize for float64" in proc.stderr
    # two bindings, two libraries (and pushpull's binding, for nj.compiled_backend)
    built = [line for line in proc.stderr.splitlines() if "compiling" in line]
    assert len([line for line in built if "'pushpull'" not in line]) == 4, proc.stderr
