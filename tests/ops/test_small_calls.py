"""Small calls (issue 19): the parallel grain of the CPU kernels and the fast call path.

- Every family gives the same result below, at and above the grain threshold of
  csrc/core/parallel.h (moved with the parallel_min_work tuning knob, so that one
  input runs serially and split among threads): bit for bit where the kernel is deterministic
  (gathers, the prefilter, resize, the regularisers and the relaxation), to rounding for the
  scatters (private copies summed in a fixed order). For pushpull the threshold is computed
  exactly from the cost rule (taps x channels x (1 + derivative order), 3/2 for a scatter).
- Parsed options are cached per argument tuple: the cache never changes a result, values that
  compare equal but parse differently stay apart, invalid ones raise every time.
- The chosen backend is per process: NI_COMPILED_BACKEND=TORCH and unset in two subprocesses
  each give their own.
- The pure-PyTorch relaxation (colour points only, from a padded copy) gives C's iterates to
  1e-10 in float64.
"""
import os
import subprocess
import sys

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit import backends
from nitorch_jit.ops import regularisers as R
from nitorch_jit.ops.options import bound_codes, order_codes
from nitorch_jit.torch_impl import regsolve as twin

F64 = torch.float64
ops = torch.ops.nitorch_jit
HUGE = 1 << 30  # every call serial


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _data(shape, channels=2, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn([1, channels] + list(shape), generator=g, dtype=F64)
    axes = [torch.arange(s, dtype=F64) for s in shape]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1)
    grid = grid + 2 * torch.rand(grid.shape, generator=g, dtype=F64) - 1
    return img.to(dtype), grid[None].to(dtype)


def _point_cost(order, dim, channels, der, scatter):
    """core/parallel.h's cost of one point (pushpull/cpu/loop.h: point_cost)."""
    c = (order + 1) ** dim * channels * (1 + der)
    return c + c // 2 if scatter else c


