"""Spline prefilter (spline_coeff, spline_coeff_nd): compiled (C) and pure-PyTorch (TORCH).

Oracles: the dense interpolation matrix B of each (order, bound, n) (the filter must be B^-1
and its adjoint B^-T), scipy.ndimage.spline_filter1d, and pulling the coefficients back at
the identity grid.
"""
import functools
import math

import numpy as np
import pytest
import torch

from nitorch_jit import BoundType, backends
from nitorch_jit.ops import splinc as api
from nitorch_jit.torch_impl import pushpull as torch_pushpull
from nitorch_jit.torch_impl import splinc as twin

scipy_ndimage = pytest.importorskip("scipy.ndimage")

BOUNDS = {"dct1": 1, "dct2": 2, "dst1": 3, "dst2": 4, "dft": 5}
ALL_CODES = range(7)


@pytest.fixture(scope="module")
def c_op():
    """The compiled kernel (fails if the module cannot be built)."""
    assert backends.ensure("splinc", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit.spline_coeff_nd


def _twin(x, order, bound, dim, adjoint):
    return twin.spline_coeff_nd(x, order, bound, dim, adjoint)


@pytest.fixture(params=["C", "TORCH"])
def kernel(request):
    if request.param == "C":
        return request.getfixturevalue("c_op")
    return _twin


# ----------------------------------------------------------------------------- dense oracle
def _bspline(order, x):
    """Centred B-spline of order `order` at x (truncated-power formula)."""
    s = 0.0
    for k in range(order + 2):
        t = x + (order + 1) / 2 - k
        if t > 0:
            s += (-1) ** k * math.comb(order + 1, k) * t ** order
    return s / math.factorial(order)


def _fold(i, n, bound):
    """Index folding of docs/pushpull-spec.md (written out again, as an oracle)."""
    if bound == 1:
        if n == 1:
            return 0, 1
        m = i % (2 * n - 2)
        return (m if m < n else 2 * n - 2 - m), 1
    if bound == 2:
        m = i % (2 * n)
        return (m if m < n else 2 * n - 1 - m), 1
    if bound == 3:
        m = i % (2 * n + 2)
        if m in (n, 2 * n + 1):
            return 0, 0
        return (m, 1) if m < n else (2 * n - m, -1)
    if bound == 4:
        m = i % (2 * n)
        return (m, 1) if m < n else (2 * n - 1 - m, -1)
    return i % n, 1


@functools.lru_cache(maxsize=None)
def _inverse(order, bound, n):
    return np.linalg.inv(_interp_matrix(order, bound, n))


def _interp_matrix(order, bound, n):
    """B[j, k]: value at voxel j of the spline with coefficient 1 at k (bound-extended)."""
    B = np.zeros((n, n))
    half = order // 2 + 2
    for j in range(n):
        for i in range(j - half, j + half + 1):
            w = (1.0 if i == j else 0.0) if order == 0 else _bspline(order, j - i)
            k, s = _fold(i, n, bound)
            B[j, k] += s * w
    return B


@pytest.mark.parametrize("order", range(8))
@pytest.mark.parametrize("bound", list(BOUNDS.values()))
def test_dense_inverse_and_adjoint(kernel, order, bound):
    for n in list(range(1, 12)) + [40, 70, 130]:
        A = _inverse(order, bound, n)
        eye = torch.eye(n, dtype=torch.float64)
        F = kernel(eye, [order], [bound], [0], False).numpy()
        Fa = kernel(eye, [order], [bound], [0], True).numpy()
        scale = max(1.0, abs(A).max())
        assert abs(F - A).max() < 1e-11 * scale, (order, bound, n)
        assert abs(Fa - A.T).max() < 1e-11 * scale, (order, bound, n)


def test_poles_are_the_roots():
    for order in range(2, 8):
        m = order // 2
        coeffs = [_bspline(order, k) for k in range(-m, m + 1)]
        roots = np.roots(coeffs)
        roots = sorted((r.real for r in roots if abs(r) < 1), key=lambda r: -abs(r))
        assert np.allclose(roots, twin.poles(order), rtol=1e-13, atol=0)


# ----------------------------------------------------------------------------- scipy
# scipy's 'reflect' initialisation is truncated without folding, so it is only exact on
# lines long enough for the poles to decay (checked against the dense inverse above).
@pytest.mark.parametrize("mode,bound", [("mirror", 1), ("reflect", 2), ("grid-wrap", 5)])
@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_vs_scipy(kernel, mode, bound, order):
    rng = np.random.default_rng(order)
    x = rng.standard_normal((5, 37, 64))
    for axis in range(3):
        if mode == "reflect" and x.shape[axis] < 30:
            continue
        ref = scipy_ndimage.spline_filter1d(x, order, axis=axis, mode=mode)
        out = kernel(torch.from_numpy(x), [order], [bound], [axis], False).numpy()
        assert abs(out - ref).max() < 1e-10, axis


def test_vs_scipy_nd(c_op):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 40, 35))
    ref = scipy_ndimage.spline_filter(x, 3, mode="mirror")
    out = api.spline_coeff_nd(torch.from_numpy(x), "cubic", "mirror")
    assert abs(out.numpy() - ref).max() < 1e-10


