"""torch-interpol served by nitorch_jit (nitorch_jit.compat.interpol*): differential tests
against the original interpol 0.3.0 in float64 (1e-6 relative), the cases where interpol is
wrong and we are right (each named below), the switch (install / uninstall, lazy import,
already imported, interpol=False, the runner, the plugin, `nitorch-jit info`), clear errors on
bad input, and interpol's own test suite run through the plugin.

The original interpol stays reachable in this process: our functions are called directly from
nitorch_jit.compat.interpol_api / interpol_lowlevel, and everything that patches interpol runs
in a subprocess. The ``orig`` fixture checks that interpol's own functions are in place, so a
comparison can never be ours against ours.

Named differences (README, "torch-interpol"):

- dst1 sign (test_named_dst1_is_antisymmetric);
- grid_grad with mixed orders including order 1 (test_named_mixed_order_grid_grad);
- prefilter with dst1 / dst2 (test_named_prefilter_dst);
- push(prefilter=True) and spline_coeff's gradient for dct1 / zero
  (test_named_transposed_prefilter);
- restrict's normalisation for anchors e, f, l (test_named_restrict_mean);
- resize / restrict of label maps (test_named_label_resize);
- label maps with prefilter=True (test_named_label_prefilter);
- affine_grid of a batch of matrices, which raises in interpol
  (test_identity_and_affine_grids_match_interpol);
- interpol.pushpull.grid_hess at orders >= 2 without extrapolation (0 or 2), which raises
  in interpol, and so does the grid gradient of its grid_grad there
  (test_pushpull_module_matches_interpol checks ours by finite differences);
- order 0 at exact half-voxel ties (test_named_order0_ties);
- 2-D order-0 pull without extrapolation, which raises in interpol (test_named_order0_2d_pull).
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from nitorch_jit.codes import PEER_BOUND_CODES
from nitorch_jit.compat import interpol_api as A
from nitorch_jit.compat import interpol_lowlevel as L

from tests.compat.clients import client_env, counts, run_pytest
from tests.cuda.cases import gpu

interpol = pytest.importorskip("interpol")  # a test dependency (pip install -e .[test])

F64 = torch.float64
CODES = PEER_BOUND_CODES["torch-interpol and NITorch's TorchScript backend"]
CODE = {name: i for i, name in enumerate(CODES)}  # interpol's numbering
COMPARED = ["zero", "replicate", "dct1", "dct2", "dst2", "dft"]  # dst1: named below
FILTERED = ["zero", "replicate", "dct1", "dct2", "dft"]  # interpol's prefilter bounds
SYMMETRIC = ["replicate", "dct2", "dft"]  # bounds whose prefilter matrix is symmetric
SHAPES = {1: ([7], [5]), 2: ([6, 5], [4, 3]), 3: ([5, 4, 6], [3, 4, 2])}


@pytest.fixture
def orig():
    """interpol itself, with its own functions (not ours) in place."""
    for mod, name in [(interpol, "grid_pull"), (interpol, "resize"),
                      (interpol.coeff, "spline_coeff"), (interpol.pushpull, "grid_push")]:
        assert not getattr(mod, name).__module__.startswith("nitorch_jit"), \
            f"{mod.__name__}.{name} is ours: a test left the compat installed"
    return interpol


def randn(*shape, seed=0, dtype=F64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=F64).to(dtype)


def coords(out, inp, batch=(), margin=1.5, seed=1):
    """Random voxel coordinates, `margin` voxels beyond the image on each side."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand([*batch, *out, len(inp)], generator=gen, dtype=F64)
    size = torch.tensor(inp, dtype=F64)
    return u * (size - 1 + 2 * margin) - margin


def close(ours, ref):
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, (ours.shape, ref.shape)
    scale = ref.abs().max().item() if ref.numel() else 1.0
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6 * max(scale, 1e-12))


def pull_as_3d(x, g, **kw):
    """interpol's 2-D pull computed by its 3-D pull over a singleton third dim (its 2-D order-0
    pull without extrapolation raises: test_named_order0_2d_pull)."""
    g3 = torch.cat([g, g.new_zeros(g.shape[:-1] + (1,))], -1).unsqueeze(-2)
    return interpol.grid_pull(x.unsqueeze(-1), g3, **kw).squeeze(-1)


def both(name, *args, module=None, **kw):
    """(ours, interpol's) of the same call."""
    ours = getattr(A if module is None else L, name)
    theirs = getattr(interpol if module is None else getattr(interpol, module), name)
    if module is None and name == "grid_pull" and order0_2d(args[1], **kw):
        theirs = pull_as_3d
    return ours(*args, **kw), theirs(*args, **kw)


def order0_2d(grid, interpolation=None, extrapolate=False, **kw):
    return grid.shape[-1] == 2 and interpolation == 0 and not extrapolate


# ----------------------------------------------------------------------------- public API
@pytest.mark.parametrize("dim,order", [(d, o) for d in (1, 2, 3) for o in range(8)
                                       if d < 3 or o < 5]
                         + [pytest.param(3, o, marks=pytest.mark.slow) for o in (5, 6, 7)])
