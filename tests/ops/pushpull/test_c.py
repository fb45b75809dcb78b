"""The compiled CPU pushpull kernels (csrc/pushpull) against the pure-PyTorch twin and oracles.

Checks: C == TORCH (nitorch_jit/torch_impl/pushpull.py) to 1e-10 in float64 for the six ops,
every dim / order / bound / extrapolate (a representative subset by default, the full sweep
under -m slow); scipy.ndimage.map_coordinates (pull, orders 0-5); torch-interpol (pull, grad,
push; all bounds but dst1, whose interpol version zeroes a real voxel, see
tests/ops/pushpull/test_torch.py); adjointness; finite differences (grad of pull, hess_dot of
grad_dot); thread-count independence of the scatters (private buffers and atomic path);
strides (non-contiguous, batch stride 0); float32, including the AVX2 order-1 pull path
(the avx2 tuning knob off selects the scalar one); out-of-range and non-finite points; bad input
raising instead of crashing; core/bounds.h and core/spline.h compiled on their own. The
scatters' atomic path is forced with the push_buffer_mb knob at 0. The contract is
docs/pushpull-spec.md.
"""
import math
import re

import numpy as np
import pytest
import torch

from nitorch_jit.backends import tuning

from tests.ops.pushpull.cases import bad_args, bad_calls, rand_coords

ndimage = pytest.importorskip("scipy.ndimage")

F64 = torch.float64
NAMES = ["replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero"]
SCIPY_MODES = {0: "nearest", 1: "mirror", 2: "reflect", 5: "grid-wrap", 6: "grid-constant"}
OPS = ["grid_pull", "grid_push", "grid_grad", "grid_pushgrad", "grid_grad_dot", "grid_hess_dot"]


# --------------------------------------------------------------------------- data

def randn(*shape, seed=1, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64).to(dtype)


def case_args(op, D, B=2, Cn=2, S=None, O=None, seed=0, margin=2.5, dtype=F64):
    """Tensor arguments (before order/bound/extrapolate) of `op` for a small random case."""
    S = S or [5, 4, 6][:D]
    O = O or [3, 4, 2][:D]
    grid = rand_coords(O, S, margin=margin, seed=seed, batch=B, dtype=dtype)
    if op in ("grid_pull", "grid_grad"):
        return [randn(B, Cn, *S, seed=seed + 1, dtype=dtype), grid]
    if op == "grid_push":
        return [randn(B, Cn, *O, seed=seed + 1, dtype=dtype), grid, S]
    if op == "grid_pushgrad":
        return [randn(B, Cn, *O, D, seed=seed + 1, dtype=dtype), grid, S]
    w = randn(B, Cn, *O, *([D] if op == "grid_hess_dot" else []), seed=seed + 2, dtype=dtype)
    return [w, randn(B, Cn, *S, seed=seed + 1, dtype=dtype), grid]


def close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(1.0, b.abs().max().item()))


# --------------------------------------------------------------------------- C vs TORCH

def twin_cases(full):
    cases = []
    for D in (1, 2, 3):
        for order in range(8):
            for bound in range(7):
                for ex in (True, False):
                    if full or (bound == (order + D) % 7 and ex == (order % 2 == 0)):
                        cases.append((D, [order] * D, [bound] * D, ex))
    # mixed orders and bounds across dims (generic path with per-dim options)
    mixed = [(2, [1, 3], [0, 3], True), (2, [0, 5], [6, 4], False), (3, [1, 1, 3], [5, 2, 1], True),
             (3, [7, 2, 0], [3, 6, 0], True), (3, [3, 3, 1], [4, 4, 4], False),
             (3, [6, 4, 5], [1, 5, 2], True), (1, [2], [3], False)]
    return cases + mixed


def _check_vs_torch(C, TORCH, op, D, order, bound, ex, seed=0):
    args = case_args(op, D, seed=seed)
    a = getattr(C, op)(*args, order, bound, ex)
    b = getattr(TORCH, op)(*args, order, bound, ex)
    assert a.shape == b.shape and a.dtype == b.dtype
    close(a, b)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("D,order,bound,ex", twin_cases(full=False))
