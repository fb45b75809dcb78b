"""nitorch_jit.ndimage against scipy.ndimage: random shapes, orders, modes, cval, dtypes and
prefilter settings (differential tests), plus what scipy does not test (exactness of our
prefilter on short lines, orders 6-7, torch tensors, argument errors, no copies).

scipy's own tests run against our module in tests/frontends/scipy_suite/.
"""
import subprocess
import sys

import numpy as np
import pytest
import torch

sn = pytest.importorskip("scipy.ndimage")
from nitorch_jit import ndimage as nn  # noqa: E402

MODES = ["constant", "nearest", "reflect", "grid-mirror", "mirror", "wrap", "grid-wrap",
         "grid-constant"]
# scipy's prefilter is approximate on short lines for these modes (ours is exact): compare
# with scipy on lines long enough for its filter to have converged (>= 40 samples)
APPROX = ("reflect", "grid-mirror", "nearest")


def _shape(rng, dim, mode, order, prefilter, lo=5, hi=12):
    if mode in APPROX and prefilter and order > 1:
        lo, hi = 40, 48
    return tuple(int(s) for s in rng.integers(lo, hi, dim))


def _tol(dtype):
    return dict(rtol=0, atol=1e-11) if dtype == np.float64 else dict(rtol=0, atol=2e-4)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_map_coordinates_vs_scipy(dim, mode):
    rng = np.random.default_rng(abs(hash((dim, mode))) % 2**32)
    for order in range(6):
        for prefilter in (True, False):
            dtype = [np.float64, np.float32][int(rng.integers(2))]
            shape = _shape(rng, dim, mode, order, prefilter)
            x = rng.standard_normal(shape).astype(dtype)
            c = rng.uniform(-6, np.array(shape)[:, None] + 5, (dim, 40)).astype(dtype)
            c[:, :3] = np.array(shape)[:, None] - 1  # exactly on the last sample
            c[:, 3:6] = 0
            cval = float(rng.uniform(-3, 3))
            kw = dict(order=order, mode=mode, cval=cval, prefilter=prefilter)
            ours, ref = nn.map_coordinates(x, c, **kw), sn.map_coordinates(x, c, **kw)
            assert ours.dtype == ref.dtype and ours.shape == ref.shape
            np.testing.assert_allclose(ours, ref, **_tol(dtype), err_msg=str(kw))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("grid_mode", [False, True])
def test_zoom_vs_scipy(mode, grid_mode):
    rng = np.random.default_rng(abs(hash((mode, grid_mode))) % 2**32)
    for it in range(8):
        dim, order = int(rng.integers(1, 4)), int(rng.integers(0, 6))
        prefilter = bool(rng.integers(2))
        shape = _shape(rng, dim, mode, order, prefilter)
        x = rng.standard_normal(shape)
        z = [float(v) for v in rng.uniform(0.5, 2.5, dim)]
        kw = dict(order=order, mode=mode, cval=0.7, prefilter=prefilter, grid_mode=grid_mode)
        with pytest.warns(UserWarning) if grid_mode and mode in ("constant", "wrap") \
                else _nothing():
            ours = nn.zoom(x, z, **kw)
        with pytest.warns(UserWarning) if grid_mode and mode in ("constant", "wrap") \
                else _nothing():
            ref = sn.zoom(x, z, **kw)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-11, err_msg=str((z, kw)))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("mode", MODES)
def test_shift_vs_scipy(mode):
    rng = np.random.default_rng(abs(hash(mode)) % 2**32)
    for it in range(8):
        dim, order = int(rng.integers(1, 4)), int(rng.integers(0, 6))
        prefilter = bool(rng.integers(2))
        x = rng.standard_normal(_shape(rng, dim, mode, order, prefilter))
        s = rng.uniform(-4, 4, dim)
        kw = dict(order=order, mode=mode, cval=-1.25, prefilter=prefilter)
        np.testing.assert_allclose(nn.shift(x, s, **kw), sn.shift(x, s, **kw), rtol=0,
                                   atol=1e-11, err_msg=str((s, kw)))


