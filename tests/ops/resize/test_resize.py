"""resize / restrict / prolong / resize_grid: compiled (C) and pure-PyTorch (TORCH).

Oracles: scipy.ndimage.zoom (grid_mode=True for edges), torch-interpol's resize (pull at an
affine grid), the dot-product test for restrict (the adjoint of resize), gradcheck.
"""
import math

import numpy as np
import pytest
import torch

from nitorch_jit import backends
from nitorch_jit.ops import resize as api
from nitorch_jit.torch_impl import resize as twin

ndi = pytest.importorskip("scipy.ndimage")


@pytest.fixture(scope="module")
def c_ops():
    assert backends.ensure("resize", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit.resize, torch.ops.nitorch_jit.resize_adjoint


def _affine(anchor, n, m, f=None):
    return api.anchor_map(anchor, n, m, f)


# ----------------------------------------------------------------------------- C vs TORCH
@pytest.mark.parametrize("prefilter", [False, True])
def test_c_vs_torch(c_ops, prefilter):
    fwd, adj = c_ops
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 12, 7, dtype=torch.float64)
    shape = [18, 5, 7]
    aff = [_affine("e", 9, 18), _affine("c", 12, 5), _affine("l", 7, 7, 1.3)]
    scale, shift = [a[0] for a in aff], [a[1] for a in aff]
    for order in range(8):
        for bound in range(7):
            o, b = [order, max(0, order - 2), order], [bound] * 3
            a = fwd(x, shape, scale, shift, o, b, prefilter)
            r = twin.resize(x, shape, scale, shift, o, b, prefilter)
            assert torch.allclose(a, r, atol=1e-10, rtol=0), (order, bound)
            y = torch.randn_like(a)
            a2 = adj(y, [9, 12, 7], scale, shift, o, b, prefilter)
            r2 = twin.resize_adjoint(y, [9, 12, 7], scale, shift, o, b, prefilter)
            assert torch.allclose(a2, r2, atol=1e-10, rtol=0), (order, bound)
            # and they are adjoint
            assert math.isclose((a * y).sum().item(), (x * a2).sum().item(),
                                rel_tol=1e-10, abs_tol=1e-10)


def test_c_strided_and_float32(c_ops):
    fwd, _ = c_ops
    torch.manual_seed(1)
    base = torch.randn(3, 20, 11, 14, dtype=torch.float64)
    x = base.permute(0, 3, 1, 2)[:, :, ::2]          # non-contiguous [3, 14, 10, 11]
    args = ([17, 6], [10 / 17, 11 / 6], [0.1, -0.3], [3, 2], [2, 5], True)
    a = fwd(x, *args)
    r = twin.resize(x, *args)
    assert a.is_contiguous() and torch.allclose(a, r, atol=1e-10, rtol=0)
    a32 = fwd(x.float(), *args)
    assert a32.dtype == torch.float32
    assert torch.allclose(a32.double(), r, atol=1e-5, rtol=0)
    # stride-0 (expanded) batch
    e = base[:1].expand(4, -1, -1, -1)
    assert torch.allclose(fwd(e, *args), twin.resize(e.contiguous(), *args), atol=1e-10)


