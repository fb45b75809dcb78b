"""The CUDA splinc and resize kernels on a GPU (docs/splinc-resize-spec.md).

Against the compiled CPU kernels: every order and bound, 1-3 dims, sizes 1, 2, odd and even,
resizing up / down / identity with every anchor, prefilter on and off, forward and adjoint,
in float64 (1e-10) and float32 (1e-5); 64-bit offsets; non-contiguous, expanded and offset
inputs; the in-place op; empty tensors; bad arguments (the CPU ops' errors). Plus gradcheck
through the public API (spline_coeff_nd, resize, restrict), the resize / restrict dot test,
PyTorch's current stream, and a tensor of more than 2^31 elements (slow). The same cases run
without a GPU through the host emulation of the kernels (tests/cuda/emu/test_lines.py).
Every test needs a CUDA device.
"""
import math

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit import backends

from tests.cuda import lines_cases as L
from tests.cuda.cases import gpu, check as _check, on_side_stream

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def CU():
    """torch.ops.nitorch_jit with the compiled CUDA kernels (compiled here if needed)."""
    for module in ("splinc", "resize"):
        which = backends.ensure(module, "cuda")
        assert which == "C", f"the CUDA {module} kernels did not compile: {backends.status()}"
    return torch.ops.nitorch_jit


@pytest.fixture(scope="module")
def C():
    assert backends.ensure("splinc", "cpu") == "C", backends.status()
    assert backends.ensure("resize", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


# ----------------------------------------------------------------------------- vs CPU
@gpu
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-5)])
def test_splinc_vs_cpu(CU, C, D, dtype, tol):
    _check(L.splinc_sweep(CU, C, "cuda", D, dtype, tol))


@gpu
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("prefilter", [False, True])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-5)])
def test_resize_vs_cpu(CU, C, D, prefilter, dtype, tol):
    _check(L.resize_sweep(CU, C, "cuda", D, dtype, tol, prefilter))


@gpu
@pytest.mark.parametrize("prefilter", [False, True])
def test_resize_64bit_offsets(CU, C, prefilter, knobs):
    knobs(cuda_index32=False)
    _check(L.resize_sweep(CU, C, "cuda", 2, F64, 1e-10, prefilter, orders_=[0, 1, 3, 6]))


@gpu
def test_layouts(CU, C):
    _check(L.layout_sweep(CU, C, "cuda"))


@gpu
def test_inplace(CU, C):
    _check(L.inplace_sweep(CU, C, "cuda"))


@gpu
def test_empty_and_size_one(CU, C):
    x = torch.empty(0, 3, 5, dtype=F64, device="cuda")
    assert CU.spline_coeff_nd(x, [3, 3], [2, 2], [1, 2], False).shape == (0, 3, 5)
    CU.spline_coeff_nd_(x, [3], [2], [2], False)
    assert CU.resize(x, [9], [0.5], [0.0], [3], [2], True).shape == (0, 3, 9)
    assert CU.resize_adjoint(x, [2], [2.0], [0.0], [3], [1], True).shape == (0, 3, 2)
    x = L.randn(1, 1, 1)
    for order in L.ORDERS:
        for bound in L.BOUNDS:
            for adj in (False, True):
                got = CU.spline_coeff_nd(x.cuda(), [order] * 3, [bound] * 3, [0, 1, 2], adj)
                want = C.spline_coeff_nd(x, [order] * 3, [bound] * 3, [0, 1, 2], adj)
                assert L.close(got, want, 1e-12) is None, (order, bound, adj)
            args = ([1, 1], [1.0, 0.5], [0.0, 0.25], [order] * 2, [bound] * 2, True)
            assert L.close(CU.resize(x.cuda(), *args), C.resize(x, *args), 1e-12) is None
            assert L.close(CU.resize_adjoint(x.cuda(), *args), C.resize_adjoint(x, *args),
                           1e-12) is None


@gpu
def test_bad_arguments_raise(CU, C):
    x = L.randn(2, 5, 4)
    for (name, args), (_, dargs) in zip(L.bad_calls(x), L.bad_calls(x.cuda())):
        with pytest.raises(RuntimeError) as want:
            getattr(C, name)(*args)
        with pytest.raises(RuntimeError) as got:
            getattr(CU, name)(*dargs)
        assert L.first_line(got.value) == L.first_line(want.value), name
    # the process is still healthy afterwards
    assert torch.isfinite(CU.resize(x.cuda(), [3, 3], [1.5, 1.2], [0.0, 0.0], [3, 3], [2, 2],
                                    True)).all()
    torch.cuda.synchronize()