# ----------------------------------------------------------------------------- identity
@pytest.mark.parametrize("order", range(8))
@pytest.mark.parametrize("bound", list(BOUNDS.values()))
def test_identity_pull(kernel, order, bound):
    for n in range(1, 12):
        x = torch.randn(1, 2, n, dtype=torch.float64)
        c = kernel(x, [order], [bound], [2], False)
        grid = torch.arange(n, dtype=torch.float64).reshape(1, n, 1)
        y = torch_pushpull.grid_pull(c, grid, [order], [bound], True)
        assert torch.allclose(y, x, atol=1e-10, rtol=0), n


def test_identity_pull_3d(c_op):
    x = torch.randn(1, 1, 6, 7, 5, dtype=torch.float64)
    order, bound = [3, 5, 2], [2, 1, 5]
    c = api.spline_coeff_nd(x, order, ["dct2", "dct1", "dft"], dim=3)
    grid = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64)
                                        for s in x.shape[2:]], indexing="ij"), -1)[None]
    y = torch_pushpull.grid_pull(c, grid, order, bound, True)
    assert torch.allclose(y, x, atol=1e-10, rtol=0)


def test_identity_public_grid_pull(c_op):
    """grid_pull(prefilter=True) at the identity grid gives the input back (lengths 1-11)."""
    import nitorch_jit
    for n in (1, 2, 5, 11):
        x = torch.randn(2, 3, n, 4, dtype=torch.float64)
        grid = nitorch_jit.identity_grid([n, 4], dtype=torch.float64)
        for order in range(8):
            for bound in ("dct1", "dct2", "dst1", "dst2", "dft"):
                y = nitorch_jit.grid_pull(x, grid, order, bound, extrapolate=True, prefilter=True)
                assert torch.allclose(y, x, atol=1e-10, rtol=0), (n, order, bound)


# ----------------------------------------------------------------------------- C vs TORCH
@pytest.mark.parametrize("shape", [(7,), (5, 9), (3, 17, 20), (4, 1, 33, 5), (2, 70, 3)])
def test_c_vs_torch(c_op, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    for order in range(8):
        for bound in ALL_CODES:
            for d in range(len(shape)):
                for adjoint in (False, True):
                    a = c_op(x, [order], [bound], [d], adjoint)
                    b = _twin(x, [order], [bound], [d], adjoint)
                    assert torch.allclose(a, b, atol=1e-10, rtol=0), (order, bound, d)


def test_c_vs_torch_strided(c_op):
    torch.manual_seed(1)
    base = torch.randn(9, 40, 21, dtype=torch.float64)
    for x in (base.transpose(0, 2), base[:, ::3, 1:], base.permute(1, 2, 0)[2:-3]):
        dims = [0, 1, 2]
        a = c_op(x, [3, 4, 7], [2, 5, 1], dims, False)
        b = _twin(x, [3, 4, 7], [2, 5, 1], dims, False)
        assert a.is_contiguous()
        assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_float32(kernel):
    torch.manual_seed(2)
    x = torch.randn(4, 50, 30, dtype=torch.float64)
    for order in (3, 7):
        a = kernel(x.float(), [order] * 3, [2, 1, 5], [0, 1, 2], False)
        b = kernel(x, [order] * 3, [2, 1, 5], [0, 1, 2], False)
        assert a.dtype == torch.float32
        assert torch.allclose(a.double(), b, atol=1e-4 * b.abs().max().item(), rtol=0)


# ----------------------------------------------------------------------------- public API
def test_api_maps_zero_and_replicate(c_op):
    x = torch.randn(3, 12, 10, dtype=torch.float64)
    assert torch.equal(api.spline_coeff_nd(x, 3, "zero", dim=2),
                       api.spline_coeff_nd(x, 3, "dct1", dim=2))
    assert torch.equal(api.spline_coeff_nd(x, 3, "replicate", dim=2),
                       api.spline_coeff_nd(x, 3, "dct2", dim=2))


def test_api_dims_and_inplace(c_op):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 10, 11, dtype=torch.float64)
    ref = _twin(x, [3, 5], [2, 1], [2, 3], False)
    out = api.spline_coeff_nd(x, ["cubic", "fifth"], ["reflect", "mirror"], dim=2)
    assert torch.allclose(out, ref, atol=1e-12)
    y = x.clone()
    ret = api.spline_coeff_nd(y, [3, 5], [BoundType.dct2, BoundType.dct1],
                              dim=2, inplace=True)
    assert ret is y and torch.allclose(y, ref, atol=1e-12)
    # non-contiguous in-place
    z = x.clone().transpose(2, 3)
    api.spline_coeff(z, 3, "dft", dim=-2, inplace=True)
    assert torch.allclose(z, _twin(x.transpose(2, 3), [3], [5], [2], False), atol=1e-12)
    # one dim
    one = api.spline_coeff(x, "quadratic", "dst2", dim=1)
    assert torch.allclose(one, _twin(x, [2], [4], [1], False), atol=1e-12)
    # orders 0 and 1 are the identity
    assert torch.equal(api.spline_coeff_nd(x, 1), x)
    # half types are computed in float32
    h = api.spline_coeff_nd(x.to(torch.bfloat16), 3, dim=2)
    assert h.dtype == torch.bfloat16


