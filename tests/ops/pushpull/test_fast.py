"""The CPU fast paths of csrc/pushpull/cpu/avx2/ and the batch-split scatter.

Fast paths (AVX2 + FMA, every dim of one order): grid_pull of orders 1 and 3 in 2-D and 3-D
(float32) and in 3-D (float64), and grid_push and grid_pull_backward of order 1 in 2-D and 3-D.
Each is checked on the
cases it takes and on its borders (points whose support leaves the source go back to the
scalar path, one by one) against two references: the pure-PyTorch twin
(nitorch_jit/torch_impl/pushpull.py) in float64 on the same float32 data, and the scalar C path
(the avx2 tuning knob off). Cases: every bound,
extrapolate on and off, points out of range, NaN / inf / huge coordinates, rows that are not a
multiple of 8 points, non-contiguous grids (gathered coordinates), incoming gradients and inputs
(the latter declines the fast path), 1 / 3 / 8 channels, batches and a broadcast input batch.
Extrapolated dct1 / dct2 pulls fold points outside the source into it in the vector path: checked
far outside, on mirror points and period boundaries, and shown to be taken.
The scatter of a batch of several images splits whole images among threads (no private copies):
its result does not depend on the thread count at all.
"""
import platform

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit.backends import tuning

F32, F64 = torch.float32, torch.float64
BOUNDS = ["replicate", "dct1", "dct2", "dst1", "dst2", "dft", "zero"]


def has_avx2():
    # the machine first: under qemu-user an aarch64 Python reads the x86 host's /proc/cpuinfo
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


def coords(batch, shape_out, shape_in, margin=2.5, seed=0):
    """float32 voxel coordinates in [-margin, n - 1 + margin] (borders and out-of-range points),
    with a NaN, an inf and a huge value in the first row."""
    gen = torch.Generator().manual_seed(seed)
    D = len(shape_in)
    g = torch.rand([batch, *shape_out, D], generator=gen, dtype=F64)
    lo = torch.tensor([-margin] * D, dtype=F64)
    hi = torch.tensor([n - 1 + margin for n in shape_in], dtype=F64)
    g = (lo + g * (hi - lo)).to(F32)
    first = g.view(batch, -1, D)[0]
    first[1, 0] = float("nan")
    first[3, -1] = float("inf")
    first[5, 0] = 1e20
    return g


def data(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64).to(F32)


def scalar_path(fn):
    """fn() with the AVX2 paths off (the avx2 tuning knob): the scalar C path."""
    with tuning.override(avx2=False):
        return fn()


def assert_close(out, ref, tol=2e-5):
    """Same NaN pattern; elsewhere equal up to float32 rounding (relative to the largest)."""
    ref = ref.to(out.dtype)
    assert torch.equal(out.isnan(), ref.isnan())
    out, ref = out.nan_to_num(0), ref.nan_to_num(0)
    scale = max(1.0, ref.abs().max().item())
    assert (out - ref).abs().max().item() <= tol * scale


def finite_points(grid):
    """The huge coordinate folds differently in float32 and float64 (the float64 twin sees a
    different number): those points are compared with the scalar float32 path only."""
    return (grid.abs() < 1e6).all(-1)


def twin_close(out, ref, grid, channel_dims=1):
    keep = finite_points(grid)  # [B, *O]
    mask = keep.reshape(keep.shape[:1] + (1,) * channel_dims + keep.shape[1:])
    assert_close(torch.where(mask, out, 0), torch.where(mask, ref.to(out.dtype), 0))


@pytest.mark.parametrize("order", [1, 3])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("ex", [False, True])
def test_pull2d(C, TORCH, order, bound, ex):
    b = BOUNDS.index(bound)
    S, O = (9, 13), (6, 21)  # rows of 21 points: two blocks of 8 and a scalar tail
    for Cn, B in [(1, 1), (3, 2), (8, 1)]:
        img = data(B, Cn, *S)
        grid = coords(B, O, S)
        for g in (grid, grid.transpose(1, 2).contiguous().transpose(1, 2)):  # packed, gathered
            out = C.grid_pull(img, g, [order] * 2, [b] * 2, ex)
            ref = scalar_path(lambda: C.grid_pull(img, g, [order] * 2, [b] * 2, ex))
            assert_close(out, ref)
            twin = TORCH.grid_pull(img.double(), g.double(), [order] * 2, [b] * 2, ex)
            twin_close(out, twin, g)


