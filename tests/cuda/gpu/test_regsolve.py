"""The CUDA regsolve kernels on a GPU (docs/regsolve-spec.md).

Against the compiled CPU kernels, the three ops (reg_matvec, reg_precond, reg_relax_) on random
tap lists (every kind and bound code 2..6, cross-channel taps) and on the realistic ones of
ops.regularisers.taps, D = 1, 2, 3, sizes 1, 2, odd and even, K = 1, C, C(C+1)/2, weights of 1
and C channels, C = 1, 3, 5 and 12 (the voxel solves in registers, local arrays and the scratch
buffer), in float64 (1e-10) and float32 (1e-5); 64-bit offsets; non-contiguous inputs; bad
arguments (the CPU ops' errors). The public API on CUDA tensors against CPU ones
(regulariser, regulariser_grid, the CG / relax / FMG / closed-form solvers), gradcheck of
regulariser and the solvers on CUDA float64, opcheck, PyTorch's current stream, and a tensor of
more than 2^31 elements (slow). The pure-PyTorch kernels on CUDA tensors against themselves
on CPU ones. The same kernel cases run without a GPU through the host emulation
(tests/cuda/emu/test_regsolve.py). Every test needs a CUDA device.
"""
import random

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit import backends
from nitorch_jit.ops import regularisers as R

from tests.cuda.cases import gpu, check as _check, on_side_stream
from tests.cuda.emu.test_regsolve import (BOUNDS, SHAPES, close, dominant, packings, periods,
                                          random_taps, realistic, realistic_cases, spd_hessian)
from tests.ops.regsolve.cases import bad_calls, first_line

F32, F64 = torch.float32, torch.float64
DEV = "cuda"  # (a dry run of these tests on the CPU sets it to "cpu")


@pytest.fixture(scope="module")
def CU():
    """torch.ops.nitorch_jit with the compiled CUDA kernels (compiled here if needed)."""
    which = backends.ensure("regsolve", DEV)
    assert which == "C", f"the CUDA regsolve kernels did not compile: {backends.status()}"
    return torch.ops.nitorch_jit