def test_api_errors():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="interpolation"):
        api.spline_coeff(x, 9)
    with pytest.raises(ValueError, match="bound"):
        api.spline_coeff(x, 3, "sliding")
    with pytest.raises(ValueError, match="dim"):
        api.spline_coeff(x, 3, dim=2)
    with pytest.raises(TypeError, match="dim"):
        api.spline_coeff(x, 3, dim=1.0)
    with pytest.raises(ValueError, match="dim"):
        api.spline_coeff_nd(x, 3, dim=3)
    with pytest.raises(TypeError, match="input"):
        api.spline_coeff(torch.ones(3, dtype=torch.int64), 3)
    with pytest.raises(TypeError, match="input"):
        api.spline_coeff([1.0, 2.0], 3)
    with pytest.raises(TypeError, match="inplace"):
        api.spline_coeff(x, 3, inplace="yes")


def test_bad_arguments_same_errors_as_c(c_op):
    """The TORCH ops refuse each bad raw-op call of tests/cuda/lines_cases.py (dtypes,
    lengths, dims, orders, bound codes, expanded in-place input) with C's RuntimeError and
    first line (csrc/lines/checks.h), and change nothing."""
    from tests.cuda.lines_cases import bad_call_sweep
    names = ("spline_coeff_nd", "spline_coeff_nd_")
    assert bad_call_sweep(twin.KERNELS, torch.ops.nitorch_jit, names) == []


def test_gradcheck(c_op):
    torch.manual_seed(4)
    for bound in ("dct1", "dct2", "dst1", "dst2", "dft", "zero"):
        x = torch.randn(2, 6, 5, dtype=torch.float64, requires_grad=True)
        f = lambda t: api.spline_coeff_nd(t, [3, 5], bound, dim=2)  # noqa: E731
        assert torch.autograd.gradcheck(f, (x,))
        assert torch.autograd.gradgradcheck(f, (x,))


def test_gradcheck_inplace(c_op):
    x = torch.randn(7, 6, dtype=torch.float64, requires_grad=True)

    def f(t):
        y = t * 1.0
        return api.spline_coeff(y, 4, "dct1", dim=0, inplace=True)

    assert torch.autograd.gradcheck(f, (x,))


@pytest.mark.slow
def test_torch_compile(c_op):
    x = torch.randn(2, 8, 9, dtype=torch.float64)
    f = torch.compile(lambda t: api.spline_coeff_nd(t, 3, dim=2) * 2, fullgraph=True)
    assert torch.allclose(f(x), 2 * api.spline_coeff_nd(x, 3, dim=2))

    def g(t):  # the in-place (mutating) op inside a graph
        u = t * 2
        api.spline_coeff(u, 5, "dft", dim=1, inplace=True)
        return u + 1

    assert torch.allclose(torch.compile(g, fullgraph=True)(x), g(x))


def test_threads_agree(c_op, knobs):
    knobs(parallel_min_work=1)  # small enough to split
    x = torch.randn(6, 40, 33, dtype=torch.float64)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = c_op(x, [3, 5, 7], [2, 1, 5], [0, 1, 2], False)
        torch.set_num_threads(max(2, n))
        two = c_op(x, [3, 5, 7], [2, 1, 5], [0, 1, 2], False)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(one, two)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_c_vs_torch_planes(c_op, dtype):
    """Contiguous tensors whose two innermost dims are filtered together plane by plane while
    the plane is in cache (planes of 16 KiB to 1 MiB): out of place and in place, with other
    dims before and after them in the list, a single plane, and a plane too small to take."""
    torch.manual_seed(3)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    for shape, orders, bounds, dims in [
        ((3, 64, 80), [3, 5, 2], [2, 1, 5], [0, 1, 2]),
        ((2, 3, 64, 80), [3, 7], [4, 3], [3, 2]),
        ((4, 64, 80), [2, 3, 3], [1, 2, 2], [2, 0, 1]),
        ((1, 64, 80), [3, 3], [2, 2], [1, 2]),
        ((5, 8, 9), [3, 3, 3], [2, 2, 2], [0, 1, 2]),
    ]:
        xs = torch.randn(shape, dtype=torch.float64).to(dtype)
        ref = _twin(xs.double(), orders, bounds, dims, False)
        atol = tol * ref.abs().max().item()
        assert torch.allclose(c_op(xs, orders, bounds, dims, False).double(), ref, atol=atol,
                              rtol=0)
        y = xs.clone()
        torch.ops.nitorch_jit.spline_coeff_nd_(y, orders, bounds, dims, False)
        assert torch.allclose(y.double(), ref, atol=atol, rtol=0)