def test_resampling_matches_interpol(orig, dim, order):
    """grid_pull / grid_grad / grid_push / grid_count, every bound but dst1 (as interpol's
    integers and as names), extrapolate on and off, prefilter on the bounds interpol filters."""
    S, O = SHAPES[dim]
    for k, bound in enumerate(COMPARED):
        b = CODE[bound] if k % 2 else bound
        x = randn(2, 2, *S, seed=k)
        g = coords(O, S, batch=[2], seed=k + 10)
        v = randn(2, 2, *O, seed=k + 20)
        for ex in (True, False):
            kw = dict(interpolation=order, bound=b, extrapolate=ex)
            close(*both("grid_pull", x, g, **kw))
            close(*both("grid_grad", x, g, **kw))
            close(*both("grid_push", v, g, S, **kw))
            close(*both("grid_count", g, S, **kw))
        if bound in FILTERED:
            kw = dict(interpolation=order, bound=b, extrapolate=True, prefilter=True)
            close(*both("grid_pull", x, g, **kw))
            close(*both("grid_grad", x, g, **kw))
            if bound in SYMMETRIC:
                close(*both("grid_push", v, g, S, **kw))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_histogram_extrapolate_and_aliases(orig, dim):
    """extrapolate=2 (in bounds within half a voxel), the pull/push/count aliases, enum
    members and mixed per-dim options (a list longer than the dims is cut, as interpol does)."""
    S, O = SHAPES[dim]
    x, g, v = randn(1, 3, *S), coords(O, S, batch=[1], margin=1.0), randn(1, 3, *O)
    for name, args in (("pull", (x, g)), ("push", (v, g, S)), ("count", (g, S))):
        close(*both(name, *args, interpolation=2, bound="dct2", extrapolate=2))
    orders = [3, 1, 2, 5][:dim] + [2]
    bounds = [interpol.bounds.BoundType.dft, "reflect", 1, "zero"]
    close(*both("grid_pull", x, g, interpolation=orders, bound=bounds))
    close(*both("grid_push", v, g, S, interpolation=orders, bound=bounds))
    close(*both("grid_pull", x, g, interpolation=interpol.splines.InterpolationType.cubic,
                bound=interpol.bounds.BoundType.mirror))


LAYOUTS = [  # (input shape, grid batch): interpol's channel and batch conventions
    ("no channel, no batch", [], []),
    ("no channel, batched grid", [], [2]),
    ("channel, no batch", [3], []),
    ("batch and channel", [2, 3], [2]),
    ("broadcast batch dims", [3, 1, 2], [2]),
]


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("lead,gbatch", [l[1:] for l in LAYOUTS], ids=[l[0] for l in LAYOUTS])
def test_layouts_match_interpol(orig, dim, lead, gbatch):
    S, O = SHAPES[dim]
    x = randn(*lead, *S, seed=3)
    g = coords(O, S, batch=gbatch, seed=4)
    for op in ("grid_pull", "grid_grad"):
        close(*both(op, x, g, interpolation=3, bound="dct2", prefilter=True))
    v = randn(*lead, *O, seed=5)
    close(*both("grid_push", v, g, S, interpolation=2, bound="dft"))
    close(*both("grid_count", g, S, interpolation=1, bound="replicate"))
    # push broadcasts the spatial dims of the values against the grid's
    close(*both("grid_push", randn(*lead, *[1] * dim, seed=6), g, S, interpolation=1))


def test_mixed_dtypes_compute_in_the_promoted_one(orig):
    x = randn(1, 2, 6, 5, dtype=torch.float32)
    g = coords([3, 4], [6, 5], batch=[1])
    close(*both("grid_pull", x, g, interpolation=3, bound="dct2"))


def labels_from_masks(lab, g, **kw):
    """interpol's label rule on interpol's float pulls of each label's mask: the label of
    largest positive weight, else 0."""
    out, best = None, None
    for label in torch.unique(lab):
        mask = (lab == label).to(g.dtype)
        pull = pull_as_3d if order0_2d(g, **kw) else interpol.grid_pull
        w = pull(mask, g, **kw)
        if out is None:
            out, best = torch.zeros(w.shape, dtype=lab.dtype), torch.zeros_like(w)
        out[w > best] = label
        best = torch.maximum(best, w)
    return out


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order,prefilter", [(0, False), (1, False), (3, False), (3, True)])
def test_label_maps_match_interpol(orig, dim, order, prefilter):
    """Integer images are pulled label by label: the label of largest positive weight, 0
    where none is positive (labels here: -1..3, so 0 is not the smallest). Compared with
    interpol's label pull where it works, and always with its rule applied to its float pulls
    (test_named_label_prefilter)."""
    S, O = SHAPES[dim]
    gen = torch.Generator().manual_seed(dim)
    lab = torch.randint(-1, 4, [2, 1, *S], generator=gen)
    g = coords(O, S, batch=[2], margin=3.0, seed=dim)
    for bound in ("zero", "dct2"):
        kw = dict(interpolation=order, bound=bound, prefilter=prefilter)
        ours = A.grid_pull(lab, g, **kw)
        assert ours.dtype == lab.dtype and torch.equal(ours, labels_from_masks(lab, g, **kw))
        if not prefilter and not (dim == 2 and order == 0):
            assert torch.equal(ours, interpol.grid_pull(lab, g, **kw))