@pytest.mark.parametrize("mode", MODES)
def test_rotate_vs_scipy(mode):
    rng = np.random.default_rng(abs(hash(("rot", mode))) % 2**32)
    for axes, dim in [((1, 0), 2), ((0, 2), 3), ((-1, 1), 3), ((3, 1), 4)]:
        order = int(rng.integers(0, 6))
        prefilter = bool(rng.integers(2))
        plane = _shape(rng, 2, mode, order, prefilter)
        shape = [3] * dim  # the rotation plane gets the long lines
        shape[axes[0] % dim], shape[axes[1] % dim] = plane
        shape = tuple(shape)
        x = rng.standard_normal(shape)
        for reshape in (True, False):
            kw = dict(axes=axes, reshape=reshape, order=order, mode=mode, cval=2.0,
                      prefilter=prefilter)
            angle = float(rng.uniform(-180, 180))
            np.testing.assert_allclose(nn.rotate(x, angle, **kw), sn.rotate(x, angle, **kw),
                                       rtol=0, atol=1e-10, err_msg=str(kw))


@pytest.mark.parametrize("mode", MODES)
def test_affine_transform_forms_vs_scipy(mode):
    rng = np.random.default_rng(abs(hash(("aff", mode))) % 2**32)
    for dim in (2, 3):
        order = int(rng.integers(0, 6))
        x = rng.standard_normal(_shape(rng, dim, mode, order, True))
        lin = np.eye(dim) + rng.uniform(-0.3, 0.3, (dim, dim))
        off = rng.uniform(-3, 3, dim)
        homog = np.eye(dim + 1)
        homog[:dim, :dim], homog[:dim, dim] = lin, off
        diag = rng.uniform(0.6, 1.4, dim)
        kw = dict(order=order, mode=mode, cval=0.5)
        cases = [(lin, dict(offset=off)), (homog, {}), (homog[:dim], {}),
                 (diag, dict(offset=off)), (lin, dict(offset=float(off[0]))),
                 (lin, dict(offset=off, output_shape=tuple(s + 3 for s in x.shape)))]
        for mat, extra in cases:
            np.testing.assert_allclose(nn.affine_transform(x, mat, **extra, **kw),
                                       sn.affine_transform(x, mat, **extra, **kw), rtol=0,
                                       atol=1e-10, err_msg=str((mat, extra, kw)))


def test_affine_transform_output_rank_differs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 10, 11))
    mat = rng.uniform(-1, 1, (3, 2)) * 3
    kw = dict(order=3, output_shape=(7, 8), mode="mirror")
    np.testing.assert_allclose(nn.affine_transform(x, mat, **kw),
                               sn.affine_transform(x, mat, **kw), atol=1e-11)


def test_geometric_transform_vs_scipy():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 11))

    def mapping(o, a, b=0.0):
        return (o[0] * a - 0.5, o[1] ** 1.1 + b)
    for mode in MODES:
        kw = dict(order=3, mode=mode, cval=0.3, output_shape=(10, 9), extra_arguments=(0.9,),
                  extra_keywords=dict(b=-1.0))
        np.testing.assert_allclose(nn.geometric_transform(x, mapping, **kw),
                                   sn.geometric_transform(x, mapping, **kw), atol=1e-11)