@pytest.mark.parametrize("order,dtype", [(1, F32), (3, F32), (1, F64), (3, F64)])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("ex", [False, True])
def test_pull3d(C, TORCH, order, dtype, bound, ex):
    """3-D orders 1 and 3, float32 and float64, rows of 19 points: two blocks of 8 (float64:
    four of 4) and a scalar tail."""
    b = BOUNDS.index(bound)
    S, O = (5, 6, 7), (3, 2, 19)
    tol = 2e-5 if dtype == F32 else 1e-12
    for Cn, B in [(1, 1), (3, 2), (8, 1)]:
        img = data(B, Cn, *S).to(dtype)
        grid = coords(B, O, S).to(dtype)
        for g in (grid, grid.transpose(1, 3).contiguous().transpose(1, 3)):
            args = ([order] * 3, [b] * 3, ex)
            out = C.grid_pull(img, g, *args)
            assert_close(out, scalar_path(lambda: C.grid_pull(img, g, *args)), tol)
            keep = finite_points(g)[:, None]
            ref = TORCH.grid_pull(img.double(), g.double(), *args)
            assert_close(torch.where(keep, out, 0), torch.where(keep, ref.to(dtype), 0), tol)


def test_pull3d_long_rows(C, TORCH):
    """Rows of 300 points (37 blocks of 8 and a tail), 8 channels, borders at both ends."""
    S, O = (6, 5, 40), (2, 1, 300)
    img = data(1, 8, *S)
    grid = coords(1, O, S, margin=1.5)
    for order in (1, 3):
        args = ([order] * 3, [2] * 3, False)
        out = C.grid_pull(img, grid, *args)
        assert_close(out, scalar_path(lambda: C.grid_pull(img, grid, *args)))
        twin_close(out, TORCH.grid_pull(img.double(), grid.double(), *args), grid)


def test_pull2d_long_rows(C, TORCH):
    """2-D order 1, rows of 600 points: more blocks than one chunk of kept weights (32), 3
    channels, borders at both ends."""
    S, O = (9, 70), (3, 600)
    img = data(2, 3, *S)
    grid = coords(2, O, S, margin=1.5)
    args = ([1] * 2, [1] * 2, True)
    out = C.grid_pull(img, grid, *args)
    assert_close(out, scalar_path(lambda: C.grid_pull(img, grid, *args)))
    twin_close(out, TORCH.grid_pull(img.double(), grid.double(), *args), grid)


@pytest.mark.parametrize("order", [1, 3])
def test_pull3d_tiled_channels(C, TORCH, order):
    """Several channels and long source rows: the output is walked in tiles of a few dim-1 rows
    (each tile through every dim-0 plane); every point is still computed once and right, and
    affine_pull (same walk) still equals grid_pull on the built grid."""
    S, O = (5, 6, 3000), (3, 11, 20)
    img = data(2, 8, *S)
    grid = coords(2, O, S, margin=1.5)
    args = ([order] * 3, [2] * 3, False)
    out = C.grid_pull(img, grid, *args)
    assert_close(out, scalar_path(lambda: C.grid_pull(img, grid, *args)))
    twin_close(out, TORCH.grid_pull(img.double(), grid.double(), *args), grid)
    A = torch.tensor([[0.9, 0.1, 0.0, 1.2], [-0.1, 0.95, 0.05, 0.3], [0.02, 0.0, 140.0, 5.5]])
    via_grid = nj.grid_pull(img, nj.affine_grid(A, list(O)).expand(2, *O, 3), order, "dct2")
    assert torch.equal(nj.affine_pull(img, A, list(O), order, "dct2"), via_grid)


@pytest.mark.parametrize("order", [1, 3])
def test_pull2d_layouts(C, TORCH, order):
    """Non-contiguous input (declines the fast path), tiny sources (order + 1 voxels, the least
    the fast path takes, and fewer), a broadcast input batch through the public API."""
    S, O = (7, 12), (4, 16)
    img = data(2, 3, *S)
    grid = coords(2, O, S)
    args = ([order] * 2, [2] * 2, True)
    ref = TORCH.grid_pull(img.double(), grid.double(), *args)
    strided = img.transpose(2, 3).contiguous().transpose(2, 3)
    twin_close(C.grid_pull(strided, grid, *args), ref, grid)
    for S in [(order + 1, order + 1), (order, order + 3)]:
        small = data(1, 2, *S)
        g = coords(1, O, S)
        ref = TORCH.grid_pull(small.double(), g.double(), *args)
        twin_close(C.grid_pull(small, g, *args), ref, g)
    one = data(1, 3, *S)
    grid3 = coords(3, O, S)
    out = nj.grid_pull(one, grid3, interpolation=order, bound="dct2", extrapolate=True)
    ref = TORCH.grid_pull(one.double().expand(3, -1, -1, -1), grid3.double(), *args)
    twin_close(out, ref, grid3)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("ex", [False, True])
