"""Regularisers and solvers (docs/regsolve-spec.md) against oracles written elsewhere:
dense matrices on tiny grids (symmetry, PSD, null spaces, torch.linalg.solve), the classic
stencil values of SPM / NITorch / jitfields, grouped conv3d, gradcheck and opcheck.
The dense operators are probed with unit vectors through the public API (the backend the
process chose) or through the TORCH twin where the test is about the discretisation.
"""

import pytest
import torch
import torch.nn.functional as F

import nitorch_jit as nj
from nitorch_jit.ops import regularisers as R
from nitorch_jit.torch_impl import regsolve as T

F64 = torch.float64
BOUNDS = ["dct2", "dst1", "dst2", "dft", "zero"]


def dense(fn, shape, dtype=F64):
    """The matrix of a linear map on tensors of `shape`, probed with unit vectors."""
    n = 1
    for s in shape:
        n *= s
    eye = torch.eye(n, dtype=dtype)
    return torch.stack([fn(eye[i].reshape(shape)).reshape(-1) for i in range(n)], 1)


def check_spd(mat, tol=1e-10):
    assert (mat - mat.T).abs().max() <= tol * mat.abs().max()
    assert torch.linalg.eigvalsh(mat).min() >= -tol * mat.abs().max()


# ----------------------------------------------------------------------------- the operator
CASES = [dict(absolute=0.7), dict(membrane=1.3), dict(bending=0.4),
         dict(absolute=0.1, membrane=0.5, bending=0.2)]


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_field_dense_symmetric_psd(dim, bound, case):
    shape = [5, 4, 3][:dim]
    vs = [1.0, 1.7, 0.6][:dim]
    kw = dict(CASES[case])
    kw = {k: [v, 2 * v] for k, v in kw.items()}  # two channels, different penalties
    mat = dense(lambda e: nj.regulariser(e, voxel_size=vs, bound=bound, **kw), [2] + shape)
    check_spd(mat)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("bound", BOUNDS)
def test_grid_dense_symmetric_psd(dim, bound):
    shape = [4, 3, 5][:dim]
    vs = [1.0, 1.7, 0.6][:dim]
    for kw in (dict(lame=(0.8, 0)), dict(lame=(0, 0.9)),
               dict(absolute=0.1, membrane=0.3, bending=0.2, lame=(0.05, 0.2), factor=2)):
        mat = dense(lambda e: nj.regulariser_grid(e, voxel_size=vs, bound=bound, **kw),
                    shape + [dim])
        check_spd(mat)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("bound", BOUNDS)
def test_weighted_dense_symmetric_psd(dim, bound):
    torch.manual_seed(dim)
    shape = [4, 3, 5][:dim]
    w = torch.rand([2] + shape, dtype=F64) + 0.05
    mat = dense(lambda e: nj.regulariser(e, absolute=0.3, membrane=[1.0, 0.5], weights=w,
                                         voxel_size=[1, 2, 3][:dim], bound=bound), [2] + shape)
    check_spd(mat)
    wg = torch.rand(shape, dtype=F64) + 0.05
    mat = dense(lambda e: nj.regulariser_grid(e, absolute=0.2, membrane=1.0, weights=wg,
                                              bound=bound), shape + [dim])
    check_spd(mat)


