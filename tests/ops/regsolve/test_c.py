"""The compiled CPU regsolve kernels (csrc/regsolve) against the pure-PyTorch twin.

Checks: reg_matvec, reg_precond and reg_relax_ == nitorch_jit/torch_impl/regsolve.py to 1e-10
in float64, on random tap lists (every kind, offsets within +-2, every bound per axis, cross-
channel taps) and on the realistic ones of ops.regularisers.taps; D = 1, 2, 3; sizes 1, 2, 3,
5, 8 (rows with and without an interior); K = 1, C, C(C+1)/2; weights of 1 and C channels;
float32; non-contiguous inputs; relax in place, also on a non-contiguous x, the same bit for
bit on 1, 2 or 3 threads (its wave order), a gradient that is x; singular voxel blocks; the
generic per-point path of regsolve/point.h (the regsolve_generic tuning knob) and the header
compiled on its own; bad arguments raising RuntimeError that names the argument. The contract
is docs/regsolve-spec.md.
"""
import itertools
import random

import pytest
import torch

from nitorch_jit.torch_impl import regsolve as twin
from tests.ops.regsolve.cases import BOUNDS, C, close, periods, random_taps, realistic, spd_hessian  # noqa: F401

F64 = torch.float64
SIZES = [1, 2, 3, 5, 8]

from nitorch_jit.ops.regularisers import taps as real_taps



# ----------------------------------------------------------------------------- helpers


def only_kind0(flat, dim):
    n = 4 + 2 * dim
    return [v for i in range(0, len(flat), n) if flat[i + 2] == 0 for v in flat[i:i + n]]