def test_pull_backward(C, TORCH, D, bound, ex):
    b = BOUNDS.index(bound)
    S, O = ((9, 11), (5, 19)) if D == 2 else ((5, 6, 7), (3, 4, 11))
    for Cn, B in [(1, 1), (3, 4), (8, 1)]:
        img = data(B, Cn, *S)
        grid = coords(B, O, S)
        grad = data(B, Cn, *O, seed=2)
        grad.view(-1)[2:6] = 0  # zero gradients add nothing, not even 0 * inf
        img.view(-1)[0] = float("inf")
        for nc in (False, True):
            g = grid.transpose(1, 2).contiguous().transpose(1, 2) if nc else grid
            gr = grad.transpose(2, -1).contiguous().transpose(2, -1) if nc else grad
            args = ([1] * D, [b] * D, ex)
            gi, gg = C.grid_pull_backward(gr, img, g, *args)
            ri, rg = scalar_path(lambda: C.grid_pull_backward(gr, img, g, *args))
            assert_close(gi, ri)
            assert_close(gg, rg)
        # finite data and coordinates: against the twin
        img = data(B, Cn, *S)
        g = grid.nan_to_num(0.5, 0.5, 0.5).clamp(-3, max(S) + 2)
        args = ([1] * D, [b] * D, ex)
        gi, gg = C.grid_pull_backward(grad, img, g, *args)
        ti, tg = TORCH.grid_pull_backward(grad.double(), img.double(), g.double(), *args)
        assert_close(gi, ti)
        assert_close(gg, tg)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("ex", [False, True])
def test_push(C, TORCH, D, bound, ex):
    """grid_push of order 1 (float32, avx2/push.h): rows of 19 points (two blocks of 8 and a
    scalar tail), borders, out-of-range and non-finite points, zero and NaN values, 1 / 3 / 8
    channels, batches, gathered coordinates and values."""
    b = BOUNDS.index(bound)
    S, O = ((9, 11), (5, 19)) if D == 2 else ((5, 6, 7), (3, 4, 19))
    args = ([1] * D, [b] * D, ex)
    for Cn, B in [(1, 1), (3, 4), (8, 1)]:
        grid = coords(B, O, S)
        val = data(B, Cn, *O, seed=2)
        val.view(-1)[2:6] = 0  # zero values add nothing
        val.view(-1)[9] = float("nan")
        for nc in (False, True):
            g = grid.transpose(1, 2).contiguous().transpose(1, 2) if nc else grid
            v = val.transpose(2, -1).contiguous().transpose(2, -1) if nc else val
            out = C.grid_push(v, g, list(S), *args)
            assert_close(out, scalar_path(lambda: C.grid_push(v, g, list(S), *args)))
        # finite values and coordinates: against the twin
        g = grid.nan_to_num(0.5, 0.5, 0.5).clamp(-3, max(S) + 2)
        v = val.nan_to_num(0.25)
        out = C.grid_push(v, g, list(S), *args)
        assert_close(out, TORCH.grid_push(v.double(), g.double(), list(S), *args))


@pytest.mark.parametrize("D", [2, 3])
def test_scatter_interior_bit_for_bit(C, D):
    """Blocks of interior points scatter in the scalar path's order with its products: grid_push
    and grid_pull_backward's grad_input equal the scalar path bit for bit."""
    S = (9, 11) if D == 2 else (5, 6, 7)
    O = (4, 24) if D == 2 else (3, 2, 24)
    # strictly inside [0, n - 1): every point interior
    g = coords(2, O, S, margin=0.0).nan_to_num(1.0, 1.0, 1.0)
    g = torch.minimum(g.clamp(min=0), torch.tensor([n - 1.001 for n in S]))
    val = data(2, 3, *O, seed=3)
    img = data(2, 3, *S, seed=4)
    args = ([1] * D, [1] * D, True)
    out = C.grid_push(val, g, list(S), *args)
    assert torch.equal(out, scalar_path(lambda: C.grid_push(val, g, list(S), *args)))
    gi = C.grid_pull_backward(val, img, g, *args)[0]
    assert torch.equal(gi, scalar_path(lambda: C.grid_pull_backward(val, img, g, *args))[0])