def _sides(total):
    """Knob values: serial, just below the 2-thread threshold, at it, above it, all split."""
    return [HUGE, total, total // 2 + 1, total // 2, max(1, total // 8), 1]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("dim,order", [(2, 1), (2, 3), (3, 1), (3, 3)])
@pytest.mark.parametrize("op", ["pull", "push", "grad"])
def test_pushpull_same_on_both_sides_of_the_grain(knobs, two_threads, op, dim, order, dtype):
    shape = [30, 26] if dim == 2 else [12, 10, 14]
    img, grid = _data(shape, dtype=dtype)
    kw = dict(interpolation=order, bound="dct2", extrapolate=True)
    run = {"pull": lambda: nj.grid_pull(img, grid, **kw),
           "push": lambda: nj.grid_push(img, grid, shape, **kw),
           "grad": lambda: nj.grid_grad(img, grid, **kw)}[op]
    n = grid[0, ..., 0].numel()
    total = n * _point_cost(order, dim, 2, op == "grad", op == "push")
    outs = []
    for w in _sides(total):
        knobs(parallel_min_work=w)
        outs.append(run())
    for w, out in zip(_sides(total)[1:], outs[1:]):
        if op == "push":  # summed from per-thread copies: equal to rounding
            tol = 1e-12 if dtype == F64 else 1e-5
            torch.testing.assert_close(out, outs[0], rtol=tol, atol=tol, msg=f"knob {w}")
        else:
            assert torch.equal(out, outs[0]), (w, (out - outs[0]).abs().max())


def test_pushpull_batches_same_on_both_sides_of_the_grain(knobs, two_threads):
    """Several batches: the scatter splits whole batches (no copies): bit for bit; the pull of
    a 3-D multi-channel image takes the row-tile loop of the vector path."""
    img, grid = _data([12, 40, 14], channels=3, dtype=torch.float32)
    img, grid = img.expand(4, -1, -1, -1, -1), (grid + 0.25 * torch.arange(4).reshape(4, 1, 1, 1, 1))
    shape = list(img.shape[2:])
    res = {}
    for w in (HUGE, 1):
        knobs(parallel_min_work=w)
        res[w] = (nj.grid_push(img, grid, shape, 1, "zero", True),
                  nj.grid_pull(img, grid, 1, "zero", True), nj.grid_pull(img, grid, 3, "dft"))
    for a, b in zip(res[HUGE], res[1]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("order", [1, 3])
def test_affine_same_on_both_sides_of_the_grain(knobs, two_threads, order, dtype):
    """affine_pull (gather: rows of computed coordinates) and affine_push (scatter)."""
    img, _ = _data([12, 10, 14], dtype=dtype)
    mat = torch.tensor([[0.9, 0.1, 0.0, 0.5], [-0.1, 1.0, 0.05, 0.2], [0.0, 0.02, 1.1, -0.3]],
                       dtype=dtype)
    total = img[0, 0].numel() * _point_cost(order, 3, 2, 0, False)
    ref_pull = ref_push = None
    for w in _sides(total):
        knobs(parallel_min_work=w)
        pull = nj.affine_pull(img, mat, None, order, "dct2", True)
        push = nj.affine_push(img, mat, [12, 10, 14], order, "dct2", True)
        if ref_pull is None:
            ref_pull, ref_push = pull, push
        assert torch.equal(pull, ref_pull), w
        tol = 1e-12 if dtype == F64 else 1e-5
        torch.testing.assert_close(push, ref_push, rtol=tol, atol=tol, msg=f"knob {w}")


def _sweep(knobs, run):
    """run() with the knob at every power of two from 1 to 2^30: each call site of the op is
    on both sides of its threshold somewhere in the sweep; all results equal bit for bit."""
    knobs(parallel_min_work=HUGE)
    ref = run()
    for k in range(31):
        knobs(parallel_min_work=1 << k)
        out = run()
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        for a, b in zip(outs, refs):
            assert torch.equal(a, b), (1 << k, (a - b).abs().max())


@pytest.mark.parametrize("shape", [[6, 64, 48], [70, 9], [300]])
def test_splinc_same_on_both_sides_of_the_grain(knobs, two_threads, shape):
    backends.load_module("splinc", "cpu")
    x = torch.randn([2] + shape, dtype=F64)
    d = len(shape)
    _sweep(knobs, lambda: ops.spline_coeff_nd(x, [3, 5, 2][:d], [2, 5, 1][:d],
                                              list(range(1, d + 1)), False))


def test_resize_same_on_both_sides_of_the_grain(knobs, two_threads):
    backends.load_module("resize", "cpu")
    x = torch.randn(2, 3, 20, 17, 9, dtype=F64)
    args = ([31, 8, 9], [20 / 31, 17 / 8, 1.0], [0.1, 0.2, 0.0], [3, 1, 2], [2, 5, 1], True)
    _sweep(knobs, lambda: (ops.resize(x, *args), ops.resize_adjoint(x, *args)))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_regsolve_same_on_both_sides_of_the_grain(knobs, two_threads, dim):
    backends.load_module("regsolve", "cpu")
    shape = {1: [40], 2: [17, 12], 3: [9, 11, 10]}[dim]
    flat = R.taps(dim, 2, [0.01, 0.02], [0.1, 0.2], [0.05, 0.02], [1.0] * dim, [2] * dim)
    per = R.colour_periods(flat, shape, [2] * dim)
    g = torch.Generator().manual_seed(dim)
    x = torch.randn([3, 2] + shape, generator=g, dtype=F64)
    b = torch.randn([3, 2] + shape, generator=g, dtype=F64)
    h = torch.rand([3, 3] + shape, generator=g, dtype=F64) * 0.1
    h[:, :2] += 1

    def run():
        y = x.clone()
        ops.reg_relax_(y, h, b, None, flat, per, 5)
        return ops.reg_matvec(x, h, None, flat), ops.reg_precond(x, h, None, flat), y
    _sweep(knobs, run)


# ----------------------------------------------------------------------------- option cache
def test_option_cache_never_changes_a_result():
    img, grid = _data([9, 8], channels=1)
    cases = [(1, "zero", False), (3, "dct2", True), ([1, 3], ["replicate", "dft"], True),
             ("cubic", nj.BoundType.dst2, False), (nj.InterpolationType.quadratic, "wrap", 1),
             ((0, 5), ("mirror", "zeros"), False), (torch.Size([2, 1]), "reflect", True)]
    for _ in range(2):  # the second round hits the cache, interleaved
        for interp, bnd, extra in cases + cases[::-1]:
            ref = ops.grid_pull(img, grid, order_codes(interp, 2), bound_codes(bnd, 2),
                                bool(extra))
            assert torch.equal(nj.grid_pull(img, grid, interp, bnd, extra), ref), (interp, bnd)
            assert torch.equal(nj.grid_push(img, grid, None, interp, bnd, extra),
                               ops.grid_push(img, grid, [9, 8], order_codes(interp, 2),
                                             bound_codes(bnd, 2), bool(extra)))


def test_option_cache_keeps_equal_values_apart():
    """True == 1 and 1.0 == 1, but only 1 is an order; 'zero' after a list; errors every time,
    with their messages."""
    img, grid = _data([9, 8], channels=1)
    one = nj.grid_pull(img, grid, 1)
    for _ in range(2):
        for bad in (True, 1.0, 8, "cubicc"):
            with pytest.raises(ValueError, match="interpolation: unknown interpolation"):
                nj.grid_pull(img, grid, bad)
        with pytest.raises(TypeError, match="ambiguous"):
            nj.grid_pull(img, grid, 1, 0)
        with pytest.raises(TypeError, match="extrapolate: expected True or False"):
            nj.grid_pull(img, grid, 1, "zero", "yes")
        assert torch.equal(nj.grid_pull(img, grid, 1), one)
    unhashable = [[1], [3]]  # a list of lists: not hashable, parsed every time, then refused
    with pytest.raises(ValueError, match="unknown interpolation"):
        nj.grid_pull(img, grid, unhashable)


def test_fast_path_keeps_batches_grad_and_dtype():
    """The no-reshape path (one batch dim each) and the below-autograd dispatch give what the
    general path gives: broadcast batches, half inputs, gradients when asked for."""
    img, grid = _data([9, 8], channels=2)
    ref = nj.grid_pull(img, grid, 3, "dct2")
    batched = nj.grid_pull(img[None].expand(3, 1, -1, -1, -1), grid[None], 3, "dct2")
    assert batched.shape == (3, 1, 2, 9, 8) and torch.equal(batched[1], ref)
    assert nj.grid_pull(img.half(), grid.half(), 1).dtype == torch.float16
    x = img.clone().requires_grad_()
    nj.grid_pull(x, grid, 3, "dct2").square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.no_grad():
        assert torch.equal(nj.grid_pull(x, grid, 3, "dct2"), ref)
    assert not nj.grid_pull(x.detach(), grid, 1).requires_grad


_CHILD = """
import torch, nitorch_jit as nj
from nitorch_jit import backends
g = torch.Generator().manual_seed(0)
img = torch.randn(1, 1, 9, 8, dtype=torch.float64, generator=g)
grid = torch.rand(1, 5, 4, 2, dtype=torch.float64, generator=g) * 7
out = [nj.grid_pull(img, grid, o, "dct2", True) for o in (1, 3, 1)]
torch.save(out, {path!r})
print(backends.ensure("pushpull", "cpu"))
"""


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_backend_choice_per_process(tmp_path):
    res = {}
    for want in ("TORCH", None):
        env = dict(os.environ)
        env.pop("NI_COMPILED_BACKEND", None)
        if want:
            env["NI_COMPILED_BACKEND"] = want
        path = tmp_path / f"{want}.pt"
        proc = subprocess.run([sys.executable, "-c", _CHILD.format(path=str(path))], env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        res[want] = (proc.stdout.split()[-1], torch.load(path))
    assert res["TORCH"][0] == "TORCH" and res[None][0] == "C"
    for a, b in zip(res["TORCH"][1], res[None][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert not torch.equal(res[None][1][0], res[None][1][1])  # order 1 and 3 kept apart


# ----------------------------------------------------------------------------- TORCH relax
@pytest.mark.parametrize("dim", [2, 3])
def test_torch_relax_iterates_equal_c(dim):
    """Sizes not a multiple of the periods, dct2 / dft / dst1 / zero, weights (kinds 1 and 2),
    a symmetric Hessian, a grid with elastic cross terms, several batches, a gradient that is
    x (read before x changes, as C does)."""
    backends.load_module("regsolve", "cpu")
    shape = [11, 7] if dim == 2 else [7, 8, 6]
    g = torch.Generator().manual_seed(dim)
    for bnd in (2, 5, 3, 6):
        bounds = [bnd] * dim
        field = R.taps(dim, 2, [0.01, 0.03], [0.1, 0.2], [0.05, 0.02], [1.0] * dim, bounds)
        weighted = R.taps(dim, 2, [0.01, 0.03], [0.1, 0.2], [0, 0], [1.0] * dim, bounds,
                          weighted=True)
        grid = R.taps(dim, dim, 0.01, 0.1, 0.05, [1.0] * dim, bounds, lame=(0.05, 0.2),
                      grid=True)
        for flat, chans, weights in [(field, 2, False), (weighted, 2, True), (grid, dim, False)]:
            per = R.colour_periods(flat, shape, bounds)
            x = torch.randn([2, chans] + shape, generator=g, dtype=F64)
            b = torch.randn([2, chans] + shape, generator=g, dtype=F64)
            k = chans * (chans + 1) // 2
            h = torch.rand([2, k] + shape, generator=g, dtype=F64) * 0.1
            h[:, :chans] += 1
            w = torch.rand([2, 1] + shape, generator=g, dtype=F64) + 0.5 if weights else None
            for nb_iter in (1, 3):
                ours, theirs = x.clone(), x.clone()
                twin.reg_relax_(ours, h, b, w, flat, per, nb_iter)
                ops.reg_relax_(theirs, h, b, w, flat, per, nb_iter)
                torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
            ours, theirs = x.clone(), x.clone()
            twin.reg_relax_(ours, h, ours, w, flat, per, 2)
            ops.reg_relax_(theirs, h, theirs, w, flat, per, 2)
            torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)



def test_torch_relax_layout_cache_never_changes_a_result():
    """The twin's relaxation caches the geometry of its colour-ordered buffer per grid: a call
    repeated after calls on other grids, bounds, periods, batches and dtypes, and after the
    cache is emptied (nitorch_jit.empty_cache), gives the same bits; a colour without points (an axis shorter than its
    period) is skipped, and the iterates still equal C's."""
    backends.load_module("regsolve", "cpu")
    g = torch.Generator().manual_seed(19)

    def case(shape, bnd, batch, dtype):
        dim = len(shape)
        flat = R.taps(dim, 2, [0.01, 0.03], [0.1, 0.2], [0.05, 0.02], [1.0] * dim, [bnd] * dim)
        per = R.colour_periods(flat, shape, [bnd] * dim)
        x, b = (torch.randn([batch, 2] + shape, generator=g, dtype=F64).to(dtype)
                for _ in range(2))
        h = (torch.rand([batch, 2] + shape, generator=g, dtype=F64) + 1).to(dtype)

        def run(kernel=twin.reg_relax_):
            y = x.clone()
            kernel(y, h, b, None, flat, per, 3)
            return y
        return run, per

    first, _ = case([9, 7, 5], 2, 2, F64)
    ref = first()
    for other in [case([9, 7, 5], 6, 2, F64), case([9, 7, 5], 2, 1, F64),
                  case([11, 8], 3, 2, F64), case([9, 7, 5], 2, 2, torch.float32)]:
        assert torch.isfinite(other[0]()).all()
        assert torch.equal(first(), ref)
    assert twin._colour_layout.cache_info().currsize > 0
    nj.empty_cache()  # drops the layouts too
    assert twin._colour_layout.cache_info().currsize == 0
    assert torch.equal(first(), ref)
    small, per = case([2, 7, 5], 2, 1, F64)
    assert per[0] > 2
    torch.testing.assert_close(small(), small(ops.reg_relax_), rtol=1e-10, atol=1e-10)


def test_torch_relax_without_neighbour_taps_equals_c():
    """No taps at all (the Hessian alone) and weighted voxel-wise taps only: no tap reads a
    neighbour, x still gets its buffer, and the iterates equal C's."""
    backends.load_module("regsolve", "cpu")
    g = torch.Generator().manual_seed(20)
    x, b = (torch.randn(2, 2, 5, 6, generator=g, dtype=F64) for _ in range(2))
    h = torch.rand(2, 2, 5, 6, generator=g, dtype=F64) + 1
    w = torch.rand(2, 1, 5, 6, generator=g, dtype=F64)
    absolute = R.taps(2, 2, [0.5, 0.3], [0, 0], [0, 0], [1.0, 1.0], [2, 2], weighted=True)
    for flat, weights in [([], None), (absolute, w)]:
        per = R.colour_periods(flat, [5, 6], [2, 2])
        ours, theirs = x.clone(), x.clone()
        twin.reg_relax_(ours, h, b, weights, flat, per, 2)
        ops.reg_relax_(theirs, h, b, weights, flat, per, 2)
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
