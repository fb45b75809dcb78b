"""The CUDA pushpull kernels, run by their host emulation (no GPU needed).

tests/cuda/emu/pushpull_cuda_emu.cpp compiles the CUDA sources of csrc/pushpull (kernels, variant
dispatch, host-side checks and geometry) with the host C++ compiler, emulating the CUDA
built-ins (thread indices, __ldg, atomicAdd) and running the threads of each launch one after
the other. Its ops (namespace nj_emu, CPU tensors) are compared with the compiled CPU kernels
on every (dim, order, bound, extrapolate), in float64, float32, float16 and bfloat16, with
32- and 64-bit offsets, non-contiguous / broadcast / non-flat tensors, non-finite points and
bad arguments. What only a GPU shows (concurrency, atomics, memory spaces, the launch itself)
is left to tests/cuda/gpu/test_pushpull.py. Needs the CUDA toolkit's headers (cuda_runtime_api.h,
cuda_fp16.h), not a GPU; skipped without them.
"""

import pytest
import torch

from nitorch_jit import backends

from tests.cuda import cases as K
from tests.cuda.cases import check as _check

# the quick tier leaves out: a build of the CUDA emulation (10-30 s) per module
pytestmark = pytest.mark.slow

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def EMU():
    """torch.ops.nj_emu: the emulated CUDA kernels (built once per test cache)."""
    return K.load_emulation("nj_emu", ["pushpull"], "pushpull_cuda_emu.cpp", "pushpull_cuda_emu")


