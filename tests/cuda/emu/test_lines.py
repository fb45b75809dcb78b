"""The CUDA splinc and resize kernels, run by their host emulation (no GPU needed).

tests/cuda/emu/lines_cuda_emu.cpp compiles the CUDA sources of csrc/splinc and csrc/resize (the
line kernels of lines/cuda.cuh, the host-side checks, plans, tables and passes)
with the host C++ compiler, emulating the CUDA built-ins and running the threads of each launch
one after the other, with a grid of at most 2 blocks so that the grid-stride loops run. Its
ops (namespace nj_emu_lines, CPU tensors) are compared with the compiled CPU kernels on every
order and bound, 1-3 dims, sizes 1, 2, odd and even, resizing up / down / identity with every
anchor, prefilter on and off, forward and adjoint, the in-place op, non-contiguous inputs,
32- and 64-bit offsets, empty tensors and bad arguments. What only a GPU shows is left to
tests/cuda/gpu/test_lines.py. Needs the CUDA toolkit's headers (cuda_runtime_api.h), not a GPU;
skipped without them.
"""
import math

import pytest
import torch

from nitorch_jit import backends

from tests.cuda import lines_cases as L
from tests.cuda.cases import check as _check, load_emulation

# the quick tier leaves out: a build of the CUDA emulation (10-30 s) per module
pytestmark = pytest.mark.slow

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def EMU():
    """torch.ops.nj_emu_lines: the emulated CUDA kernels (built once per test cache)."""
    return load_emulation("nj_emu_lines", ["splinc", "resize"], "lines_cuda_emu.cpp",
                          "lines_cuda_emu")


@pytest.fixture(scope="module")
def C():
    """torch.ops.nitorch_jit with the compiled CPU kernels: the reference."""
    assert backends.ensure("splinc", "cpu") == "C", backends.status()
    assert backends.ensure("resize", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


# ----------------------------------------------------------------------------- splinc
@pytest.mark.parametrize("D", [1, 2, 3])
def test_splinc_float64(EMU, C, D):
    _check(L.splinc_sweep(EMU, C, "cpu", D, F64, 1e-10))


@pytest.mark.parametrize("D", [1, 3])
def test_splinc_float32(EMU, C, D):
    _check(L.splinc_sweep(EMU, C, "cpu", D, F32, 1e-5))


def test_splinc_inplace(EMU, C):
    _check(L.inplace_sweep(EMU, C, "cpu"))


# ----------------------------------------------------------------------------- resize
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("prefilter", [False, True])
def test_resize_float64(EMU, C, D, prefilter):
    _check(L.resize_sweep(EMU, C, "cpu", D, F64, 1e-10, prefilter))


@pytest.mark.parametrize("D", [1, 3])
def test_resize_float32(EMU, C, D):
    _check(L.resize_sweep(EMU, C, "cpu", D, F32, 1e-5, True))


@pytest.mark.parametrize("prefilter", [False, True])
def test_resize_64bit_offsets(EMU, C, prefilter, knobs):
    knobs(cuda_index32=False)
    _check(L.resize_sweep(EMU, C, "cpu", 2, F64, 1e-10, prefilter, orders_=[0, 1, 3, 6]))


def test_layouts(EMU, C):
    _check(L.layout_sweep(EMU, C, "cpu"))


def test_adjointness(EMU):
    # <R x, y> == <x, R^T y> with the emulated kernels alone
    for c, case in enumerate(L.RESIZE_CASES[3] + L.RESIZE_CASES[2]):
        nin, nout, scale, shift = L.resize_params(case)
        x = L.randn(2, *nin, seed=c)
        y = L.randn(2, *nout, seed=c + 50)
        for order in (1, 3, 4, 7):
            for bound in L.BOUNDS:
                args = (scale, shift, [order] * len(nin), [bound] * len(nin), True)
                a = (EMU.resize(x, nout, *args) * y).sum().item()
                b = (x * EMU.resize_adjoint(y, nin, *args)).sum().item()
                assert math.isclose(a, b, rel_tol=1e-10, abs_tol=1e-10), (case, order, bound)


# ----------------------------------------------------------------------------- edge cases
def test_empty_and_size_one(EMU, C):
    x = torch.empty(0, 3, 5, dtype=F64)
    assert EMU.spline_coeff_nd(x, [3, 3], [2, 2], [1, 2], False).shape == (0, 3, 5)
    EMU.spline_coeff_nd_(x, [3], [2], [2], False)
    assert EMU.resize(x, [9], [0.5], [0.0], [3], [2], True).shape == (0, 3, 9)
    assert EMU.resize_adjoint(x, [2], [2.0], [0.0], [3], [1], True).shape == (0, 3, 2)
    # size-1 everything
    x = L.randn(1, 1, 1)
    for order in L.ORDERS:
        for bound in L.BOUNDS:
            for adj in (False, True):
                got = EMU.spline_coeff_nd(x, [order] * 3, [bound] * 3, [0, 1, 2], adj)
                want = C.spline_coeff_nd(x, [order] * 3, [bound] * 3, [0, 1, 2], adj)
                assert L.close(got, want, 1e-12) is None, (order, bound, adj)
            args = ([1, 1], [1.0, 0.5], [0.0, 0.25], [order] * 2, [bound] * 2, True)
            assert L.close(EMU.resize(x, *args), C.resize(x, *args), 1e-12) is None
            assert L.close(EMU.resize_adjoint(x, *args), C.resize_adjoint(x, *args),
                           1e-12) is None
    # no filtered dim, nothing to do: a fresh contiguous copy
    x = L.randn(3, 4).t()
    out = EMU.spline_coeff_nd(x, [1], [2], [0], False)
    assert out.is_contiguous() and torch.equal(out, x) and out.data_ptr() != x.data_ptr()
    out = EMU.resize(x, [3], [1.0], [0.0], [1], [2], True)
    assert out.is_contiguous() and torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_input_is_not_modified(EMU):
    x = L.randn(2, 6, 7)
    x0 = x.clone()
    EMU.spline_coeff_nd(x, [3, 3], [2, 2], [1, 2], False)
    EMU.resize(x, [12, 3], [0.5, 2.0], [0.0, 0.0], [3, 5], [2, 1], True)
    EMU.resize_adjoint(x, [3, 14], [2.0, 0.5], [0.0, 0.0], [3, 5], [2, 1], True)
    assert torch.equal(x, x0)


def test_bad_arguments_same_errors_as_cpu(EMU, C):
    x = L.randn(2, 5, 4)
    for name, args in L.bad_calls(x):
        with pytest.raises(RuntimeError) as want:
            getattr(C, name)(*args)
        with pytest.raises(RuntimeError) as got:
            getattr(EMU, name)(*args)
        assert L.first_line(got.value) == L.first_line(want.value), name
    # the CPU kernel's device message, with the emulated device's name
    with pytest.raises(RuntimeError, match="expected float32 or float64, got Half"):
        EMU.resize(x.half(), [3, 3], [1.0, 1.0], [0.0, 0.0], [1, 1], [2, 2], True)