@pytest.mark.parametrize("mode", MODES)
def test_spline_filter_vs_scipy(mode):
    rng = np.random.default_rng(abs(hash(("spf", mode))) % 2**32)
    for order in range(2, 6):
        lo = 40 if mode in APPROX else 3
        x = rng.standard_normal(tuple(rng.integers(lo, lo + 8, 3)))
        np.testing.assert_allclose(nn.spline_filter(x, order, mode=mode),
                                   sn.spline_filter(x, order, mode=mode), atol=1e-11)
        for axis in (0, -1):
            np.testing.assert_allclose(nn.spline_filter1d(x, order, axis, mode=mode),
                                       sn.spline_filter1d(x, order, axis, mode=mode),
                                       atol=1e-11)
    x5 = rng.standard_normal((4, 3, 5, 6, 2))  # any rank (short lines: scipy is off for
    ref = x5                                    # APPROX modes, so compare with our 1-D one)
    for axis in range(5):
        ref = (nn if mode in APPROX else sn).spline_filter1d(ref, 3, axis, mode=mode)
    np.testing.assert_allclose(nn.spline_filter(x5, 3, mode=mode), ref, atol=1e-11)


@pytest.mark.parametrize("mode", ["reflect", "grid-mirror", "nearest"])
@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_exact_prefilter_on_short_lines(mode, order):
    """Ours interpolates the samples to rounding on any length; scipy's filter is approximate
    on short lines for these modes (documented difference)."""
    rng = np.random.default_rng(order)
    for n in (2, 3, 5, 12):
        x = rng.standard_normal(n)
        c = np.arange(n, dtype=np.float64)[None]
        np.testing.assert_allclose(nn.map_coordinates(x, c, order=order, mode=mode), x,
                                   rtol=0, atol=1e-13)
    if mode != "nearest" and order >= 3:  # scipy is measurably off on 5 samples
        x = rng.standard_normal(5)
        c = np.arange(5, dtype=np.float64)[None]
        assert np.abs(sn.map_coordinates(x, c, order=order, mode=mode) - x).max() > 1e-8


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.uint16, np.int64, bool,
                                   np.float32])
def test_output_dtypes_rounding_clipping(dtype):
    rng = np.random.default_rng(5)
    x = rng.uniform(-300, 300, (13, 14))
    x[0, :4] = [0.5, -0.5, 2.5, -2.5]  # ties: half away from zero
    c = rng.uniform(-1, 14, (2, 50))
    c[:, :4] = [[0, 0, 0, 0], [0, 1, 2, 3]]
    # bool: (npy_bool)t truncates, so interpolated bools (t in [0, 1]) hang on 1-ulp sums
    outputs = (dtype,) if dtype is bool else (dtype, np.dtype(dtype).str, None)
    for output in outputs:
        if output is None:
            xi = x.astype(dtype)
            ours, ref = nn.map_coordinates(xi, c, order=1), sn.map_coordinates(xi, c, order=1)
        else:  # order 1: the ties stay exact ties (a cubic puts them 1 ulp either side)
            ours, ref = nn.map_coordinates(x, c, output=output, order=1), \
                sn.map_coordinates(x, c, output=output, order=1)
        assert ours.dtype == ref.dtype
        np.testing.assert_allclose(ours.astype(float), ref.astype(float),
                                   rtol=1e-4 if dtype is np.float32 else 0)
    out = np.zeros((4, 4), dtype=dtype)
    res = nn.zoom(x[:2, :2], 2.2, output=out, order=1)
    assert res is out
    np.testing.assert_array_equal(out, sn.zoom(x[:2, :2], 2.2, output=dtype, order=1))


def test_float16_output_extension():
    """scipy rejects float16 (data type not supported); we compute in float32."""
    x = np.random.default_rng(11).standard_normal((7, 8))
    ours = nn.zoom(x.astype(np.float16), 1.5, order=1)
    assert ours.dtype == np.float16
    np.testing.assert_allclose(ours, sn.zoom(x.astype(np.float32), 1.5, order=1), atol=5e-3)


def test_integer_input_and_complex():
    rng = np.random.default_rng(6)
    xi = rng.integers(0, 255, (12, 10)).astype(np.uint8)
    np.testing.assert_array_equal(nn.zoom(xi, 1.7), sn.zoom(xi, 1.7))
    xc = rng.standard_normal((9, 8)) + 1j * rng.standard_normal((9, 8))
    for mode in ("constant", "grid-constant"):
        kw = dict(order=3, mode=mode, cval=1 - 2j)
        ours, ref = nn.shift(xc, (0.4, -2.5), **kw), sn.shift(xc, (0.4, -2.5), **kw)
        assert ours.dtype == ref.dtype == np.complex128
        np.testing.assert_allclose(ours, ref, atol=1e-11)
    ours = nn.map_coordinates(xc.astype(np.complex64), [[1.5, 2.0], [0.5, 7.0]])
    assert ours.dtype == np.complex64


