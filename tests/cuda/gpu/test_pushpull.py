"""The CUDA pushpull kernels on a GPU (docs/pushpull-spec.md).

Against the compiled CPU kernels: every (dim, order, bound, extrapolate) for the seven ops in
float64 (1e-10) and float32 (1e-4), 64-bit offsets, float16 / bfloat16 data (half or float32
grid) within tolerance, non-contiguous / broadcast / non-flat layouts, non-finite points,
scatter contention, more batches than a launch's grid y-dimension, the block-tiled scatter of
push and pull_backward (on and off). Plus gradcheck through the public API, adjointness, the
fused backward through autograd, PyTorch's current stream (CUDA graph capture on a side
stream), errors raised as Python exceptions, the fallback when nvcc is missing, and the half
API.
Every test but the last (a CPU-only process never compiles CUDA) needs a CUDA device.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit import backends

from tests.cuda import cases as K
from tests.cuda.cases import gpu, check as _check

REPO = Path(__file__).resolve().parents[3]
F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def CU():
    """torch.ops.nitorch_jit with the compiled CUDA kernels (compiled here if needed)."""
    which = backends.ensure("pushpull", "cuda")
    assert which == "C", f"the CUDA kernels did not compile: {backends.status()}"
    return torch.ops.nitorch_jit


@pytest.fixture(scope="module")
def C():
    assert backends.ensure("pushpull", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


# ----------------------------------------------------------------------------- vs CPU
@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D,ex", K.combos())
def test_vs_cpu_float64(CU, C, op, D, ex):
    _check(K.compare_sweep(CU, C, "cuda", op, D, ex, F64, 1e-10))


@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D,ex", K.combos())
def test_vs_cpu_float32(CU, C, op, D, ex):
    _check(K.compare_sweep(CU, C, "cuda", op, D, ex, F32, 1e-4))


@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D,ex", [(1, True), (2, False), (3, True)])
def test_vs_cpu_64bit_offsets(CU, C, op, D, ex, knobs):
    knobs(cuda_index32=False)
    _check(K.compare_sweep(CU, C, "cuda", op, D, ex, F64, 1e-10, full=False))


@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("dtype,grid_dtype,tol", [
    (torch.float16, None, 2e-3), (torch.float16, F32, 2e-3),
    (torch.bfloat16, None, 1.6e-2), (torch.bfloat16, F32, 1.6e-2)])
def test_half_vs_cpu(CU, C, op, D, dtype, grid_dtype, tol):
    # the reference runs in float32 on the half-rounded data and grid
    _check(K.compare_sweep(CU, C, "cuda", op, D, True, dtype, tol, full=False,
                           grid_dtype=grid_dtype))


@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 3, 5])
def test_layouts(CU, C, op, D, order):
    _check(K.compare_layouts(CU, C, "cuda", op, D, order))


@gpu
@pytest.mark.parametrize("op", K.OPS)
@pytest.mark.parametrize("ex", [False, True])
def test_non_finite_points(CU, C, op, ex):
    args = K.non_finite_args(op)
    dev = [a.cuda() if torch.is_tensor(a) else a for a in args]
    for order in ([1] * 3, [3] * 3, [2, 0, 5]):
        want = getattr(C, op)(*args, order, [2, 6, 5], ex)
        got = getattr(CU, op)(*dev, order, [2, 6, 5], ex)
        assert K.close(got, want, 1e-10) is None, order


@gpu
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
@pytest.mark.parametrize("order", [0, 1, 3, 4])
def test_scatter_contention(CU, C, dtype, tol, order):
    # 200k points on a handful of voxels: every atomic add collides
    B, P = 1, 200_000
    gen = torch.Generator().manual_seed(3)
    grid = (2.0 + 0.5 * torch.rand(B, P, 1, 1, 3, generator=gen, dtype=F64)).to(dtype)
    val = torch.randn(B, 2, P, 1, 1, generator=gen, dtype=F64).to(dtype)
    args = [val, grid, [6, 6, 6], [order] * 3, [6] * 3, True]
    want = C.grid_push(*args)
    got = CU.grid_push(val.cuda(), grid.cuda(), *args[2:])
    assert K.close(got, want, tol * 10) is None
    vg = torch.randn(B, 2, P, 1, 1, 3, generator=gen, dtype=F64).to(dtype)
    want = C.grid_pushgrad(vg, grid, *args[2:])
    got = CU.grid_pushgrad(vg.cuda(), grid.cuda(), *args[2:])
    assert K.close(got, want, tol * 10) is None
    x = torch.randn(B, 2, 6, 6, 6, generator=gen, dtype=F64).to(dtype)
    want = C.grid_pull_backward(val, x, grid, *args[3:])
    got = CU.grid_pull_backward(val.cuda(), x.cuda(), grid.cuda(), *args[3:])
    assert K.close(got, want, tol * 10) is None


@gpu
@pytest.mark.parametrize("op", K.TILE_OPS)
@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
@pytest.mark.parametrize("tiles", ["1", "0"])
def test_tiled_scatter(CU, C, op, D, dtype, tol, tiles, knobs):
    """push / pull_backward on grids with one point per source voxel (the block-tiled kernel,
    and with the cuda_tiles knob off the one-point kernel): near identity with far points, random."""
    knobs(cuda_tiles=tiles == "1")
    _check(K.compare_tiles(CU, C, "cuda", op, D, dtype, tol))
    _check(K.compare_tiles(CU, C, "cuda", op, D, dtype, tol, orders=(1, 3), disp=6.0, far=0.3))


@gpu
@pytest.mark.parametrize("op", K.TILE_OPS)
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
def test_tiled_scatter_contention(CU, C, op, dtype, tol):
    # 64^3 points within +-1.5 voxels of the centre: shared-memory atomics collide
    args = K.convert(K.collapse_args(op, n=64), dtype=dtype)
    for order in (0, 1, 3):
        want = getattr(C, op)(*args, [order] * 3, [2] * 3, True)
        got = getattr(CU, op)(*K.convert(args, "cuda"), [order] * 3, [2] * 3, True)
        assert K.close(got, want, tol * 10) is None, order


@gpu
def test_more_batches_than_grid_y(CU, C):
    B = 70_000  # > 65535: the kernels loop over batches past the launch's grid y-dimension
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(B, 1, 5, generator=gen, dtype=F64)
    g = 4 * torch.rand(B, 3, 1, generator=gen, dtype=F64)
    for op, args in [("grid_pull", [x, g]), ("grid_push", [x[..., :3].contiguous(), g, [5]]),
                     ("grid_grad_dot", [x[..., :3].contiguous(), x, g]),
                     ("grid_pull_backward", [x[..., :3].contiguous(), x, g])]:
        want = getattr(C, op)(*args, [3], [2], True)
        got = getattr(CU, op)(*[a.cuda() if torch.is_tensor(a) else a for a in args],
                              [3], [2], True)
        assert K.close(got, want, 1e-10) is None, op


# ----------------------------------------------------------------------------- autograd
@gpu
@pytest.mark.parametrize("D,order,bound", [(1, 3, "dct2"), (2, 1, "zero"), (2, 2, "dft"),
                                           (3, 1, "replicate"), (3, 3, "dst1"),
                                           (3, [1, 3, 0], "dct1")])
@pytest.mark.parametrize("ex", [False, True])
def test_gradcheck(CU, D, order, bound, ex):
    S, O = [5, 4, 6][:D], [3, 2, 2][:D]
    kw = dict(interpolation=order, bound=bound, extrapolate=ex)
    grid = K.rand_coords(O, S, margin=1.5, seed=7, batch=1).cuda().requires_grad_()
    x = K.randn(1, 2, *S, seed=8).cuda().requires_grad_()
    y = K.randn(1, 2, *O, seed=9).cuda().requires_grad_()
    opts = dict(eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradcheck(lambda a, g: nj.grid_pull(a, g, **kw), (x, grid), **opts)
    assert torch.autograd.gradcheck(lambda a, g: nj.grid_push(a, g, S, **kw), (y, grid), **opts)
    assert torch.autograd.gradcheck(lambda a, g: nj.grid_grad(a, g, **kw), (x, grid), **opts)
    assert torch.autograd.gradcheck(lambda g: nj.grid_count(g, S, **kw), (grid,), **opts)


@gpu
@pytest.mark.parametrize("dtype", [F64, F32])
def test_pull_backward_fused_through_autograd(CU, dtype):
    """On CUDA too, a backward of grid_pull that needs both gradients runs the fused op, and
    agrees with the separate ops (create_graph=True)."""
    x = K.randn(2, 3, 7, 6, 8).to(dtype).cuda().requires_grad_()
    g = K.rand_coords([4, 3, 5], [7, 6, 8], batch=2).to(dtype).cuda().requires_grad_()
    gout = K.randn(2, 3, 4, 3, 5, seed=5).to(dtype).cuda()
    kw = dict(interpolation=1, bound="dct2", extrapolate=True)
    with K.OpLog() as log:
        gi, gg = torch.autograd.grad(nj.grid_pull(x, g, **kw), (x, g), gout)
    assert "grid_pull_backward" in log.names and "grid_push" not in log.names, log.names
    ri, rg = torch.autograd.grad(nj.grid_pull(x, g, **kw), (x, g), gout, create_graph=True)
    tol = 1e-10 if dtype == F64 else 1e-4
    assert K.close(gi, ri, tol) is None and K.close(gg, rg, tol) is None


def _dot(a, b):
    return (a * b).sum().item()


@gpu
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order", [[0], [1], [2], [3], [5], [7], [1, 3, 2]])
@pytest.mark.parametrize("ex", [False, True])
def test_adjoint(CU, D, order, ex):
    order = (order * 3)[:D]
    S, O = K.SRC[:D], K.PTS[:D]
    for bound in range(7):
        grid = K.rand_coords(O, S, seed=bound, batch=2).cuda()
        x = K.randn(2, 3, *S, seed=1).cuda()
        y = K.randn(2, 3, *O, seed=2).cuda()
        yd = K.randn(2, 3, *O, D, seed=3).cuda()
        a = _dot(CU.grid_pull(x, grid, order, [bound] * D, ex), y)
        b = _dot(x, CU.grid_push(y, grid, S, order, [bound] * D, ex))
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12), bound
        a = _dot(CU.grid_grad(x, grid, order, [bound] * D, ex), yd)
        b = _dot(x, CU.grid_pushgrad(yd, grid, S, order, [bound] * D, ex))
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12), bound


# ----------------------------------------------------------------------------- runtime
@gpu
def test_current_stream_and_graph_capture(CU):
    # kernels launched on PyTorch's current stream: a CUDA graph captured on a side stream
    # fails if any of them goes to another stream
    x = K.randn(2, 3, 7, 6, 8).cuda()
    g = K.rand_coords([4, 3, 5], [7, 6, 8], batch=2).cuda()
    y = K.randn(2, 3, 4, 3, 5).cuda()
    opts = ([3, 3, 3], [2, 2, 2], False)
    want = [CU.grid_pull(x, g, *opts), CU.grid_push(y, g, [7, 6, 8], *opts),
            CU.grid_grad_dot(y, x, g, *opts), CU.grid_pull(x, g, [2, 1, 4], [0, 6, 3], True),
            *CU.grid_pull_backward(y, x, g, *opts)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the side stream
        CU.grid_pull(x, g, *opts)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = [CU.grid_pull(x, g, *opts), CU.grid_push(y, g, [7, 6, 8], *opts),
               CU.grid_grad_dot(y, x, g, *opts), CU.grid_pull(x, g, [2, 1, 4], [0, 6, 3], True),
               *CU.grid_pull_backward(y, x, g, *opts)]
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        assert K.close(a, b, 1e-12) is None


@gpu
def test_bad_arguments_raise(CU):
    x = K.randn(1, 2, 5, 4).cuda()
    g = K.rand_coords([3, 2], [5, 4]).cuda()
    with pytest.raises(RuntimeError, match="order"):
        CU.grid_pull(x, g, [8, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="bound"):
        CU.grid_pull(x, g, [1, 1], [0, 9], True)
    with pytest.raises(RuntimeError, match="device"):
        CU.grid_pull(x.cpu(), g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="dtype"):
        CU.grid_pull(x.float(), g, [1, 1], [0, 0], True)
    with pytest.raises(RuntimeError, match="shape"):
        CU.grid_push(x, g, [5, 4], [1, 1], [0, 0], True)
    # the process is still healthy afterwards
    assert torch.isfinite(CU.grid_pull(x, g, [1, 1], [0, 0], True)).all()
    torch.cuda.synchronize()


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("grid_dtype", ["same", F32, F64])
def test_public_api_half(CU, dtype, grid_dtype):
    x = K.randn(2, 3, 7, 6, 8)
    g = K.rand_coords([4, 3, 5], [7, 6, 8], batch=2)
    gd = dtype if grid_dtype == "same" else grid_dtype
    xh = x.to(dtype).cuda().requires_grad_()
    gh = g.to(gd).cuda().requires_grad_()
    out = nj.grid_pull(xh, gh, interpolation=3, bound="dct2", extrapolate=True)
    assert out.dtype == dtype
    ref = nj.grid_pull(x.to(dtype).double().cuda(), g.to(gd).double().cuda(), interpolation=3,
                       bound="dct2", extrapolate=True)
    tol = 2e-3 if dtype == torch.float16 else 1.6e-2
    assert K.close(out, ref, tol) is None
    out.float().square().sum().backward()
    assert xh.grad.dtype == dtype and gh.grad.dtype == gd
    assert torch.isfinite(xh.grad.float()).all() and torch.isfinite(gh.grad.float()).all()
    push = nj.grid_push(out.detach(), gh.detach(), [7, 6, 8], interpolation=1)
    assert push.dtype == dtype
    assert nj.grid_count(gh.detach(), [7, 6, 8]).dtype == gd


# ----------------------------------------------------------------------------- processes
def _run(code, cache, **env):
    e = dict(os.environ, NI_JIT_CACHE_DIR=str(cache),
             PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    e.pop("NI_COMPILED_BACKEND", None)
    e.update({k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=900)


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])


FALLBACK = """
import json, warnings, torch
import nitorch_jit as nj
x = torch.arange(24.).reshape(1, 1, 4, 6)
g = torch.tensor([[[[1.5, 2.25]]]])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    a = nj.grid_pull(x.cuda(), g.cuda()).item()
    b = nj.grid_pull(x.cuda(), g.cuda()).item()