# ----------------------------------------------------------------------------- scipy
@pytest.mark.parametrize("order", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("mode,bound", [("reflect", "dct2"), ("mirror", "dct1"),
                                        ("grid-wrap", "dft")])
def test_vs_scipy_zoom(c_ops, order, mode, bound):
    rng = np.random.default_rng(order)
    x = rng.standard_normal((40, 33, 31))
    for grid_mode, anchor in [(True, "e"), (False, "c")]:
        if mode == "grid-wrap" and not grid_mode:
            continue  # scipy wraps with period n-1 there, not a bound of ours
        for zoom in (2, 0.5, 1.3):
            ref = ndi.zoom(x, zoom, order=order, mode=mode, grid_mode=grid_mode)
            if order == 0 and anchor == "e" and zoom in (2, 0.5):
                continue  # sampling on exact voxel edges: nearest-neighbour ties
            out = api.resize(torch.from_numpy(x)[None, None], shape=list(ref.shape),
                             anchor=anchor, interpolation=order, bound=bound)
            assert abs(out[0, 0].numpy() - ref).max() < 1e-9, (grid_mode, zoom)


# ----------------------------------------------------------------------------- interpol
@pytest.mark.parametrize("anchor", ["c", "e", "f", "l"])
@pytest.mark.parametrize("order", [1, 3] + [pytest.param(o, marks=pytest.mark.slow)
                                            for o in (2, 4, 5, 6, 7)])
def test_vs_interpol(c_ops, anchor, order):
    interpol = pytest.importorskip("interpol")
    torch.manual_seed(order)
    x = torch.randn(2, 2, 10, 13, 9, dtype=torch.float64)
    for factor in (2, 0.5, 1.7):
        ref = interpol.resize(x, factor=[factor] * 3, anchor=anchor, interpolation=order,
                              prefilter=True, bound="dct2")
        out = api.resize(x, factor=factor, anchor=anchor, interpolation=order, bound="dct2")
        assert out.shape == ref.shape
        assert torch.allclose(out, ref, atol=1e-9, rtol=0), factor


def test_vs_interpol_nearest_and_no_prefilter(c_ops):
    interpol = pytest.importorskip("interpol")
    x = torch.randn(1, 2, 10, 13, dtype=torch.float64)
    # factor 1.3 puts no sample on a voxel edge (no nearest-neighbour ties)
    for kw in [dict(interpolation=0), dict(interpolation=3, prefilter=False)]:
        ref = interpol.resize(x, factor=[1.3, 1.3], anchor="e", bound="dft", **kw)
        out = api.resize(x, factor=1.3, anchor="e", bound="dft", **kw)
        assert torch.allclose(out, ref, atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- properties
@pytest.mark.parametrize("anchor", ["c", "e", "f", "l"])
def test_restrict_is_adjoint(c_ops, anchor):
    torch.manual_seed(2)
    y = torch.randn(2, 3, 7, 9, 5, dtype=torch.float64)
    for order in range(8):
        for bound in ("dct2", "dct1", "dst1", "dst2", "dft", "zero", "replicate"):
            up = api.resize(y, factor=2, anchor=anchor, interpolation=order, bound=bound,
                            prefilter=False)
            g = torch.randn_like(up)
            down = api.restrict(g, factor=2, shape=[7, 9, 5], anchor=anchor,
                                interpolation=order, bound=bound, reduce_sum=True)
            assert down.shape == y.shape
            assert math.isclose((up * g).sum().item(), (y * down).sum().item(),
                                rel_tol=1e-10, abs_tol=1e-10), (order, bound)


def test_identity_and_constants(c_ops):
    x = torch.randn(2, 1, 8, 9, dtype=torch.float64)
    for order in range(8):
        for anchor in "cefl":
            assert torch.allclose(api.resize(x, 1, anchor=anchor, interpolation=order), x,
                                  atol=1e-10)
    ones = torch.ones(1, 1, 16, 12)
    assert torch.allclose(api.restrict(ones, 2, anchor="e"), torch.ones(1, 1, 8, 6))
    assert torch.allclose(api.prolong(ones[..., :8, :6]), ones)
    assert torch.allclose(api.resize(ones, 2.5, interpolation=3), torch.ones(1, 1, 40, 30))


def test_size_one_dims_no_nan(c_ops):
    x = torch.randn(1, 1, 1, 5)
    out = api.resize(x, shape=[3, 1], anchor="c", interpolation=3)
    assert out.shape == (1, 1, 3, 1) and torch.isfinite(out).all()
    out = api.restrict(torch.randn(1, 1, 4, 1), shape=[1, 1], anchor="c")
    assert torch.isfinite(out).all()


def test_prolong_restrict_multigrid(c_ops):
    torch.manual_seed(3)
    x = torch.randn(1, 2, 6, 5, 4, dtype=torch.float64)
    fine = api.prolong(x)
    assert fine.shape == (1, 2, 12, 10, 8)
    ref = api.resize(x, factor=2, anchor="e", interpolation=2, prefilter=False)
    assert torch.equal(fine, ref)
    odd = api.prolong(x, shape=[13, 11, 9])
    assert odd.shape == (1, 2, 13, 11, 9)
    coarse = api.restrict(fine, 2, anchor="e")
    assert coarse.shape == x.shape
    # full weighting along one dim: [1, 3, 3, 1] / 8 (edge-aligned linear, normalised)
    line = torch.zeros(1, 1, 8, dtype=torch.float64)
    line[..., 3] = 1
    assert torch.allclose(api.restrict(line, 2, anchor="e")[0, 0],
                          torch.tensor([0, 0.375, 0.125, 0], dtype=torch.float64))


def test_resize_grid(c_ops):
    torch.manual_seed(4)
    # an affine displacement is reproduced exactly by linear resizing (edges anchor)
    n = [6, 7, 5]
    A = torch.randn(3, 3, dtype=torch.float64) * 0.1
    idn = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in n],
                                     indexing="ij"), -1)
    disp = idn @ A.T + 0.3
    out = api.resize_grid(disp, factor=2, anchor="c", bound="dft", interpolation=1,
                          prefilter=False)
    m = [2 * s for s in n]
    scale = torch.tensor([(a - 1) / (b - 1) for a, b in zip(n, m)], dtype=torch.float64)
    idm = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in m],
                                     indexing="ij"), -1)
    # the displacement, in output voxels, of the same physical field
    ref = ((idm * scale) @ A.T + 0.3) / scale
    assert out.shape == (*m, 3)
    inner = (slice(1, -1),) * 3
    assert torch.allclose(out[inner], ref[inner], atol=1e-10)
    g = api.resize_grid(idn + disp, factor=2, anchor="c", interpolation=1, type="grid")
    assert torch.allclose(g[inner], (idm + ref)[inner], atol=1e-10)
    # batch dims
    b = api.resize_grid(disp[None].expand(2, -1, -1, -1, -1), shape=[4, 4, 4])
    assert b.shape == (2, 4, 4, 4, 3)


