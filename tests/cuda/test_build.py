"""The CUDA modules without a GPU: each (pushpull, splinc, resize, regsolve) compiles for an
explicit arch and registers every op of its module under the CUDA key; and a CUDA device whose
kernels cannot be compiled falls back to the pure-PyTorch kernels with one warning (or raises
with NI_COMPILED_BACKEND=C).

The build runs in a fresh process with its own cache (loading a second copy of the CUDA
kernels into the test process would re-register them). Skipped only when torch is a CPU build
or no CUDA toolkit is found; the fallback tests need neither.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nitorch_jit.backends import compiled
from nitorch_jit.jit import toolchain

REPO = Path(__file__).resolve().parents[2]
ARCH = "9.0"


def run(code, tmp_path, timeout=1800, args=(), **env):
    e = dict(os.environ, NI_JIT_CACHE_DIR=str(tmp_path / "cache"),
             PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    e.pop("NI_COMPILED_BACKEND", None)
    e.update({k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", code, *args], env=e, capture_output=True,
                          text=True, timeout=timeout)


def lines(proc, tag):
    return [x[len(tag) + 1:] for x in proc.stdout.splitlines() if x.startswith(tag + " ")]


BUILD = """
import json, sys, time, torch
from nitorch_jit import backends, jit
from nitorch_jit.jit import cache
from nitorch_jit.backends import MODULES, compiled
module = sys.argv[1]
start = time.monotonic()
path = backends.load_module(module, "cuda", "{ARCH}")
print("SECONDS", time.monotonic() - start)
print("LIBRARY", path)
missing = [op for op in MODULES[module]
           if not torch._C._dispatch_has_kernel_for_dispatch_key("nitorch_jit::" + op, "CUDA")]
print("MISSING", json.dumps(missing))
# a split module: every op's kernel library in float32 (each kernel file, each op's guard) and
# the other dtypes of grid_pull, built as a pool and bound in the binding as a call binds them
names = [n for n in compiled.kernel_names(module, "cuda")
         if n.endswith(".float32.cuda") or n.startswith(module + ".grid_pull.")]
start = time.monotonic()
outcomes = jit.load_all([compiled.kernel_spec(n, archs="{ARCH}") for n in names])
print("KERNEL_SECONDS", time.monotonic() - start)
print("KERNEL_FAILED", json.dumps([str(o.error) for o in outcomes if o.error is not None]))
bound = [str(compiled.load_kernel(path, n, archs="{ARCH}")) for n in names]
print("BOUND", json.dumps(len(bound)))
entries = [e for e in cache.entries() if e.manifest["key"].get("device") == "cuda"]
print("ARCHS", json.dumps(sorted({json.dumps(e.manifest["key"].get("archs")) for e in entries})))
print("KERNELS", json.dumps(len(names)))
"""


@pytest.mark.parametrize("module", ["pushpull", "splinc", "resize", "regsolve"])
def test_cuda_module_builds_and_registers(tmp_path, module):
    if torch.version.cuda is None:
        pytest.skip("torch is a CPU-only build (torch.version.cuda is None): no CUDA module")
    try:
        home, _ = toolchain.find_cuda_home()
        toolchain.check_cuda_versions(toolchain.nvcc_version(home), torch.version.cuda)
    except toolchain.ToolchainError as e:
        pytest.skip(f"no usable CUDA toolkit: {e}")
    proc = run(BUILD.replace("{ARCH}", ARCH), tmp_path, args=[module],
               MAX_JOBS=os.environ.get("MAX_JOBS", str(os.cpu_count() or 1)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert lines(proc, "MISSING") == ["[]"], proc.stdout
    kernels = json.loads(lines(proc, "KERNELS")[0])
    seconds = float(lines(proc, "SECONDS")[0])
    if (module, "cuda") in compiled.BINDINGS:
        # the binding holds no device code (no arch); the kernel libraries are built for ARCH
        assert kernels >= (10 if module == "pushpull" else 1), proc.stdout
        assert lines(proc, "KERNEL_FAILED") == ["[]"], proc.stdout + proc.stderr[-6000:]
        assert json.loads(lines(proc, "BOUND")[0]) == kernels
        assert set(json.loads(lines(proc, "ARCHS")[0])) == {"[]", f'["{ARCH}"]'}, proc.stdout
        print(f"CUDA {module}: binding in {seconds:.0f} s, {kernels} kernel libraries for sm "
              f"{ARCH} in {float(lines(proc, 'KERNEL_SECONDS')[0]):.0f} s")
    else:
        assert kernels == 0
        assert json.loads(lines(proc, "ARCHS")[0]) == [f'["{ARCH}"]'], proc.stdout
        print(f"CUDA {module} module built for sm {ARCH} in {seconds:.0f} s")


FALLBACK = """
import json, warnings, torch
from nitorch_jit import backends
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = backends.ensure("pushpull", "cuda")
    second = backends.ensure("pushpull", "cuda")
    cpu_kernels = backends.status().get(("pushpull", "cpu"))
msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
has = torch._C._dispatch_has_kernel_for_dispatch_key("nitorch_jit::grid_pull", "CUDA")
print("RESULT", json.dumps([first, second, msgs, has, cpu_kernels]))
"""


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    import json
    return json.loads(lines(proc, "RESULT")[-1])


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cuda_without_toolkit_falls_back_to_torch_once(tmp_path):
    # a CUDA_HOME that points nowhere is an explicit setting: no other toolkit is tried
    proc = run(FALLBACK, tmp_path, CUDA_HOME=str(tmp_path / "no-cuda"))
    first, second, msgs, has, cpu = _result(proc)
    assert first == second == "TORCH"
    assert len(msgs) == 1, msgs
    assert "unavailable on CUDA" in msgs[0] and "NI_COMPILED_BACKEND=TORCH" in msgs[0]
    if torch.version.cuda is not None:  # on a CPU torch the reason is the torch build
        assert "no usable CUDA toolkit" in msgs[0] and "no-cuda" in msgs[0]
    assert has  # the pure-PyTorch kernels serve the CUDA key
    assert cpu is None  # nothing was done for the CPU
    assert not (tmp_path / "cache").exists() or not any(
        p.name.startswith("pushpull-cuda") for p in (tmp_path / "cache").iterdir())


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cuda_without_toolkit_backend_c_raises(tmp_path):
    code = "from nitorch_jit import backends; backends.ensure('pushpull', 'cuda')"
    proc = run(code, tmp_path, CUDA_HOME=str(tmp_path / "no-cuda"), NI_COMPILED_BACKEND="C")
    assert proc.returncode != 0
    assert "NI_COMPILED_BACKEND=C" in proc.stderr and "CUDA" in proc.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cuda_builds_off_falls_back(tmp_path):
    proc = run(FALLBACK, tmp_path, NI_USE_CUDA="0")
    first, second, msgs, has, _ = _result(proc)
    assert first == second == "TORCH" and len(msgs) == 1 and has
    if torch.version.cuda is not None:
        assert "NI_USE_CUDA=0" in msgs[0]


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_bad_arch_list_falls_back_with_reason(tmp_path):
    proc = run(FALLBACK, tmp_path, TORCH_CUDA_ARCH_LIST="sm_bogus")
    first, _, msgs, _, _ = _result(proc)
    assert first == "TORCH" and len(msgs) == 1
    if torch.version.cuda is not None:
        try:
            toolchain.find_cuda_home()
        except toolchain.ToolchainError:
            return
        assert "TORCH_CUDA_ARCH_LIST" in msgs[0]
