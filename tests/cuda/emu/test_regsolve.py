"""The CUDA regsolve kernels, run by their host emulation (no GPU needed).

tests/cuda/emu/regsolve_cuda_emu.cpp compiles the CUDA sources of csrc/regsolve (the kernels of
regsolve/cuda/kernels.cuh, the host logic of regsolve/cuda/host.cuh and the checks it shares with
the CPU ops) with the host C++ compiler, emulating the CUDA built-ins and running the threads of
each launch one after the other, with a grid of at most 2 blocks so that the grid-stride loops
run. Its ops (namespace nj_emu_regsolve, CPU tensors) are compared with the compiled CPU kernels
to 1e-10 in float64 (1e-5 in float32) on random tap lists (every kind, offsets within +-2, every
bound code 2..6 per tap and axis, cross-channel taps) and on the realistic ones of
ops.regularisers.taps; D = 1, 2, 3 with sizes 1, 2, odd and even (voxels on the interior path
and on the border path); K = 1, C, C(C+1)/2; weights of 1 and C channels; C = 1, 3 (voxel
solves in registers), 5 (local arrays) and 12 (the global scratch buffer); relax with the
periods of ops.regularisers.colour_periods and larger ones; non-contiguous inputs; 64-bit
offsets (the cuda_index32 knob off); empty tensors; bad arguments (the CPU ops' messages). What only
a GPU shows is left to tests/cuda/gpu/test_regsolve.py. Needs the CUDA toolkit's headers
(cuda_runtime_api.h), not a GPU; skipped without them.
"""
import random

import pytest
import torch

from nitorch_jit.ops.regularisers import colour_periods
from tests.cuda.cases import load_emulation
from tests.ops.regsolve.cases import (  # noqa: F401
    BOUNDS, C, assert_same_errors, close, first_line, periods, random_taps, realistic, spd_hessian)

# the quick tier leaves out: a build of the CUDA emulation (10-30 s) per module
pytestmark = pytest.mark.slow

F32, F64 = torch.float32, torch.float64


@pytest.fixture(scope="module")
def EMU():
    """torch.ops.nj_emu_regsolve: the emulated CUDA kernels (built once per test cache)."""
    return load_emulation("nj_emu_regsolve", ["regsolve"], "regsolve_cuda_emu.cpp",
                          "regsolve_cuda_emu")



# ----------------------------------------------------------------------------- helpers


def dominant(flat, dim, chans, value=8.0):
    """Centre taps that make every voxel block positive definite."""
    for c in range(chans):
        flat = flat + [float(c), float(c), 0.0, value] + [0.0] * dim + [2.0] * dim
    return flat



def randn(*shape, dtype=F64):
    return torch.randn(*shape, dtype=dtype)