def test_orders_6_7_extension():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((10, 9))
    idx = np.indices(x.shape, dtype=np.float64)
    for order in (6, 7):
        for mode in MODES:
            np.testing.assert_allclose(nn.map_coordinates(x, idx, order=order, mode=mode), x,
                                       atol=1e-11)
        z = nn.zoom(x, 2, order=order)
        assert z.shape == (20, 18) and np.isfinite(z).all()
    with pytest.raises(ValueError, match="order"):
        nn.zoom(x, 2, order=8)


def test_torch_tensors():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8, 9, 10))
    xt = torch.from_numpy(x)
    out = nn.zoom(xt, 1.5, order=3, mode="mirror")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), sn.zoom(x, 1.5, order=3, mode="mirror"),
                               atol=1e-11)
    c = rng.uniform(0, 8, (3, 20))
    out = nn.map_coordinates(xt.float(), torch.from_numpy(c), output=torch.float64)
    assert out.dtype == torch.float64
    target = torch.zeros(20, dtype=torch.int16)
    assert nn.map_coordinates(xt * 100, torch.from_numpy(c), output=target) is target


def test_no_copy_of_the_input():
    from nitorch_jit.ndimage._arrays import Input
    x = np.random.default_rng(9).standard_normal((6, 7))
    t = Input(x).tensor
    assert t.data_ptr() == x.__array_interface__["data"][0]
    xv = x[:, ::2]  # strided view: still no copy
    assert Input(xv).tensor.data_ptr() == xv.__array_interface__["data"][0]
    # identity results never alias the input
    z = nn.zoom(x, 1)
    assert not np.shares_memory(z, x)
    np.testing.assert_array_equal(z, x)


def test_results_are_c_contiguous():
    """As scipy's (issue 41): the pipelines that permute axes (rotate in a leading plane,
    zoom / shift / diagonal affine with an unchanged axis before a changed one, copies of a
    strided input, spline_filter1d of orders 0-1) give C-contiguous results, NumPy and torch,
    in every output dtype, with scipy's values (float64)."""
    x = np.random.default_rng(41).standard_normal((5, 6, 4))
    calls = [lambda m, v, **k: m.rotate(v, 17.0, axes=(0, 2), reshape=False, order=1, **k),
             lambda m, v, **k: m.rotate(v, 17.0, axes=(1, 0), order=1, **k),
             lambda m, v, **k: m.zoom(v, (2, 1, 1), order=1, **k),
             lambda m, v, **k: m.shift(v, (0, 1.5, 0), order=1, **k),
             lambda m, v, **k: m.affine_transform(v, [1, 0.5, 1], output_shape=(5, 12, 4),
                                                  order=1, **k),
             lambda m, v, **k: m.zoom(v.T, 1, **k),
             lambda m, v, **k: m.spline_filter1d(v.T, order=1, **k)]
    for k, call in enumerate(calls):
        for output in (np.float32, np.int16):
            assert call(nn, x, output=output).flags.c_contiguous, (k, output)
        r = call(nn, x)
        assert r.flags.c_contiguous, k
        np.testing.assert_allclose(r, call(sn, x), rtol=0, atol=1e-12)
        rt = call(nn, torch.from_numpy(x))
        assert rt.is_contiguous(), k
        np.testing.assert_allclose(rt.numpy(), call(sn, x), rtol=0, atol=1e-12)