def test_bad_arguments_same_errors_as_c(c_ops):
    """The TORCH ops refuse each bad raw-op call of tests/cuda/lines_cases.py (dtypes, numbers
    of spatial sizes, lengths, output sizes, orders, bound codes, non-finite scale / shift,
    empty input dims, sizes past int32) with C's RuntimeError and first line
    (csrc/lines/checks.h), and change nothing."""
    from tests.cuda.lines_cases import bad_call_sweep
    names = ("resize", "resize_adjoint")
    assert bad_call_sweep(twin.KERNELS, torch.ops.nitorch_jit, names) == []


def test_api_errors():
    x = torch.randn(1, 1, 8, 8)
    with pytest.raises(ValueError, match="factor or shape"):
        api.resize(x)
    with pytest.raises(ValueError, match="anchor"):
        api.resize(x, 2, anchor="middle")
    with pytest.raises(ValueError, match="factor"):
        api.resize(x, -2)
    with pytest.raises(TypeError, match="factor"):
        api.resize(x, "2")
    with pytest.raises(ValueError, match="shape"):
        api.resize(x, shape=[0, 4])
    with pytest.raises(ValueError, match="interpolation"):
        api.resize(x, 2, interpolation=8)
    with pytest.raises(ValueError, match="bound"):
        api.resize(x, 2, bound="sliding")
    with pytest.raises(TypeError, match="image"):
        api.resize(torch.ones(1, 1, 4, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="image"):
        api.resize(torch.ones(4), 2)
    with pytest.raises(TypeError, match="prefilter"):
        api.resize(x, 2, prefilter=1)
    with pytest.raises(ValueError, match="type"):
        api.resize_grid(torch.zeros(4, 4, 2), 2, type="field")


def test_dims_and_dtypes(c_ops):
    x = torch.randn(2, 3, 8, 10)
    assert api.resize(x, [2]).shape == (2, 3, 8, 20)       # a list of one value: 1 dim
    assert api.resize(x, 2).shape == (2, 3, 16, 20)        # a scalar: every spatial dim
    assert api.resize(x, shape=[5, 5, 5]).shape == (2, 5, 5, 5)
    h = api.resize(x.to(torch.bfloat16), 2, interpolation=3)
    assert h.dtype == torch.bfloat16 and h.shape == (2, 3, 16, 20)
    assert api.restrict(x, 2).shape == (2, 3, 4, 5)


def test_gradcheck(c_ops):
    torch.manual_seed(5)
    x = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    for order, pf, bound in [(1, False, "dct2"), (3, True, "dct1"), (2, True, "dst2")]:
        f = lambda t: api.resize(t, factor=[1.7, 0.8], anchor="e",  # noqa: E731
                                 interpolation=order, prefilter=pf, bound=bound)
        assert torch.autograd.gradcheck(f, (x,))
        assert torch.autograd.gradgradcheck(f, (x,))
    y = torch.randn(1, 2, 9, 7, dtype=torch.float64, requires_grad=True)
    g = lambda t: api.restrict(t, 2, anchor="c", interpolation=3)  # noqa: E731
    assert torch.autograd.gradcheck(g, (y,))
    d = torch.randn(5, 4, 2, dtype=torch.float64, requires_grad=True)
    h = lambda t: api.resize_grid(t, 1.5, interpolation=3)  # noqa: E731
    assert torch.autograd.gradcheck(h, (d,))


@pytest.mark.slow
def test_torch_compile(c_ops):
    x = torch.randn(1, 1, 6, 7)
    f = torch.compile(lambda t: api.resize(t, 2, interpolation=3) + 1, fullgraph=True)
    assert torch.allclose(f(x), api.resize(x, 2, interpolation=3) + 1)
    d = torch.randn(5, 6, 2)
    g = torch.compile(lambda t: api.restrict(api.resize_grid(t, 2), 2, anchor="e"),
                      fullgraph=True)
    assert torch.allclose(g(d), api.restrict(api.resize_grid(d, 2), 2, anchor="e"))


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_torch_backend_subprocess(c_ops, tmp_path):
    """NI_COMPILED_BACKEND=TORCH serves splinc and resize through the registered twins."""
    import os
    import subprocess
    import sys
    torch.manual_seed(6)
    x = torch.randn(2, 1, 7, 6, dtype=torch.float64)
    torch.save(x, tmp_path / "x.pt")
    code = (
        "import torch, sys\n"
        "from nitorch_jit import backends\n"
        "from nitorch_jit.ops import resize as R, splinc as S\n"
        f"x = torch.load({str(tmp_path / 'x.pt')!r})\n"
        "y = R.resize(x, 1.5, interpolation=3, bound='dct1')\n"
        "z = R.restrict(x, 2, anchor='e')\n"
        "c = x.clone(); S.spline_coeff_nd(c, 4, 'dft', dim=2, inplace=True)\n"
        "assert backends.status()[('resize', 'cpu')][0] == 'TORCH'\n"
        "assert backends.status()[('splinc', 'cpu')][0] == 'TORCH'\n"
        f"torch.save((y, z, c), {str(tmp_path / 'out.pt')!r})\n")
    env = dict(os.environ, NI_COMPILED_BACKEND="TORCH")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    y, z, c = torch.load(tmp_path / "out.pt")
    from nitorch_jit.ops import splinc
    assert torch.allclose(y, api.resize(x, 1.5, interpolation=3, bound="dct1"), atol=1e-10)
    assert torch.allclose(z, api.restrict(x, 2, anchor="e"), atol=1e-10)
    assert torch.allclose(c, splinc.spline_coeff_nd(x, 4, "dft", dim=2), atol=1e-10)


def test_threads_agree(c_ops, knobs):
    knobs(parallel_min_work=1)  # small enough to split
    fwd, adj = c_ops
    x = torch.randn(3, 2, 20, 17, 9, dtype=torch.float64)
    args = ([31, 8, 9], [20 / 31, 17 / 8, 1.0], [0.1, 0.2, 0.0], [3, 1, 2], [2, 5, 1], True)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, one_a = fwd(x, *args), adj(x, *args)
        torch.set_num_threads(max(2, n))
        two, two_a = fwd(x, *args), adj(x, *args)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(one, two) and torch.equal(one_a, two_a)
