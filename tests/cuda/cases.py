"""Cases shared by the CUDA kernel tests (tests/cuda/gpu/test_pushpull.py on a GPU, tests/cuda/emu/test_pushpull.py
with the host emulation of the kernels): random arguments for the seven pushpull ops, the
(dim, order, bound, extrapolate) sweep, the comparison with the compiled CPU kernels, and
OpLog (which nitorch_jit ops a call runs).
The contract is docs/pushpull-spec.md.
"""
import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nitorch_jit.backends import tuning

from tests.ops.pushpull import cases

F64 = torch.float64
HAVE_GPU = torch.cuda.is_available()
_EMU_LIBS = []  # schema definitions of the emulated namespaces, kept alive


def load_emulation(namespace, modules, source, build_name):
    """torch.ops.<namespace>: the host emulation of the CUDA kernels of `modules` (the ops of
    tests/cuda/emu/<source>, registered under that namespace with the modules' schemas), built
    once per test cache. Skips the test without the CUDA headers or a compiler."""
    import os
    import sys
    from pathlib import Path

    from nitorch_jit.jit import toolchain
    from nitorch_jit.backends import MODULES
    try:
        home, _ = toolchain.find_cuda_home()
        toolchain.find_cxx()
        toolchain.find_ninja()
    except toolchain.ToolchainError as e:
        pytest.skip(f"no CUDA toolkit headers or no compiler: {e}")
    from torch.utils import cpp_extension
    ops = getattr(torch.ops, namespace)
    if not hasattr(ops, next(iter(MODULES[modules[0]]))):
        lib = torch.library.Library(namespace, "DEF")
        for module in modules:
            for name, schema in MODULES[module].items():
                lib.define(name + schema)
        _EMU_LIBS.append(lib)
    root = Path(__file__).resolve().parents[2]
    # one folder per torch and Python: cpp_extension keys its build on the sources, not on
    # the torch it links, and the suite's cache is kept between runs
    tag = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    build = Path(os.environ["NI_JIT_CACHE_DIR"]) / f"{build_name}-{tag}"
    build.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name="nj_" + build_name,
        sources=[str(root / "tests" / "cuda" / "emu" / source)],
        extra_include_paths=[str(root / "csrc"), str(Path(home) / "include")],
        # -O0: a test build, compiled by every fresh test cache; it halves the compile
        # (pushpull's 27 s, not 50 s, on 2026-12-07) and the emulated sweeps run as fast on
        # test sizes
        extra_cflags=["-O0", "-Wno-attributes"],
        build_directory=str(build),
        is_python_module=False,
    )
    tuning.attach(build / f"nj_{build_name}.so")  # the knobs, as for our own libraries
    return ops


def gpu(f):
    """Mark a test that needs a CUDA device (skipped without one)."""
    f = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device (torch.cuda.is_available() "
                           "is False)")(f)
    return pytest.mark.cuda(f)


def on_side_stream(ops, x):
    """(ops(x) on the default stream, ops of a copy of x on a side stream that first sleeps):
    kernels that ignore the current stream read the copy before it is written."""
    want = ops(x)
    buf = torch.zeros_like(x)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s
        buf.copy_(x)
        got = ops(buf)
    side.synchronize()
    return want, got


def check(fails):
    """Fail with the first 20 of a list of mismatch descriptions, if any."""
    assert not fails, f"{len(fails)} failures:\n" + "\n".join(fails[:20])


OPS = ["grid_pull", "grid_push", "grid_grad", "grid_pushgrad", "grid_grad_dot", "grid_hess_dot",
       "grid_pull_backward"]
BOUNDS = list(range(7))  # replicate, dct1, dct2, dst1, dst2, dft, zero
# sizes chosen so that every fast path (orders 0, 1, 3) sees interior and border points
SRC = [7, 6, 8]
PTS = [4, 3, 5]


rand_coords = cases.rand_coords  # float64 coordinates, shared with the CPU tests


def randn(*shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64)


