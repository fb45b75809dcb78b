"""The pure-PyTorch backend passes the regulariser and solver checks of test_api.py (dense
matrices, SPM stencils, solves against torch.linalg.solve, gradcheck, FMG convergence) that
the compiled kernels pass: what users without a compiler get must be usable (about 1 min on
2 cores); and it refuses the bad calls the compiled kernels refuse, with their messages."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nitorch_jit.ops.regularisers import colour_periods
from nitorch_jit.torch_impl import regsolve as twin
from tests.ops.regsolve.cases import C, assert_same_errors, first_line  # noqa: F401

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_api_checks_pass_on_the_torch_backend(tmp_path):
    # in one process: this test already runs beside the suite's other workers, and workers of
    # its own only contended for the same cores (124 s with 2, 64 s alone in one); the process
    # says who served it
    served = tmp_path / "served.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO), NI_JIT_TEST_SERVED=str(served))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-p", "tests.ops.regsolve.torch_backend", str(Path(__file__).with_name("test_api.py"))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = res.stdout[-3000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    lines = served.read_text().splitlines() if served.exists() else []
    assert lines and set(lines) == {"SERVED BY ['TORCH']"}, (lines, tail)
    assert " passed" in res.stdout and "failed" not in res.stdout, tail


def test_bad_arguments_same_errors_as_c(C):
    """Every bad call of the list (dtypes, shapes, Hessian packings, weights, each tap field,
    gradient, period, nb_iter, colours that a tap couples) raises RuntimeError with C's first
    line, and changes nothing."""
    assert_same_errors(C, twin)


def test_colour_check_agrees_with_c(C):
    """For every period from 1 to 4 per axis, bound and realistic tap list (membrane, bending,
    elasticity), the TORCH relaxation refuses exactly the periods C refuses; the periods that
    colour_periods picks are accepted by both."""
    from nitorch_jit.ops.regularisers import taps
    shape = [5, 6]
    g = torch.randn(1, 2, *shape, dtype=torch.float64)
    h = torch.rand(1, 2, *shape, dtype=torch.float64) + 1
    for bnd in (2, 3, 5, 6):
        for flat in (taps(2, 2, [0.1] * 2, [0.2] * 2, [0.0] * 2, [1.0, 1.0], [bnd] * 2),
                     taps(2, 2, [0.1] * 2, [0.2] * 2, [0.3] * 2, [1.0, 1.0], [bnd] * 2),
                     taps(2, 2, 0.1, 0.2, 0.3, [1.0, 1.0], [bnd] * 2, lame=(0.2, 0.3),
                          grid=True)):
            chosen = colour_periods(flat, shape, [bnd] * 2)
            for per in [[a, b] for a in range(1, 5) for b in range(1, 5)] + [chosen]:
                outcome = []
                for kernel in (C.reg_relax_, twin.reg_relax_):
                    x = torch.zeros(1, 2, *shape, dtype=torch.float64)
                    try:
                        kernel(x, h, g, None, flat, per, 1)
                        outcome.append(None)
                    except RuntimeError as e:
                        outcome.append(first_line(e))
                assert outcome[0] == outcome[1], (bnd, per, outcome)
                if per == chosen:
                    assert outcome[0] is None, (bnd, per, outcome)