def test_vs_torch(C, TORCH, op, D, order, bound, ex):
    _check_vs_torch(C, TORCH, op, D, order, bound, ex)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_vs_torch_full(C, TORCH, op):
    for D, order, bound, ex in twin_cases(full=True):
        _check_vs_torch(C, TORCH, op, D, order, bound, ex, seed=D)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("order", [0, 1, 2, 3])
@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("Cn", [1, 3])
def test_vs_torch_fast_paths_larger(C, TORCH, op, order, D, Cn):
    """Fast paths (every dim of order 0-3, D = 2, 3; float64 has those of orders 1 and 3):
    sizes large enough for the parallel split and for both interior (unrolled) and border
    (folded) points; one and several channels; float64 and float32."""
    S, O = [9, 8, 10][-D:], [12, 10, 14][-D:]
    args = case_args(op, D, B=1, Cn=Cn, S=S, O=O, margin=1.5, seed=3)
    bound = [2, 5, 3][-D:]
    a = getattr(C, op)(*args, [order] * D, bound, True)
    b = getattr(TORCH, op)(*args, [order] * D, bound, True)
    close(a, b)
    args32 = [x.float() if isinstance(x, torch.Tensor) else x for x in args]
    a32 = getattr(C, op)(*args32, [order] * D, bound, True)
    torch.testing.assert_close(a32.double(), b, rtol=1e-4, atol=1e-4 * max(1, b.abs().max()))


# --------------------------------------------------------------------------- the shared headers

HEADER_PROBE = r"""
#include <cstdio>
#include "core/bounds.h"
#include "core/spline.h"
using namespace nitorch_jit;
int main() {
  for (int b = 0; b < 7; ++b)
    for (long n = 1; n <= 5; ++n)
      for (long i = -23; i <= 23; ++i) {
        int s;
        long j = fold_index(i, n, b, s);
        std::printf("F %d %ld %ld %ld %d\n", b, n, i, j, s);
      }
  for (int o = 0; o <= 7; ++o)
    for (int k = -40; k <= 40; ++k) {
      double t = k * 0.1 + 0.0123;
      std::printf("S %d %.17g %.17g %.17g %.17g\n", o, t, bspline(o, t), bspline_d(o, t),
                  bspline_dd(o, t));
    }
  return 0;
}
"""


def spec_fold(i, n, b):
    """docs/pushpull-spec.md, 'Bound codes and index folding', literally."""
    if b == 0:
        return min(max(i, 0), n - 1), 1
    if b == 1:
        if n == 1:
            return 0, 1
        m = i % (2 * (n - 1))
        return (m if m < n else 2 * (n - 1) - m), 1
    if b == 2:
        m = i % (2 * n)
        return (m if m < n else 2 * n - 1 - m), 1
    if b == 3:
        m = i % (2 * (n + 1))
        if m == n or m == 2 * n + 1:
            return None, 0
        return (m, 1) if m < n else (2 * n - m, -1)
    if b == 4:
        m = i % (2 * n)
        return (m, 1) if m < n else (2 * n - 1 - m, -1)
    if b == 5:
        return i % n, 1
    return (i, 1) if 0 <= i < n else (None, 0)


def truncated_power(o, t, der):
    """der-th derivative of the centred B-spline of order o at t (truncated-power form)."""
    total = 0.0
    for j in range(o + 2):
        a = t + (o + 1) / 2 - j
        if der > o or a <= 0:
            continue
        p = o - der
        total += (-1) ** j * math.comb(o + 1, j) * math.perm(o, der) * a ** p
    return total / math.factorial(o)


def test_headers_fold_and_splines(header_probe):
    """core/bounds.h and core/spline.h on their own (no torch): the other modules and the CUDA
    kernels include them directly."""
    lines = header_probe(HEADER_PROBE).split("\n")
    nf = ns = 0
    for line in lines:
        f = line.split()
        if not f:
            continue
        if f[0] == "F":
            b, n, i, j, s = map(int, f[1:])
            jj, ss = spec_fold(i, n, b)
            assert s == ss and (s == 0 or j == jj), (b, n, i, j, s, jj, ss)
            nf += 1
        else:
            o = int(f[1])
            t, w, dw, ddw = map(float, f[2:])
            for der, got in enumerate((w, dw, ddw)):
                assert got == pytest.approx(truncated_power(o, t, der), abs=1e-12), (o, t, der)
            ns += 1
    assert nf == 7 * 5 * 47 and ns == 8 * 81


