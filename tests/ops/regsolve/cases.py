"""Helpers shared by the regsolve kernel tests (tests/ops/regsolve/test_c.py, the CUDA emulation
tests/cuda/emu/test_regsolve.py): random and realistic tap lists, Hessians, tolerances and the
compiled CPU kernels as a fixture."""
import pytest
import torch

from nitorch_jit import backends
from nitorch_jit.ops.regularisers import colour_periods, taps as real_taps

F64 = torch.float64
BOUNDS = [2, 3, 4, 5, 6]  # dct2, dst1, dst2, dft, zero (replicate and dct1: refused upstream)


@pytest.fixture(scope="module")
def C():
    """torch.ops.nitorch_jit with the compiled CPU kernels of "regsolve" registered."""
    backends.load_module("regsolve", "cpu")
    return torch.ops.nitorch_jit


def random_taps(rng, dim, chans, n, kinds=(0,), bounds=BOUNDS):
    """n random taps: kind 1 with c_in == c_out, kind 2 with offsets 0."""
    flat = []
    for _ in range(n):
        kind = rng.choice(kinds)
        co = rng.randrange(chans)
        ci = co if kind == 1 else rng.randrange(chans)
        offs = [0] * dim if kind == 2 else [rng.randint(-2, 2) for _ in range(dim)]
        bnds = [rng.choice(bounds) for _ in range(dim)]
        flat += [co, ci, kind, rng.uniform(-1, 1)] + offs + bnds
    return [float(v) for v in flat]


def periods(flat, shape):
    """ops.regularisers.colour_periods with, per dim, dft where some tap uses it."""
    dim = len(shape)
    n = 4 + 2 * dim
    bnd = [5 if any(flat[i + 4 + dim + d] == 5 for i in range(0, len(flat), n)) else 2
           for d in range(dim)]
    return colour_periods(flat, shape, bnd)


def spd_hessian(batch, chans, shape, k, dtype=F64):
    """A packed voxel-wise Hessian with k values, positive definite (diagonally dominant)."""
    h = torch.rand(batch, k, *shape, dtype=dtype)
    if k > chans:
        h[:, chans:] -= 0.5
    h[:, :chans] += chans
    return h


def close(a, b, tol=1e-10):
    """(max |a - b| <= tol * max(1, max |b|), the error)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    if b.numel() == 0:
        return True, 0.0
    scale = max(1.0, b.abs().max().item())
    err = (a - b).abs().max().item()
    return err <= tol * scale, err


def realistic(dim, chans, bnd, grid=False, weighted=False, vs=(1.0, 1.7, 0.6)):
    """The tap list of a real regulariser (ops.regularisers.taps)."""
    vs = list(vs[:dim])
    if grid:
        return real_taps(dim, dim, 0.1, 0.3, 0.2, vs, bnd, lame=(0.4, 0.7), grid=True)
    a = [0.1 * (c + 1) for c in range(chans)]
    m = [0.3 + 0.1 * c for c in range(chans)]
    b = [0.0 if weighted else 0.2 * (c + 1) for c in range(chans)]
    return real_taps(dim, chans, a, m, b, vs, bnd, weighted=weighted)
