"""affine_pull / affine_push: resampling through an affine map with no grid in memory.

Oracles: grid_pull / grid_push on the materialised grid affine_grid(A, shape) (the kernels
compute the same coordinates with the same operations, so the compiled results are equal bit
for bit), the pure-PyTorch twin (torch_impl, a separate implementation of the same sums),
adjointness <pull x, y> == <x, push y>, the matrix gradient of the grid-based expression
(autograd through affine_grid + grid_pull) and gradcheck in float64.
"""
import doctest

import numpy as np
import pytest
import torch

import nitorch_jit
from nitorch_jit import affine_grid, affine_pull, affine_push, backends, grid_pull, grid_push
from nitorch_jit.torch_impl import pushpull as twin

F64, F32 = torch.float64, torch.float32
BOUNDS = ["replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero"]
SRC = [7, 6, 8]
OUT = [5, 9, 4]  # rows of 4, 9 points: the AVX2 order-1 path sees full and partial vectors


@pytest.fixture(scope="module", autouse=True)
def compiled():
    assert backends.ensure("pushpull", "cpu") == "C", backends.status()


def matrix(D, batch=(), seed=0, dtype=F64, scale=1.0):
    """[*batch, D, D+1]: near a rotation-and-zoom, its points cover the source's interior,
    its border and beyond (so every bound and the extrapolate rule matter)."""
    gen = torch.Generator().manual_seed(seed)
    lin = torch.eye(D, dtype=F64) * 1.3 * scale + 0.35 * torch.randn(*batch, D, D, generator=gen,
                                                                      dtype=F64)
    off = -1.7 + 0.6 * torch.randn(*batch, D, 1, generator=gen, dtype=F64)
    return torch.cat([lin, off], -1).to(dtype)


def randn(*shape, seed=1, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64).to(dtype)


def homogeneous(A):
    D = A.shape[-1] - 1
    last = torch.zeros(A.shape[:-2] + (1, D + 1), dtype=A.dtype)
    last[..., -1] = 1
    return torch.cat([A, last], -2)


# ----------------------------------------------------------------------------- vs grid_pull
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("extrapolate", [False, True])
def test_equals_grid_pull(D, extrapolate):
    x = randn(2, 3, *SRC[:D])
    A = matrix(D, (2,))
    for order in range(8):
        for bound in BOUNDS:
            want = grid_pull(x, affine_grid(A, OUT[:D]), order, bound, extrapolate)
            got = affine_pull(x, A, OUT[:D], order, bound, extrapolate)
            assert torch.equal(got, want), (order, bound, (got - want).abs().max())


@pytest.mark.parametrize("D", [1, 2, 3])
def test_equals_grid_pull_options(D):
    """Prefilter, per-dim orders and bounds, the square homogeneous form, a matrix shared by
    a batch, a batch of matrices for one image."""
    x = randn(2, 2, *SRC[:D])
    A = matrix(D, seed=3)
    orders = [3, 1, 5][:D]
    bounds = ["dct2", "dft", "zero"][:D]
    for prefilter in (False, True):
        want = grid_pull(x, affine_grid(A, OUT[:D]), orders, bounds, True, prefilter)
        got = affine_pull(x, homogeneous(A), OUT[:D], orders, bounds, True, prefilter)
        assert (got - want).abs().max() <= 1e-12 * max(1, want.abs().max()), prefilter
        assert torch.equal(got, want)
    Ab = matrix(D, (3,), seed=4)
    want = grid_pull(x[:1], affine_grid(Ab, OUT[:D]), 3, "dct1", True)
    assert want.shape == (3, 2, *OUT[:D])
    assert torch.equal(affine_pull(x[0], Ab, OUT[:D], 3, "dct1", True), want)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("order", [0, 1, 3])
def test_equals_grid_pull_float32(D, order):
    """float32, including the vectorised order-1 path (coordinates computed 8 at a time)."""
    x = randn(2, 2, *SRC[:D], dtype=F32)
    A = matrix(D, (2,), dtype=F32)
    for bound in ("zero", "dct2"):
        for ex in (False, True):
            want = grid_pull(x, affine_grid(A, OUT[:D]), order, bound, ex)
            got = affine_pull(x, A, OUT[:D], order, bound, ex)
            assert torch.equal(got, want), (bound, ex, (got - want).abs().max())