def test_named_label_prefilter(orig):
    """Label maps with prefilter=True: interpol replaces its image by the coefficients of the
    first label's mask, so the later labels are compared with those (most voxels get 0);
    ours prefilters each label's mask."""
    gen = torch.Generator().manual_seed(1)
    lab = torch.randint(-1, 4, [2, 1, 7], generator=gen)
    g = coords([5], [7], batch=[2], margin=3.0, seed=1)
    kw = dict(interpolation=3, bound="dct2", prefilter=True)
    ours = A.grid_pull(lab, g, **kw)
    assert torch.equal(ours, labels_from_masks(lab, g, **kw))
    assert not torch.equal(interpol.grid_pull(lab, g, **kw), ours)


@pytest.mark.parametrize("order", range(8))
def test_spline_coeff_matches_interpol(orig, order):
    x = randn(3, 6, 7, seed=order)
    for k, bound in enumerate(FILTERED):
        b = CODE[bound] if k % 2 else bound
        for dim in (-1, 0, 1):
            close(*both("spline_coeff", x, order, b, dim))
        close(*both("spline_coeff_nd", x, [order, 2], [b, "dft"], 2))
        close(*both("spline_coeff_nd", x, order, b))  # dim=None: every dim
        # a list: spline_coeff takes its first value
        close(*both("spline_coeff", x, [order, 1], [b, "zero"]))


@pytest.mark.parametrize("order", [0, 1, 3])
def test_spline_coeff_inplace(orig, order):
    for inplace in (False, True):
        for fn in ("spline_coeff", "spline_coeff_nd"):
            x, y = randn(4, 9, seed=2), randn(4, 9, seed=2)
            ours = getattr(A, fn)(x, order, "dct2", 1 if fn.endswith("nd") else -1, inplace)
            ref = getattr(interpol, fn)(y, order, "dct2", 1 if fn.endswith("nd") else -1,
                                        inplace)
            close(ours, ref)
            # the input's memory exactly when inplace, and overwritten alike
            assert (ours.data_ptr() == x.data_ptr()) == (ref.data_ptr() == y.data_ptr()) \
                == inplace
            close(x, y)


RESIZE_ANCHORS = ["c", "e", "f", "l", "centers", "edges", "first", "last"]


@pytest.mark.parametrize("anchor", RESIZE_ANCHORS)
@pytest.mark.parametrize("order", range(8))
def test_resize_matches_interpol(orig, anchor, order):
    """Factors, shapes, both; scalar factor (the last dim only, as interpol counts dims);
    prefilter; the bound and extrapolate passed on."""
    x = randn(1, 2, 6, 5, 7, seed=order)
    cases = [dict(factor=[1.7, 2.3, 0.6]), dict(factor=1.3), dict(shape=[9, 4, 11]),
             dict(factor=[1.7, 0.7], shape=[10, 3]), dict(factor=[1.7, 2.3, 0.6],
                                                          prefilter=False),
             dict(factor=[1.3], bound="dft"), dict(factor=[1.7, 2.3, 0.6], bound="dct1",
                                                   extrapolate=False)]
    if order == 0:  # factors whose sample points are never at exact .5 (named: ties)
        cases = [c for c in cases if c.get("factor") == [1.7, 2.3, 0.6]]
    for kw in cases:
        close(*both("resize", x, anchor=anchor, interpolation=order, **kw))


@pytest.mark.parametrize("anchor", RESIZE_ANCHORS)
@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_restrict_matches_interpol(orig, anchor, order):
    """reduce_sum=True everywhere, the mean for anchor c (e, f, l: named below)."""
    x = randn(1, 2, 9, 8, 11, seed=order)
    for kw in (dict(factor=[1.7, 2.0, 1.4]), dict(shape=[5, 4, 6]), dict(factor=2.2),
               dict(factor=[2, 1.5], shape=[4, 5]), dict(factor=[2.0], bound="dct2"),
               dict(factor=[1.7, 2.0, 1.4], prefilter=True),  # replicate: a symmetric filter
               dict(factor=[1.7, 2.0, 1.4], bound="dct1", extrapolate=False)):
        close(*both("restrict", x, anchor=anchor, interpolation=order, reduce_sum=True, **kw))
        if anchor[0] == "c":
            close(*both("restrict", x, anchor=anchor, interpolation=order, **kw))