@pytest.fixture(scope="module")
def C():
    assert backends.ensure("regsolve", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


def dev(*ts):
    out = [None if t is None else t.to(DEV) for t in ts]
    return out[0] if len(out) == 1 else out


def both(CU, C, op, args, tol, tag, fails):
    """Run op on the device and on the CPU (tensors of args on the CPU); record a mismatch."""
    got = getattr(CU, op)(*[dev(a) if torch.is_tensor(a) else a for a in args])
    want = getattr(C, op)(*args)
    ok, err = close(got.cpu(), want, tol)
    if not ok:
        fails.append(f"{op} {tag}: {err}")


def relax_both(CU, C, x, h, g, w, flat, per, nb_iter, tol, tag, fails):
    x1, x2 = dev(x.clone()), x.clone()
    CU.reg_relax_(x1, *dev(h, g, w), flat, per, nb_iter)
    C.reg_relax_(x2, h, g, w, flat, per, nb_iter)
    ok, err = close(x1.cpu(), x2, tol)
    if not ok:
        fails.append(f"relax {tag} period={per}: {err}")


# ----------------------------------------------------------------------------- vs CPU
def sweep(CU, C, dim, chans, dtype, tol, seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    fails = []
    for shape in SHAPES[dim]:
        for kinds, wch in [((0,), None), ((0, 1, 2), 1), ((0, 1, 2), chans)]:
            flat = dominant(random_taps(rng, dim, chans, 5 * chans, kinds), dim, chans)
            x = torch.randn(2, chans, *shape, dtype=dtype)
            g = torch.randn(2, chans, *shape, dtype=dtype)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=dtype)
            per = periods(flat, shape)
            for k in [None] + packings(chans):
                h = None if k is None else spd_hessian(2, chans, shape, k, dtype)
                tag = f"{shape} C={chans} kinds={kinds} w={wch} K={k} {dtype}"
                both(CU, C, "reg_matvec", (x, h, w, flat), tol, tag, fails)
                both(CU, C, "reg_precond", (x, h, w, flat), tol, tag, fails)
                relax_both(CU, C, x, h, g, w, flat, per, 2, tol, tag, fails)
    return fails


@gpu
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("chans", [1, 3, 5, 12])
def test_random_taps_vs_cpu(CU, C, dim, chans):
    _check(sweep(CU, C, dim, chans, F64, 1e-10, 100 * dim + chans))


@gpu
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_float32_vs_cpu(CU, C, dim):
    _check(sweep(CU, C, dim, 3, F32, 1e-5, 200 + dim))


@gpu
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_realistic_taps_vs_cpu(CU, C, dim):
    torch.manual_seed(20 + dim)
    fails = []
    for tag, flat, chans, x, g, w, per in realistic_inputs(dim):
        for k in [None] + packings(chans):
            h = None if k is None else spd_hessian(2, chans, x.shape[2:], k)
            tag_k = f"{tag} K={k}"
            both(CU, C, "reg_matvec", (x, h, w, flat), 1e-10, tag_k, fails)
            both(CU, C, "reg_precond", (x, h, w, flat), 1e-10, tag_k, fails)
            relax_both(CU, C, x, h, g, w, flat, per, 3, 1e-10, tag_k, fails)
    _check(fails)


def realistic_inputs(dim, shape=(9, 6, 7)):
    """(tag, taps, channels, x, g, w, period) on a [2, C, *shape] grid for every bound and
    realistic tap list."""
    shape = list(shape[:dim])
    for bnd in BOUNDS:
        bnds = [bnd] * dim
        for flat, chans, wch in realistic_cases(dim, bnds):
            x, g = (torch.randn(2, chans, *shape, dtype=F64) for _ in range(2))
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            yield (f"bound={bnd} C={chans} w={wch}", flat, chans, x, g, w,
                   R.colour_periods(flat, shape, bnds))


@gpu
@pytest.mark.parametrize("dim", [2, 3])
def test_torch_twin_on_cuda_tensors(dim):
    """The pure-PyTorch kernels (the TORCH backend, also what a CUDA machine without nvcc
    gets) on CUDA tensors equal themselves on CPU ones: the relaxation's colour-ordered buffer,
    its cached layout and its ghost refresh are device-agnostic torch code."""
    from nitorch_jit.torch_impl import regsolve as twin
    torch.manual_seed(40 + dim)
    fails = []
    for tag, flat, chans, x, g, w, per in realistic_inputs(dim):
        h = spd_hessian(2, chans, x.shape[2:], packings(chans)[-1])
        for op in ("reg_matvec", "reg_precond"):
            got = getattr(twin, op)(*dev(x, h, w), flat)
            ok, err = close(got.cpu(), getattr(twin, op)(x, h, w, flat), 1e-10)
            if not ok:
                fails.append(f"twin {op} {tag}: {err}")
        x1, x2 = dev(x.clone()), x.clone()
        twin.reg_relax_(x1, *dev(h, g, w), flat, per, 3)
        twin.reg_relax_(x2, h, g, w, flat, per, 3)
        ok, err = close(x1.cpu(), x2, 1e-10)
        if not ok:
            fails.append(f"twin relax {tag} period={per}: {err}")
    _check(fails)


@gpu
def test_64bit_offsets(CU, C, knobs):
    knobs(cuda_index32=False)
    _check(sweep(CU, C, 3, 3, F64, 1e-10, 300) + sweep(CU, C, 2, 12, F64, 1e-10, 301))


@gpu
def test_noncontiguous(CU, C):
    torch.manual_seed(4)
    flat = dominant(random_taps(random.Random(4), 3, 3, 30, (0, 1, 2)), 3, 3)
    base = torch.randn(3, 2, 9, 5, 14, dtype=F64)
    h = spd_hessian(2, 3, [7, 5, 9], 6)
    w = torch.rand(2, 7, 5, 9, 3, dtype=F64)
    g = torch.randn(2, 3, 9, 5, 7, dtype=F64)

    def views(t):  # non-contiguous views of the same values, on t's device
        return (t[0].permute(1, 0, 4, 3, 2)[:, :, ::2], t[1].movedim(1, -1).contiguous()
                .movedim(-1, 1), t[2].movedim(-1, 1), t[3].transpose(2, 4))

    xs, hs, ws, gs = views((base, h, w, g))
    xd, hd, wd, gd = views(dev(base, h, w, g))
    assert not any(t.is_contiguous() for t in (xd, hd, wd, gd))
    for op in ("reg_matvec", "reg_precond"):
        out = getattr(CU, op)(xd, hd, wd, flat)
        assert out.is_contiguous() and out.device.type == torch.device(DEV).type
        ok, err = close(out.cpu(), getattr(C, op)(xs, hs, ws, flat))
        assert ok, (op, err)
    per = periods(flat, [7, 5, 9])
    x1, x2 = xd.clone().transpose(2, 4).contiguous().transpose(2, 4), xs.contiguous()
    assert not x1.is_contiguous()
    ptr = x1.data_ptr()
    CU.reg_relax_(x1, hd, gd, wd, flat, per, 2)
    C.reg_relax_(x2, hs, gs, ws, flat, per, 2)
    assert x1.data_ptr() == ptr
    ok, err = close(x1.cpu(), x2)
    assert ok, err


@gpu
def test_empty_and_no_taps(CU, C):
    x = torch.randn(2, 3, 4, 5, dtype=F64)
    h = torch.rand(2, 6, 4, 5, dtype=F64)
    ok, err = close(CU.reg_matvec(*dev(x, h), None, []).cpu(), C.reg_matvec(x, h, None, []))
    assert ok, err
    tap = [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]
    e = dev(torch.randn(0, 3, 4, 5, dtype=F64))
    assert CU.reg_matvec(e, None, None, tap).shape == e.shape
    assert CU.reg_precond(e, None, None, tap).shape == e.shape
    CU.reg_relax_(e, None, e, None, tap, [2, 2], 3)


@gpu
def test_bad_arguments_same_errors_as_cpu(CU, C):
    x = torch.randn(1, 3, 4, 5, dtype=F64)
    ok = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]
    h = torch.rand(1, 3, 4, 5, dtype=F64)
    w = torch.rand(1, 1, 4, 5, dtype=F64)
    # bad_calls makes its extra tensors when called: on the device under a device default
    for i, (want_fn, got_fn) in enumerate(zip(bad_calls(C, x, h, w, ok),
                                              bad_calls(CU, *dev(x, h, w), ok))):
        with pytest.raises(RuntimeError) as want:
            want_fn()
        with torch.device(DEV), pytest.raises(RuntimeError) as got:
            got_fn()
        assert first_line(got.value) == first_line(want.value), i
    if DEV == "cuda":
        with pytest.raises(RuntimeError, match="reg_matvec: hessian must be a CUDA tensor"):
            CU.reg_matvec(dev(x), h, None, ok)
        with pytest.raises(RuntimeError, match="reg_relax_: gradient must be a CUDA tensor"):
            CU.reg_relax_(dev(x), None, x, None, ok, [2, 2], 1)
    # the process is still healthy afterwards
    assert torch.isfinite(CU.reg_matvec(dev(x), None, None, ok)).all()