msgs = [str(w.message) for w in caught if "unavailable on CUDA" in str(w.message)]
from nitorch_jit import backends
print("RESULT", json.dumps([a, b, msgs, backends.status()[("pushpull", "cuda")][0]]))
"""


@gpu
def test_cuda_tensor_without_nvcc_uses_torch_once(tmp_path):
    proc = _run(FALLBACK, tmp_path / "cache", CUDA_HOME=str(tmp_path / "no-cuda"))
    a, b, msgs, which = _result(proc)
    assert a == b == pytest.approx(1.5 * 6 + 2.25) and which == "TORCH"
    assert len(msgs) == 1 and "no usable CUDA toolkit" in msgs[0]


CPU_ONLY = """
import json, torch
import nitorch_jit as nj
from nitorch_jit import backends, jit
from nitorch_jit.jit import toolchain
asked = []
_load, _home = jit.load, toolchain.find_cuda_home
def load(spec, *args, **kwargs):
    asked.append(spec.device)
    return _load(spec, *args, **kwargs)
def home():
    asked.append("find_cuda_home")
    return _home()
jit.load = load
toolchain.find_cuda_home = home
x = torch.randn(1, 2, 5, 4, 3, requires_grad=True)
g = (4 * torch.rand(1, 3, 2, 2, 3)).requires_grad_()
nj.grid_pull(x, g, interpolation=3).sum().backward()
nj.grid_push(torch.randn(1, 2, 3, 2, 2), g, [5, 4, 3]).sum()
nj.grid_count(g)
print("RESULT", json.dumps([asked, sorted(map(list, backends.status()))]))
"""


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cpu_only_process_never_compiles_cuda():
    # the session cache (tests/conftest.py) usually holds the CPU build already
    proc = _run(CPU_ONLY, os.environ["NI_JIT_CACHE_DIR"])
    asked, status = _result(proc)
    assert "cuda" not in asked and "find_cuda_home" not in asked, asked
    assert status == [["pushpull", "cpu"]], status


# ----------------------------------------------------------------------------- affine ops
@gpu
@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype,tol", [(F64, 1e-10), (F32, 1e-4)])
def test_affine_vs_cpu(CU, C, D, dtype, tol):
    """affine_pull / affine_push / affine_grad_dot (warp-reduced matrix gradient) against the
    CPU kernels."""
    _check(K.compare_affine(CU, C, "cuda", D, dtype, tol))


@gpu
def test_affine_public_api():
    """affine_pull equals grid_pull on affine_grid bit for bit in float64 (the coordinates are
    rounded one operation at a time, no fused multiply-add), half data is computed in float32,
    the matrix gradient matches the grid path's, and a big matrix-gradient reduction (many
    blocks and warps adding into one entry) matches float64 CPU."""
    x = torch.randn(2, 3, 9, 8, 7, dtype=F64, device="cuda")
    A = (torch.eye(3, 4, dtype=F64) * 1.1 + 0.2 * torch.randn(2, 3, 4, dtype=F64)).cuda()
    for order in (0, 1, 3, 5):
        want = nj.grid_pull(x, nj.affine_grid(A, [6, 10, 5]), order, "dct2", True)
        assert torch.equal(nj.affine_pull(x, A, [6, 10, 5], order, "dct2", True), want)
    y = nj.affine_pull(x.half(), A, [6, 10, 5], 1, "dft", True)
    assert y.dtype == torch.float16
    w = torch.randn(2, 3, 6, 10, 5, dtype=F64, device="cuda")
    A1, A2 = A.clone().requires_grad_(), A.clone().requires_grad_()
    (nj.affine_pull(x, A1, [6, 10, 5], 3, "zero") * w).sum().backward()
    (nj.grid_pull(x, nj.affine_grid(A2, [6, 10, 5]), 3, "zero") * w).sum().backward()
    assert torch.allclose(A1.grad, A2.grad, rtol=1e-10, atol=1e-10)
    big = torch.randn(1, 1, 96, 96, 96, device="cuda")
    wb = torch.randn(1, 1, 100, 100, 100, device="cuda")
    Ab = torch.tensor([[[0.9, 0.1, 0.0, 2.0], [-0.1, 0.9, 0.05, 1.0], [0.0, -0.05, 0.95, 3.0]]],
                      device="cuda")
    got = torch.ops.nitorch_jit.affine_grad_dot(wb, big, Ab, [1] * 3, [2] * 3, True)
    want = torch.ops.nitorch_jit.affine_grad_dot(wb.cpu().double(), big.cpu().double(),
                                                 Ab.cpu().double(), [1] * 3, [2] * 3, True)
    assert torch.allclose(got.cpu().double(), want, rtol=1e-3, atol=1e-3 * want.abs().max())