def probe_centre(fn, shape, channels=1, src=0, grid=False):
    """Column of the operator at the central voxel (channel `src`), reshaped."""
    e = torch.zeros(shape + [channels] if grid else [channels] + shape, dtype=F64)
    centre = tuple(s // 2 for s in shape)
    if grid:
        e[centre + (src,)] = 1
    else:
        e[(src,) + centre] = 1
    return fn(e)


def test_interior_stencils_match_spm():
    # 3-D, vs = 1: bending centre 42, faces -12, +-2 along an axis 1, in-plane diagonals 2
    out = probe_centre(lambda e: nj.regulariser(e, bending=1), [7, 7, 7])[0]
    assert out[3, 3, 3] == 42 and out[2, 3, 3] == -12 and out[3, 5, 3] == 1
    assert out[2, 2, 3] == 2 and out[2, 2, 2] == 0 and out.sum().abs() < 1e-12
    # anisotropic membrane: centre 2 * sum(1/vs^2), neighbours -1/vs_d^2
    vs = [1.0, 2.0, 0.5]
    out = probe_centre(lambda e: nj.regulariser(e, membrane=1, voxel_size=vs), [5, 5, 5])[0]
    assert torch.isclose(out[2, 2, 2], torch.tensor(2 * (1 + 0.25 + 4.0), dtype=F64))
    assert out[1, 2, 2] == -1 and out[2, 3, 2] == -0.25 and out[2, 2, 1] == -4
    # linear elasticity (jitfields flow_kernel(shears=1)): centre 8, own axis -2, other -1,
    # cross -0.25 at (+1, +1) in the (d, e) plane
    for src in range(3):
        out = probe_centre(lambda e: nj.regulariser_grid(e, lame=(1, 0)), [5, 5, 5], 3, src,
                           grid=True)
        own = [2, 2, 2]
        own[src] = 1
        assert out[2, 2, 2, src] == 8 and out[tuple(own) + (src,)] == -2
        other = [2, 2, 2]
        other[(src + 1) % 3] = 1
        assert out[tuple(other) + (src,)] == -1
        dst = (src + 1) % 3
        pos = [2, 2, 2]
        pos[src] += 1
        pos[dst] += 1
        assert out[tuple(pos) + (dst,)] == -0.25
        pos[src] -= 2
        assert out[tuple(pos) + (dst,)] == 0.25
    # divergence: centre 2, own axis -1, the same cross pattern
    out = probe_centre(lambda e: nj.regulariser_grid(e, lame=(0, 1)), [5, 5, 5], 3, 0, True)
    assert out[2, 2, 2, 0] == 2 and out[1, 2, 2, 0] == -1 and out[2, 1, 2, 0] == 0
    assert out[3, 3, 2, 1] == -0.25 and out[1, 3, 2, 1] == 0.25


@pytest.mark.parametrize("bound", ["dct2", "dst1", "dst2", "dft"])
def test_bending_is_membrane_squared(bound):
    # the classic ghost-point stencil: with these bounds, bending = (membrane)^2 exactly
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5, 7, dtype=F64)
    vs = [1.0, 1.5, 0.7]
    m = nj.regulariser(nj.regulariser(x, membrane=1, voxel_size=vs, bound=bound),
                       membrane=1, voxel_size=vs, bound=bound)
    b = nj.regulariser(x, bending=1, voxel_size=vs, bound=bound)
    assert torch.allclose(m, b, atol=1e-10)


def _conv_stencil(kernel, x, pad):
    """Grouped conv3d with circular padding (what a user writes for dft)."""
    c = x.shape[1]
    xp = F.pad(x, [pad] * 6, mode="circular")
    return F.conv3d(xp, kernel.expand(c, 1, *kernel.shape).contiguous(), groups=c)


def test_dft_matches_conv3d():
    torch.manual_seed(1)
    x = torch.randn(1, 2, 8, 7, 6, dtype=F64)
    lap = torch.zeros(3, 3, 3, dtype=F64)
    lap[1, 1, 1] = 6
    for idx in [(0, 1, 1), (2, 1, 1), (1, 0, 1), (1, 2, 1), (1, 1, 0), (1, 1, 2)]:
        lap[idx] = -1
    mem = _conv_stencil(lap, x, 1)
    assert torch.allclose(nj.regulariser(x, membrane=1, bound="dft"), mem, atol=1e-12)
    lap5 = F.pad(lap, [1] * 6)
    ben = F.conv3d(F.pad(lap5[None, None], [2] * 6), lap5[None, None].flip([2, 3, 4]))[0, 0]
    assert torch.allclose(nj.regulariser(x, bending=1, bound="dft"),
                          _conv_stencil(ben, x, 2), atol=1e-10)