@pytest.mark.skipif(not has_avx2(), reason="no AVX2 + FMA on this CPU")
@pytest.mark.parametrize("D", [2, 3])
def test_push_fast_path_taken(C, D):
    """The push's vector path runs: it adds a block's interior points before the border points
    the scalar path redoes, which shows in float32 rounding. Voxel 0 of a row gets 1e8 from a
    border point (lane 0: coordinate -1, replicate) and 1 from each of 7 interior points:
    1e8 + 1 rounds back to 1e8 seven times in the scalar path, 7 + 1e8 rounds to 1e8 + 8 in
    the vector path."""
    S = (4, 12) if D == 2 else (4, 4, 12)
    g = torch.zeros(1, *(1,) * (D - 1), 8, D)
    g[..., :-1] = 1.0  # an interior row of the other dims
    g[..., 0, -1] = -1.0
    val = torch.ones(1, 1, *(1,) * (D - 1), 8)
    val[..., 0] = 1e8
    args = ([1] * D, [0] * D, True)
    fast = C.grid_push(val, g, list(S), *args)[(0, 0) + (1,) * (D - 1) + (0,)]
    slow = scalar_path(lambda: C.grid_push(val, g, list(S), *args))[(0, 0) + (1,) * (D - 1) + (0,)]
    assert slow.item() == 1e8
    assert fast.item() == 1e8 + 8


@pytest.mark.parametrize("D", [2, 3])
def test_pull_backward_autograd(C, TORCH, D):
    """The public grid_pull's backward (float32, the fused op) against the twin's autograd in
    float64, with a broadcast input batch."""
    S, O = ((10, 12), (6, 17)) if D == 2 else ((5, 6, 8), (3, 4, 10))
    img = data(1, 3, *S).requires_grad_()
    grid = coords(2, O, S).nan_to_num(1.0, 1.0, 1.0).clamp(-3, 14).requires_grad_()
    out = nj.grid_pull(img, grid, interpolation=1, bound="dft", extrapolate=False)
    w = data(*out.shape, seed=3)
    gi, gg = torch.autograd.grad(out, (img, grid), w)
    x64 = img.detach().double().requires_grad_()
    g64 = grid.detach().double().requires_grad_()
    ref = TORCH.grid_pull(x64.expand(2, *x64.shape[1:]), g64, [1] * D, [5] * D, False)
    ri, rg = torch.autograd.grad(ref, (x64, g64), w.double())
    assert_close(out.detach(), ref.detach())
    assert_close(gi, ri)
    assert_close(gg, rg)


@pytest.mark.parametrize("op", ["grid_push", "grid_pull_backward"])
def test_batch_split_scatter_thread_independent(C, op, knobs):
    """With several images, each thread scatters whole images: 1 and 2 threads give the same
    bits (the split into private copies would differ in rounding)."""
    knobs(parallel_min_work=1)  # small enough to split
    S, O = (12, 14), (12, 14)
    img = data(6, 2, *S)
    grid = coords(6, O, S).nan_to_num(0.0, 0.0, 0.0)
    val = data(6, 2, *O, seed=4)
    args = ([1, 1], [2, 2], True)
    if op == "grid_push":
        run = lambda: C.grid_push(val, grid, list(S), *args)  # noqa: E731
    else:
        run = lambda: C.grid_pull_backward(val, img, grid, *args)  # noqa: E731
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(2)
        two = run()
    finally:
        torch.set_num_threads(threads)
    if op == "grid_push":
        one, two = (one,), (two,)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


def far_coords(shape_out, shape_in, dtype, seed=0):
    """[1, *shape_out, D] coordinates mostly far outside the source ([-3n, 4n]), then on every
    dim the mirror points and period boundaries of dct1 and dct2, linear dct2's flat parts,
    integers, values whose x + 1/2 rounds, values near the fold's limit 2^22 and non-finite
    ones."""
    gen = torch.Generator().manual_seed(seed)
    D = len(shape_in)
    n = torch.tensor(shape_in, dtype=F64)
    g = (torch.rand([1, *shape_out, D], generator=gen, dtype=F64) * 7 - 3) * n
    flat = g.view(-1, D)
    for d in range(D):
        m = shape_in[d]
        special = [-0.5, m - 0.5, -1, 2 * m - 0.5, -0.25, -0.75, m - 0.75, m - 0.25, 2 * m - 1.5, -2 * m - 0.5, 0, m - 1,
                   2 * m - 2, -(m - 1), 3 * m - 3, -3, 4 * m, 2 ** 21 - 0.125, 3e6 + 0.25,
                   -2.5e6 - 0.75, 2 ** 22 + 1, -(2 ** 22), 1e20, float("nan"), float("inf"),
                   -float("inf")]
        special = torch.tensor(special, dtype=F64)
        rows = torch.randperm(flat.shape[0], generator=gen)[: len(special)]
        flat[rows, d] = special
    return g.to(dtype)


