"""The pure-PyTorch backend passes the regulariser and solver checks of test_api.py (dense
matrices, SPM stencils, solves against torch.linalg.solve, gradcheck, FMG convergence) that
the compiled kernels pass: what users without a compiler get must be usable (about 1 min on
2 cores)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_api_checks_pass_on_the_torch_backend():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "tests.ops.regsolve.torch_backend", str(Path(__file__).with_name("test_api.py"))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = res.stdout[-3000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    assert "SERVED BY ['TORCH']" in res.stdout, tail
    assert " passed" in res.stdout and "failed" not in res.stdout, tail