# ----------------------------------------------------------------------------- public API
@gpu
def test_gradcheck(CU):
    opts = dict(eps=1e-6, atol=1e-6, rtol=1e-5)
    x = L.randn(1, 2, 6, 5, seed=3).cuda().requires_grad_()
    for order, bound in [(3, "dct2"), (5, "dft"), (2, "dst1"), (7, "dct1"), (4, "zero")]:
        f = lambda t: nj.spline_coeff_nd(t, interpolation=order, bound=bound, dim=2)  # noqa
        assert torch.autograd.gradcheck(f, (x,), **opts), (order, bound)
    x = L.randn(1, 2, 5, 4, seed=4).cuda().requires_grad_()
    for order, pf, bound in [(1, False, "dct2"), (3, True, "dct1"), (2, True, "dst2"),
                             (5, True, "dft")]:
        f = lambda t: nj.resize(t, factor=[1.7, 0.8], anchor="e",  # noqa: E731
                                interpolation=order, prefilter=pf, bound=bound)
        assert torch.autograd.gradcheck(f, (x,), **opts), (order, pf, bound)
    y = L.randn(1, 2, 9, 7, seed=5).cuda().requires_grad_()
    g = lambda t: nj.restrict(t, 2, anchor="c", interpolation=3)  # noqa: E731
    assert torch.autograd.gradcheck(g, (y,), **opts)


@gpu
@pytest.mark.parametrize("anchor", ["c", "e", "f", "l"])
def test_restrict_is_adjoint(CU, anchor):
    y = L.randn(2, 3, 7, 9, 5, seed=2).cuda()
    for order in L.ORDERS:
        for bound in ("dct2", "dct1", "dst1", "dst2", "dft", "zero", "replicate"):
            up = nj.resize(y, factor=2, anchor=anchor, interpolation=order, bound=bound,
                           prefilter=False)
            g = torch.randn_like(up)
            down = nj.restrict(g, factor=2, shape=[7, 9, 5], anchor=anchor,
                               interpolation=order, bound=bound, reduce_sum=True)
            assert down.shape == y.shape and down.is_cuda
            assert math.isclose((up * g).sum().item(), (y * down).sum().item(),
                                rel_tol=1e-10, abs_tol=1e-10), (order, bound)


@gpu
def test_public_api_matches_cpu(CU, C):
    x = L.randn(2, 3, 11, 8, 6, seed=6)
    for t in (x, x.float()):
        tol = 1e-10 if t.dtype == F64 else 1e-5
        for f in (lambda a: nj.spline_coeff_nd(a, interpolation=[3, 5, 2], bound="dft", dim=3),
                  lambda a: nj.resize(a, factor=[1.5, 0.5, 2], interpolation=3),
                  lambda a: nj.restrict(a, 2, anchor="e"),
                  lambda a: nj.prolong(a)):
            got, want = f(t.cuda()), f(t)
            assert got.is_cuda and L.close(got, want, tol) is None
        # in place on a non-contiguous CUDA tensor
        a = t.cuda().transpose(2, 4)
        b = nj.spline_coeff_nd(a.clone(), interpolation=4, bound="dct1", dim=3)
        assert nj.spline_coeff_nd(a, interpolation=4, bound="dct1", dim=3, inplace=True) is a
        assert L.close(a, b, tol) is None
    h = nj.resize(x.cuda().half(), 2, interpolation=3)
    assert h.dtype == torch.float16 and h.is_cuda


# ----------------------------------------------------------------------------- runtime
@gpu
def test_current_stream(CU):
    # Everything (the upload of the plans and tables, the kernels) must run on PyTorch's
    # current stream. The side stream below is busy (sleeping), then writes the input: work
    # sent to any other stream would run first and read the zeros instead.
    x = L.randn(2, 3, 40, 50).cuda()
    shape, sc, sh = [80, 25], [39 / 79, 2.0], [0.0, 0.5]
    opts = ([3, 5], [2, 5], True)

    def ops(t):
        c = t.clone()
        CU.spline_coeff_nd_(c, [3, 4], [1, 2], [2, 3], False)
        return [CU.spline_coeff_nd(t, [3, 4], [1, 2], [2, 3], True), c,
                CU.resize(t, shape, sc, sh, *opts), CU.resize_adjoint(t, [7, 9], sc, sh, *opts)]

    want, got = on_side_stream(ops, x)
    for a, b in zip(got, want):
        assert L.close(a, b, 0) is None


@gpu
@pytest.mark.slow
def test_more_than_2_31_elements(CU):
    # 64-bit offsets: lines beyond element 2^31 (float32, about 8.6 GB in and out)
    rows = (1 << 31) // 64 + 3
    x = torch.randn(rows, 64, device="cuda")
    pick = [0, rows // 2, rows - 1]
    out = CU.spline_coeff_nd(x, [3], [2], [1], False)
    ref = CU.spline_coeff_nd(x[pick], [3], [2], [1], False)
    assert torch.equal(out[pick], ref)
    del out
    out = CU.resize(x, [32], [2.0], [0.5], [3], [1], True)
    ref = CU.resize(x[pick], [32], [2.0], [0.5], [3], [1], True)  # 32-bit offsets
    assert torch.allclose(out[pick], ref, atol=1e-6, rtol=0)