# --------------------------------------------------------------------------- external oracles

@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order", range(6))
@pytest.mark.parametrize("bound", sorted(SCIPY_MODES))
def test_pull_vs_scipy(C, D, order, bound):
    S = [7, 6, 5][:D]
    inp = randn(1, 1, *S)
    grid = rand_coords([4, 5, 3][:D], S, seed=order + 10 * bound)
    out = C.grid_pull(inp, grid, [order] * D, [bound] * D, True)
    coords = grid[0].permute(D, *range(D)).numpy()
    ref = ndimage.map_coordinates(inp[0, 0].numpy(), coords, order=order, prefilter=False,
                                  mode=SCIPY_MODES[bound])
    np.testing.assert_allclose(out[0, 0].numpy(), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order", range(8))
def test_vs_interpol(C, D, order):
    interpol = pytest.importorskip("interpol")
    S = [6, 5, 7][:D]
    for bound in (0, 1, 2, 4, 5, 6):  # not dst1 (see the module docstring)
        inp = randn(2, 2, *S, seed=bound)
        grid = rand_coords([3, 4, 2][:D], S, seed=bound, batch=2)
        kw = dict(interpolation=order, bound=NAMES[bound], extrapolate=True)
        o, b = [order] * D, [bound] * D
        close(C.grid_pull(inp, grid, o, b, True), interpol.grid_pull(inp, grid, **kw))
        close(C.grid_grad(inp, grid, o, b, True), interpol.grid_grad(inp, grid, **kw))
        val = randn(2, 2, *grid.shape[1:-1], seed=bound + 7)
        close(C.grid_push(val, grid, S, o, b, True), interpol.grid_push(val, grid, S, **kw))


# --------------------------------------------------------------------------- adjointness

def dot(a, b):
    return (a * b).sum().item()


ADJOINT_CASES = [
    (1, [3], [3]), (1, [0], [6]), (2, [1, 1], [4, 5]), (2, [2, 7], [1, 3]),
    (3, [1, 1, 1], [0, 1, 2]), (3, [3, 3, 3], [3, 4, 6]), (3, [5, 0, 4], [5, 3, 2]),
    (3, [6, 1, 2], [6, 6, 1]), (3, [7, 7, 7], [3, 3, 3]),
]


@pytest.mark.parametrize("D,order,bound", ADJOINT_CASES)
@pytest.mark.parametrize("ex", [True, False])
def test_adjoint(C, D, order, bound, ex):
    S = [5, 4, 6][:D]
    O = [4, 3, 5][:D]
    grid = rand_coords(O, S, seed=sum(order))
    x = randn(1, 2, *S, seed=2)
    y = randn(1, 2, *O, seed=3)
    lhs = dot(C.grid_pull(x, grid, order, bound, ex), y)
    rhs = dot(x, C.grid_push(y, grid, S, order, bound, ex))
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)
    yg = randn(1, 2, *O, D, seed=4)
    lhs = dot(C.grid_grad(x, grid, order, bound, ex), yg)
    rhs = dot(x, C.grid_pushgrad(yg, grid, S, order, bound, ex))
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)


# --------------------------------------------------------------------------- derivatives

FD_CASES = [(1, [1], [2]), (1, [5], [3]), (2, [2, 3], [5, 1]), (2, [7, 7], [2, 2]),
            (3, [3, 3, 3], [2, 3, 4]), (3, [1, 4, 6], [0, 5, 1]), (3, [5, 5, 5], [1, 6, 2])]