def case_args(op, D, B=2, C=2, S=None, O=None, seed=0, margin=2.5):
    """float64 CPU tensor arguments (before order/bound/extrapolate) of `op`."""
    S = list(S or SRC[:D])
    O = list(O or PTS[:D])
    grid = rand_coords(O, S, margin=margin, seed=seed, batch=B)
    if op in ("grid_pull", "grid_grad"):
        return [randn(B, C, *S, seed=seed + 1), grid]
    if op == "grid_push":
        return [randn(B, C, *O, seed=seed + 1), grid, S]
    if op == "grid_pushgrad":
        return [randn(B, C, *O, D, seed=seed + 1), grid, S]
    # the dots and grid_pull_backward (grad, input, grid)
    w = randn(B, C, *O, *([D] if op == "grid_hess_dot" else []), seed=seed + 2)
    return [w, randn(B, C, *S, seed=seed + 1), grid]


def convert(args, device=None, dtype=None, grid_dtype=None):
    """Move / cast the tensor arguments; the grid (always the last tensor) may get its own dtype."""
    tensors = [i for i, a in enumerate(args) if torch.is_tensor(a)]
    out = list(args)
    for i in tensors:
        dt = grid_dtype if (i == tensors[-1] and grid_dtype is not None) else dtype
        out[i] = args[i].to(device=device, dtype=dt)
    return out


def sweep(D, full=True):
    """(order, bound) lists of one dim count: every iso order 0..7 with every bound, plus mixed
    orders (the generic path) and mixed bounds."""
    out = [([o] * D, [b] * D) for o in range(8) for b in BOUNDS] if full else \
        [([o] * D, [b] * D) for o in (0, 1, 2, 3, 5) for b in (0, 3, 6)]
    if D > 1:
        mixed = [[1, 3, 0], [2, 5, 7], [3, 1, 1], [0, 4, 6]]
        bmix = [[6, 3, 1], [0, 5, 2], [4, 6, 0], [2, 2, 3]]
        out += [(o[:D], b[:D]) for o, b in zip(mixed, bmix)]
        out += [([3] * D, b[:D]) for b in bmix]  # fast path, per-dim bounds
    return out