def test_identity_and_affine_grids_match_interpol(orig):
    close(*both("identity_grid", [3, 4, 2], F64))
    d = randn(2, 3, 4, 2, seed=1)
    close(*both("add_identity_grid", d))
    d1, d2 = d.clone(), d.clone()
    out1, out2 = A.add_identity_grid_(d1), interpol.add_identity_grid_(d2)
    close(out1, out2)
    close(d1, d2)  # in place, both
    mat = randn(2, 3, 4, seed=2)
    close(*both("affine_grid", mat[0], [3, 4, 2]))
    close(*both("affine_grid", mat[1].tolist() + [[0, 0, 0, 1]], [2, 2, 3]))
    # a batch of matrices: interpol's own raises (a shape error in its matvec); ours stacks
    # what interpol gives for each matrix
    with pytest.raises(RuntimeError):
        interpol.affine_grid(mat, [3, 4, 2])
    close(A.affine_grid(mat, [3, 4, 2]),
          torch.stack([interpol.affine_grid(m, [3, 4, 2]) for m in mat]))


# ----------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [0, 1, 2, 3, 5])
def test_gradients_match_interpol(orig, dim, order):
    S, O = SHAPES[dim]
    for k, bound in enumerate(["dct2", "zero", "dft"]):
        for name in ("grid_pull", "grid_grad", "grid_push", "grid_count"):
            g = coords(O, S, batch=[2], seed=k)
            args = {"grid_pull": (randn(2, 2, *S),), "grid_grad": (randn(2, 2, *S),),
                    "grid_push": (randn(2, 2, *O),), "grid_count": ()}[name]
            ins = [t.clone().requires_grad_() for t in args] + [g.clone().requires_grad_()]
            tail = (S,) if name in ("grid_push", "grid_count") else ()
            results = []
            for fn in (getattr(A, name), getattr(interpol, name)):
                call = ([ins[0], ins[1]] if args else [ins[0]]) + list(tail)
                out = fn(*call, interpolation=order, bound=bound, extrapolate=True)
                w = randn(*out.shape, seed=7)
                results.append(torch.autograd.grad((out * w).sum(), ins))
            for ours, ref in zip(*results):
                close(ours, ref)


# ----------------------------------------------------------------------------- internal modules
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [0, 1, 3, 4])
def test_pushpull_module_matches_interpol(orig, dim, order):
    """interpol.pushpull's positional functions (bound first, interpol's integers, extrapolate
    0 / 1 / 2) and their backward pairs for every requires_grad combination."""
    S, O = SHAPES[dim]
    bound, interp = [CODE["dct2"], CODE["dft"], CODE["zero"]][:dim], [order]
    x, g, v = randn(2, 2, *S), coords(O, S, batch=[2]), randn(2, 2, *O)
    gg = randn(2, 2, *O, dim, seed=3)
    for ex in (0, 1, 2):
        opts = (bound, interp, ex)
        if not (dim == 2 and order == 0 and ex != 1):  # test_named_order0_2d_pull
            close(*both("grid_pull", x, g, *opts, module="pushpull"))
        close(*both("grid_grad", x, g, *opts, module="pushpull"))
        close(*both("grid_push", v, g, S, *opts, module="pushpull"))
        close(*both("grid_count", g, S, *opts, module="pushpull"))
        close(*both("grid_pushgrad", gg, g, S, *opts, module="pushpull"))
        hess_ok = order < 2 or ex == 1  # interpol's hess is broken elsewhere (named below)
        if hess_ok:
            with torch.no_grad():
                close(*both("grid_hess", x, g, *opts, module="pushpull"))
        else:  # central differences of interpol's grid_grad instead
            fd = []
            for d in range(dim):
                e = torch.zeros(dim, dtype=F64)
                e[d] = 1e-6
                fd.append((interpol.pushpull.grid_grad(x, g + e, *opts)
                           - interpol.pushpull.grid_grad(x, g - e, *opts)) / 2e-6)
            torch.testing.assert_close(L.grid_hess(x, g, *opts), torch.stack(fd, -1),
                                       rtol=1e-5, atol=1e-5)
        if dim == 2 and order == 0 and ex != 1:
            continue  # the backward pairs pull: test_named_order0_2d_pull
        for need_x, need_g in ((True, False), (False, True), (True, True), (False, False)):
            xi, gi = x.clone().requires_grad_(need_x), g.clone().requires_grad_(need_g)
            vi = v.clone().requires_grad_(need_x)
            for name, args in (("grid_pull_backward", (v, xi, gi)),
                               ("grid_push_backward", (x, vi, gi)),
                               ("grid_grad_backward", (gg, xi, gi if hess_ok else g))):
                with torch.no_grad():  # as interpol's autograd calls them
                    ours, ref = both(name, *args, *opts, module="pushpull")
                assert isinstance(ours, tuple) and len(ours) == 2
                for o, r in zip(ours, ref):
                    assert (o is None) == (r is None), name
                    if r is not None:
                        close(o, r)
            with torch.no_grad():
                ours, ref = both("grid_count_backward", randn(2, 1, *S), gi, *opts,
                                 module="pushpull")
            assert (ours is None) == (ref is None) == (not need_g)
            if ref is not None:
                close(ours, ref)