def test_rank_limits():
    x = np.zeros((3, 4, 5, 6))
    with pytest.raises(ValueError, match="input: 4-D"):
        nn.map_coordinates(x, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="input: 4-D"):
        nn.zoom(x, 2)
    # zoom / shift along at most 3 axes of a 4-D array: the others are batch
    x = np.random.default_rng(10).standard_normal((3, 4, 5, 6))
    np.testing.assert_allclose(nn.zoom(x, (1, 2, 1.5, 1)), sn.zoom(x, (1, 2, 1.5, 1)),
                               atol=1e-11)
    np.testing.assert_allclose(nn.shift(x, (0, 1.5, 0, -0.5)),
                               sn.shift(x, (0, 1.5, 0, -0.5)), atol=1e-11)


def test_errors_name_the_argument():
    x = np.zeros((4, 5))
    cases = [
        (lambda: nn.zoom(x, 2, mode="wrapp"), ValueError, "mode"),
        (lambda: nn.zoom(x, 2, order=2.5), TypeError, "order"),
        (lambda: nn.zoom(x, (1, 2, 3)), ValueError, "zoom"),
        (lambda: nn.shift(x, "a"), TypeError, "shift"),
        (lambda: nn.shift(x, (1, 2, 3)), ValueError, "shift"),
        (lambda: nn.map_coordinates(x, np.zeros((3, 2))), ValueError, "coordinates"),
        (lambda: nn.map_coordinates(x, np.zeros((2, 2)) + 1j), TypeError, "coordinates"),
        (lambda: nn.map_coordinates(x, np.zeros((2, 2)), output=np.zeros(3)), ValueError,
         "output"),
        (lambda: nn.map_coordinates(x, np.zeros((2, 2)), cval="a"), TypeError, "cval"),
        (lambda: nn.affine_transform(x, np.eye(3) * 2), ValueError, "matrix"),
        (lambda: nn.affine_transform(x, np.zeros((3, 3, 3))), ValueError, "matrix"),
        (lambda: nn.rotate(x, 10, axes=(0, 5)), ValueError, "axes"),
        (lambda: nn.rotate(np.zeros(4), 10), ValueError, "input"),
        (lambda: nn.spline_filter1d(x, axis=2), ValueError, "axis"),
        (lambda: nn.spline_filter(x, order=1), ValueError, "order"),
        (lambda: nn.geometric_transform(x, 3), TypeError, "mapping"),
        (lambda: nn.geometric_transform(x, lambda o: (1.0,)), ValueError, "mapping"),
        (lambda: nn.map_coordinates(np.array(["a"]), [[0]]), TypeError, "input"),
    ]
    for fn, exc, name in cases:
        with pytest.raises(exc, match=name):
            fn()
    # scipy raises RuntimeError for these: ours are RuntimeErrors too
    with pytest.raises(RuntimeError):
        nn.zoom(x, 2, mode="wrapp")


def test_nonfinite_coordinates_give_cval():
    x = np.arange(10.0)
    c = np.array([[np.nan, np.inf, -np.inf, 2.0]])
    for mode in MODES:
        out = nn.map_coordinates(x, c, order=3, mode=mode, cval=-7.0)
        np.testing.assert_allclose(out[:3], -7.0)
        assert abs(out[3] - 2.0) < 1e-12


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_import_is_lazy():
    code = ("import sys, nitorch_jit; assert 'nitorch_jit.ndimage' not in sys.modules; "
            "m = nitorch_jit.ndimage; assert m.zoom and 'nitorch_jit.ndimage' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_map_coordinates_vs_scipy_3d_larger(mode):
    rng = np.random.default_rng(abs(hash(("big", mode))) % 2**32)
    x = rng.standard_normal((41, 43, 45))
    c = np.indices(x.shape, dtype=np.float64) + rng.uniform(-3, 3, (3,) + x.shape)
    for order in range(6):
        kw = dict(order=order, mode=mode, cval=0.25)
        np.testing.assert_allclose(nn.map_coordinates(x, c, **kw),
                                   sn.map_coordinates(x, c, **kw), atol=1e-10)