def packings(chans):
    return sorted({1, chans, chans * (chans + 1) // 2})



def check(fails):
    assert not fails, f"{len(fails)} failures:\n" + "\n".join(fails[:20])


# shapes per dim: sizes 1, 2, odd and even; the larger ones have an interior (reach 2) and
# more voxels than the 2 blocks of 256 threads of the emulated grid
SHAPES = {1: [[1], [2], [5], [8], [600]],
          2: [[1, 7], [2, 2], [6, 5], [9, 8], [3, 1]],
          3: [[1, 1, 1], [2, 3, 1], [5, 6, 7], [4, 5, 6], [7, 2, 9]]}


# ----------------------------------------------------------------------------- matvec
def matvec_sweep(EMU, C, dim, chans, dtype=F64, tol=1e-10, seed=0):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    fails = []
    for shape in SHAPES[dim]:
        for kinds, wch in [((0,), None), ((0, 1, 2), 1), ((0, 1, 2), chans)]:
            flat = random_taps(rng, dim, chans, 6 * chans, kinds)
            x = randn(2, chans, *shape, dtype=dtype)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=dtype)
            for k in [None] + packings(chans):
                h = None if k is None else randn(2, k, *shape, dtype=dtype)
                ok, err = close(EMU.reg_matvec(x, h, w, flat), C.reg_matvec(x, h, w, flat), tol)
                if not ok:
                    fails.append(f"matvec {shape} C={chans} kinds={kinds} w={wch} K={k}: {err}")
    return fails


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("chans", [1, 3, 5, 12])
def test_matvec_random_taps(EMU, C, dim, chans):
    check(matvec_sweep(EMU, C, dim, chans, seed=10 * dim + chans))



def realistic_cases(dim, bnds):
    """(taps, channels, weight channels): grid, field, weighted fields."""
    return [(realistic(dim, dim, bnds, grid=True), dim, None),
            (realistic(dim, 3, bnds), 3, None),
            (realistic(dim, 2, bnds, weighted=True), 2, 1),
            (realistic(dim, 2, bnds, weighted=True), 2, 2)]


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_realistic_taps(EMU, C, dim):
    """matvec, precond and relax (the regularisers' periods) on every bound."""
    torch.manual_seed(20 + dim)
    shape = [9, 6, 7][:dim]
    fails = []
    for bnd in BOUNDS:
        bnds = [bnd] * dim
        for flat, chans, wch in realistic_cases(dim, bnds):
            tag = f"bound={bnd} C={chans} w={wch}"
            x = randn(2, chans, *shape)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            for k in [None] + packings(chans):
                h = None if k is None else spd_hessian(2, chans, shape, k)
                for op in ("reg_matvec", "reg_precond"):
                    ok, err = close(getattr(EMU, op)(x, h, w, flat),
                                    getattr(C, op)(x, h, w, flat))
                    if not ok:
                        fails.append(f"{op} {tag} K={k}: {err}")
                per = colour_periods(flat, shape, bnds)
                g = randn(2, chans, *shape)
                x1, x2 = x.clone(), x.clone()
                EMU.reg_relax_(x1, h, g, w, flat, per, 2)
                C.reg_relax_(x2, h, g, w, flat, per, 2)
                ok, err = close(x1, x2)
                if not ok:
                    fails.append(f"relax {tag} K={k} period={per}: {err}")
    check(fails)


def test_mixed_bounds_and_voxel_sizes(EMU, C):
    torch.manual_seed(3)
    shape = [6, 7, 11]
    flat = realistic(3, 3, [3, 5, 4], grid=True, vs=(0.8, 1.3, 2.1))
    flat += random_taps(random.Random(3), 3, 3, 30)
    x = randn(1, 3, *shape)
    h = spd_hessian(1, 3, shape, 6)
    for op in ("reg_matvec", "reg_precond"):
        ok, err = close(getattr(EMU, op)(x, h, None, flat), getattr(C, op)(x, h, None, flat))
        assert ok, (op, err)


# ----------------------------------------------------------------------------- precond
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("chans", [1, 3, 5, 12])
def test_precond_random_taps(EMU, C, dim, chans):
    """Exact L_vv on the border and interior paths, cross-channel blocks, every K."""
    rng = random.Random(30 + dim + chans)
    torch.manual_seed(30 + dim + chans)
    fails = []
    for shape in SHAPES[dim]:
        for kinds, wch in [((0,), None), ((0, 1, 2), 1), ((0, 1, 2), chans)]:
            flat = dominant(random_taps(rng, dim, chans, 5 * chans, kinds), dim, chans)
            x = randn(2, chans, *shape)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            for k in [None] + packings(chans):
                h = None if k is None else spd_hessian(2, chans, shape, k)
                ok, err = close(EMU.reg_precond(x, h, w, flat), C.reg_precond(x, h, w, flat))
                if not ok:
                    fails.append(f"precond {shape} C={chans} kinds={kinds} w={wch} K={k}: {err}")
    check(fails)


def test_precond_singular_blocks(EMU, C):
    """A pivot <= 0 zeroes its component (also in the scratch path)."""
    r = torch.tensor([1.0, 2.0, 3.0], dtype=F64).reshape(1, 3, 1)
    for h in (torch.tensor([0.0, 2.0, -1.0], dtype=F64).reshape(1, 3, 1),
              torch.tensor([1.0, 1.0, 4.0, 1.0, 0.0, 0.0], dtype=F64).reshape(1, 6, 1)):
        assert torch.equal(EMU.reg_precond(r, h, None, []), C.reg_precond(r, h, None, []))
    torch.manual_seed(7)
    chans = 12
    h = torch.randn(2, chans * (chans + 1) // 2, 5, 3, dtype=F64)  # indefinite blocks
    r = torch.randn(2, chans, 5, 3, dtype=F64)
    ok, err = close(EMU.reg_precond(r, h, None, []), C.reg_precond(r, h, None, []))
    assert ok, err


# ----------------------------------------------------------------------------- relax
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("chans", [1, 3, 5, 12])
def test_relax_random_taps(EMU, C, dim, chans):
    rng = random.Random(50 + dim + chans)
    torch.manual_seed(50 + dim + chans)
    fails = []
    for shape in SHAPES[dim]:
        kinds, wch = [((0,), None), ((0, 1, 2), 1), ((0, 1, 2), chans)][len(shape) % 3]
        flat = dominant(random_taps(rng, dim, chans, 4 * chans, kinds), dim, chans)
        x = randn(2, chans, *shape)
        g = randn(2, chans, *shape)
        w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
        per = periods(flat, shape)
        for k in [None] + packings(chans):
            h = None if k is None else spd_hessian(2, chans, shape, k)
            # the regularisers' periods, and larger ones (some beyond a dim's size)
            # (with dft, a larger period may let a wrapped tap couple two voxels of a colour:
            # then both refuse it with the same message)
            for p in (per, [q + 1 + d for d, q in enumerate(per)]):
                x1, x2 = x.clone(), x.clone()
                try:
                    C.reg_relax_(x2, h, g, w, flat, p, 2)
                except RuntimeError as e:
                    with pytest.raises(RuntimeError) as got:
                        EMU.reg_relax_(x1, h, g, w, flat, p, 2)
                    assert first_line(got.value) == first_line(e) and p != per
                    continue
                assert EMU.reg_relax_(x1, h, g, w, flat, p, 2) is None
                ok, err = close(x1, x2)
                if not ok:
                    fails.append(f"relax {shape} C={chans} w={wch} K={k} period={p}: {err}")
    check(fails)


def test_relax_converges(EMU, C):
    """Many sweeps solve (H + L) x = g (the emulated kernels alone)."""
    torch.manual_seed(60)
    shape = [9, 7, 6]
    flat = realistic(3, 3, [5, 2, 4], grid=True)
    per = colour_periods(flat, shape, [5, 2, 4])
    x = randn(1, 3, *shape)
    g = randn(1, 3, *shape)
    h = spd_hessian(1, 3, shape, 6)
    EMU.reg_relax_(x, h, g, None, flat, per, 100)
    res = g - EMU.reg_matvec(x, h, None, flat)
    assert res.abs().max() < 1e-6 * g.abs().max()


# ----------------------------------------------------------------------------- layouts, dtypes
def test_noncontiguous_and_float32(EMU, C):
    torch.manual_seed(4)
    flat = dominant(random_taps(random.Random(4), 3, 3, 30, (0, 1, 2)), 3, 3)
    base = randn(3, 2, 9, 5, 14)
    x = base.permute(1, 0, 4, 3, 2)[:, :, ::2]            # [2, 3, 7, 5, 9], non-contiguous
    h = spd_hessian(2, 3, [7, 5, 9], 6).movedim(1, -1).contiguous().movedim(-1, 1)
    w = torch.rand(2, 7, 5, 9, 3, dtype=F64).movedim(-1, 1)
    g = randn(2, 3, 9, 5, 7).transpose(2, 4)
    assert not any(t.is_contiguous() for t in (x, h, w, g))
    for dtype, tol in ((F64, 1e-10), (F32, 1e-5)):
        xs, hs, ws, gs = (t.to(dtype) for t in (x, h, w, g))
        for op in ("reg_matvec", "reg_precond"):
            out = getattr(EMU, op)(xs, hs, ws, flat)
            assert out.is_contiguous() and out.dtype == dtype
            ok, err = close(out, getattr(C, op)(xs, hs, ws, flat), tol)
            assert ok, (op, dtype, err)
        per = periods(flat, [7, 5, 9])
        x1 = base.to(dtype).permute(1, 0, 4, 3, 2)[:, :, ::2]
        x2 = x1.contiguous()
        ptr = x1.data_ptr()
        EMU.reg_relax_(x1, hs, gs, ws, flat, per, 2)
        C.reg_relax_(x2, hs, gs, ws, flat, per, 2)
        assert x1.data_ptr() == ptr and not x1.is_contiguous()
        ok, err = close(x1, x2, tol)
        assert ok, (dtype, err)


@pytest.mark.parametrize("dim", [1, 3])
def test_float32(EMU, C, dim):
    check(matvec_sweep(EMU, C, dim, 3, F32, 1e-5, seed=70 + dim))


def test_64bit_offsets(EMU, C, knobs):
    knobs(cuda_index32=False)
    fails = matvec_sweep(EMU, C, 3, 3, seed=80) + matvec_sweep(EMU, C, 2, 12, seed=81)
    check(fails)
    torch.manual_seed(82)
    shape = [7, 6, 5]
    for chans in (3, 12):
        flat = dominant(random_taps(random.Random(82), 3, chans, 3 * chans, (0, 1, 2)), 3, chans)
        x, g = randn(2, chans, *shape), randn(2, chans, *shape)
        w = torch.rand(2, 1, *shape, dtype=F64)
        h = spd_hessian(2, chans, shape, chans * (chans + 1) // 2)
        ok, err = close(EMU.reg_precond(x, h, w, flat), C.reg_precond(x, h, w, flat))
        assert ok, (chans, err)
        x1, x2 = x.clone(), x.clone()
        per = periods(flat, shape)
        EMU.reg_relax_(x1, h, g, w, flat, per, 2)
        C.reg_relax_(x2, h, g, w, flat, per, 2)
        ok, err = close(x1, x2)
        assert ok, (chans, err)


# ----------------------------------------------------------------------------- edge cases
def test_empty_no_taps_no_iterations(EMU, C):
    x = randn(2, 3, 4, 5)
    h = torch.rand(2, 6, 4, 5, dtype=F64)
    assert torch.equal(EMU.reg_matvec(x, h, None, []), C.reg_matvec(x, h, None, []))
    assert EMU.reg_matvec(x, None, None, []).abs().max() == 0
    tap = [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]
    e = randn(0, 3, 4, 5)
    assert EMU.reg_matvec(e, None, None, tap).shape == e.shape
    assert EMU.reg_precond(e, None, None, tap).shape == e.shape
    EMU.reg_relax_(e, None, e, None, tap, [2, 2], 3)
    x0 = x.clone()
    EMU.reg_relax_(x, h, x, None, tap, [2, 2], 0)
    assert torch.equal(x, x0)


def test_input_is_not_modified(EMU):
    torch.manual_seed(9)
    flat = dominant(random_taps(random.Random(9), 2, 3, 12, (0, 1, 2)), 2, 3)
    x, h, w = randn(2, 3, 6, 5), spd_hessian(2, 3, [6, 5], 6), torch.rand(2, 3, 6, 5)
    w = w.double()
    saved = [t.clone() for t in (x, h, w)]
    EMU.reg_matvec(x, h, w, flat)
    EMU.reg_precond(x, h, w, flat)
    g = x.clone()
    EMU.reg_relax_(g, h, x, w, flat, [3, 3], 1)
    assert all(torch.equal(a, b) for a, b in zip((x, h, w), saved))


def test_bad_arguments_same_errors_as_cpu(EMU, C):
    assert_same_errors(C, EMU)
