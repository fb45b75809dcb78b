"""Issue 31 on CUDA, without a GPU: pushpull's CUDA library is a binding (host compiler, no
device code) and torch-free kernel libraries, one per op and dtype, built by nvcc for the
architectures asked for. Here: the names and specs that the binding, the prebuild and the
resolver share, the binding's key (no arch in it), and one real nvcc build of a kernel library
that loads with ctypes and exports its entry only. Running a kernel needs a GPU
(scripts/gpu_check.sh); the host logic runs in tests/cuda/emu, the binding's build in
tests/cuda/test_build.py (a CUDA torch).
"""
import re
import subprocess

import pytest
import torch

from nitorch_jit import jit
from nitorch_jit.backends import compiled
from nitorch_jit.backends.errors import BackendError
from nitorch_jit.backends.schemas import MODULES
from nitorch_jit.jit import toolchain


def _toolkit():
    try:
        return toolchain.find_cuda_home()[0]
    except toolchain.ToolchainError as e:
        pytest.skip(f"no CUDA toolkit here: {e}")


def test_names_cover_every_op_and_dtype():
    names = compiled.kernel_names("pushpull", "cuda")
    assert len(names) == len(set(names))
    ops = {n.split(".")[1] for n in names}
    assert ops == set(MODULES["pushpull"])  # every op the binding registers
    for op in ops:  # every grid op in the four dtypes; the affine ops in float32 and float64
        dts = {n.split(".")[2] for n in names if n.split(".")[1] == op}
        want = {"float32", "float64"} | (set() if op.startswith("affine") else
                                         {"float16", "bfloat16"})
        assert dts == want, (op, dts)
    assert all(n.endswith(".cuda") for n in names)
    # the others name their kernels by launcher (lines/cuda.h) or op; float32 and float64
    assert compiled.kernel_names("splinc", "cuda") == ["splinc.filter.float32.cuda",
                                                       "splinc.filter.float64.cuda"]
    assert {n.split(".")[1] for n in compiled.kernel_names("resize", "cuda")} == \
        {"gather", "filter"}
    assert {n.split(".")[1] for n in compiled.kernel_names("regsolve", "cuda")} == \
        set(MODULES["regsolve"])


def test_every_op_kind_has_one_kernel_line():
    """The C++ (binding.cpp's kernel_op, from kernels.def) names each OpKind of params.cuh once."""
    params = (compiled.CSRC / "pushpull" / "cuda" / "params.cuh").read_text()
    kinds = re.findall(r"^\s*(k[A-Z]\w*) = \d+,?$", params.split("enum OpKind")[1].split("};")[0],
                       re.MULTILINE)
    table = (compiled.CSRC / "pushpull" / "cuda" / "kernels.def").read_text()
    listed = re.findall(r"^NJ_CUDA_KERNEL\(\w+, \w+, (\w+),", table, re.MULTILINE)
    assert sorted(kinds) == sorted(listed) and len(kinds) == 10


def test_spec_of_a_cuda_kernel():
    spec = compiled.kernel_spec("pushpull.grid_pull.bfloat16.cuda", archs="8.0;9.0")
    assert spec.device == "cuda" and spec.torch_free and spec.direct
    assert spec.archs == ["8.0", "9.0"]
    assert spec.sources[0].name == "pull.cu" and spec.sources[0].is_file()
    assert "-DNJ_KERNEL_grid_pull" in spec.cflags and "-DNJ_KERNEL_DTYPE=1" in spec.cflags
    assert spec.label == "grid_pull for bfloat16 (CUDA)"
    with pytest.raises(BackendError, match="kernel_names"):
        compiled.kernel_spec("pushpull.affine_pull.float16.cuda", archs="9.0")


def test_likely_kernel_on_cuda():
    like = compiled.likely_kernel
    assert like("pushpull", "cuda", "grid_pull", torch.float16, [3, 3]) == \
        "pushpull.grid_pull.float16.cuda"
    assert like("pushpull", "cuda", "affine_pull", torch.float64, [1]) == \
        "pushpull.affine_pull.float64.cuda"
    assert like("pushpull", "cuda", "affine_pull", torch.float16, [1]) is None
    assert like("splinc", "cuda", "spline_coeff_nd", torch.float32, [3]) == \
        "splinc.filter.float32.cuda"
    assert like("resize", "cuda", "resize", torch.float64, [1]) == "resize.gather.float64.cuda"
    assert like("regsolve", "cuda", "reg_relax_", torch.float32, [1]) == \
        "regsolve.reg_relax_.float32.cuda"
    assert like("splinc", "cuda", "spline_coeff_nd", torch.float16, [3]) is None


def test_binding_key_holds_no_arch():
    """One CUDA binding serves every GPU: the arch list is not in its key (the kernels' is)."""
    _toolkit()
    a, b = (jit.compute_key(compiled.module_spec("pushpull", "cuda", archs))
            for archs in ("8.0", "9.0"))
    assert a == b and a["archs"] == []
    assert [s.name for s in compiled.module_spec("pushpull", "cuda", "9.0").sources] == \
        ["binding.cpp"]
    k8, k9 = (jit.compute_key(compiled.kernel_spec("pushpull.grid_pull.float32.cuda", archs=a))
              for a in ("8.0", "9.0"))
    assert k8 != k9 and k9["archs"] == ["9.0"] and "torch" not in k9
    with pytest.raises(toolchain.ToolchainError, match="TORCH_CUDA_ARCH_LIST"):
        compiled.module_spec("pushpull", "cuda", "sm_bogus")  # said now, not at the first call


@pytest.mark.slow
def test_nvcc_builds_one_kernel_library(tmp_path, monkeypatch):
    """A real nvcc build (no GPU needed): one op, one dtype, one arch; it loads with ctypes (the
    CUDA runtime found as the binding's torch would find it, or through its rpath) and exports
    nothing but its entry."""
    _toolkit()
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    spec = compiled.kernel_spec("pushpull.grid_grad.float64.cuda", archs="9.0")
    path = jit.load(spec)
    assert getattr(jit.handle(path), "nj_pushpull_grid_grad")
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                         text=True)
    if out.returncode == 0:
        exported = [line.split()[-1] for line in out.stdout.splitlines() if " T " in line]
        assert exported == ["nj_pushpull_grid_grad"], exported
    assert jit.find_cached(jit.compute_key(spec)) == path