@pytest.mark.parametrize("order", range(8))
def test_coeff_module_matches_interpol(orig, order):
    """interpol.coeff.spline_coeff(inp, bound, order, dim, inplace) and spline_coeff_nd, with
    interpol's integer bounds, as NITorch calls them."""
    x = randn(2, 5, 6, 4, seed=order)
    for bound in FILTERED:
        b = CODE[bound]
        for dim in (-1, 1, 2):
            close(*both("spline_coeff", x, b, order, dim, False, module="coeff"))
        close(*both("spline_coeff_nd", x, [b], [order], 3, False, module="coeff"))
        close(*both("spline_coeff_nd", x, [b, CODE["dft"]], [order, 2], None, False,
                    module="coeff"))
    y1, y2 = x.clone(), x.clone()
    out1 = L.spline_coeff_nd(y1, [CODE["dct2"]], [order], 2, True)
    out2 = interpol.coeff.spline_coeff_nd(y2, [CODE["dct2"]], [order], 2, True)
    close(out1, out2)
    close(y1, y2)


# ----------------------------------------------------------------------------- CUDA
def device_results(dev):
    """Ours on `dev`, each call of the public and internal functions once (float64)."""
    S, O = SHAPES[3]
    x, g, v = randn(2, 2, *S), coords(O, S, batch=[2]), randn(2, 2, *O)
    lab = torch.randint(0, 3, [2, 1, *S], generator=torch.Generator().manual_seed(0))
    x, g, v, lab = (t.to(dev) for t in (x, g, v, lab))
    xr, gr = x.clone().requires_grad_(), g.clone().requires_grad_()
    out = A.grid_pull(xr, gr, 3, "dct2", True, True)
    grads = torch.autograd.grad((out * out).sum(), [xr, gr])
    return [out.detach(), *grads,
            A.grid_grad(x, g, [1, 2, 3], "dft", False),
            A.grid_push(v, g, S, 5, "dst2", True, True),
            A.grid_count(g, S, 2, "replicate", 2),
            A.grid_pull(lab, g, 1, "zero"),
            A.resize(x, factor=[1.7, 2.3, 0.6], interpolation=3),
            A.restrict(x, factor=2, anchor="e", interpolation=2),
            A.spline_coeff_nd(x, 7, "dct1", 3),
            L.grid_hess(x, g, [3], [3], 1),
            L.grid_pushgrad(randn(2, 2, *O, 3).to(dev), g, S, [3], [2], 0)]


def test_device_results_dry_run_on_cpu():
    assert all(t.device.type == "cpu" for t in device_results("cpu"))


@gpu
def test_cuda_tensors_give_the_cpu_results():
    for got, want in zip(device_results("cuda"), device_results("cpu")):
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- named cases
def test_named_dst1_is_antisymmetric(orig):
    """dst1: ours is the antisymmetric extension about the virtual voxels -1 and n, i.e. the
    pull of the explicit period [x, 0, -reversed(x), 0] with interpol's own dft bound;
    interpol's dst1 zeroes the weight of a real voxel instead."""
    n = 6
    x = randn(1, 1, n, seed=4)
    period = torch.cat([x, x.new_zeros(1, 1, 1), -x.flip(-1), x.new_zeros(1, 1, 1)], -1)
    g = coords([40], [n], batch=[1], margin=4.0, seed=5)
    for order in range(8):
        ours = A.grid_pull(x, g, order, "dst1", True)
        oracle = interpol.grid_pull(period, g % (2 * n + 2), order, "dft", True)
        close(ours, oracle)
        if order >= 1:
            theirs = interpol.grid_pull(x, g, order, "dst1", True)
            assert (theirs - oracle).abs().max() > 1e-3


def test_named_mixed_order_grid_grad(orig):
    """grid_grad with mixed orders including order 1: ours is the derivative of the pull
    (central differences of interpol's own pull); interpol's is not."""
    S, O = SHAPES[3]
    x, g = randn(1, 2, *S, seed=6), coords(O, S, batch=[1], margin=0.0, seed=7)
    for orders in ([1, 1, 3], [1, 0, 1], [3, 1, 2]):
        ours = A.grid_grad(x, g, orders, "dct2", True)
        fd = []
        for d in range(3):
            e = torch.zeros(3, dtype=F64)
            e[d] = 1e-6
            fd.append((interpol.grid_pull(x, g + e, orders, "dct2", True)
                       - interpol.grid_pull(x, g - e, orders, "dct2", True)) / 2e-6)
        fd = torch.stack(fd, -1)
        torch.testing.assert_close(ours, fd, rtol=1e-5, atol=1e-6)
        theirs = interpol.grid_grad(x, g, orders, "dct2", True)
        assert (theirs - fd).abs().max() > 1e-2