def test_grid_components_scaled_by_voxel_size():
    torch.manual_seed(2)
    v = torch.randn(1, 6, 5, 4, 3, dtype=F64)
    vs = [1.0, 2.0, 0.5]
    out = nj.regulariser_grid(v, membrane=0.3, bending=0.1, absolute=0.2, voxel_size=vs,
                              bound="dct2")
    for d in range(3):
        ref = nj.regulariser(v[..., d], membrane=0.3, bending=0.1, absolute=0.2,
                             voxel_size=vs, bound="dct2", dim=3) * vs[d] ** 2
        assert torch.allclose(out[..., d], ref, atol=1e-12)


def _interior(t, r, dim):
    sl = (Ellipsis,) + (slice(r, -r),) * dim
    return t[sl]


def test_null_spaces_in_the_interior():
    n = 9
    ax = torch.arange(n, dtype=F64)
    i, j, k = torch.meshgrid(ax, ax, ax, indexing="ij")
    ones = torch.ones(1, n, n, n, dtype=F64)
    lin = (0.3 * i - 0.2 * j + 0.5 * k)[None]
    for bound in BOUNDS:
        assert _interior(nj.regulariser(ones, membrane=1, bending=1, bound=bound), 2, 3) \
            .abs().max() < 1e-12
        assert _interior(nj.regulariser(lin, bending=1, bound=bound), 2, 3).abs().max() < 1e-12
    # grids: constants (all terms), rotations (shear), divergence-free fields (div)
    const = torch.ones(n, n, n, 3, dtype=F64) * torch.tensor([0.3, -1.0, 2.0], dtype=F64)
    rot = torch.stack([-j, i, torch.zeros_like(i)], -1)          # infinitesimal rotation
    # div = 0 but curved (second order operators see every affine field as null)
    divfree = torch.stack([j ** 2, torch.zeros_like(i), i * j], -1) * 0.1
    for bound in BOUNDS:
        out = nj.regulariser_grid(const, membrane=1, bending=1, lame=(1, 1), bound=bound)
        assert _interior(out.movedim(-1, 0), 2, 3).abs().max() < 1e-12
        out = nj.regulariser_grid(rot, lame=(1, 0), bound=bound)
        assert _interior(out.movedim(-1, 0), 1, 3).abs().max() < 1e-12
        out = nj.regulariser_grid(divfree, lame=(0, 1), bound=bound)
        assert _interior(out.movedim(-1, 0), 1, 3).abs().max() < 1e-12
        assert _interior(nj.regulariser_grid(divfree, lame=(1, 0), bound=bound)
                         .movedim(-1, 0), 1, 3).abs().max() > 0.1  # shear sees it


def test_hessian_term_and_packings():
    torch.manual_seed(3)
    x = torch.randn(2, 3, 5, 4, dtype=F64)
    full = torch.randn(2, 3, 3, 5, 4, dtype=F64)
    full = full + full.transpose(1, 2)
    packed = torch.cat([full[:, [0, 1, 2], [0, 1, 2]], full[:, [0, 0, 1], [1, 2, 2]]], 1)
    hx = torch.einsum("bij...,bj...->bi...", full, x)
    base = nj.regulariser(x, membrane=0.5, dim=2)
    assert torch.allclose(nj.regulariser(x, membrane=0.5, hessian=packed, dim=2) - base, hx)
    diag = full[:, [0, 1, 2], [0, 1, 2]]
    assert torch.allclose(nj.regulariser(x, membrane=0.5, hessian=diag, dim=2) - base,
                          diag * x)
    assert torch.allclose(nj.regulariser(x, membrane=0.5, hessian=diag[:, :1], dim=2) - base,
                          diag[:, :1] * x)


def test_weighted_membrane_energy():
    # the weighted membrane is the Hessian of 1/2 sum_edges m vx (w_i + w_j)/2 (x_i - x_j)^2
    torch.manual_seed(4)
    x = torch.randn(1, 1, 6, 5, dtype=F64)
    w = torch.rand(1, 1, 6, 5, dtype=F64) + 0.1
    vs = [1.0, 2.0]
    e = 0
    for d in range(2):
        dx = x.diff(dim=2 + d)
        wm = 0.5 * (w.narrow(2 + d, 0, w.shape[2 + d] - 1) + w.narrow(2 + d, 1, w.shape[2 + d] - 1))
        e = e + 0.5 * (wm * dx ** 2).sum() / vs[d] ** 2
    xr = x.clone().requires_grad_()
    ea = 0.5 * (xr * nj.regulariser(xr, membrane=1, weights=w, voxel_size=vs, dim=2)).sum()
    assert torch.isclose(ea, e)