# ----------------------------------------------------------------------------- matvec
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_matvec_random_taps(C, dim):
    """Every size on every axis (rows without an interior, with one) and every bound."""
    rng = random.Random(dim)
    torch.manual_seed(dim)
    shapes = [list(s) for s in itertools.product(SIZES, repeat=dim)]
    if dim == 3:  # a subset, every size on every axis
        shapes = [[a, b, c] for a, b, c in zip(SIZES, SIZES[2:] + SIZES[:2], SIZES[::-1])]
        shapes += [[8, 5, 8], [1, 8, 2], [5, 1, 1]]
    for shape, chans in itertools.product(shapes, [1, 3]):
        for kinds, wch in [((0,), None), ((0, 1, 2), 1), ((0, 1, 2), chans)]:
            flat = random_taps(rng, dim, chans, 12 * chans, kinds)
            x = torch.randn(2, chans, *shape, dtype=F64)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            for k in sorted({1, chans, chans * (chans + 1) // 2}):
                h = torch.randn(2, k, *shape, dtype=F64)
                a = C.reg_matvec(x, h, w, flat)
                ok, err = close(a, twin.reg_matvec(x, h, w, flat))
                assert ok, (shape, chans, kinds, wch, k, err)
            ok, err = close(C.reg_matvec(x, None, w, flat), twin.reg_matvec(x, None, w, flat))
            assert ok, (shape, chans, kinds, wch, err)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_matvec_every_bound_per_axis(C, dim):
    """One bound per axis (each code, also replicate and dct1, which the kernels accept)."""
    rng = random.Random(10 + dim)
    torch.manual_seed(10 + dim)
    shape = [5, 3, 8][:dim]
    x = torch.randn(1, 2, *shape, dtype=F64)
    w = torch.rand(1, 2, *shape, dtype=F64)
    for codes in itertools.product(range(7), repeat=dim):
        if dim == 3 and len(set(codes)) > 1 and rng.random() > 0.1:
            continue
        flat = random_taps(rng, dim, 2, 20, (0, 1, 2), bounds=[0])
        n = 4 + 2 * dim
        for t in range(0, len(flat), n):
            flat[t + 4 + dim:t + n] = [float(c) for c in codes]
        ok, err = close(C.reg_matvec(x, None, w, flat), twin.reg_matvec(x, None, w, flat))
        assert ok, (codes, err)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_matvec_realistic(C, dim):
    torch.manual_seed(20 + dim)
    shape = [8, 5, 7][:dim]
    for bnd in BOUNDS:
        bnds = [bnd] * dim
        cases = [(realistic(dim, 2, bnds), 2, None),
                 (realistic(dim, dim, bnds, grid=True), dim, None),
                 (realistic(dim, 2, bnds, weighted=True), 2, 1),
                 (realistic(dim, 2, bnds, weighted=True), 2, 2)]
        for flat, chans, wch in cases:
            x = torch.randn(2, chans, *shape, dtype=F64)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            h = spd_hessian(2, chans, shape, chans * (chans + 1) // 2)
            ok, err = close(C.reg_matvec(x, h, w, flat), twin.reg_matvec(x, h, w, flat))
            assert ok, (bnd, chans, wch, err)
            # L is symmetric: <y, L x> == <L y, x>
            y = torch.randn_like(x)
            lhs = (y * C.reg_matvec(x, None, w, flat)).sum()
            rhs = (C.reg_matvec(y, None, w, flat) * x).sum()
            assert torch.isclose(lhs, rhs, rtol=1e-10, atol=1e-10), (bnd, chans, wch)


def test_matvec_mixed_bounds_long_rows(C):
    """Rows long enough for the vectorised interior, mixed bounds, 3 channels, both dtypes."""
    torch.manual_seed(3)
    flat = realistic(3, 3, [3, 5, 4], grid=True) + random_taps(random.Random(3), 3, 3, 30)
    x = torch.randn(1, 3, 6, 7, 37, dtype=F64)
    h = spd_hessian(1, 3, [6, 7, 37], 6)
    ref = twin.reg_matvec(x, h, None, flat)
    ok, err = close(C.reg_matvec(x, h, None, flat), ref)
    assert ok, err
    ok, err = close(C.reg_matvec(x.float(), h.float(), None, flat).double(), ref, 1e-5)
    assert ok, err


def test_matvec_noncontiguous_and_float32(C):
    torch.manual_seed(4)
    flat = random_taps(random.Random(4), 3, 3, 30, (0, 1, 2))
    base = torch.randn(3, 2, 9, 5, 14, dtype=F64)
    x = base.permute(1, 0, 4, 3, 2)[:, :, ::2]            # [2, 3, 7, 5, 9], non-contiguous
    h = torch.randn(2, 7, 5, 9, 6, dtype=F64).movedim(-1, 1)
    w = torch.rand(2, 7, 5, 9, 3, dtype=F64).movedim(-1, 1)
    assert not (x.is_contiguous() or h.is_contiguous() or w.is_contiguous())
    ref = twin.reg_matvec(x.contiguous(), h.contiguous(), w.contiguous(), flat)
    out = C.reg_matvec(x, h, w, flat)
    assert out.is_contiguous() and out.shape == x.shape
    ok, err = close(out, ref)
    assert ok, err
    out32 = C.reg_matvec(x.float(), h.float(), w.float(), flat)
    assert out32.dtype == torch.float32
    ok, err = close(out32.double(), ref, 1e-5)
    assert ok, err


def test_matvec_unweighted_kinds_read_weight_one(C):
    """Kind 1 and 2 taps without weights: w = 1."""
    torch.manual_seed(5)
    flat = random_taps(random.Random(5), 2, 2, 20, (0, 1, 2))
    x = torch.randn(2, 2, 6, 5, dtype=F64)
    ones = torch.ones(2, 1, 6, 5, dtype=F64)
    ok, err = close(C.reg_matvec(x, None, None, flat), twin.reg_matvec(x, None, ones, flat))
    assert ok, err
    ok, err = close(C.reg_precond(x, None, None, flat), twin.reg_precond(x, None, ones, flat))
    assert ok, err


def test_matvec_no_taps_and_empty(C):
    x = torch.randn(2, 3, 4, 5, dtype=F64)
    h = torch.rand(2, 6, 4, 5, dtype=F64)
    assert torch.allclose(C.reg_matvec(x, h, None, []), twin.sym_matvec(h, x), atol=1e-12)
    assert C.reg_matvec(x, None, None, []).abs().max() == 0
    e = torch.randn(0, 3, 4, 5, dtype=F64)
    assert C.reg_matvec(e, None, None, [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]).shape == e.shape


def test_generic_point_path(C, knobs):
    """regsolve_generic knob: every point through regsolve/point.h alone (point_value,
    add_self_block, add_hess_block, chol_solve), as the CUDA kernels will use it."""
    torch.manual_seed(6)
    rng = random.Random(6)
    knobs(regsolve_generic=True)
    for dim, shape in [(1, [7]), (2, [5, 8]), (3, [3, 8, 5])]:
        flat = random_taps(rng, dim, 3, 40, (0, 1, 2))
        x = torch.randn(2, 3, *shape, dtype=F64)
        w = torch.rand(2, 3, *shape, dtype=F64)
        h = torch.randn(2, 6, *shape, dtype=F64)
        ok, err = close(C.reg_matvec(x, h, w, flat), twin.reg_matvec(x, h, w, flat))
        assert ok, (dim, err)
        for c in range(3):  # positive definite blocks
            flat += [c, c, 0, 8.0] + [0] * dim + [2] * dim
        hs = spd_hessian(2, 3, shape, 6)
        ok, err = close(C.reg_precond(x, hs, w, flat), twin.reg_precond(x, hs, w, flat))
        assert ok, (dim, err)
        flat = realistic(dim, 3, [4] * dim, grid=False)
        g = torch.randn_like(x)
        per = periods(flat, shape)
        x1, x2 = x.clone(), x.clone()
        C.reg_relax_(x1, h.abs() + 1, g, None, flat, per, 2)
        twin.reg_relax_(x2, h.abs() + 1, g, None, flat, per, 2)
        ok, err = close(x1, x2)
        assert ok, (dim, err)


@pytest.mark.parametrize("avx2", ["1", "0"])
def test_long_rows_both_vector_builds(C, knobs, avx2):
    """Rows of many lengths (vector chunks, overlapping tails), the AVX2 and baseline sums."""
    knobs(avx2=avx2 == "1")
    torch.manual_seed(9)
    rng = random.Random(9)
    for n in (5, 6, 9, 12, 21, 37, 40, 71):
        flat = random_taps(rng, 2, 2, 30, (0, 1, 2))
        x = torch.randn(1, 2, 6, n, dtype=F64)
        w = torch.rand(1, 2, 6, n, dtype=F64)
        h = torch.randn(1, 3, 6, n, dtype=F64)
        ref = twin.reg_matvec(x, h, w, flat)
        ok, err = close(C.reg_matvec(x, h, w, flat), ref)
        assert ok, (n, err)
        ok, err = close(C.reg_matvec(x.float(), h.float(), w.float(), flat).double(), ref, 1e-5)
        assert ok, (n, err)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_relax_periods_and_strides(C, dtype):
    """Periods 2-5 along a long last axis: the vector span of small strides, plain strides."""
    torch.manual_seed(10)
    shape = [5, 37]
    flat = real_taps(2, 2, [0.1, 0.2], [0.3, 0.4], [0.0, 0.0], [1.0, 1.3], [2, 4])  # reach 1
    g = torch.randn(1, 2, *shape, dtype=F64)
    h = spd_hessian(1, 2, shape, 3)
    for p in (2, 3, 4, 5):
        x = torch.randn(1, 2, *shape, dtype=F64)
        ref = x.clone()
        twin.reg_relax_(ref, h, g, None, flat, [p, p], 2)
        got = x.to(dtype)
        C.reg_relax_(got, h.to(dtype), g.to(dtype), None, flat, [p, p], 2)
        ok, err = close(got.double(), ref, 1e-10 if dtype == F64 else 1e-5)
        assert ok, (p, err)


# ----------------------------------------------------------------------------- precond
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_precond_random_taps(C, dim):
    """Exact L_vv at borders (every bound, every size), cross-channel blocks, every K."""
    rng = random.Random(30 + dim)
    torch.manual_seed(30 + dim)
    for size, chans in itertools.product(SIZES, [1, 3]):
        shape = [size] * dim
        # centre taps dominate: the blocks are positive definite
        flat = random_taps(rng, dim, chans, 10 * chans, (0, 1, 2))
        for c in range(chans):
            flat += [c, c, 0, 8.0] + [0] * dim + [2] * dim
        x = torch.randn(2, chans, *shape, dtype=F64)
        for wch, k in [(None, None), (1, 1), (chans, chans), (chans, chans * (chans + 1) // 2)]:
            sub = flat if wch is not None else only_kind0(flat, dim)  # the twin needs weights
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            h = None if k is None else spd_hessian(2, chans, shape, k)
            ok, err = close(C.reg_precond(x, h, w, sub), twin.reg_precond(x, h, w, sub))
            assert ok, (shape, chans, wch, k, err)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_precond_realistic(C, dim):
    torch.manual_seed(40 + dim)
    shape = [8, 5, 3][:dim]
    for bnd in BOUNDS:
        bnds = [bnd] * dim
        for flat, chans, wch in [(realistic(dim, dim, bnds, grid=True), dim, None),
                                 (realistic(dim, 2, bnds, weighted=True), 2, 2)]:
            x = torch.randn(2, chans, *shape, dtype=F64)
            w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
            for k in sorted({1, chans, chans * (chans + 1) // 2}):
                h = spd_hessian(2, chans, shape, k)
                ok, err = close(C.reg_precond(x, h, w, flat), twin.reg_precond(x, h, w, flat))
                assert ok, (bnd, chans, k, err)
            ok, err = close(C.reg_precond(x, None, w, flat), twin.reg_precond(x, None, w, flat))
            assert ok, (bnd, chans, err)


def test_precond_singular_blocks(C):
    """A pivot <= 0 zeroes its component; the others solve the rest."""
    r = torch.tensor([1.0, 2.0, 3.0], dtype=F64).reshape(1, 3, 1)
    h = torch.tensor([0.0, 2.0, -1.0], dtype=F64).reshape(1, 3, 1)
    z = C.reg_precond(r, h, None, [])
    assert z.flatten().tolist() == pytest.approx([0.0, 1.0, 0.0], abs=1e-15)
    # symmetric: H = [[1, 1, 0], [1, 1, 0], [0, 0, 4]] -> pivot 1 is 0 after elimination
    h = torch.tensor([1.0, 1.0, 4.0, 1.0, 0.0, 0.0], dtype=F64).reshape(1, 6, 1)
    z = C.reg_precond(r, h, None, [])
    assert torch.allclose(z.flatten(), torch.tensor([1.0, 0.0, 0.75], dtype=F64))
    assert torch.allclose(z, twin.reg_precond(r, h, None, []))
    # large C, symmetric packing, random SPD blocks
    torch.manual_seed(7)
    chans = 20
    a = torch.randn(4, chans, chans, dtype=F64)
    a = a @ a.transpose(1, 2) + torch.eye(chans, dtype=F64)
    iu = [(i, i) for i in range(chans)] + twin.upper_pairs(chans)
    h = torch.stack([a[:, i, j] for i, j in iu], 0).unsqueeze(0)  # [1, 210, 4 voxels]
    r = torch.randn(1, chans, 4, dtype=F64)
    z = C.reg_precond(r, h, None, [])
    ref = torch.linalg.solve(a, r[0].t().unsqueeze(-1)).squeeze(-1).t()
    assert torch.allclose(z[0], ref, atol=1e-9)


# ----------------------------------------------------------------------------- relax
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_relax_random_taps(C, dim):
    rng = random.Random(50 + dim)
    torch.manual_seed(50 + dim)
    shapes = {1: [[1], [2], [5], [8], [13]], 2: [[3, 8], [5, 5], [8, 2], [1, 7]],
              3: [[3, 5, 8], [5, 2, 5], [4, 4, 6]]}[dim]
    for shape in shapes:
        chans = 2
        flat = random_taps(rng, dim, chans, 12, (0, 1, 2))
        for c in range(chans):
            flat += [c, c, 0, 8.0] + [0] * dim + [2] * dim
        x = torch.randn(2, chans, *shape, dtype=F64)
        g = torch.randn_like(x)
        w = torch.rand(2, chans, *shape, dtype=F64)
        for k in (None, 1, 3):
            h = None if k is None else spd_hessian(2, chans, shape, k)
            per = periods(flat, shape)
            x1, x2 = x.clone(), x.clone()
            assert C.reg_relax_(x1, h, g, w, flat, per, 2) is None
            twin.reg_relax_(x2, h, g, w, flat, per, 2)
            ok, err = close(x1, x2)
            assert ok, (shape, k, per, err)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_relax_realistic_converges(C, dim):
    """Realistic taps with the regularisers' periods; many sweeps solve (H + L) x = g."""
    torch.manual_seed(60 + dim)
    shape = [9, 7, 6][:dim]
    for bnd in BOUNDS:
        bnds = [bnd] * dim
        flat = realistic(dim, dim, bnds, grid=True)
        per = periods(flat, shape)
        x = torch.randn(1, dim, *shape, dtype=F64)
        g = torch.randn_like(x)
        h = spd_hessian(1, dim, shape, dim * (dim + 1) // 2)
        x1, x2 = x.clone(), x.clone()
        C.reg_relax_(x1, h, g, None, flat, per, 3)
        twin.reg_relax_(x2, h, g, None, flat, per, 3)
        ok, err = close(x1, x2)
        assert ok, (bnd, err)
        C.reg_relax_(x1, h, g, None, flat, per, 200)
        res = g - C.reg_matvec(x1, h, None, flat)
        assert res.abs().max() < 1e-6 * g.abs().max(), (bnd, res.abs().max())


@pytest.mark.slow  # many relaxation sweeps
@pytest.mark.parametrize("dim", [2, 3])
def test_relax_wave_order_threads(C, dim, knobs):
    """reg_relax_ runs the colours' tasks plane by plane in a wave (rows in a wave within a
    plane), whole planes per thread, iterations pipelined in groups of 4: every voxel sees the
    values of the colour by colour sweep, so the result is the twin's, bit for bit the same on
    1, 2 or 3 threads. Sizes not a multiple of the period, dft (wrapped neighbours) and dct2,
    periods larger than needed, weights, symmetric H, several batches, nb_iter = 5 (a group
    of 4 and one of 1)."""
    knobs(parallel_min_work=1)  # small enough to split
    rng = random.Random(70 + dim)
    torch.manual_seed(70 + dim)
    shapes = {2: [[11, 9], [13, 6]], 3: [[11, 9, 13], [13, 7, 10]]}[dim]
    threads = torch.get_num_threads()
    try:
        for shape, bnd in itertools.product(shapes, [5, 2]):
            cases = [(realistic(dim, dim, [bnd] * dim, grid=True), dim, None, None),
                     (realistic(dim, dim, [bnd] * dim, grid=True), dim, None, 1)]
            flat = random_taps(rng, dim, 2, 16, (0, 1, 2), bounds=[bnd])
            for c in range(2):
                flat += [c, c, 0, 8.0] + [0] * dim + [2] * dim
            cases.append((flat, 2, 2, None))
            for flat, chans, wch, grow in cases:
                per = periods(flat, shape)
                if grow and bnd != 5:  # larger periods (dft: they could wrap onto a colour)
                    per = [p + grow for p in per]
                x = torch.randn(2, chans, *shape, dtype=F64)
                g = torch.randn_like(x)
                h = spd_hessian(2, chans, shape, chans * (chans + 1) // 2)
                w = None if wch is None else torch.rand(2, wch, *shape, dtype=F64)
                ref = x.clone()
                twin.reg_relax_(ref, h, g, w, flat, per, 5)
                outs = []
                for nt in (1, 2, 3):
                    torch.set_num_threads(nt)
                    got = x.clone()
                    C.reg_relax_(got, h, g, w, flat, per, 5)
                    ok, err = close(got, ref)
                    assert ok, (shape, bnd, chans, per, nt, err)
                    outs.append(got)
                assert all(torch.equal(outs[0], o) for o in outs[1:]), (shape, bnd, per)
    finally:
        torch.set_num_threads(threads)


def test_relax_gradient_aliasing_x(C):
    """A gradient that is x itself is read as x was on entry (x is reordered in place during
    the call)."""
    torch.manual_seed(12)
    flat = realistic(3, 3, [2, 2, 2], grid=True)
    shape = [6, 7, 9]
    per = periods(flat, shape)
    x = torch.randn(1, 3, *shape, dtype=F64)
    h = spd_hessian(1, 3, shape, 6)
    ref = x.clone()
    twin.reg_relax_(ref, h, x.clone(), None, flat, per, 2)
    C.reg_relax_(x, h, x, None, flat, per, 2)
    ok, err = close(x, ref)
    assert ok, err


def test_relax_in_place_noncontiguous_float32(C):
    torch.manual_seed(8)
    flat = realistic(3, 3, [2, 5, 4], grid=True)
    shape = [6, 7, 9]
    per = periods(flat, shape)
    base = torch.randn(6, 9, 7, 1, 3, dtype=F64)
    x = base.permute(3, 4, 0, 2, 1)                     # [1, 3, 6, 7, 9], non-contiguous
    g = torch.randn(1, 3, 9, 7, 6, dtype=F64).transpose(2, 4)
    h = spd_hessian(1, 3, shape, 3)
    ref = x.clone()
    twin.reg_relax_(ref, h, g.contiguous(), None, flat, per, 2)
    ptr = x.data_ptr()
    C.reg_relax_(x, h, g, None, flat, per, 2)
    assert x.data_ptr() == ptr and not x.is_contiguous()
    ok, err = close(x, ref)
    assert ok, err
    assert torch.equal(base.permute(3, 4, 0, 2, 1), x)  # the storage itself was updated
    x32 = base.permute(3, 4, 0, 2, 1).float()
    x0 = x32.clone()
    C.reg_relax_(x32, h.float(), g.float(), None, flat, per, 0)
    assert torch.equal(x32, x0)                           # nb_iter = 0: unchanged


# ----------------------------------------------------------------------------- header
HEADER_PROBE = r"""
#include <cstdio>
#include "regsolve/point.h"
using namespace nitorch_jit::regsolve;
int main() {
  // packed order for C = 4: 00 11 22 33 01 02 03 12 13 23
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) std::printf("P %d %d %lld\n", a, b, (long long)packed_index(a, b, 4));
  double A[9] = {4, 0, 0, 2, 5, 0, 1, 0, 0};  // lower triangle of [[4,2,1],[2,5,0],[1,0,0]]
  double z[3] = {1, 2, 3};
  chol_solve(A, 3, z);
  std::printf("Z %.17g %.17g %.17g\n", z[0], z[1], z[2]);
  const double t[10] = {1, 0, 0, 2.5, -1, 2, 3, 4, 2, 6};
  Tap<float> tap = decode_tap<float>(t, 3);
  std::printf("T %d %d %d %g %d %d %d %d %d %d\n", tap.c_out, tap.c_in, tap.kind, tap.coef,
              tap.off[0], tap.off[1], tap.off[2], tap.bound[0], tap.bound[1], tap.bound[2]);
  return 0;
}
"""


def test_header_on_its_own(header_probe):
    """regsolve/point.h compiles without torch (the CUDA kernels include it)."""
    out = header_probe(HEADER_PROBE, "-Wextra")
    order = {(i, i): i for i in range(4)}
    order.update({p: 4 + k for k, p in enumerate(twin.upper_pairs(4))})
    for line in out.splitlines():
        f = line.split()
        if f[0] == "P":
            a, b, k = map(int, f[1:])
            assert k == order[(min(a, b), max(a, b))]
        elif f[0] == "Z":
            # [[4,2],[2,5]] solved for [1, 2]; the third pivot (0 - 1/4 - 1/16 < 0) is dropped
            a = torch.tensor([[4.0, 2.0], [2.0, 5.0]], dtype=F64)
            ref = torch.linalg.solve(a, torch.tensor([1.0, 2.0], dtype=F64)).tolist() + [0.0]
            assert [float(v) for v in f[1:]] == pytest.approx(ref, abs=1e-15)
        else:
            assert f[1:] == ["1", "0", "0", "2.5", "-1", "2", "3", "4", "2", "6"]


# ----------------------------------------------------------------------------- bad arguments
def test_bad_arguments(C):
    x = torch.randn(1, 3, 4, 5, dtype=F64)
    ok = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 2.0, 2.0]
    h = torch.rand(1, 3, 4, 5, dtype=F64)
    w = torch.rand(1, 1, 4, 5, dtype=F64)
    cases = [
        (lambda: C.reg_matvec(x.long(), None, None, ok), "x"),
        (lambda: C.reg_matvec(x[0, 0], None, None, ok), "x"),
        (lambda: C.reg_matvec(torch.randn(1, 3, 2, 2, 2, 2, dtype=F64), None, None, []), "x"),
        (lambda: C.reg_matvec(x, torch.rand(1, 4, 4, 5, dtype=F64), None, ok), "hessian"),
        (lambda: C.reg_matvec(x, torch.rand(1, 3, 4, 6, dtype=F64), None, ok), "hessian"),
        (lambda: C.reg_matvec(x, torch.rand(2, 3, 4, 5, dtype=F64), None, ok), "hessian"),
        (lambda: C.reg_matvec(x, h.float(), None, ok), "hessian"),
        (lambda: C.reg_matvec(x, None, torch.rand(1, 2, 4, 5, dtype=F64), ok), "weights"),
        (lambda: C.reg_matvec(x, None, torch.rand(1, 1, 5, 4, dtype=F64), ok), "weights"),
        (lambda: C.reg_matvec(x, None, None, ok[:-1]), "taps"),
        (lambda: C.reg_matvec(x, None, None, [3.0] + ok[1:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, [0.0, -1.0] + ok[2:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, [0.5] + ok[1:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, ok[:2] + [3.0] + ok[3:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, ok[:3] + [float("nan")] + ok[4:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, ok[:4] + [3.0, 0.0] + ok[6:]), "taps"),
        (lambda: C.reg_matvec(x, None, None, ok[:6] + [7.0, 2.0]), "taps"),
        (lambda: C.reg_matvec(x, None, None, ok[:6] + [-1.0, 2.0]), "taps"),
        (lambda: C.reg_matvec(x, None, None, [0.0, 1.0, 1.0] + ok[3:]), "taps"),     # kind 1
        (lambda: C.reg_matvec(x, None, None, [0.0, 1.0, 2.0] + ok[3:]), "taps"),     # kind 2
        (lambda: C.reg_precond(x, h, torch.rand(1, 3, 4, dtype=F64), ok), "weights"),
        (lambda: C.reg_precond(x, torch.rand(1, 5, 4, 5, dtype=F64), None, ok), "hessian"),
        (lambda: C.reg_relax_(x, h, x[:, :2], w, ok, [2, 2], 1), "gradient"),
        (lambda: C.reg_relax_(x, h, x.float(), w, ok, [2, 2], 1), "gradient"),
        (lambda: C.reg_relax_(x, h, x, w, ok, [2], 1), "period"),
        (lambda: C.reg_relax_(x, h, x, w, ok, [2, 0], 1), "period"),
        (lambda: C.reg_relax_(x, h, x, w, ok, [2, 2], -1), "nb_iter"),
        (lambda: C.reg_relax_(x, h, x, w, ok, [1, 2], 1), "period"),     # offset 1, period 1
        (lambda: C.reg_relax_(x, h, x, w, ok[:4] + [2.0, 0.0] + ok[6:], [2, 2], 1), "period"),
        (lambda: C.reg_relax_(x, h, x, w, ok[:6] + [5.0, 2.0], [3, 2], 1), "period"),  # 4 % 3
    ]
    for i, (fn, name) in enumerate(cases):
        with pytest.raises(RuntimeError, match=name):
            fn()
    x0 = x.clone()
    with pytest.raises(RuntimeError):
        C.reg_relax_(x, h, x, w, ok, [2, 2, 2], 1)
    assert torch.equal(x, x0)