@pytest.mark.parametrize("bound", ["dst1", "dst2"])
def test_named_prefilter_dst(orig, bound):
    """interpol's prefilter raises NotImplementedError for dst1 / dst2; ours interpolates:
    pulling at the voxel centres gives the samples back."""
    x = randn(1, 2, 7, 6, seed=8)
    with pytest.raises(NotImplementedError):
        interpol.grid_pull(x, interpol.identity_grid([7, 6], F64), 3, bound, prefilter=True)
    for order in range(2, 8):
        back = A.grid_pull(x, A.identity_grid([7, 6], F64), order, bound, prefilter=True)
        torch.testing.assert_close(back, x, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("bound", ["dct1", "zero"])
def test_named_transposed_prefilter(orig, bound):
    """dct1's prefilter matrix is not symmetric. Ours: push(prefilter=True) is the adjoint of
    pull(prefilter=True), and spline_coeff's gradient is the transposed matrix (built from
    interpol's own forward on unit vectors). interpol applies the forward filter in both."""
    n, order = 7, 3
    M = torch.stack([interpol.spline_coeff(torch.eye(n, dtype=F64)[i], order, bound)
                     for i in range(n)], -1)  # column i: the coefficients of unit vector i
    assert (M - M.T).abs().max() > 1e-3
    w = randn(n, seed=9)
    for fn in (A.spline_coeff, A.spline_coeff_nd, interpol.spline_coeff_nd):
        x = torch.zeros(n, dtype=F64, requires_grad=True)
        (fn(x, order, bound) * w).sum().backward()
        if fn is interpol.spline_coeff_nd:
            assert (x.grad - M.T @ w).abs().max() > 1e-3
        else:
            close(x.grad, M.T @ w)
    # (interpol's 1-D spline_coeff has no working gradient at all: its backward returns a
    # list where autograd wants one value per input, and raises)
    x, g, y = randn(1, 1, n, seed=10), coords([9], [n], batch=[1], seed=11), randn(1, 1, 9)
    lhs = (A.grid_pull(x, g, order, bound, True, True) * y).sum()
    rhs = (x * A.grid_push(y, g, [n], order, bound, True, True)).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=1e-12)
    rhs = (x * interpol.grid_push(y, g, [n], order, bound, True, True)).sum()
    assert abs(lhs - rhs) > 1e-3


@pytest.mark.parametrize("anchor", ["e", "f", "l"])
def test_named_restrict_mean(orig, anchor):
    """restrict(reduce_sum=False) is a mean: ours multiplies the sum by the map's scale per
    dim (interpol does so for anchor c); interpol divides by it for e, f and l."""
    x = torch.ones(1, 1, 16, 12, dtype=F64)
    ours = A.restrict(x, factor=2, anchor=anchor)
    assert ours.shape == (1, 1, 16, 6)
    inner = ours[..., 1:-1]
    torch.testing.assert_close(inner, torch.ones_like(inner))
    total = interpol.restrict(x, factor=2, anchor=anchor, reduce_sum=True)
    close(ours, total * 0.5)
    theirs = interpol.restrict(x, factor=2, anchor=anchor)
    close(theirs, total * 2)


def test_named_label_resize(orig):
    """resize of a label map: interpol builds its grid in the image's integer dtype (its
    coordinates truncated); ours samples at the same coordinates as a float image, i.e.
    interpol's own label grid_pull at the float grid of the resize."""
    gen = torch.Generator().manual_seed(3)
    lab = torch.randint(0, 4, [1, 1, 5, 6], generator=gen)
    ours = A.resize(lab, factor=[1.5, 1.7], interpolation=1)
    grid = torch.stack(torch.meshgrid(torch.linspace(0, 4, 7, dtype=F64),
                                      torch.linspace(0, 5, 10, dtype=F64), indexing="ij"), -1)
    ref = interpol.grid_pull(lab, grid, 1, "nearest", True)
    assert ours.dtype == lab.dtype and torch.equal(ours, ref)
    assert not torch.equal(interpol.resize(lab, factor=[1.5, 1.7], interpolation=1), ref)


def test_named_order0_ties(orig):
    """Order 0 at exact half-voxel coordinates: ours rounds half up (x[floor(c + 0.5)]),
    interpol half to even. resize(factor=2, anchor='f') samples at i / 2."""
    x = randn(1, 1, 8, seed=12)
    ours = A.resize(x, factor=2, anchor="f", interpolation=0)
    idx = torch.clamp(torch.floor(torch.arange(16, dtype=F64) / 2 + 0.5), max=7).long()
    close(ours, x[..., idx])
    assert not torch.equal(interpol.resize(x, factor=2, anchor="f", interpolation=0), ours)


def test_named_order0_2d_pull(orig):
    """interpol's 2-D pull at order 0 without extrapolation computes a bool tensor of one
    channel: with several channels it raises, with one it returns that bool tensor. Ours
    equals interpol's own 3-D pull over a singleton third dim."""
    S, O = SHAPES[2]
    x, g = randn(2, 2, *S, seed=13), coords(O, S, batch=[2], seed=14)
    with pytest.raises(RuntimeError):
        interpol.grid_pull(x, g, 0, "dct2", False)
    assert interpol.grid_pull(x[:, :1], g, 0, "dct2", False).dtype == torch.bool
    for c in (slice(None), slice(0, 1)):
        close(A.grid_pull(x[:, c], g, 0, "dct2", False),
              pull_as_3d(x[:, c], g, interpolation=0, bound="dct2", extrapolate=False))