# ----------------------------------------------------------------------------- solvers
def _packed_hessian(batch, c, shape, packing, seed=0):
    g = torch.Generator().manual_seed(seed)
    if packing == 1:
        return torch.rand([batch, 1] + shape, generator=g, dtype=F64) + 0.5
    if packing == c:
        return torch.rand([batch, c] + shape, generator=g, dtype=F64) + 0.5
    a = torch.randn([batch] + shape + [c, c], generator=g, dtype=F64) * 0.3
    full = a @ a.transpose(-1, -2) + 0.2 * torch.eye(c, dtype=F64)
    pairs = T.upper_pairs(c)
    vals = [full[..., i, i] for i in range(c)] + [full[..., i, j] for i, j in pairs]
    return torch.stack(vals, 1)


def _to_grid(t):
    return t.movedim(1, -1)


@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("packing", ["one", "diag", "sym"])
def test_solvers_against_dense_solve(grid, packing):
    c, shape = (2, [5, 6]) if grid else (3, [6, 5])
    k = {"one": 1, "diag": c, "sym": c * (c + 1) // 2}[packing]
    h = _packed_hessian(1, c, shape, k)
    g = torch.randn([1, c] + shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    if grid:
        kw = dict(membrane=0.2, bending=0.05, lame=(0.3, 0.1), voxel_size=[1.0, 1.4],
                  bound="dst2")
        hg, gg = _to_grid(h)[0], _to_grid(g)[0]
        mat = dense(lambda e: nj.regulariser_grid(e, hessian=hg, **kw), shape + [c])
        ref = torch.linalg.solve(mat, gg.reshape(-1)).reshape(gg.shape)
        solve, solve_fmg, args = nj.solve_grid, nj.solve_grid_fmg, (hg, gg)
    else:
        kw = dict(membrane=[0.2, 0.4, 0.1], bending=0.05, voxel_size=[1.0, 1.4],
                  bound="dct2")
        hf, gf = h[0], g[0]
        mat = dense(lambda e: nj.regulariser(e, hessian=hf, **kw), [c] + shape)
        ref = torch.linalg.solve(mat, gf.reshape(-1)).reshape(gf.shape)
        solve, solve_fmg, args = nj.solve_field, nj.solve_field_fmg, (hf, gf)

    def err(x):
        return float((x - ref).norm() / ref.norm())

    assert err(solve(*args, optim="cg", max_iter=400, tolerance=1e-12, **kw)) < 1e-6
    assert err(solve(*args, optim="relax", max_iter=2000, tolerance=1e-12, **kw)) < 1e-6
    for optim in ("cg", "relax"):
        assert err(solve_fmg(*args, optim=optim, nb_cycles=12, nb_iter=3, **kw)) < 1e-6
    # closed form: only the absolute term, exact
    if grid:
        x = nj.solve_grid_closedform(hg, gg, absolute=0.3, voxel_size=[1.0, 1.4])
        mat = dense(lambda e: nj.regulariser_grid(e, hessian=hg, absolute=0.3,
                                                  voxel_size=[1.0, 1.4]), shape + [c])
        ref = torch.linalg.solve(mat, gg.reshape(-1)).reshape(gg.shape)
    else:
        x = nj.solve_field_closedform(hf, gf, absolute=[0.3, 0.1, 0.2], dim=2)
        mat = dense(lambda e: nj.regulariser(e, hessian=hf, absolute=[0.3, 0.1, 0.2]),
                    [c] + shape)
        ref = torch.linalg.solve(mat, gf.reshape(-1)).reshape(gf.shape)
    assert err(x) < 1e-12


def test_weighted_solve_and_periodic_colours():
    # odd sizes with dft: the colouring must not put wrapped neighbours in one colour
    torch.manual_seed(5)
    shape = [5, 7, 3]
    w = torch.rand([1] + shape, dtype=F64) + 0.1
    g = torch.randn([2] + shape, dtype=F64)
    h = torch.rand([1] + shape, dtype=F64) + 0.1
    for kw in (dict(membrane=0.5, weights=w), dict(bending=0.3)):
        mat = dense(lambda e: nj.regulariser(e, hessian=h, bound="dft", **kw), [2] + shape)
        ref = torch.linalg.solve(mat, g.reshape(-1)).reshape(g.shape)
        x = nj.solve_field(h, g, bound="dft", optim="relax", max_iter=3000, tolerance=1e-12,
                           **kw)
        assert float((x - ref).norm() / ref.norm()) < 1e-6


def test_colour_periods():
    mem = R.taps(1, 1, [0], [1], [0], [1], [5])
    ben = R.taps(1, 1, [0], [0], [1], [1], [5])
    assert R.colour_periods(mem, [8], [5]) == [2]
    assert R.colour_periods(mem, [7], [5]) == [4]      # 7 mod 2 = 7 mod 3 = 1 would wrap
    assert R.colour_periods(mem, [7], [2]) == [2]      # no wrap with dct2
    assert R.colour_periods(ben, [9], [5]) == [3]
    assert R.colour_periods(ben, [10], [5]) == [5]     # 10 mod 3 = 1, 10 mod 4 = 2
    assert R.colour_periods(R.taps(1, 1, [1], [0], [0], [1], [5]), [7], [5]) == [1]
    for n in range(1, 20):
        for flat in (mem, ben):
            (p,) = R.colour_periods(flat, [n], [5])
            r = R.reach(flat, 1)
            for i in range(n):
                for o in range(1, r + 1):
                    j = (i + o) % n
                    assert j == i or i % p != j % p


@pytest.mark.slow
def test_fmg_convergence_rate_independent_of_size():
    rates = []
    for n in (32, 64):
        torch.manual_seed(0)
        g = torch.randn(1, n, n, n, 3)
        h = torch.rand(1, n, n, n, 3) * 1e-2
        kw = dict(membrane=1e-3, bending=0.1, lame=(0.05, 0.2))
        res = []
        for cycles in (1, 3):
            x = nj.solve_grid_fmg(h, g, nb_cycles=cycles, **kw)
            r = g - nj.regulariser_grid(x, hessian=h, **kw)
            res.append(float(r.norm() / g.norm()))
        rates.append((res[1] / res[0]) ** 0.5)
    assert max(rates) < 0.5
    assert max(rates) <= 2 * min(rates) + 1e-3, rates


# ----------------------------------------------------------------------------- autograd
def test_gradcheck_regulariser():
    torch.manual_seed(6)
    x = torch.randn(2, 4, 3, dtype=F64, requires_grad=True)
    h = (torch.rand(3, 4, 3, dtype=F64) + 0.5).requires_grad_()
    w = (torch.rand(1, 4, 3, dtype=F64) + 0.5).requires_grad_()
    torch.autograd.gradcheck(lambda x, h, w: nj.regulariser(
        x, absolute=0.2, membrane=[0.5, 1.0], hessian=h, weights=w, bound="dst2"), (x, h, w))
    v = torch.randn(3, 4, 2, dtype=F64, requires_grad=True)
    hg = (torch.rand(3, 4, 3, dtype=F64) + 0.5).requires_grad_()
    torch.autograd.gradcheck(lambda v, h: nj.regulariser_grid(
        v, membrane=0.3, bending=0.1, lame=(0.2, 0.3), hessian=h), (v, hg))


@pytest.mark.slow  # ~150 solves to 1e-14
def test_gradcheck_solvers():
    # The solvers' backward is one implicit-autograd Function in Python (ops/solvers.py) over
    # the kernels of the backend: the full Jacobian here, on the compiled kernels. Rerun on
    # the TORCH twin (tests/ops/regsolve/test_torch.py), whose kernels equal C's to 1e-10
    # elsewhere, gradcheck's fast mode checks a random projection of it: the full one there
    # took 160 s of twin relaxation sweeps (to 1e-14, for each of ~150 perturbed solves).
    import os
    gradcheck = torch.autograd.gradcheck
    if os.environ.get("NI_COMPILED_BACKEND") == "TORCH":
        def gradcheck(fn, inputs):
            return torch.autograd.gradcheck(fn, inputs, fast_mode=True)
    torch.manual_seed(7)
    g = torch.randn(2, 4, 3, dtype=F64, requires_grad=True)
    h = (torch.rand(3, 4, 3, dtype=F64) + 0.5).requires_grad_()
    w = (torch.rand(1, 4, 3, dtype=F64) + 0.5).requires_grad_()
    for optim in ("cg", "relax"):
        gradcheck(lambda g, h, w: nj.solve_field(
            h, g, weights=w, membrane=0.7, absolute=0.1, optim=optim, max_iter=1000,
            tolerance=1e-14), (g, h, w))
    gg = torch.randn(3, 4, 2, dtype=F64, requires_grad=True)
    hg = (torch.rand(3, 4, 3, dtype=F64) + 0.5).requires_grad_()
    gradcheck(lambda g, h: nj.solve_grid(
        h, g, membrane=0.3, bending=0.1, lame=(0.2, 0.3), max_iter=1000, tolerance=1e-14),
        (gg, hg))
    gradcheck(lambda g, h: nj.solve_field_closedform(h, g, absolute=0.3, dim=2), (g, h))


def test_opcheck():
    torch.manual_seed(8)
    x = torch.randn(2, 2, 5, 4, dtype=F64)
    h = torch.rand(2, 3, 5, 4, dtype=F64) + 1
    w = torch.rand(2, 1, 5, 4, dtype=F64) + 0.5
    taps = R.taps(2, 2, [0.1, 0.2], [0.5, 1.0], [0, 0], [1.0, 2.0], [2, 5], weighted=True)
    nj.regulariser(x, membrane=1)  # load the kernels
    ops = torch.ops.nitorch_jit
    for args in [(x.requires_grad_(), h, w, taps), (x, None, None, taps)]:
        torch.library.opcheck(ops.reg_matvec, args)
    torch.library.opcheck(ops.reg_precond, (x.detach(), h, w, taps))
    period = R.colour_periods(taps, [5, 4], [2, 5])
    torch.library.opcheck(ops.reg_relax_, (x.detach().clone(), h, x.detach(), w, taps,
                                           period, 2))


def test_torch_compile_fullgraph():
    # aot_eager traces the fake kernels and the registered autograd, with no graph break
    torch.manual_seed(10)
    x = torch.randn(1, 2, 6, 5, 4, requires_grad=True)
    h = torch.rand(1, 3, 6, 5, 4) + 1
    w = torch.rand(1, 1, 6, 5, 4) + 0.5

    def fn(x):
        return (nj.regulariser(x, membrane=1, absolute=0.1, hessian=h, weights=w) ** 2).sum()

    ref = fn(x)
    (gref,) = torch.autograd.grad(ref, x)
    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(x)
    (gout,) = torch.autograd.grad(out, x)
    assert torch.allclose(out, ref) and torch.allclose(gout, gref, atol=1e-5)
    v = torch.randn(1, 6, 5, 4, 3)
    fg = torch.compile(lambda v: nj.regulariser_grid(v, bending=0.5, lame=(0.1, 0.2)),
                       fullgraph=True, backend="aot_eager")
    assert torch.allclose(fg(v), nj.regulariser_grid(v, bending=0.5, lame=(0.1, 0.2)))


# ----------------------------------------------------------------------------- bad input
def test_errors_name_the_argument():
    x = torch.randn(2, 5, 5)
    cases = [
        (lambda: nj.regulariser(x, membrane=-1), "membrane"),
        (lambda: nj.regulariser(x, membrane=1, bound="dct1"), "bound"),
        (lambda: nj.regulariser(x, membrane=1, bound="replicate"), "bound"),
        (lambda: nj.regulariser(x, membrane=1, bound="nope"), "bound"),
        (lambda: nj.regulariser(x, membrane=1, hessian=torch.randn(4, 5, 5)), "hessian"),
        (lambda: nj.regulariser(x, membrane=1, hessian=torch.randn(1, 4, 5)), "hessian"),
        (lambda: nj.regulariser(x, membrane=1, hessian=torch.randn(1, 5, 5).double()),
         "hessian"),
        (lambda: nj.regulariser(x, bending=1, weights=torch.rand(1, 5, 5)), "weights"),
        (lambda: nj.regulariser(x, membrane=1, weights=torch.rand(3, 5, 5)), "weights"),
        (lambda: nj.regulariser(x, membrane=1, voxel_size=0), "voxel_size"),
        (lambda: nj.regulariser(x, membrane=1, dim=4), "dim"),
        (lambda: nj.regulariser(x, membrane=[1, 2, 3]), "membrane"),
        (lambda: nj.regulariser_grid(torch.randn(5, 5, 3), membrane=1), "v"),
        (lambda: nj.regulariser_grid(torch.randn(5, 5, 2), lame=(1, 2, 3)), "lame"),
        (lambda: nj.solve_field(None, x, membrane=1, optim="newton"), "optim"),
        (lambda: nj.solve_field(None, x, membrane=1, max_iter=0), "max_iter"),
        (lambda: nj.solve_field(None, x, membrane=1, tolerance=-1), "tolerance"),
        (lambda: nj.solve_field_fmg(None, x, membrane=1, nb_cycles=0), "nb_cycles"),
        (lambda: nj.regulariser(x.to(torch.int64), membrane=1), "x"),
    ]
    for fn, name in cases:
        with pytest.raises((ValueError, TypeError)) as info:
            fn()
        assert name in str(info.value), (name, str(info.value))


def test_no_channel_cap_and_best_iterate():
    torch.manual_seed(9)
    c = 70
    g = torch.randn(c, 6, 5, dtype=F64)
    h = torch.rand(c, 6, 5, dtype=F64) + 0.1
    x = nj.solve_field(h, g, membrane=0.5, optim="relax", max_iter=400, tolerance=1e-10)
    r = g - nj.regulariser(x, membrane=0.5, hessian=h)
    assert r.norm() / g.norm() < 1e-8
    # a solve stopped early returns the best iterate, not garbage
    x = nj.solve_field(h, g, membrane=0.5, max_iter=1)
    r1 = g - nj.regulariser(x, membrane=0.5, hessian=h)
    assert torch.isfinite(x).all() and r1.norm() < g.norm()


@pytest.mark.parametrize("dim", [1, 3])
def test_solvers_1d_and_3d_with_hessian(dim):
    # NITorch's 1-D relax/precond expanded the Hessian to 5-D and failed (facts §7.6)
    c, shape = 2, [9, 4, 3][:dim]
    h = _packed_hessian(1, c, shape, 3, seed=dim)[0]
    g = torch.randn([c] + shape, dtype=F64, generator=torch.Generator().manual_seed(dim))
    kw = dict(membrane=0.3, bending=0.1, bound="dft", dim=dim)
    mat = dense(lambda e: nj.regulariser(e, hessian=h, **kw), [c] + shape)
    ref = torch.linalg.solve(mat, g.reshape(-1)).reshape(g.shape)
    for x in (nj.solve_field(h, g, optim="cg", max_iter=500, tolerance=1e-13, **kw),
              nj.solve_field(h, g, optim="relax", max_iter=3000, tolerance=1e-13, **kw),
              nj.solve_field_fmg(h, g, nb_cycles=15, nb_iter=3, **kw)):
        assert float((x - ref).norm() / ref.norm()) < 1e-6
    v = torch.randn(shape + [dim], dtype=F64)
    hv = torch.rand(shape + [dim * (dim + 1) // 2], dtype=F64) * 0.1
    hv[..., :dim] += 1
    kw = dict(membrane=0.2, lame=(0.3, 0.1))
    matg = dense(lambda e: nj.regulariser_grid(e, hessian=hv, **kw), shape + [dim])
    refg = torch.linalg.solve(matg, v.reshape(-1)).reshape(v.shape)
    x = nj.solve_grid_fmg(hv, v, nb_cycles=15, nb_iter=3, **kw)
    assert float((x - refg).norm() / refg.norm()) < 1e-6


def test_docstring_examples():
    import doctest

    from nitorch_jit.ops import solvers
    for module in (R, solvers):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, (module.__name__, result)
