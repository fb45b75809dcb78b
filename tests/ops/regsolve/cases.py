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


def bad_calls(ns, x, h, w, ok):
    """Calls that every implementation of the regsolve ops refuses (ns: the namespace of
    reg_matvec, reg_precond and reg_relax_), for x [1, 3, 4, 5], h, w and ok a valid tap list;
    the compiled CPU kernels' messages are the reference."""
    F = ns
    return [
        lambda: F.reg_matvec(x.long(), None, None, ok),
        lambda: F.reg_matvec(x[0, 0], None, None, ok),
        lambda: F.reg_matvec(torch.randn(1, 3, 2, 2, 2, 2, dtype=F64), None, None, []),
        lambda: F.reg_matvec(x, torch.rand(1, 4, 4, 5, dtype=F64), None, ok),
        lambda: F.reg_matvec(x, torch.rand(1, 3, 4, 6, dtype=F64), None, ok),
        lambda: F.reg_matvec(x, torch.rand(2, 3, 4, 5, dtype=F64), None, ok),
        lambda: F.reg_matvec(x, h.float(), None, ok),
        lambda: F.reg_matvec(x, None, torch.rand(1, 2, 4, 5, dtype=F64), ok),
        lambda: F.reg_matvec(x, None, torch.rand(1, 1, 5, 4, dtype=F64), ok),
        lambda: F.reg_matvec(x, None, None, ok[:-1]),
        lambda: F.reg_matvec(x, None, None, [3.0] + ok[1:]),
        lambda: F.reg_matvec(x, None, None, [0.0, -1.0] + ok[2:]),
        lambda: F.reg_matvec(x, None, None, [0.5] + ok[1:]),
        lambda: F.reg_matvec(x, None, None, ok[:2] + [3.0] + ok[3:]),
        lambda: F.reg_matvec(x, None, None, ok[:3] + [float("nan")] + ok[4:]),
        lambda: F.reg_matvec(x, None, None, ok[:4] + [3.0, 0.0] + ok[6:]),
        lambda: F.reg_matvec(x, None, None, ok[:6] + [7.0, 2.0]),
        lambda: F.reg_matvec(x, None, None, ok[:6] + [-1.0, 2.0]),
        lambda: F.reg_matvec(x, None, None, [0.0, 1.0, 1.0] + ok[3:]),
        lambda: F.reg_matvec(x, None, None, [0.0, 1.0, 2.0] + ok[3:]),
        lambda: F.reg_precond(x, h, torch.rand(1, 3, 4, dtype=F64), ok),
        lambda: F.reg_precond(x, torch.rand(1, 5, 4, 5, dtype=F64), None, ok),
        lambda: F.reg_precond(x.float(), None, None, ok[:3] + [float("inf")] + ok[4:]),
        lambda: F.reg_relax_(x, h, x[:, :2], w, ok, [2, 2], 1),
        lambda: F.reg_relax_(x, h, x.float(), w, ok, [2, 2], 1),
        lambda: F.reg_relax_(x, h, x, w, ok, [2], 1),
        lambda: F.reg_relax_(x, h, x, w, ok, [2, 0], 1),
        lambda: F.reg_relax_(x, h, x, w, ok, [2, 2], -1),
        lambda: F.reg_relax_(x, h, x, w, ok, [1, 2], 1),
        lambda: F.reg_relax_(x, h, x, w, ok[:4] + [2.0, 0.0] + ok[6:], [2, 2], 1),
        lambda: F.reg_relax_(x, h, x, w, ok[:6] + [5.0, 2.0], [3, 2], 1),
        lambda: F.reg_relax_(x, h, x, w, ok, [2, 2, 2], 1),
    ]


def first_line(e):
    return str(e).splitlines()[0]


def assert_same_errors(want_ns, got_ns):
    """Every call of bad_calls raises RuntimeError in both namespaces, with the same first
    line (want_ns's is the reference), and changes nothing."""
    x = torch.randn(1, 3, 4, 5, dtype=F64)
    ok = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]
    h = torch.rand(1, 3, 4, 5, dtype=F64)
    w = torch.rand(1, 1, 4, 5, dtype=F64)
    x0 = x.clone()
    for i, (want_fn, got_fn) in enumerate(zip(bad_calls(want_ns, x, h, w, ok),
                                              bad_calls(got_ns, x, h, w, ok))):
        with pytest.raises(RuntimeError) as want:
            want_fn()
        with pytest.raises(RuntimeError) as got:
            got_fn()
        assert first_line(got.value) == first_line(want.value), i
    assert torch.equal(x, x0)