# ----------------------------------------------------------------------------- bad input
BAD = [
    (lambda: A.grid_pull([1, 2], torch.zeros(2, 1)), TypeError, "input: expected a torch.Tensor"),
    (lambda: A.grid_pull(torch.zeros(3), torch.zeros(2, 4)), ValueError, "grid: expected"),
    (lambda: A.grid_pull(torch.zeros(3), torch.zeros(2, 1), bound=9), ValueError,
     "torch-interpol's numbering"),
    (lambda: A.grid_pull(torch.zeros(3), torch.zeros(2, 1), interpolation=8), ValueError,
     "interpolation: unknown"),
    (lambda: A.grid_pull(torch.zeros(3), torch.zeros(2, 1), extrapolate=3), ValueError,
     "extrapolate"),
    (lambda: A.grid_pull(torch.zeros(3, 2, 5), torch.zeros(4, 2, 1)), ValueError,
     "broadcast"),
    (lambda: A.grid_grad(torch.zeros(3, dtype=torch.long), torch.zeros(2, 1)), TypeError,
     "floating-point"),
    (lambda: A.grid_push(torch.zeros(3), torch.zeros(2, 1)), ValueError, "broadcast"),
    (lambda: A.resize(torch.zeros(1, 1, 4)), ValueError, "factor or shape"),
    (lambda: A.resize(torch.zeros(1, 1, 4), factor=-2), ValueError, "factor"),
    (lambda: A.resize(torch.zeros(1, 1, 4), factor=2, anchor="x"), ValueError, "anchor"),
    (lambda: A.resize(torch.zeros(1, 1, 4), factor=2, order=3), TypeError, "keyword"),
    (lambda: A.resize(torch.zeros(4), factor=[2, 2]), ValueError, "spatial dims"),
    (lambda: A.restrict(torch.zeros(1, 1, 4), shape=1), ValueError, "'c'"),
    (lambda: A.spline_coeff(torch.zeros(4), 3, "dct2", dim=5), ValueError, "dim"),
    (lambda: L.spline_coeff(torch.zeros(4), 11, 3), ValueError, "numbering"),
    (lambda: L.grid_pull(torch.zeros(1, 1, 4), torch.zeros(1, 2, 4), [0], [1], 0), ValueError,
     "grid"),
]