@pytest.mark.parametrize("D,order,bound", FD_CASES)
def test_grad_vs_finite_differences(C, D, order, bound):
    S = [6, 5, 7][:D]
    grid = rand_coords([3, 4, 2][:D], S, seed=5)
    x = randn(1, 2, *S, seed=6)
    g = C.grid_grad(x, grid, order, bound, True)
    eps = 1e-6
    for d in range(D):
        e = torch.zeros(D, dtype=F64)
        e[d] = eps
        fd = (C.grid_pull(x, grid + e, order, bound, True)
              - C.grid_pull(x, grid - e, order, bound, True)) / (2 * eps)
        if order[d] == 0:
            fd = torch.zeros_like(fd)
        torch.testing.assert_close(g[..., d], fd, rtol=1e-6, atol=1e-7)
    # grad_dot is the channel contraction of grad
    w = randn(1, 2, *grid.shape[1:-1], seed=7)
    gd = C.grid_grad_dot(w, x, grid, order, bound, True)
    close(gd, (w.unsqueeze(-1) * g).sum(1))


@pytest.mark.parametrize("D,order,bound", FD_CASES)
def test_hess_dot_vs_finite_differences(C, D, order, bound):
    """hess_dot(w) = d/dgrid of sum_{c,d} w[c,d] grad(x)[c,d]; orders 5-7 included (NITorch's
    C second derivatives are zero there)."""
    S = [6, 5, 7][:D]
    grid = rand_coords([3, 4, 2][:D], S, seed=8)
    x = randn(1, 2, *S, seed=9)
    w = randn(1, 2, *grid.shape[1:-1], D, seed=10)
    h = C.grid_hess_dot(w, x, grid, order, bound, True)
    eps = 1e-6

    def f(gr):
        return (w * C.grid_grad(x, gr, order, bound, True)).sum((1, -1))

    for e_ in range(D):
        e = torch.zeros(D, dtype=F64)
        e[e_] = eps
        fd = (f(grid + e) - f(grid - e)) / (2 * eps)
        torch.testing.assert_close(h[..., e_], fd, rtol=1e-5, atol=1e-6)
    if max(order) >= 2 or sum(o >= 1 for o in order) >= 2:
        assert h.abs().max() > 0


def test_second_derivatives_high_orders(C):
    """Orders 5-7 have non-zero second derivatives (NITorch's compiled kernels return 0)."""
    for order in (5, 6, 7):
        x = randn(1, 1, 9)
        grid = torch.tensor([[[3.3], [4.7]]], dtype=F64)
        w = torch.ones(1, 1, 2, 1, dtype=F64)
        assert C.grid_hess_dot(w, x, grid, [order], [2], True).abs().min() > 1e-6


# --------------------------------------------------------------------------- scatters and threads

def _with_threads(n, fn):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("op", ["grid_push", "grid_pushgrad"])
@pytest.mark.parametrize("order", [[1, 1, 1], [3, 3, 3], [2, 1, 0]])
def test_push_thread_count_independent(C, op, order, knobs):
    S = [20, 18, 22]
    O = [24, 20, 26]  # 12480 points: split among threads with the grain knob at 1
    knobs(parallel_min_work=1)
    grid = rand_coords(O, S, margin=1.0, seed=11)
    val = randn(1, 2, *O, *([3] if op == "grid_pushgrad" else []), seed=12)
    run = lambda: getattr(C, op)(val, grid, S, order, [2, 6, 3], True)  # noqa: E731
    one = _with_threads(1, run)
    two = _with_threads(2, run)
    torch.testing.assert_close(two, one, rtol=1e-12, atol=1e-12)
    knobs(push_buffer_mb=0)  # force the atomic-add path
    atomic = _with_threads(2, run)
    torch.testing.assert_close(atomic, one, rtol=1e-12, atol=1e-12)
    # float32: same up to rounding
    run32 = lambda: getattr(C, op)(val.float(), grid.float(), S, order, [2, 6, 3], True)  # noqa
    torch.testing.assert_close(_with_threads(2, run32).double(), one, rtol=1e-4, atol=1e-4)