@pytest.mark.parametrize("D,order", [(2, 1), (2, 3), (3, 1)])
def test_equals_grid_pull_float32_interior(D, order, knobs):
    """float32 through the vectorised fast paths (pushpull/cpu/avx2/, coordinates of a row
    written to a buffer): long rows mostly inside the source, bit for bit equal to grid_pull on the
    materialised grid, and equal to the scalar path with the avx2 knob off (to rounding)."""
    src, out = [23, 21, 40][-D:], [19, 17, 37][-D:]
    x = randn(2, 3, *src, dtype=F32)
    A = matrix(D, (2,), dtype=F64, scale=0.7)
    A[..., -1] = 1.5 + 0.3 * torch.arange(D, dtype=F64)  # offsets: mostly interior points
    A = A.to(F32)
    for bound, ex in (("dct2", False), ("zero", True)):
        want = grid_pull(x, affine_grid(A, out), order, bound, ex)
        got = affine_pull(x, A, out, order, bound, ex)
        assert torch.equal(got, want), (bound, ex, (got - want).abs().max())
        knobs(avx2=False)
        scalar = affine_pull(x, A, out, order, bound, ex)
        knobs(avx2=True)
        torch.testing.assert_close(got, scalar, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("D,order,dtype", [(2, 1, F32), (2, 3, F32), (3, 1, F32), (3, 3, F32),
                                           (3, 1, F64), (3, 3, F64)])
def test_equals_grid_pull_mirror_fold(D, order, dtype, knobs):
    """Extrapolated dct1 / dct2 pulls whose points lie mostly far outside the source (a zoom out
    by ~4, offset): the fast paths fold them into the source (avx2/coords.h, MirrorFold), in
    affine_pull as in grid_pull: bit for bit equal on the materialised grid, and equal to the
    scalar path to rounding."""
    src, out = [11, 9, 14][-D:], [13, 12, 40][-D:]
    x = randn(2, 3, *src, dtype=dtype)
    A = matrix(D, (2,), scale=3.0, seed=5)
    A[..., -1] = -2.0 * torch.tensor(src, dtype=F64)
    A = A.to(dtype)
    for bound in ("dct1", "dct2"):
        want = grid_pull(x, affine_grid(A, out), order, bound, True)
        got = affine_pull(x, A, out, order, bound, True)
        assert torch.equal(got, want), (bound, (got - want).abs().max())
        knobs(avx2=False)
        scalar = affine_pull(x, A, out, order, bound, True)
        knobs(avx2=True)
        tol = 1e-5 if dtype == F32 else 1e-10
        assert (got - scalar).abs().max() <= tol * x.abs().max(), bound


def test_default_shape_and_half():
    x = randn(1, 6, 7)
    A = matrix(2, seed=2)
    assert affine_pull(x, A).shape == x.shape
    y = affine_pull(x.half(), A, interpolation=1, bound="dct2", extrapolate=True)
    assert y.dtype == torch.float16
    ref = affine_pull(x.half().float(), A.float(), interpolation=1, bound="dct2",
                      extrapolate=True)
    assert (y.float() - ref).abs().max() <= 1e-2


@pytest.mark.parametrize("D", [1, 2, 3])
def test_push_equals_grid_push(D):
    y = randn(2, 2, *OUT[:D])
    A = matrix(D, (2,), seed=5)
    for order in (0, 1, 3, 4):
        for bound in ("dct2", "zero", "dft"):
            want = grid_push(y, affine_grid(A, OUT[:D]), SRC[:D], order, bound, True)
            got = affine_push(y, A, SRC[:D], order, bound, True)
            assert (got - want).abs().max() <= 1e-12 * max(1, want.abs().max()), (order, bound)


# ----------------------------------------------------------------------------- vs the twin
@pytest.mark.parametrize("D", [1, 2, 3])
def test_c_vs_torch_twin(D, monkeypatch):
    """The compiled kernels against torch_impl (with chunks of a few rows, so that the twin's
    chunking is exercised too), every op, float64, to 1e-10."""
    chunks = twin._affine_chunks
    monkeypatch.setattr(twin, "_affine_chunks", lambda shape, max_points=0: chunks(shape, 20))
    ops = torch.ops.nitorch_jit
    x = randn(2, 3, *SRC[:D])
    y = randn(2, 3, *OUT[:D], seed=7)
    A = matrix(D, (2,), seed=6)
    for order, bound, ex in [(0, 2, True), (1, 6, False), (3, 1, True), (5, 5, False),
                             (7, 3, True), (2, 0, True)]:
        o, b = [order] * D, [bound] * D
        for name, args in [("affine_pull", (x, A, OUT[:D])), ("affine_push", (y, A, SRC[:D])),
                           ("affine_grad_dot", (y, x, A))]:
            got = getattr(ops, name)(*args, o, b, ex)
            want = getattr(twin, name)(*args, o, b, ex)
            scale = max(1.0, want.abs().max().item())
            assert (got - want).abs().max() <= 1e-10 * scale, (name, order, bound, ex)


# ----------------------------------------------------------------------------- adjoint, grads
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("prefilter", [False, True])
def test_adjoint(D, prefilter):
    x = randn(2, 2, *SRC[:D])
    y = randn(2, 2, *OUT[:D], seed=8)
    A = matrix(D, (2,), seed=9)
    for order in (0, 1, 3, 5):
        for bound in ("dct2", "dst1", "dft", "zero"):
            for ex in (False, True):
                lhs = (affine_pull(x, A, OUT[:D], order, bound, ex, prefilter) * y).sum()
                rhs = (x * affine_push(y, A, SRC[:D], order, bound, ex, prefilter)).sum()
                assert abs(lhs - rhs) <= 1e-11 * max(1, abs(lhs)), (order, bound, ex)


@pytest.mark.parametrize("D", [1, 2, 3])
def test_matrix_gradient_equals_grid_autograd(D):
    """d/dA of a loss through affine_pull == through grid_pull(affine_grid(A)) (autograd of the
    grid path), for pull and push, with a batch of matrices and a shared one."""
    x = randn(2, 2, *SRC[:D])
    w = randn(2, 2, *OUT[:D], seed=10)
    for A0 in (matrix(D, (2,), seed=11), matrix(D, seed=12)):
        for order, bound, ex in [(1, "dct2", True), (3, "zero", False), (3, "dft", True)]:
            A1 = A0.clone().requires_grad_()
            ((affine_pull(x, A1, OUT[:D], order, bound, ex) * w).sum()).backward()
            A2 = A0.clone().requires_grad_()
            ((grid_pull(x, affine_grid(A2, OUT[:D]), order, bound, ex) * w).sum()).backward()
            assert (A1.grad - A2.grad).abs().max() <= 1e-10 * max(1, A2.grad.abs().max())
            A1.grad = A2.grad = None
            (affine_push(w, A1, SRC[:D], order, bound, ex) * x).sum().backward()
            (grid_push(w, affine_grid(A2, OUT[:D]), SRC[:D], order, bound, ex) * x).sum() \
                .backward()
            assert (A1.grad - A2.grad).abs().max() <= 1e-10 * max(1, A2.grad.abs().max())


@pytest.mark.parametrize("D,src,out", [(1, [7], [6]), (2, [5, 6], [4, 5]),
                                       (3, [4, 5, 4], [3, 3, 4])])
@pytest.mark.parametrize("order,bound,ex", [(1, "dct2", True), (3, "zero", False),
                                            (3, "dft", True)])
def test_gradcheck(D, src, out, order, bound, ex):
    x = randn(2, 2, *src).requires_grad_()
    A = (matrix(D, (2,), seed=13, scale=0.8)).requires_grad_()
    y = randn(2, 2, *out, seed=14).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, A: affine_pull(x, A, out, order, bound, ex), (x, A), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(
        lambda y, A: affine_push(y, A, src, order, bound, ex), (y, A), eps=1e-6, atol=1e-6)


def test_opcheck():
    ops = torch.ops.nitorch_jit
    x = randn(2, 2, 5, 6)
    y = randn(2, 2, 4, 3, seed=2)
    A = matrix(2, (2,), seed=3)
    opts = ([3, 1], [2, 6], True)
    torch.library.opcheck(ops.affine_pull, (x.requires_grad_(), A.requires_grad_(), [4, 3], *opts))
    torch.library.opcheck(ops.affine_push, (y.requires_grad_(), A, [5, 6], *opts))
    torch.library.opcheck(ops.affine_grad_dot, (y.detach(), x.detach(), A.detach(), *opts))


# ----------------------------------------------------------------------------- bad input
def test_bad_arguments():
    x = randn(1, 5, 6)
    A = matrix(2)
    with pytest.raises(ValueError, match="affine: expected"):
        affine_pull(x, torch.ones(2, 5, dtype=F64))  # 5 columns: D = 4
    with pytest.raises(ValueError, match="affine: expected"):
        affine_pull(x, torch.ones(1, 4, dtype=F64))  # 1 row for D = 3
    with pytest.raises(ValueError, match="affine: expected"):
        affine_pull(x, torch.ones(3, dtype=F64))
    with pytest.raises(TypeError, match="affine"):
        affine_pull(x, A.tolist())
    bad = A.clone()
    bad[0, 1] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        affine_pull(x, bad)
    bad[0, 1] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        affine_push(x, bad)
    with pytest.raises(ValueError, match="shape"):
        affine_pull(x, A, [4])
    with pytest.raises(ValueError, match="shape"):
        affine_pull(x, A, [4, 0])
    with pytest.raises(TypeError, match="shape"):
        affine_pull(x, A, "ab")
    with pytest.raises(TypeError, match="input"):
        affine_pull(x.long(), A)
    with pytest.raises(ValueError, match="input"):
        affine_pull(randn(6), A)
    with pytest.raises(ValueError, match="broadcast"):
        affine_pull(randn(2, 1, 5, 6), matrix(2, (3,)))
    with pytest.raises(ValueError, match="bound|interpolation|order"):
        affine_pull(x, A, interpolation=9)


def test_bad_arguments_kernel():
    """The compiled ops check what they are given too (callers of torch.ops directly)."""
    ops = torch.ops.nitorch_jit
    x = randn(1, 1, 5, 6)
    with pytest.raises(RuntimeError, match="affine must have shape"):
        ops.affine_pull(x, torch.ones(1, 2, 2, dtype=F64), [4, 3], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="batch size"):
        ops.affine_pull(x, matrix(2, (2,)), [4, 3], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="dtype"):
        ops.affine_pull(x, matrix(2, (1,), dtype=F32), [4, 3], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="shape must have D"):
        ops.affine_push(x, matrix(2, (1,)), [4], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="channels"):
        ops.affine_grad_dot(randn(1, 2, 4, 3), x, matrix(2, (1,)), [1, 1], [0, 0], True)


def test_docstring_examples():
    from nitorch_jit.ops import affine
    assert doctest.testmod(affine, extraglobs={"nitorch_jit": nitorch_jit}).failed == 0


# ----------------------------------------------------------------------------- ndimage
# nitorch_jit.ndimage's affine_transform and rotate sample through affine_pull (no grid);
# scipy.ndimage is the oracle.
def _scipy_inside(mat, off, oshape, ishape):
    """scipy's 'constant' rule on the full grid, coordinates summed in scipy's order."""
    idx = np.indices(oshape, dtype=np.float64)
    ok = np.ones(oshape, dtype=bool)
    for d in range(len(ishape)):
        c = np.full(oshape, off[d])
        for j in range(len(oshape)):
            c = c + idx[j] * mat[d, j]
        ok &= (c >= 0) & (c <= ishape[d] - 1)
    return ok


def test_ndimage_inside_intervals():
    from nitorch_jit.ndimage._engine import inside_intervals, outside_indices
    rng = np.random.default_rng(0)
    cases = [(np.array([[0.7, 0.3], [0.0, 1.0]]), np.array([-1.0999999999999996, 0.0]),
              (6, 6), (4, 4))]  # a coordinate exactly on n - 1 in scipy's order only
    for D in (1, 2, 3):
        for k in range(30):
            mat = rng.normal(0, 1, (D, D)) * (0.1 if k % 3 == 0 else 1.0)
            if k % 5 == 0:
                mat = np.round(mat * 4) / 4  # exact coordinates: ties on the bounds
            if k % 7 == 0:
                mat[:, -1] = 0  # constant along the last axis
            off = rng.normal(0, 3, D)
            oshape = tuple(int(n) for n in rng.integers(1, 9, D))
            ishape = tuple(int(n) for n in rng.integers(1, 7, D))
            cases.append((mat, off, oshape, ishape))
    for mat, off, oshape, ishape in cases:
        lo, hi = inside_intervals(mat, off, oshape, ishape)
        i = np.arange(oshape[-1])
        got = ((i >= lo[:, None]) & (i <= hi[:, None])).reshape(oshape)
        want = _scipy_inside(mat, off, oshape, ishape)
        assert np.array_equal(got, want), (mat, off)
        # the flat indices that affine_transform fills with cval: exactly the outside points
        outside = np.zeros(want.size, bool)
        outside[outside_indices(lo, hi, oshape[-1])] = True
        assert np.array_equal(outside, ~want.ravel()), (mat, off)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", [0, 1, 3])
def test_ndimage_affine_transform_vs_scipy(dtype, order):
    sn = pytest.importorskip("scipy.ndimage")
    from nitorch_jit import ndimage as nn
    rng = np.random.default_rng(order)
    x = rng.standard_normal((9, 11, 8)).astype(dtype)
    a = np.deg2rad(17)
    mat = np.array([[np.cos(a), -np.sin(a), 0.1], [np.sin(a), np.cos(a), 0], [0, 0.2, 0.9]])
    off = np.array([1.3, -2.2, 0.4])
    tol = {np.float64: 1e-9, np.float32: 2e-5}[dtype] * (1e3 if order == 3 else 1)
    for mode in ("constant", "nearest", "mirror", "reflect", "grid-wrap", "grid-constant",
                 "wrap"):
        ours = nn.affine_transform(x, mat, off, output_shape=(10, 7, 9), order=order,
                                   mode=mode, cval=-7.5)
        ref = sn.affine_transform(x, mat, off, output_shape=(10, 7, 9), order=order, mode=mode,
                                  cval=-7.5)
        assert ours.dtype == ref.dtype
        if mode == "constant":  # the same voxels get cval
            assert np.array_equal(ours == -7.5, ref == -7.5), mode
        assert np.abs(ours - ref).max() <= tol, (mode, np.abs(ours - ref).max())
    ours = nn.rotate(x, 23, axes=(0, 2), order=order)
    ref = sn.rotate(x, 23, axes=(0, 2), order=order)
    assert np.abs(ours - ref).max() <= tol


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_torch_compile_fullgraph():
    x = randn(1, 2, 6, 7)
    A = matrix(2, seed=15)
    f = torch.compile(lambda x, A: affine_pull(x, A, [5, 4], 3, "dct2", True), fullgraph=True)
    assert torch.equal(f(x, A), affine_pull(x, A, [5, 4], 3, "dct2", True))


def test_batch_broadcast():
    """Batch dims of the input and the matrix broadcast: [3, 1] x [2] -> [3, 2]."""
    x = randn(3, 1, 2, 6, 7)
    A = matrix(2, (2,), seed=16)
    y = affine_pull(x, A, [5, 4], 1, "dct1", True)
    assert y.shape == (3, 2, 2, 5, 4)
    for i in range(3):
        for j in range(2):
            assert torch.equal(y[i, j], affine_pull(x[i, 0], A[j], [5, 4], 1, "dct1", True))