def close(got, ref, tol):
    """Max abs difference within tol * max(1, max |ref|); returns an error string or None.
    Tuples (grid_pull_backward) are compared element by element."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(ref):
            return f"expected {len(ref)} outputs"
        for i, (a, b) in enumerate(zip(got, ref)):
            msg = close(a, b, tol)
            if msg:
                return f"output {i}: {msg}"
        return None
    got = got.detach().to("cpu", F64)
    ref = ref.detach().to("cpu", F64)
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
    if got.numel() == 0:
        return None
    scale = max(1.0, ref.abs().max().item())
    err = (got - ref).abs().max().item()
    if not err <= tol * scale:  # also catches NaN
        return f"max |diff| {err:.3g} > {tol:.1g} * {scale:.3g}"
    return None


def compare_sweep(target, ref, device, op, D, ex, dtype=F64, tol=1e-10, full=True,
                  grid_dtype=None, **case):
    """Run `op` of the namespaces `target` (on `device`) and `ref` (CPU, float64 or float32) on
    every (order, bound) of the sweep; return the list of failures."""
    fails = []
    for i, (order, bound) in enumerate(sweep(D, full)):
        args = case_args(op, D, seed=i, **case)
        rdt = F64 if dtype == F64 else torch.float32
        if dtype in (torch.float16, torch.bfloat16):  # the reference sees the rounded values
            rargs = convert(convert(args, dtype=dtype, grid_dtype=grid_dtype), dtype=rdt)
        else:
            rargs = convert(args, dtype=rdt)
        want = getattr(ref, op)(*rargs, order, bound, ex)
        got = getattr(target, op)(*convert(args, device, dtype, grid_dtype), order, bound, ex)
        msg = close(got, want, tol)
        if msg:
            fails.append(f"{op} D={D} order={order} bound={bound} ex={ex} {dtype}: {msg}")
    return fails


def affine_case(D, B=2, C=2, seed=0, dtype=F64):
    """Arguments of the affine ops: input [B, C, *S], pushed values / weights [B, C, *O], a
    matrix [B, D, D+1] whose points cover the interior, the border and the outside of the
    source; then S and O."""
    gen = torch.Generator().manual_seed(seed)
    S, O = SRC[:D], PTS[:D]
    lin = 1.3 * torch.eye(D, dtype=F64) + 0.35 * torch.randn(B, D, D, generator=gen, dtype=F64)
    A = torch.cat([lin, -1.7 + 0.6 * torch.randn(B, D, 1, generator=gen, dtype=F64)], -1)
    x = torch.randn(B, C, *S, generator=gen, dtype=F64)
    y = torch.randn(B, C, *O, generator=gen, dtype=F64)
    return [t.to(dtype) for t in (x, y, A)] + [S, O]


def affine_calls(ops, x, y, A, S, O, order, bound, ex):
    return [ops.affine_pull(x, A, O, order, bound, ex), ops.affine_push(y, A, S, order, bound, ex),
            ops.affine_grad_dot(y, x, A, order, bound, ex)]


def compare_affine(target, ref, device, D, dtype, tol):
    """The three affine ops of `target` (on `device`) against `ref` (CPU) over the sweep,
    extrapolate on and off, 32- and 64-bit offsets, and a matrix shared by the batch (stride
    0); returns the list of failures."""
    fails = []
    on = (lambda ts: [t.to(device) if torch.is_tensor(t) else t for t in ts])
    for i, (order, bound) in enumerate(sweep(D, full=False)):
        x, y, A, S, O = affine_case(D, seed=i, dtype=dtype)
        for ex in (False, True):
            for index in ("32", "64"):
                with tuning.override(cuda_index32=index == "32"):
                    calls = affine_calls(target, *on([x, y, A]), S, O, order, bound, ex)
                for name, got, want in zip(
                        ("pull", "push", "grad_dot"),
                        calls, affine_calls(ref, x, y, A, S, O, order, bound, ex)):
                    msg = close(got, want, tol)
                    if msg:
                        fails.append(f"affine_{name} D={D} {order} {bound} ex={ex} "
                                     f"i{index}: {msg}")
    x, y, A, S, O = affine_case(D, dtype=dtype)
    shared = A[:1].expand(A.shape)
    for got, want in zip(affine_calls(target, *on([x, y, shared]), S, O, [3] * D, [2] * D, True),
                         affine_calls(ref, x, y, shared.contiguous(), S, O, [3] * D, [2] * D,
                                      True)):
        msg = close(got, want, tol)
        if msg:
            fails.append(f"shared matrix: {msg}")
    return fails


def combos():
    return list(itertools.product([1, 2, 3], [False, True]))


def grid_of(args):
    return args[-1] if torch.is_tensor(args[-1]) else args[1]


def layouts(op, D, device="cpu"):
    """(name, args) variants of float64 arguments on `device` with the same values:
    contiguous, non-contiguous, batch stride 0, and a grid whose spatial strides do not
    collapse (the kernels' non-flat indexing)."""
    args = [a.to(device) if torch.is_tensor(a) else a for a in case_args(op, D, B=3, C=3)]
    out = [("contiguous", args)]
    nc = [a.transpose(0, -1).contiguous().transpose(0, -1) if torch.is_tensor(a) else a
          for a in args]
    out.append(("non-contiguous", nc))
    b0 = [a[:1].expand(a.shape) if torch.is_tensor(a) else a for a in args]
    out.append(("batch-stride-0", b0))
    grid = grid_of(args)
    big = torch.zeros(grid.shape[0], *[s + 2 for s in grid.shape[1:-1]], D + 1, dtype=F64,
                      device=device)
    view = big[(slice(None),) + tuple(slice(1, 1 + s) for s in grid.shape[1:-1]) + (slice(0, D),)]
    view.copy_(grid)
    out.append(("non-flat grid", [view if a is grid else a for a in args]))
    return out


def compare_layouts(target, ref, device, op, D, order):
    fails = []
    for name, args in layouts(op, D, device):
        cpu = [a.cpu().contiguous() if torch.is_tensor(a) else a for a in args]
        for bound in ([0] * D, [6] * D):
            want = getattr(ref, op)(*cpu, [order] * D, bound, False)
            got = getattr(target, op)(*args, [order] * D, bound, False)
            msg = close(got, want, 1e-10)
            if msg:
                fails.append(f"{op} D={D} order={order} {name} bound={bound}: {msg}")
    return fails


def non_finite_args(op):
    """3-D arguments whose grid holds NaN, +-inf and a huge coordinate."""
    args = case_args(op, 3)
    grid = grid_of(args)
    grid[0, 0, 0, 0, 0] = float("nan")
    grid[0, 1, 0, 0, 1] = float("inf")
    grid[1, 0, 1, 0, 2] = -float("inf")
    grid[1, 1, 1, 1, 0] = 1e30  # far out: clamped (extrapolate) or out of range
    return args


class OpLog(TorchDispatchMode):
    """Records the names of the nitorch_jit ops that run inside it, backward passes included."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if name.startswith("nitorch_jit::"):
            self.names.append(name.split("::")[1].split(".")[0])
        return func(*args, **(kwargs or {}))


# ----------------------------------------------------------------------------- tiled scatter
# push and pull_backward have a block-tiled kernel for grids with one point per source voxel
# (csrc/pushpull/cuda/tiles.cuh); the cuda_tiles knob turns it off. Shapes with partial
# tiles (3-D tiles: 8 x 16 x 16 points in float32, 4 x 16 x 16 in float64; 2-D: 32 x 64).
TILE_OPS = ["grid_push", "grid_pull_backward"]
TILE_SHAPES = {2: [40, 70], 3: [10, 20, 18]}


def tile_args(op, D, B=2, C=2, disp=1.9, far=0.03, seed=0):
    """float64 arguments of `op` on a grid of one point per voxel (O == S): identity plus
    uniform(-disp, disp) voxels, a fraction `far` of the points moved 6-9 voxels further (their
    taps leave the block's window), one NaN point."""
    S = TILE_SHAPES[D]
    gen = torch.Generator().manual_seed(seed)
    axes = [torch.arange(n, dtype=F64) for n in S]
    ident = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).expand(B, *S, D)
    grid = ident + (2 * torch.rand(B, *S, D, generator=gen, dtype=F64) - 1) * disp
    jump = torch.rand(B, *S, 1, generator=gen, dtype=F64) < far
    step = (6 + 3 * torch.rand(B, *S, D, generator=gen, dtype=F64)) * \
        torch.where(torch.rand(B, *S, D, generator=gen, dtype=F64) < 0.5, -1.0, 1.0)
    grid = torch.where(jump, grid + step, grid)
    grid[0, 1, 2] = float("nan")
    vals = torch.randn(B, C, *S, generator=gen, dtype=F64)
    if op == "grid_push":
        return [vals, grid, S]
    return [vals, torch.randn(B, C, *S, generator=gen, dtype=F64), grid]


def compare_tiles(target, ref, device, op, D, dtype=F64, tol=1e-10, orders=(0, 1, 2, 3),
                  **case):
    """`op` of `target` (on `device`, in `dtype`) against `ref` (CPU) on tile_args grids, for
    a few orders, bounds and extrapolate; returns the list of failures."""
    fails = []
    bounds = [([0] * D, True), ([6] * D, False), ([2, 3, 5][:D], True), ([1, 4, 6][:D], False)]
    for order in orders:
        for i, (bound, ex) in enumerate(bounds):
            args = tile_args(op, D, seed=10 * order + i, **case)
            rdt = F64 if dtype == F64 else torch.float32
            want = getattr(ref, op)(*convert(args, dtype=rdt), [order] * D, bound, ex)
            got = getattr(target, op)(*convert(args, device, dtype), [order] * D, bound, ex)
            msg = close(got, want, tol)
            if msg:
                fails.append(f"{op} D={D} order={order} bound={bound} ex={ex} {dtype} "
                             f"{case}: {msg}")
    return fails


def collapse_args(op, n=24, B=1, C=2, seed=0):
    """One point per voxel of an n^3 source (O == S), all within +-1.5 voxels of the centre:
    the tiles there add every point into the same few window cells (shared-memory atomics
    collide), the others take the one-point path."""
    gen = torch.Generator().manual_seed(seed)
    grid = n / 2 + 0.3 + (2 * torch.rand(B, n, n, n, 3, generator=gen, dtype=F64) - 1) * 1.5
    vals = torch.randn(B, C, n, n, n, generator=gen, dtype=F64)
    if op == "grid_push":
        return [vals, grid, [n] * 3]
    return [vals, torch.randn(B, C, n, n, n, generator=gen, dtype=F64), grid]