def test_pull_parallel_equals_serial(C, knobs):
    knobs(parallel_min_work=1)  # small enough to split
    S = [20, 18, 22]
    grid = rand_coords([24, 20, 26], S, margin=1.0, seed=13)
    x = randn(2, 2, *S, seed=14)
    for order in ([1] * 3, [3] * 3, [0] * 3, [4, 2, 1]):
        run = lambda: C.grid_pull(x, grid.expand(2, *grid.shape[1:]), order, [1] * 3, True)  # noqa
        assert torch.equal(_with_threads(2, run), _with_threads(1, run))


# --------------------------------------------------------------------------- layouts and dtypes

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("order", [[1, 1, 1], [3, 3, 3], [2, 0, 5]])
def test_strides(C, op, order):
    """Non-contiguous tensors and batch stride 0 give the same result as contiguous copies."""
    args = case_args(op, 3, B=2, seed=15)
    strided = []
    for a in args:
        if isinstance(a, torch.Tensor):
            # non-contiguous: every spatial dim reversed in memory layout (via transpose of a
            # bigger tensor) and a sliced channel/batch dim
            big = torch.zeros([a.shape[0], 2 * a.shape[1] + 1, *a.shape[2:]], dtype=a.dtype)
            big = big.transpose(-1, -2).contiguous().transpose(-1, -2)
            big[:, 1::2] = a
            strided.append(big[:, 1::2])
            assert not strided[-1].is_contiguous()
        else:
            strided.append(a)
    bound = [2, 6, 3]
    ref = getattr(C, op)(*args, order, bound, True)
    out = getattr(C, op)(*strided, order, bound, True)
    close(out, ref, 1e-13)
    # batch stride 0 (expanded) for every tensor argument
    exp = [a[:1].expand(2, *a.shape[1:]) if isinstance(a, torch.Tensor) else a for a in args]
    cont = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in exp]
    close(getattr(C, op)(*exp, order, bound, True), getattr(C, op)(*cont, order, bound, True),
          1e-13)