# ----------------------------------------------------------------------------- public API
@gpu
def test_public_api_matches_cpu(CU, C):
    torch.manual_seed(6)
    v = torch.randn(2, 12, 11, 10, 3, dtype=F64)
    hg = torch.cat([torch.rand(2, 12, 11, 10, 3, dtype=F64) + 0.5,  # positive definite
                    0.02 * torch.randn(2, 12, 11, 10, 3, dtype=F64)], -1)
    f = torch.randn(2, 2, 13, 9, dtype=F64)
    hf = torch.rand(2, 1, 13, 9, dtype=F64) + 0.1
    wf = torch.rand(2, 1, 13, 9, dtype=F64) + 0.1
    grid = dict(membrane=1e-3, bending=0.1, lame=(0.05, 0.2), voxel_size=[1.0, 1.3, 0.9])
    field = dict(absolute=0.01, membrane=[0.5, 0.2], bound="dst2", dim=2)
    cases = [
        ("regulariser_grid", lambda t, h: nj.regulariser_grid(t, **grid), 1e-10),
        ("regulariser_grid + H", lambda t, h: nj.regulariser_grid(t, hessian=h, **grid), 1e-10),
        ("solve_grid_fmg", lambda t, h: nj.solve_grid_fmg(h, t, **grid), 1e-8),
        ("solve_grid_fmg relax", lambda t, h: nj.solve_grid_fmg(h, t, optim="relax", **grid),
         1e-8),
        ("solve_grid cg", lambda t, h: nj.solve_grid(h, t, max_iter=20, **grid), 1e-8),
        ("solve_grid relax", lambda t, h: nj.solve_grid(h, t, optim="relax", max_iter=8, **grid),
         1e-8),
        ("solve_grid_closedform", lambda t, h: nj.solve_grid_closedform(h, t, absolute=0.1),
         1e-10),
    ]
    for name, fn, tol in cases:
        got, want = fn(*dev(v, hg)), fn(v, hg)
        assert got.device.type == torch.device(DEV).type and got.shape == v.shape
        ok, err = close(got.cpu(), want, tol)
        assert ok, (name, err)
    fcases = [
        ("regulariser", lambda t, h, w: nj.regulariser(t, weights=w, hessian=h, **field)),
        ("solve_field_fmg", lambda t, h, w: nj.solve_field_fmg(h, t, weights=w, **field)),
        ("solve_field relax", lambda t, h, w: nj.solve_field(h, t, weights=w, optim="relax",
                                                             **field)),
    ]
    for name, fn in fcases:
        ok, err = close(fn(*dev(f, hf, wf)).cpu(), fn(f, hf, wf), 1e-8)
        assert ok, (name, err)
    # float32 on the device: the operator to 1e-5, FMG close to the float64 answer
    got = nj.regulariser_grid(dev(v.float()), **grid)
    ok, err = close(got.cpu().double(), nj.regulariser_grid(v, **grid), 1e-5)
    assert ok, err
    got = nj.solve_grid_fmg(*dev(hg.float(), v.float()), **grid)
    want = nj.solve_grid_fmg(hg, v, **grid)
    assert (got.cpu().double() - want).abs().max() <= 1e-4 * want.abs().max()