@pytest.fixture(scope="module")
def C():
    """torch.ops.nitorch_jit with the compiled CPU kernels: the reference."""
    assert backends.ensure("pushpull", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D,ex", K.combos())
def test_sweep_float64(EMU, C, op, D, ex):
    _check(K.compare_sweep(EMU, C, "cpu", op, D, ex, F64, 1e-10))


@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D", [1, 2, 3])
def test_sweep_float32(EMU, C, op, D):
    _check(K.compare_sweep(EMU, C, "cpu", op, D, True, F32, 1e-4))


@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D,ex", [(2, False), (3, True)])
def test_sweep_64bit_offsets(EMU, C, op, D, ex, knobs):
    knobs(cuda_index32=False)
    _check(K.compare_sweep(EMU, C, "cpu", op, D, ex, F64, 1e-10, full=False))


@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("dtype,grid_dtype,tol", [
    (torch.float16, None, 2e-3), (torch.float16, F32, 2e-3),
    (torch.bfloat16, None, 1.6e-2), (torch.bfloat16, F32, 1.6e-2)])
def test_half(EMU, C, op, dtype, grid_dtype, tol):
    # coordinates stay exact enough in half precision on these small images
    _check(K.compare_sweep(EMU, C, "cpu", op, 3, True, dtype, tol, full=False,
                           grid_dtype=grid_dtype))


def test_half_output_dtypes(EMU):
    x, g = K.case_args("grid_pull", 2)
    for dt, gdt in [(torch.float16, torch.float16), (torch.bfloat16, F32)]:
        xi, gi = x.to(dt), g.to(gdt)
        assert EMU.grid_pull(xi, gi, [1, 1], [0, 0], True).dtype == dt
        assert EMU.grid_grad(xi, gi, [1, 1], [0, 0], True).dtype == dt
        y = EMU.grid_pull(xi, gi, [1, 1], [0, 0], True)
        assert EMU.grid_push(y, gi, [7, 6], [1, 1], [0, 0], True).dtype == dt
        assert EMU.grid_grad_dot(y, xi, gi, [1, 1], [0, 0], True).dtype == gdt
        gin, gg = EMU.grid_pull_backward(y, xi, gi, [1, 1], [0, 0], True)
        assert gin.dtype == dt and gg.dtype == gdt


# ----------------------------------------------------------------------------- tiled scatter
def _phased(EMU):
    return EMU.emu_phased_launches()


@pytest.mark.parametrize("op", K.TILE_OPS)
@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
def test_tiled_scatter(EMU, C, op, D, dtype, tol, knobs):
    """The block-tiled scatter (one point per source voxel) against the CPU kernels: near-
    identity grids with a few points far outside their block's window, NaN, border points
    (every bound), several batches and channels; and it is the kernel that ran."""
    tiled_orders = {"grid_push": (0, 1, 3), "grid_pull_backward": (1, 3)}[op]
    before = _phased(EMU)
    _check(K.compare_tiles(EMU, C, "cpu", op, D, dtype, tol, orders=tiled_orders))
    assert _phased(EMU) - before == 4 * len(tiled_orders)  # every one of those calls
    # other orders (no tiled kernel), random grids (most points outside the windows)
    before = _phased(EMU)
    _check(K.compare_tiles(EMU, C, "cpu", op, D, dtype, tol, orders=(2, 5)))
    assert _phased(EMU) == before
    _check(K.compare_tiles(EMU, C, "cpu", op, D, dtype, tol, orders=(1, 3), disp=6.0, far=0.3,
                           C=1, B=1))
    # turned off: the one-point kernel
    knobs(cuda_tiles=False)
    before = _phased(EMU)
    _check(K.compare_tiles(EMU, C, "cpu", op, D, dtype, tol, orders=(1,)))
    assert _phased(EMU) == before


@pytest.mark.parametrize("op", K.TILE_OPS)
def test_tiled_scatter_collapse(EMU, C, op):
    """Every point near the centre: the centre tiles add all their points into a few cells."""
    args = K.collapse_args(op, n=20)
    for order in (1, 3):
        before = _phased(EMU)
        msg = K.close(getattr(EMU, op)(*args, [order] * 3, [2] * 3, True),
                      getattr(C, op)(*args, [order] * 3, [2] * 3, True), 1e-10)
        assert msg is None, msg
        assert _phased(EMU) == before + 1


@pytest.mark.parametrize("op", K.TILE_OPS)
def test_tiled_scatter_layouts(EMU, C, op):
    """Non-contiguous values and grid, batch stride 0, a non-flat grid, in the tiled kernel;
    64-bit offsets and half data take the one-point kernel."""
    args = K.tile_args(op, 3, B=2, C=3, seed=5)
    grid = K.grid_of(args)
    big = torch.zeros(2, *[n + 2 for n in grid.shape[1:-1]], 4, dtype=F64)
    nonflat = big[:, 1:-1, 1:-1, 1:-1, :3]
    nonflat.copy_(grid)
    variants = [
        [a.transpose(0, -1).contiguous().transpose(0, -1) if torch.is_tensor(a) else a
         for a in args],
        [a[:1].expand(a.shape) if torch.is_tensor(a) else a for a in args],
        [nonflat if a is grid else a for a in args],
    ]
    for order in ([1] * 3, [3] * 3):
        for v in variants:
            before = _phased(EMU)
            ref = [a.contiguous() if torch.is_tensor(a) else a for a in v]
            msg = K.close(getattr(EMU, op)(*v, order, [2, 6, 3], True),
                          getattr(C, op)(*ref, order, [2, 6, 3], True), 1e-10)
            assert msg is None, msg
            assert _phased(EMU) == before + 1


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 3, 5])
def test_layouts(EMU, C, op, D, order):
    _check(K.compare_layouts(EMU, C, "cpu", op, D, order))


# ----------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("ex", [False, True])
def test_non_finite_points(EMU, C, op, ex):
    args = K.non_finite_args(op)
    for order in ([1] * 3, [3] * 3, [2, 0, 5]):
        want = getattr(C, op)(*args, order, [2, 6, 5], ex)
        got = getattr(EMU, op)(*args, order, [2, 6, 5], ex)
        msg = K.close(got, want, 1e-10)
        assert msg is None, f"order={order}: {msg}"


def test_dropped_taps_read_nothing(EMU):
    # zero / dst1 bounds: a tap past the border is dropped, it must not read the voxel its
    # folded index names (index 0, here NaN); the legitimate taps never reach index 0
    x = torch.tensor([[[float("nan"), 1.0, 1.0, 1.0, 1.0]]], dtype=F64)
    g = torch.tensor([[[3.6], [4.02], [3.9]]], dtype=F64)
    for order in (1, 2, 3):
        for bound in (3, 6):
            y = EMU.grid_pull(x, g, [order], [bound], True)
            assert torch.isfinite(y).all(), (order, bound, y)
            w = torch.ones(1, 1, 3, dtype=F64)
            assert torch.isfinite(EMU.grid_grad_dot(w, x, g, [order], [bound], True)).all()