@pytest.mark.parametrize("D,order,dtype", [(2, 1, F32), (2, 3, F32), (3, 1, F32), (3, 3, F32),
                                           (3, 1, F64), (3, 3, F64)])
@pytest.mark.parametrize("bound", ["dct1", "dct2", "dst2"])
def test_pull_mirror_fold_far_outside(C, TORCH, D, order, dtype, bound):
    """Extrapolated pulls fold coordinates on dct1 / dct2 dims into the source (MirrorFold in
    avx2/coords.h) and take them in the vector path: equal to the scalar path to rounding,
    far outside, on the mirror points and period boundaries, and for NaN / inf / huge values
    (dst2: no fold, the control)."""
    b = BOUNDS.index(bound)
    S, O = ((9, 13), (12, 37)) if D == 2 else ((5, 6, 7), (4, 5, 37))
    tol = 1e-5 if dtype == F32 else 1e-10
    img = data(2, 3, *S).to(dtype)
    grid = far_coords(O, S, dtype).expand(2, *O, D)
    args = ([order] * D, [b] * D, True)
    for g in (grid.contiguous(), grid.movedim(-1, 1).contiguous().movedim(1, -1)):
        out = C.grid_pull(img, g, *args)
        assert_close(out, scalar_path(lambda: C.grid_pull(img, g, *args)), tol)
        keep = finite_points(g)[:, None]
        ref = TORCH.grid_pull(img.double(), g.double(), *args)
        assert_close(torch.where(keep, out, 0), torch.where(keep, ref.to(dtype), 0), tol)


@pytest.mark.skipif(not has_avx2(), reason="no AVX2 + FMA on this CPU")
def test_mirror_fold_taken(C):
    """The vector paths take the folded points outside the source: they round differently from
    the scalar path there (the FMA paths, and the 2-D order-3 one that rounds as the scalar path
    inside: a mirrored point's weights are those of 1 - u, in reverse order)."""
    for D, order, dtype in [(2, 1, F32), (2, 3, F32), (3, 1, F32), (3, 3, F32), (3, 1, F64),
                            (3, 3, F64)]:
        S = (40, 40, 40)[:D]
        img = data(1, 1, *S).to(dtype)
        g = far_coords((6, 64) if D == 2 else (2, 3, 64), S, dtype)
        out_pts = ((g < -1) | (g > 41)).any(-1)[:, None] & finite_points(g)[:, None]
        for bound in (1, 2):
            args = ([order] * D, [bound] * D, True)
            fast = C.grid_pull(img, g, *args)[out_pts]
            slow = scalar_path(lambda: C.grid_pull(img, g, *args))[out_pts]
            assert (fast != slow).float().mean() > 0.1, (D, order, dtype, bound)


@pytest.mark.skipif(not has_avx2(), reason="no AVX2 + FMA on this CPU")
def test_fast_paths_taken_and_rounding(C):
    """The vector paths really run: those with FMAs round differently from the scalar path; the
    2-D order-3 one rounds exactly as the scalar path."""
    S = (64, 64)
    img = data(1, 1, *S)
    grid = coords(1, S, S, margin=0.0).nan_to_num(3.0, 3.0, 3.0).clamp(0, 63)
    fast, slow = {}, {}
    for order in (1, 3):
        args = ([order] * 2, [0] * 2, True)
        fast[order] = C.grid_pull(img, grid, *args)
        slow[order] = scalar_path(lambda: C.grid_pull(img, grid, *args))
    assert not torch.equal(fast[1], slow[1])
    assert torch.equal(fast[3], slow[3])
    # 3-D: orders 1 and 3 in float32 and float64, all with FMAs
    S3 = (12, 12, 12)
    for order, dtype in [(1, F32), (3, F32), (1, F64), (3, F64)]:
        img3 = data(1, 1, *S3).to(dtype)
        grid3 = coords(1, S3, S3, margin=0.0).nan_to_num(3.0, 3.0, 3.0).clamp(0, 11).to(dtype)
        args3 = ([order] * 3, [0] * 3, True)
        out3 = C.grid_pull(img3, grid3, *args3)
        assert not torch.equal(out3, scalar_path(lambda: C.grid_pull(img3, grid3, *args3)))
    args = ([1, 1], [0, 0], True)
    fast = C.grid_pull_backward(img, img, grid, *args)[1]
    slow = scalar_path(lambda: C.grid_pull_backward(img, img, grid, *args))[1]
    assert not torch.equal(fast, slow)