@gpu
def test_gradcheck(CU):
    torch.manual_seed(6)
    x = dev(torch.randn(2, 4, 3, dtype=F64)).requires_grad_()
    h = dev(torch.rand(3, 4, 3, dtype=F64) + 0.5).requires_grad_()
    w = dev(torch.rand(1, 4, 3, dtype=F64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, h, w: nj.regulariser(
        x, absolute=0.2, membrane=[0.5, 1.0], hessian=h, weights=w, bound="dst2"), (x, h, w))
    v = dev(torch.randn(3, 5, 4, 3, dtype=F64)).requires_grad_()
    hg = dev(torch.rand(3, 5, 4, 6, dtype=F64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda v, h: nj.regulariser_grid(
        v, membrane=0.3, bending=0.1, lame=(0.2, 0.3), hessian=h), (v, hg))
    g = dev(torch.randn(2, 4, 3, dtype=F64)).requires_grad_()
    for optim in ("cg", "relax"):
        assert torch.autograd.gradcheck(lambda g, h, w: nj.solve_field(
            h, g, weights=w, membrane=0.7, absolute=0.1, optim=optim, max_iter=1000,
            tolerance=1e-14), (g, h, w))


@gpu
def test_opcheck(CU):
    torch.manual_seed(8)
    x = dev(torch.randn(2, 2, 5, 4, dtype=F64))
    h = dev(torch.rand(2, 3, 5, 4, dtype=F64) + 1)
    w = dev(torch.rand(2, 1, 5, 4, dtype=F64) + 0.5)
    taps = R.taps(2, 2, [0.1, 0.2], [0.5, 1.0], [0, 0], [1.0, 2.0], [2, 5], weighted=True)
    ops = torch.ops.nitorch_jit
    for args in [(x.clone().requires_grad_(), h, w, taps), (x, None, None, taps)]:
        torch.library.opcheck(ops.reg_matvec, args)
    torch.library.opcheck(ops.reg_precond, (x, h, w, taps))
    period = R.colour_periods(taps, [5, 4], [2, 5])
    torch.library.opcheck(ops.reg_relax_, (x.clone(), h, x, w, taps, period, 2))


# ----------------------------------------------------------------------------- runtime
@gpu
def test_current_stream(CU):
    # Everything (the upload of the taps, the kernels, relax's copy back) must run on PyTorch's
    # current stream. The side stream below is busy (sleeping), then writes the inputs: work
    # sent to any other stream would run first and read the zeros instead.
    torch.manual_seed(9)
    flat = realistic(3, 3, [2, 5, 4], grid=True)
    shape = [20, 30, 24]
    per = R.colour_periods(flat, shape, [2, 5, 4])
    x = torch.randn(2, 3, *shape, dtype=F64, device="cuda")
    h = spd_hessian(2, 3, shape, 6).cuda()

    def ops(t):
        r = t.transpose(2, 4).contiguous().transpose(2, 4)  # relax copies back
        CU.reg_relax_(r, h, t, None, flat, per, 2)
        return [CU.reg_matvec(t, h, None, flat), CU.reg_precond(t, h, None, flat), r]

    want, got = on_side_stream(ops, x)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@gpu
@pytest.mark.slow
def test_more_than_2_31_elements(CU):
    # 64-bit offsets: a 1-D field of 2^31 + 11 float32 voxels (8.6 GB in, 8.6 GB out); the
    # last voxels (border and interior paths) against the same op on a slice
    n = (1 << 31) + 11
    flat = R.taps(1, 1, [0.1], [0.5], [0.2], [1.0], [2])
    x = torch.randn(1, 1, n, device="cuda")
    ref = CU.reg_matvec(x[..., -64:].contiguous(), None, None, flat)[..., -32:]
    out = CU.reg_matvec(x, None, None, flat)[..., -32:]
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    del out
    h = torch.rand(1, 1, n, device="cuda") + 1
    flat1 = R.taps(1, 1, [0.1], [0.5], [0.0], [1.0], [2])
    ref = CU.reg_precond(x[..., -64:].contiguous(), h[..., -64:].contiguous(), None,
                         flat1)[..., -32:]
    out = CU.reg_precond(x, h, None, flat1)[..., -32:]
    assert torch.allclose(out, ref, atol=1e-6, rtol=1e-6)
