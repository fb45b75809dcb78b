"""The regsolve CPU kernels built by clang (issue 40).

clang emitted aligned vector moves for the unaligned rows of csrc/regsolve/cpu/lanes.h (loads
through a reference to a typedef whose `aligned` attribute lowered its alignment: clang keeps
that attribute only on the typedef's own lvalues), so every regulariser call of a clang build
died of a segfault, in the AVX2 lanes and in the baseline ones. The kernels run in a child
process, built by clang++ into the suite's cache (the compiler is in the key), so that a crash
fails this test instead of ending the run; their results must equal the pure-PyTorch twin to
1e-10 in float64. Skips where clang++ is not installed.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import torch, nitorch_jit as nj
    from nitorch_jit.backends import tuning
    torch.manual_seed(0)
    for avx2 in (True, False):  # the AVX2 lanes and the baseline (16-byte) lanes
        tuning.set_knobs(avx2=avx2)
        for dtype, shape in ((torch.float32, (16, 16, 16)), (torch.float64, (8, 9, 10)),
                             (torch.float64, (5, 7, 3))):
            x = torch.randn(1, *shape, 3, dtype=dtype)
            opts = dict(membrane=1e-3, bending=0.1)
            got = nj.regulariser_grid(x, **opts)
            print("ok", dtype, shape, float(got.abs().sum()), flush=True)
        # solves: reg_precond's and reg_relax_'s voxel solves in lanes (solve_lanes)
        h = torch.rand(1, 8, 9, 10, 6, dtype=torch.float64) * 0.1
        h[..., :3] += 1
        g = torch.randn(1, 8, 9, 10, 3, dtype=torch.float64)
        for optim in ("cg", "relax"):
            sol = nj.solve_grid(h, g, membrane=1e-3, bending=0.1, optim=optim)
            print("solved", optim, float(sol.abs().sum()), flush=True)
""")


def _run(env):
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.skipif(shutil.which("clang++") is None,
                    reason="clang++ is not installed (Debian: apt install clang libomp-dev)")
@pytest.mark.slow  # builds the kernels with clang
def test_regsolve_clang_build_runs_and_equals_gcc_build():
    env = dict(os.environ, NI_COMPILED_BACKEND="C", CXX="clang++")
    clang = _run(env)
    assert clang.returncode == 0, (
        f"the clang build of the regsolve kernels failed (rc {clang.returncode}; "
        f"-11/139 is a segfault):\n{clang.stdout}\n{clang.stderr[-4000:]}")
    # the same sums from the build of the default compiler (gcc here): clang's equal to 1e-10
    # relative in float64 (float32 sums: 1e-5, two compilers may contract differently)
    default = _run(dict(os.environ, NI_COMPILED_BACKEND="C"))
    assert default.returncode == 0, default.stderr[-4000:]
    lines_c = [ln.split() for ln in clang.stdout.splitlines() if ln[:2] in ("ok", "so")]
    lines_d = [ln.split() for ln in default.stdout.splitlines() if ln[:2] in ("ok", "so")]
    assert len(lines_c) == len(lines_d) == 10
    for a, b in zip(lines_c, lines_d):
        assert a[:-1] == b[:-1]
        tol = 1e-5 if "float32" in a[1] else 1e-10
        assert float(a[-1]) == pytest.approx(float(b[-1]), rel=tol), (a, b)