@pytest.mark.parametrize("D,dtype", [(2, F32), (3, F32), (3, F64)])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("ex", [False, True])
def test_pull_last_voxel(C, TORCH, D, dtype, bound, ex):
    """Order-1 pulls take a coordinate exactly on the last voxel (n - 1) in the vector path, as
    the end of cell n - 2 (LastCell in avx2/coords.h): equal to the scalar path and the twin
    to rounding, and an identity grid returns the input exactly."""
    b = BOUNDS.index(bound)
    S = (9, 13) if D == 2 else (5, 6, 7)
    tol = 1e-5 if dtype == F32 else 1e-10
    img = data(2, 3, *S).to(dtype)
    gen = torch.Generator().manual_seed(3)
    n = torch.tensor(S, dtype=F64)
    O = (4, 40) if D == 2 else (2, 4, 20)
    g = torch.rand([2, *O, D], generator=gen, dtype=F64) * (n - 1)
    pick = torch.randint(0, 3, g.shape, generator=gen)  # 0: random, 1: n - 1, 2: 0
    g = torch.where(pick == 1, n - 1, torch.where(pick == 2, 0.0, g)).to(dtype)
    args = ([1] * D, [b] * D, ex)
    out = C.grid_pull(img, g, *args)
    assert_close(out, scalar_path(lambda: C.grid_pull(img, g, *args)), tol)
    assert_close(out, TORCH.grid_pull(img.double(), g.double(), *args).to(dtype), tol)
    ident = nj.identity_grid(list(S), dtype=dtype)[None].expand(2, *S, D)
    assert torch.equal(C.grid_pull(img, ident, *args), img)


@pytest.mark.skipif(not has_avx2(), reason="no AVX2 + FMA on this CPU")
def test_last_voxel_taken(C):
    """Points with a coordinate exactly on the last voxel go through the 3-D vector paths: with
    the other coordinates random, they round unlike the scalar path (before, all went scalar).
    The 2-D order-1 path sums as the scalar one does when a weight is 0: not visible there."""
    for D, dtype in [(3, F32), (3, F64)]:
        S = (40, 40, 40)[:D]
        img = data(1, 1, *S).to(dtype)
        gen = torch.Generator().manual_seed(4)
        O = (8, 64) if D == 2 else (2, 8, 64)
        g = torch.rand([1, *O, D], generator=gen, dtype=F64) * 39
        g[..., 0] = 39.0
        g = g.to(dtype)
        args = ([1] * D, [0] * D, True)
        fast = C.grid_pull(img, g, *args)
        slow = scalar_path(lambda: C.grid_pull(img, g, *args))
        assert (fast != slow).float().mean() > 0.1, (D, dtype)


@pytest.mark.parametrize("order,dtype", [(1, F32), (3, F32), (1, F64), (3, F64)])
def test_pull3d_blocks_outside(C, TORCH, order, dtype):
    """3-D pulls with extrapolate off: blocks with no interior point are written as zeros
    without reading the source (their points outside read 0, those on the border are redone
    by the scalar path); rows that leave the source and come back, every bound."""
    S = (6, 7, 9)
    img = data(2, 3, *S).to(dtype)
    idx = nj.identity_grid([5, 6, 64], dtype=F64)[None]
    g = idx.clone()
    g[..., 2] = (idx[..., 2] - 20) * 0.5 + 0.25 * idx[..., 1]  # a row crosses the source
    g[0, 1] += 40  # a plane wholly outside
    g = g.expand(2, *g.shape[1:]).to(dtype)
    for b in range(len(BOUNDS)):
        args = ([order] * 3, [b] * 3, False)
        out = C.grid_pull(img, g, *args)
        ref = TORCH.grid_pull(img.double(), g.double(), *args)
        assert_close(out, ref.to(dtype), 1e-5 if dtype == F32 else 1e-10)
        assert_close(out, scalar_path(lambda: C.grid_pull(img, g, *args)),
                     1e-5 if dtype == F32 else 1e-10)
        assert (out[:, :, 1] == 0).all()