@pytest.mark.parametrize("call,exc,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_gets_a_clear_error(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_docstring_examples():
    import doctest

    from nitorch_jit.compat import interpol as route
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    tests = [t for m in (A, L, route) for t in finder.find(m) if t.examples]
    assert len(tests) >= 25
    failed = [t.name for t in tests if runner.run(t).failed]
    assert not failed, failed


# ----------------------------------------------------------------------------- the switch
def run_py(code, tmp_path, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=client_env(**env), capture_output=True, text=True, timeout=600)


OURS = "lambda f: f.__module__.startswith('nitorch_jit')"


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_install_serves_interpol_imported_later_and_lazily(tmp_path):
    (tmp_path / "lazy_client.py").write_text(
        "def warp(x, g):\n    import interpol\n    return interpol.grid_pull(x, g, 3, 'dct2', "
        "prefilter=True)\n")
    res = run_py(f"""
        import sys, torch, nitorch_jit.compat as c
        ours = {OURS}
        print(c.install(nitorch=False, monai=False), c.patched(), 'interpol' in sys.modules)
        import lazy_client
        out = lazy_client.warp(torch.rand(1, 1, 5), torch.rand(1, 3, 1) * 4)
        import interpol, interpol.api, interpol.coeff, interpol.pushpull, interpol.autograd
        print(all(ours(f) for f in (interpol.grid_pull, interpol.resize,
              sys.modules['interpol.restrict'].restrict,
              interpol.coeff.spline_coeff_nd, interpol.pushpull.grid_push,
              interpol.autograd.grid_pull, interpol.api.grid_grad)),
              interpol.bounds.BoundType.dct2.value, out.shape)
        from nitorch_jit.compat.interpol import is_served
        # interpol's own autograd classes run on ours too (their forward and backward)
        x = torch.rand(1, 1, 5, dtype=torch.float64, requires_grad=True)
        g = (torch.rand(1, 3, 1, dtype=torch.float64) * 4).requires_grad_()
        y = interpol.autograd.GridPull.apply(x, g, 3, 'dct2', 1)
        gx, gg = torch.autograd.grad(y.sum(), [x, g])
        import nitorch_jit as nj
        ref = torch.autograd.grad(nj.grid_pull(x, g, 3, 'dct2', True).sum(), [x, g])
        assert torch.allclose(gx, ref[0]) and torch.allclose(gg, ref[1])
        print(is_served())
        c.uninstall()
        print(ours(interpol.grid_pull), ours(interpol.coeff.spline_coeff), c.patched(), is_served())
    """, tmp_path, PYTHONPATH=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "[] ['interpol'] False", lines
    assert lines[1] == "True 3 torch.Size([1, 1, 3])", lines
    assert lines[2:] == ["True", "False False [] False"], lines


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_install_interpol_false_leaves_it_alone(tmp_path):
    res = run_py(f"""
        import nitorch_jit.compat as c
        c.install(interpol=False)
        import interpol
        print(({OURS})(interpol.grid_pull), c.patched())
    """, tmp_path)
    assert res.stdout.split() == ["False", "[]"], res.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_already_imported_is_served_from_then_on(tmp_path):
    res = run_py(f"""
        import interpol, nitorch_jit.compat as c
        c.install()
        print(({OURS})(interpol.grid_pull), ({OURS})(interpol.pushpull.grid_pull))
    """, tmp_path)
    assert res.stdout.split() == ["True", "True"], res.stderr


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_already_imported_and_held_elsewhere_is_an_error(tmp_path):
    (tmp_path / "holder.py").write_text("from interpol import grid_pull\n")
    res = run_py("""
        import holder, nitorch_jit.compat as c
        try:
            c.install()
        except RuntimeError as e:
            print('ERR', e)
        import interpol
        print(interpol.grid_pull.__module__, c.served(), c.patched())
    """, tmp_path, PYTHONPATH=tmp_path)
    assert res.stdout.startswith("ERR"), res.stdout + res.stderr
    assert "holder.grid_pull" in res.stdout and "before importing interpol" in res.stdout
    assert "interpol=False" in res.stdout
    # nothing half-done: neither interpol nor the other clients are served
    assert res.stdout.splitlines()[-1] == "interpol.api [] []", res.stdout


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_changed_signature_stays_interpols_own_with_a_warning(tmp_path):
    """interpol's next release: a function whose signature changed is not swapped."""
    res = run_py("""
        import warnings, interpol, interpol.api
        def grid_pull(input, grid, order=1, mode='zero'):
            return 'new'
        interpol.grid_pull = interpol.api.grid_pull = grid_pull
        import nitorch_jit.compat as c
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            c.install()
        print(interpol.grid_pull is grid_pull, interpol.resize.__module__)
        print(w[0].message)
    """, tmp_path)
    lines = res.stdout.splitlines()
    assert lines[0] == "True nitorch_jit.compat.interpol_api", res.stdout + res.stderr
    assert "interpol.grid_pull" in lines[1] and "interpol's own" in lines[1]


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_runner_serves_interpol_unless_told_not_to(tmp_path):
    (tmp_path / "prog.py").write_text(
        "import interpol\nprint(interpol.grid_pull.__module__)\n")
    outs = []
    for flags in ([], ["--no-interpol"]):
        res = subprocess.run([sys.executable, "-m", "nitorch_jit.compat", *flags, "prog.py"],
                             cwd=tmp_path, env=client_env(), capture_output=True, text=True,
                             timeout=600)
        outs.append(res.stdout.strip())
    assert outs == ["nitorch_jit.compat.interpol_api", "interpol.api"], outs


@pytest.mark.slow
def test_info_says_whether_interpol_is_served(tmp_path):
    for runner, expect in (([], "no"), (["-m", "nitorch_jit.compat"], "yes")):
        res = subprocess.run([sys.executable, *runner, "-m", "nitorch_jit", "info"],
                             cwd=tmp_path, env=client_env(), capture_output=True, text=True,
                             timeout=600)
        line = [s for s in res.stdout.splitlines() if s.startswith("torch-interpol")]
        assert line and f"in this process: {expect}" in line[0], res.stdout[-2000:]


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_plugin_serves_interpol(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        "import interpol\n"
        "def test_served():\n"
        "    assert interpol.grid_pull.__module__ == 'nitorch_jit.compat.interpol_api'\n")
    outcomes, log = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", "test_probe.py"],
                               tmp_path, client_env())
    assert counts(outcomes) == {"passed": 1}, log


@pytest.mark.slow
def test_interpols_own_tests_pass_through_the_plugin(tmp_path):
    """interpol/tests/test_coeff.py (144) and test_gradcheck_pushpull.py (624 gradchecks on
    1 and 10 threads) from its wheel, unchanged, on our kernels."""
    tests = Path(interpol.__file__).parent / "tests"
    files = [tests / "test_coeff.py", tests / "test_gradcheck_pushpull.py"]
    for f in files:
        assert f.exists(), f
    (tmp_path / "served_probe.py").write_text(
        "def pytest_sessionfinish(session):\n"
        "    import interpol\n"
        "    assert interpol.grid_pull.__module__ == 'nitorch_jit.compat.interpol_api'\n"
        "    print('SERVED-BY-NITORCH-JIT')\n")
    env = client_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    outcomes, log = run_pytest(["-p", "nitorch_jit.compat.pytest_plugin", "-p", "served_probe",
                                "-s", *map(str, files)], tmp_path, env)
    assert "SERVED-BY-NITORCH-JIT" in log, log
    by = counts(outcomes)
    assert by == {"passed": 144 + 624}, (by, log)