def test_empty(EMU, C):
    x, g = K.case_args("grid_pull", 2)
    assert EMU.grid_pull(x[:, :0], g, [1, 1], [0, 0], True).shape == (2, 0, 4, 3)
    assert EMU.grid_pull(x, g[:, :0], [1, 1], [0, 0], True).shape == (2, 2, 0, 3)
    assert (EMU.grid_pull(x[:, :, :0], g, [1, 1], [0, 0], True) == 0).all()
    y = torch.ones(2, 2, 4, 3, dtype=F64)
    assert EMU.grid_push(y, g, [0, 6], [1, 1], [0, 0], True).shape == (2, 2, 0, 6)
    assert (EMU.grid_grad_dot(y, x[:, :, :0], g, [1, 1], [0, 0], True) == 0).all()
    for a, b in zip(EMU.grid_pull_backward(y, x[:, :, :0], g, [1, 1], [0, 0], True),
                    C.grid_pull_backward(y, x[:, :, :0], g, [1, 1], [0, 0], True)):
        assert a.shape == b.shape and (a == 0).all()
    gin, gg = EMU.grid_pull_backward(y[:, :, :0], x, g[:, :0], [1, 1], [0, 0], True)
    assert gin.shape == x.shape and (gin == 0).all() and gg.shape == (2, 0, 3, 2)


def test_bad_input_raises(EMU):
    x, g = K.case_args("grid_pull", 2)
    with pytest.raises(RuntimeError, match="order"):
        EMU.grid_pull(x, g, [9, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="bound"):
        EMU.grid_pull(x, g, [1, 1], [7, 0], True)
    with pytest.raises(RuntimeError, match="dtype"):
        EMU.grid_pull(x.float(), g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="dtype"):
        EMU.grid_pull(x.half(), g, [1, 1], [0, 0], True)  # half data: grid half or float32
    with pytest.raises(RuntimeError, match="batch"):
        EMU.grid_pull(x[:1], g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="dims"):
        EMU.grid_pull(x[0], g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="grid must be float16, bfloat16, float32"):
        EMU.grid_pull(x, g.int(), [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="shape"):
        EMU.grid_push(x[:, :, :4, :3], g, [7], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="spatial shape"):
        EMU.grid_push(x, g, [7, 6], [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="channels"):
        EMU.grid_grad_dot(torch.ones(2, 3, 4, 3, dtype=F64), x, g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="channels"):
        EMU.grid_pull_backward(torch.ones(2, 3, 4, 3, dtype=F64), x, g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="grad dtype"):
        EMU.grid_pull_backward(torch.ones(2, 2, 4, 3), x.half(), g.float(), [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="spatial shape"):
        EMU.grid_pull_backward(torch.ones(2, 2, 4, 2, dtype=F64), x, g, [1, 1], [0, 0], True)


# ----------------------------------------------------------------------------- affine ops
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
def test_affine_ops(EMU, C, D, dtype, tol):
    """affine_pull / affine_push / affine_grad_dot (coordinates from the matrix in the kernel;
    the grad_dot reduction kernel) against the CPU kernels: fast and generic paths, every
    bound, extrapolate on and off, 32- and 64-bit offsets, a matrix shared by the batch."""
    _check(K.compare_affine(EMU, C, "cpu", D, dtype, tol))


def test_affine_bad_input_raises(EMU):
    x, y, A, S, O = K.affine_case(2)
    with pytest.raises(RuntimeError, match="affine must have shape"):
        EMU.affine_pull(x, A[:, :, :2], O, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="dtype"):
        EMU.affine_pull(x.float(), A, O, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="affine must be float32 or float64"):
        EMU.affine_pull(x.half(), A.half(), O, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="batch"):
        EMU.affine_push(y[:1], A, S, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="channels"):
        EMU.affine_grad_dot(y[:, :1], x, A, [1, 1], [0, 0], True)