@pytest.mark.parametrize("op", OPS)
def test_float32(C, op):
    for order in ([1, 1, 1], [3, 3, 3], [2, 4, 0]):
        args = case_args(op, 3, seed=16)
        args32 = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        a = getattr(C, op)(*args32, order, [0, 1, 5], True)
        b = getattr(C, op)(*args, order, [0, 1, 5], True)
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("ex", [True, False])
def test_float32_linear_pull_vectorised(C, D, ex):
    """float32 order-1 pull in 2-D/3-D has an AVX2 path (8 points of a grid row at a time; a
    point whose support leaves the source is redone by the scalar path): it must agree with
    float64 and with the scalar path, for every layout, bound, channel count and odd point."""
    S = [13, 11, 17][-D:]
    O = [9, 10, 21][-D:]  # rows of 21: two vector groups and a tail
    grid = rand_coords(O, S, margin=1.2, seed=21, batch=2)
    grid[0, 1, 1, -1] = float("nan")
    grid[1, 2, 3, 0] = 1e30
    grid[1, 3, 5, -1] = -1e30
    x = randn(2, 3, *S, seed=22)
    for bound in ([2] * D, [6] * D, [3, 5, 0][-D:]):
        ref = C.grid_pull(x, grid, [1] * D, bound, ex)
        for xx, gg in [(x, grid),
                       (x.transpose(-1, -2).contiguous().transpose(-1, -2),
                        grid.transpose(-1, -2).contiguous().transpose(-1, -2)),
                       (x[:, 1:2].expand(2, 3, *S), grid)]:
            out = C.grid_pull(xx.float(), gg.float(), [1] * D, bound, ex)
            want = ref if xx is x else C.grid_pull(xx, gg, [1] * D, bound, ex)
            # (huge coordinates fold differently in float32 and float64: compared below only)
            huge = (gg.abs() > 1e20).any(-1).unsqueeze(1).expand_as(want)
            torch.testing.assert_close(out.double()[~huge], want[~huge], rtol=1e-5, atol=1e-5)
            with tuning.override(avx2=False):
                scalar = C.grid_pull(xx.float(), gg.float(), [1] * D, bound, ex)
            torch.testing.assert_close(out, scalar, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("S", [[1, 9, 10], [7, 1, 10], [7, 9, 1], [1, 17]])
def test_float32_linear_pull_size_one_dims(C, S):
    """Size-1 source dims (no interior point there) on the float32 order-1 path."""
    D = len(S)
    grid = rand_coords([5, 6, 19][-D:], S, margin=1.5, seed=23)
    x = randn(1, 2, *S, seed=24)
    for bound in (0, 1, 3, 6):
        ref = C.grid_pull(x, grid, [1] * D, [bound] * D, True)
        out = C.grid_pull(x.float(), grid.float(), [1] * D, [bound] * D, True)
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- ranges and non-finite

@pytest.mark.parametrize("order", [0, 1, 3, 4])
def test_extrapolate_threshold(C, order):
    n = 6
    x = randn(1, 1, n) + 2
    coords = [-0.06, -0.04, n - 1 + 0.04, n - 1 + 0.06, -3.3, n + 2.2]
    grid = torch.tensor(coords, dtype=F64).reshape(1, -1, 1)
    out = C.grid_pull(x, grid, [order], [0], False)[0, 0]
    assert out[0] == 0 and out[3] == 0 and out[4] == 0 and out[5] == 0
    assert out[1] != 0 and out[2] != 0
    full = C.grid_pull(x, grid, [order], [0], True)[0, 0]
    assert (full != 0).all()
    pushed = C.grid_push(torch.ones(1, 1, len(coords), dtype=F64), grid, [n], [order], [0], False)
    assert pushed.sum().item() == pytest.approx(2.0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("order", [[1, 1], [3, 3], [2, 5]])
@pytest.mark.parametrize("ex", [True, False])
def test_non_finite_points(C, op, order, ex):
    args = case_args(op, 2, seed=17)
    grid = args[-1] if op not in ("grid_push", "grid_pushgrad") else args[1]
    bad = grid.clone()
    bad[0, 0, 0, 0] = float("nan")
    bad[0, 1, 1, 1] = float("inf")
    bad[1, 2, 0, 0] = -float("inf")
    bad[1, 0, 2, 1] = 1e30  # finite and huge: no crash, uses the bound when extrapolating
    nargs = [bad if a is grid else a for a in args]
    out = getattr(C, op)(*nargs, order, [2, 5], ex)
    assert torch.isfinite(out).all()
    if op in ("grid_pull", "grid_grad"):
        assert (out[0, :, 0, 0] == 0).all() and (out[0, :, 1, 1] == 0).all()
        assert (out[1, :, 2, 0] == 0).all()
    if op in ("grid_grad_dot", "grid_hess_dot"):
        assert (out[0, 0, 0] == 0).all() and (out[0, 1, 1] == 0).all() and (out[1, 2, 0] == 0).all()
    if op in ("grid_push", "grid_pushgrad"):
        # pushing only from the non-finite points adds nothing
        val = torch.zeros_like(args[0])
        val[0, :, 0, 0] = 1
        val[0, :, 1, 1] = 1
        val[1, :, 2, 0] = 1
        nargs[0] = val
        assert (getattr(C, op)(*nargs, order, [2, 5], ex) == 0).all()


def test_dropped_taps_read_nothing(C):
    """Taps with sign 0 (zero bound outside, dst1 at -1 and n) are dropped, so a NaN stored at
    the placeholder address cannot leak in."""
    x = randn(1, 1, 6)
    x[0, 0, 0] = float("nan")
    far = torch.tensor([[[30.2], [-9.7]]], dtype=F64)
    for order in range(8):
        assert (C.grid_pull(x, far, [order], [6], True) == 0).all()
    # dst1, order 1 at 6.3: taps 6 (sign 0) and 7 (-> index 5, sign -1)
    out = C.grid_pull(x, torch.tensor([[[6.3]]], dtype=F64), [1], [3], True)
    assert out.item() == pytest.approx(-0.3 * x[0, 0, 5].item())


def test_empty(C):
    x = randn(0, 2, 4, 5)
    g = rand_coords([3, 2], [4, 5], batch=0)
    assert C.grid_pull(x, g, [1, 1], [0, 0], True).shape == (0, 2, 3, 2)
    x = randn(1, 0, 4, 5)
    g = rand_coords([3, 2], [4, 5])
    assert C.grid_grad(x, g, [3, 3], [0, 0], True).shape == (1, 0, 3, 2, 2)
    assert C.grid_grad_dot(randn(1, 0, 3, 2), x, g, [1, 1], [0, 0], True).abs().sum() == 0
    assert C.grid_push(randn(1, 2, 3, 2), g, [0, 5], [1, 1], [0, 0], True).shape == (1, 2, 0, 5)
    out = C.grid_pull(randn(1, 2, 0, 5), g, [1, 1], [0, 0], True)
    assert out.shape == (1, 2, 3, 2) and (out == 0).all()


# --------------------------------------------------------------------------- bad input

def test_bad_input_raises(C):
    """The shared list of bad calls (tests/ops/pushpull/cases.py) raises, naming the culprit."""
    x, g, w = bad_args()
    for fn, word in bad_calls(C, x, g, w):
        with pytest.raises(RuntimeError, match=re.escape(word)):
            fn()


# --------------------------------------------------------------------------- fused pull backward

def _separate_backward(C, w, x, g, order, bound, ex):
    return (C.grid_push(w, g, list(x.shape[2:]), order, bound, ex),
            C.grid_grad_dot(w, x, g, order, bound, ex))


def pullback_cases():
    """Every dim, iso order 0-7, bound and extrapolate, plus mixed orders and bounds."""
    cases = [(D, [o] * D, [b] * D, ex) for D in (1, 2, 3) for o in range(8) for b in range(7)
             for ex in (False, True)]
    return cases + [(D, o, b, ex) for D, o, b, ex in twin_cases(False) if len(set(o)) > 1]


@pytest.mark.parametrize("D", [1, 2, 3])
def test_pull_backward_vs_separate_ops(C, D):
    """grid_pull_backward == (grid_push, grid_grad_dot) on the whole sweep: float64 to 1e-10,
    float32 to 1e-5 (relative to the largest value)."""
    for i, (DD, order, bound, ex) in enumerate(pullback_cases()):
        if DD != D:
            continue
        w, x, g = case_args("grid_grad_dot", D, seed=i)
        gi, gg = C.grid_pull_backward(w, x, g, order, bound, ex)
        ri, rg = _separate_backward(C, w, x, g, order, bound, ex)
        assert gi.shape == ri.shape and gg.shape == rg.shape
        assert gi.is_contiguous() and gg.is_contiguous()
        close(gi, ri)
        close(gg, rg)
        f32 = [a.float() for a in (w, x, g)]
        gi32, gg32 = C.grid_pull_backward(*f32, order, bound, ex)
        ri32, rg32 = _separate_backward(C, *f32, order, bound, ex)
        assert gi32.dtype == gg32.dtype == torch.float32
        close(gi32, ri32, 1e-5)
        close(gg32, rg32, 1e-5)


@pytest.mark.parametrize("order", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("Cn", [1, 3])
def test_pull_backward_fast_paths_larger(C, TORCH, order, D, Cn):
    """Sizes large enough for the parallel split and interior (unrolled) points, C vs TORCH;
    float32 against float64."""
    S, O = [9, 8, 10][-D:], [12, 10, 14][-D:]
    w, x, g = case_args("grid_grad_dot", D, B=2, Cn=Cn, S=S, O=O, margin=1.5, seed=3)
    bound = [2, 5, 3][-D:]
    a = C.grid_pull_backward(w, x, g, [order] * D, bound, True)
    b = TORCH.grid_pull_backward(w, x, g, [order] * D, bound, True)
    for u, v in zip(a, b):
        close(u, v)
    a32 = C.grid_pull_backward(w.float(), x.float(), g.float(), [order] * D, bound, True)
    for u, v in zip(a32, b):
        torch.testing.assert_close(u.double(), v, rtol=1e-4, atol=1e-4 * max(1, v.abs().max()))


@pytest.mark.parametrize("D,order,bound,ex", twin_cases(full=False))
def test_pull_backward_vs_torch(C, TORCH, D, order, bound, ex):
    args = case_args("grid_grad_dot", D, seed=1)
    a = C.grid_pull_backward(*args, order, bound, ex)
    b = TORCH.grid_pull_backward(*args, order, bound, ex)
    assert isinstance(b, tuple) and len(b) == 2
    for u, v in zip(a, b):
        assert u.shape == v.shape and u.dtype == v.dtype
        close(u, v)


@pytest.mark.parametrize("order", [[1, 1, 1], [3, 3, 3], [2, 1, 0]])
def test_pull_backward_threads_and_atomics(C, order, knobs):
    """Thread count (private per-thread buffers) and the atomic path give the same result."""
    S, O = [20, 18, 22], [24, 20, 26]
    g = rand_coords(O, S, margin=1.0, seed=11)
    w = randn(1, 2, *O, seed=12)
    x = randn(1, 2, *S, seed=13)
    run = lambda: C.grid_pull_backward(w, x, g, order, [2, 6, 3], True)  # noqa: E731
    one = _with_threads(1, run)
    ref = _separate_backward(C, w, x, g, order, [2, 6, 3], True)
    for u, v in zip(one, ref):
        close(u, v, 1e-12)
    for u, v in zip(_with_threads(2, run), one):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    knobs(push_buffer_mb=0)
    for u, v in zip(_with_threads(2, run), one):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("order", [[1, 1, 1], [3, 3, 3], [2, 0, 5]])
def test_pull_backward_strides(C, order):
    """Non-contiguous grad / input / grid (the input's spatial dims reordered in memory, which
    the kernel copies), and batch or channel stride 0, against contiguous copies."""
    w, x, g = case_args("grid_grad_dot", 3, B=2, Cn=3, seed=15)
    bound = [2, 6, 3]
    ref = C.grid_pull_backward(w, x, g, order, bound, True)
    xt = x.transpose(-1, -3).contiguous().transpose(-1, -3)
    wt = w.transpose(-1, -2).contiguous().transpose(-1, -2)
    gt = g.transpose(1, 2).contiguous().transpose(1, 2)
    assert not (xt.is_contiguous() or wt.is_contiguous() or gt.is_contiguous())
    for u, v in zip(C.grid_pull_backward(wt, xt, gt, order, bound, True), ref):
        close(u, v, 1e-13)
    for xx in (x[:1].expand_as(x), x[:, :1].expand_as(x), xt[:1].expand_as(x)):
        ww = w[:, :1].expand_as(w)
        got = C.grid_pull_backward(ww, xx, g, order, bound, True)
        want = C.grid_pull_backward(ww.contiguous(), xx.contiguous(), g, order, bound, True)
        for u, v in zip(got, want):
            close(u, v, 1e-13)


def test_pull_backward_non_finite_and_empty(C):
    w, x, g = case_args("grid_grad_dot", 2, seed=17)
    g = g.clone()
    g[0, 0, 0, 0] = float("nan")
    g[0, 1, 1, 1] = float("inf")
    g[1, 0, 2, 1] = 1e30
    for ex in (False, True):
        for order in ([1, 1], [3, 3], [2, 5]):
            gi, gg = C.grid_pull_backward(w, x, g, order, [2, 5], ex)
            ri, rg = _separate_backward(C, w, x, g, order, [2, 5], ex)
            assert torch.isfinite(gi).all() and torch.isfinite(gg).all()
            close(gi, ri)
            close(gg, rg)
            assert (gg[0, 0, 0] == 0).all() and (gg[0, 1, 1] == 0).all()
    # empty: no channel, an empty source, no point
    gi, gg = C.grid_pull_backward(w[:, :0], x[:, :0], g, [1, 1], [0, 0], True)
    assert gi.shape == (2, 0, 5, 4) and gg.shape == g.shape and (gg == 0).all()
    gi, gg = C.grid_pull_backward(w, x[:, :, :0], g, [1, 1], [0, 0], True)
    assert gi.shape == (2, 2, 0, 4) and (gg == 0).all()
    gi, gg = C.grid_pull_backward(w[:, :, :0], x, g[:, :0], [1, 1], [0, 0], True)
    assert gg.shape == (2, 0, 4, 2) and (gi == 0).all()
