"""nitorch_jit.ndimage inside torch.compile'd NumPy code (issue 26): every function traces
with no graph break (torch._dynamo.explain) and with fullgraph=True gives the eager result
(which tests/frontends/test_ndimage.py and the scipy suite hold to scipy's), over every mode,
orders 0-7, cval, prefilter and output dtypes; new data of the same shapes does not recompile;
what cannot enter a graph names its argument under fullgraph=True and runs eagerly otherwise;
torch tensors stay tensors; arrays of other DLPack libraries come back as their library's.

Most graphs run through the "aot_eager" backend (dynamo, the fake kernels and AOTAutograd, no
code generation: fast); the realistic pipeline also runs through inductor (slow).
"""
import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend

# the quick tier leaves out: torch.compile (dynamo and inductor, seconds a graph)
pytestmark = pytest.mark.slow

sn = pytest.importorskip("scipy.ndimage")
from nitorch_jit import ndimage as nn  # noqa: E402

MODES = ["constant", "nearest", "reflect", "grid-mirror", "mirror", "wrap", "grid-wrap",
         "grid-constant"]


def _tol(dtype):
    return dict(rtol=0, atol=1e-12) if np.dtype(dtype) == np.float64 else \
        dict(rtol=0, atol=1e-5)


def _no_break(fn, *args):
    """fn traces as one graph with no break. (explain's graph_break_count misses a break in
    the top frame, which it lists in break_reasons as 'step_unsupported': both are read.)"""
    ex = torch._dynamo.explain(fn)(*args)
    assert (ex.graph_count, ex.graph_break_count, len(ex.break_reasons)) == (1, 0, 0), \
        [b.reason for b in ex.break_reasons]


def _layout_checked(gm, example_inputs):
    """A backend: dynamo's graph run as it is, each call of the front end's op held to the
    size and strides its fake kernel promised (inductor's assert_size_stride, which ignores
    size-1 dims, without inductor's code generation)."""
    def layout(t):
        return tuple(t.shape), tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)

    class Run(torch.fx.Interpreter):
        def run_node(self, n):
            res = super().run_node(n)
            if "nitorch_jit_ndimage" in str(n.target):
                assert layout(res) == layout(n.meta["example_value"]), n.format_node()
            return res
    return lambda *args: Run(gm).run(*args)


def _same_as_eager(fn, *args, backend="aot_eager"):
    """fullgraph=True gives the eager result (dtype, shape, values); returns it."""
    torch._dynamo.reset()  # (a compiled graph each time, not a cached one or eager past the
    counter = CompileCounterWithBackend(backend)  # recompile limit: counted below)
    got = torch.compile(fn, fullgraph=True, backend=counter)(*args)
    assert counter.frame_count == 1
    ref = fn(*args)
    assert type(got) is type(ref) and got.dtype == ref.dtype and got.shape == ref.shape
    tol = _tol(ref.dtype) if ref.dtype.kind in "fc" else dict(rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64 if ref.dtype.kind != "c"
                                          else np.complex128),
                               np.asarray(ref, dtype=np.float64 if ref.dtype.kind != "c"
                                          else np.complex128), **tol)
    return got


def _cases(j):
    """Eight cases that between them use every mode and every order 0-7 (shifted by j from
    one function to the next), with float64 / float32 data, several output dtypes, random
    cval and both prefilter settings; every other one through the "eager" backend."""
    for k in range(8):
        mode = MODES[(k + j) % 8]
        rng = np.random.default_rng(abs(hash((k, j))) % 2**32)
        dtype = (np.float64, np.float32)[k % 2]
        output = (None, np.float64, "float32", np.int16)[(k + j) % 4]
        yield rng, dtype, dict(order=k, mode=mode, cval=float(rng.uniform(-2, 2)),
                               prefilter=bool((k + j) % 3), output=output), \
            ("aot_eager", "eager")[k % 2]


def _check_function(j, fn, make_args):
    """fn(kw) -> the function to compile; make_args(rng, dtype) -> its arguments."""
    for k, (rng, dtype, kw, backend) in enumerate(_cases(j)):
        f = fn(kw)
        args = make_args(rng, dtype)
        if k == 0:
            _no_break(f, *args)
        _same_as_eager(f, *args, backend=backend)


def _volume(rng, dtype):
    return (rng.standard_normal((6, 7, 5)).astype(dtype),)


def test_map_coordinates():
    _check_function(0, lambda kw: lambda x, c: np.abs(nn.map_coordinates(x, c, **kw)) + 1,
                    lambda rng, dtype: (rng.standard_normal((6, 7, 5)).astype(dtype),
                                        rng.uniform(-3, 9, (3, 4, 5)).astype(dtype)))


def test_zoom():
    _check_function(1, lambda kw: lambda x: nn.zoom(x, (1.5, 0.75, 1), **kw), _volume)
    grid = {"constant": "grid-constant", "wrap": "grid-wrap"}  # (scipy warns on the others)
    _check_function(2, lambda kw: lambda x: nn.zoom(
        x, 1.3, grid_mode=True, **{**kw, "mode": grid.get(kw["mode"], kw["mode"])}), _volume)


def test_shift():
    _check_function(3, lambda kw: lambda x: nn.shift(x, (0.5, -1.25, 2), **kw), _volume)


def test_spline_filters():
    def kw1(kw):
        return dict(order=kw["order"], mode=kw["mode"], output=kw["output"] or np.float64)
    _check_function(4, lambda kw: lambda x: nn.spline_filter1d(x, axis=1, **kw1(kw)),
                    _volume)
    _check_function(5, lambda kw: lambda x: nn.spline_filter(
        x, **{**kw1(kw), "order": max(kw["order"], 2)}), _volume)


def test_rotate():
    _check_function(6, lambda kw: lambda x: nn.rotate(x, 30, axes=(0, 2), **kw), _volume)


# every plane of a 3-D array, as scipy takes them: either order, negative axes
AXES = [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1), (-1, 0), (0, -1), (-3, -1), (-1, -3),
        (-2, -1), (2, -3)]


def _rotations(m, x):
    return [m.rotate(x, 17.0, axes=a, reshape=False, order=1, mode="nearest") for a in AXES]


def test_rotate_every_axes_pair_fullgraph():
    """Issue 41: rotate in a plane that is not the trailing one gave a permuted result where
    the fake kernel promised a C-contiguous one (inductor's stride assert failed on
    axes=(0, 2)). Every pair (float32 in the slow inductor test below): the promised
    layout, eager's values and scipy's (order 1, 'nearest': no prefilter, exact)."""
    x = np.random.default_rng(41).standard_normal((5, 6, 4))
    got = torch.compile(lambda v: _rotations(nn, v), fullgraph=True,
                        backend=_layout_checked)(x)
    for a, g, e, r in zip(AXES, got, _rotations(nn, x), _rotations(sn, x)):
        assert g.dtype == e.dtype == x.dtype and g.shape == e.shape == r.shape, a
        assert e.flags.c_contiguous, a  # eager's layout is scipy's too
        np.testing.assert_allclose(g, e, rtol=0, atol=0, err_msg=str(a))
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-12, err_msg=str(a))


def test_every_function_gives_the_promised_layout():
    """Issue 41: the other functions whose pipelines permute axes (zoom / shift / diagonal
    affine with an unchanged axis before a changed one, identities and orders 0-1 of a
    strided input) give the layout the fake promises, and eager's values."""
    rng = np.random.default_rng(7)

    def layouts(x, c):
        t = x.T  # (a view: strided data reaches the op)
        return (nn.zoom(x, (2, 1, 1), order=1), nn.zoom(x, (1, 1.5, 1), order=3),
                nn.shift(x, (0, 1.5, 0), order=1), nn.zoom(t, 1),
                nn.affine_transform(x, [1, 0.5, 1], output_shape=(5, 12, 4), order=1),
                nn.spline_filter1d(t, order=1, axis=1), nn.spline_filter1d(t, axis=0),
                nn.spline_filter(t), nn.map_coordinates(t, c, order=1),
                nn.geometric_transform(t, lambda o: (o[0], o[1] + 0.5, o[2]), order=1),
                nn.rotate(t, 30, axes=(2, 0), order=1))
    args = (rng.standard_normal((5, 6, 4)), rng.uniform(0, 4, (3, 4, 3, 2)))
    got = torch.compile(layouts, fullgraph=True, backend=_layout_checked)(*args)
    for k, (g, e) in enumerate(zip(got, layouts(*args))):
        assert e.flags.c_contiguous, k
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12, err_msg=str(k))


@pytest.mark.slow
def test_rotate_every_axes_pair_inductor():
    """The issue's failure as it showed: through inductor, whose generated code asserts the
    fake's strides on the real result."""
    x = np.random.default_rng(2).standard_normal((5, 6, 4)).astype(np.float32)
    got = torch.compile(lambda v: _rotations(nn, v), fullgraph=True)(x)
    for a, g, e in zip(AXES, got, _rotations(nn, x)):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6, err_msg=str(a))


def test_affine_transform():
    m = np.array([[0.9, 0.1, 0], [0, 1.1, 0.05], [0.2, 0, 0.9]])

    def args(rng, dtype):
        return _volume(rng, dtype) + (m + rng.uniform(-0.05, 0.05, (3, 3)),)
    _check_function(7, lambda kw: lambda x, m: nn.affine_transform(
        x, m, offset=(0.5, -1, 2), output_shape=(5, 6, 7), **kw), args)
    _check_function(0, lambda kw: lambda x, m: nn.affine_transform(  # diagonal: separable
        x, np.diag(m), offset=0.5, **kw), args)
    _check_function(1, lambda kw: lambda x, m: nn.affine_transform(  # [D, D + 1]
        x, np.concatenate([m, np.ones((3, 1))], 1), **kw), args)


def test_geometric_transform():
    """A mapping written for scalars traces when it is arithmetic: under torch.compile it is
    called once, on the output indices as arrays."""
    _check_function(2, lambda kw: lambda x: nn.geometric_transform(
        x, lambda o, a, b=0: (o[0] * a, o[1] - 0.5, o[2] + b), extra_arguments=(0.9,),
        extra_keywords=dict(b=0.25), **kw), _volume)


@pytest.mark.parametrize("mode", ["constant", "mirror", "wrap", "grid-wrap", "grid-constant"])
def test_compiled_vs_scipy(mode):
    """Compiled, scipy's results (modes where scipy's prefilter is exact on short lines)."""
    rng = np.random.default_rng(len(mode))
    x = rng.standard_normal((9, 8, 10))
    c = rng.uniform(-2, 11, (3, 5, 6))

    def f(m, x, c):
        return (m.map_coordinates(x, c, order=3, mode=mode, cval=0.5),
                m.zoom(x, 1.4, order=5, mode=mode, cval=-1.0),
                m.rotate(x, 20, axes=(0, 2), order=2, mode=mode, reshape=False))
    got = torch.compile(lambda x, c: f(nn, x, c), fullgraph=True, backend="aot_eager")(x, c)
    for g, r in zip(got, f(sn, x, c)):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-11)


def test_complex_and_integer_inputs():
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((6, 5)) + 1j * rng.standard_normal((6, 5))).astype(np.complex64)
    i = rng.integers(-50, 50, (6, 5)).astype(np.int32)
    for fn in (lambda x: nn.zoom(x, 1.5, order=3, cval=1 + 2j),
               lambda x: nn.shift(x, 0.5, order=2, mode="wrap")):
        for x in (z, i):
            _no_break(fn, x)
            _same_as_eager(fn, x)


def augment(vol, params, coarse):
    """A NumPy augmentation as a user writes it: rotation, zoom, elastic displacement."""
    n = vol.shape
    x = nn.rotate(vol, params[0], axes=(1, 2), reshape=False, order=3, mode="nearest")
    centre = (np.array(n, dtype=np.float64) - 1) / 2
    scale = np.full(3, 1.0) / params[1]
    x = nn.affine_transform(x, scale, centre - scale * centre, order=3, mode="nearest")
    x = (x - x.mean()) / (x.std() + 1e-6)
    disp = nn.zoom(coarse, (1,) + tuple(s / c for s, c in zip(n, coarse.shape[1:])), order=3)
    coords = np.indices(n, dtype=np.float32) + disp
    y = nn.map_coordinates(x, coords, order=3, mode="nearest")
    return np.clip(y, -3, 3).astype(np.float32)


def _draws(n, count):
    rng = np.random.default_rng(n)
    return [(rng.standard_normal((n, n + 1, n - 1)).astype(np.float32),
             np.array([rng.uniform(-20, 20), rng.uniform(0.9, 1.1)]),
             rng.uniform(-2, 2, (3, 4, 4, 4)).astype(np.float32)) for _ in range(count)]


def test_pipeline_no_break_and_no_recompile():
    """The realistic pipeline is one graph; new data and new parameters of the same shapes
    reuse it, and each result is the eager one."""
    draws = _draws(12, 3)
    _no_break(augment, *draws[0])
    counter = CompileCounter()
    compiled = torch.compile(augment, fullgraph=True, backend=counter)
    for args in draws:
        np.testing.assert_allclose(compiled(*args), augment(*args), rtol=0, atol=1e-5)
    assert counter.frame_count == 1


def augment_grid(vol, disp, angle, scale):
    """Issue 41's augmentation: the grid takes the dtype of our zoom's result."""
    v = nn.rotate(vol, angle, axes=(1, 2), reshape=False, order=3, mode="nearest")
    v = (v - v.mean()) / (v.std() + 1e-6)
    v = nn.zoom(v, scale, order=3, mode="nearest")
    n = v.shape
    grid = np.stack(np.meshgrid(*[np.arange(s, dtype=v.dtype) for s in n], indexing="ij"))
    out = nn.map_coordinates(v, grid + disp[:, :n[0], :n[1], :n[2]], order=3, mode="reflect")
    return np.clip(out, -3.0, 3.0)


def augment_grid_2d(img, disp, angle, scale):
    """augment_grid on 2-D images."""
    v = nn.rotate(img, angle, reshape=False, order=3, mode="nearest")
    v = (v - v.mean()) / (v.std() + 1e-6)
    v = nn.zoom(v, scale, order=3, mode="nearest")
    n = v.shape
    grid = np.stack(np.meshgrid(*[np.arange(s, dtype=v.dtype) for s in n], indexing="ij"))
    out = nn.map_coordinates(v, grid + disp[:, :n[0], :n[1]], order=3, mode="reflect")
    return np.clip(out, -3.0, 3.0)


def _grid_draw(shape, scale=1.2):
    rng = np.random.default_rng(len(shape))
    big = tuple(int(round(s * scale)) + 1 for s in shape)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.uniform(-1, 1, (len(shape),) + big).astype(np.float32), 10.0, scale)


@pytest.mark.parametrize("fn, shape", [(augment_grid, (8, 9, 7)), (augment_grid_2d, (9, 8))])
def test_augmentation_reading_dtype_one_graph(fn, shape):
    """Issue 41: ``v.dtype`` on our result broke the graph (gb0157: dynamo refuses
    ``ndarray.dtype`` on every array it traces). One graph, and eager's result."""
    args = _grid_draw(shape)
    _no_break(fn, *args)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args)
    ref = fn(*args)
    assert type(got) is np.ndarray and got.dtype == ref.dtype == np.float32
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


def test_attributes_of_every_result_trace():
    """.dtype, .shape, .ndim, .size and .itemsize of each function's result trace (as
    values: the dtype returned, and feeding NumPy's constructors): fullgraph=True."""
    def attrs(x, c):
        res = (nn.map_coordinates(x, c, order=1), nn.spline_filter(x),
               nn.spline_filter1d(x, axis=0, output=np.float32), nn.zoom(x, 1.5, order=1),
               nn.shift(x, 0.5, order=1, output=np.int16), nn.rotate(x, 30, order=1),
               nn.affine_transform(x, np.eye(2), order=1, output="float32"),
               nn.geometric_transform(x, lambda o: o, order=1))
        return [np.full(r.shape, r.ndim * r.size + r.itemsize, dtype=r.dtype) + r
                for r in res], [r.dtype for r in res]
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((6, 5)), rng.uniform(0, 5, (2, 3, 4)))
    got, dtypes = torch.compile(attrs, fullgraph=True, backend="eager")(*args)
    ref, ref_dtypes = attrs(*args)
    assert dtypes == ref_dtypes
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-12)


def test_every_function_new_data_no_recompile():
    counter = CompileCounter()

    def every(x, c, m, s):
        return (nn.map_coordinates(x, c, order=3).sum() + nn.spline_filter(x).sum()
                + nn.spline_filter1d(x, axis=0).sum() + nn.zoom(x, 2, order=1).sum()
                + nn.shift(x, s, order=3).sum() + nn.rotate(x, s[0], reshape=False).sum()
                + nn.affine_transform(x, m, s).sum()
                + nn.geometric_transform(x, lambda o: (o[0] + s[0], o[1] * m[0, 0])).sum())
    compiled = torch.compile(every, fullgraph=True, backend=counter)
    rng = np.random.default_rng(5)
    for _ in range(3):
        args = (rng.standard_normal((6, 7)), rng.uniform(0, 6, (2, 3, 4)),
                np.eye(2) + rng.uniform(-0.1, 0.1, (2, 2)), rng.uniform(-1, 1, 2))
        np.testing.assert_allclose(compiled(*args), every(*args), rtol=1e-12)
    assert counter.frame_count == 1


@pytest.mark.slow
def test_pipeline_inductor():
    """The pipeline through inductor (the NumPy arithmetic compiled) equals eager."""
    draws = _draws(16, 2)
    compiled = torch.compile(augment, fullgraph=True)
    for args in draws:
        got = compiled(*args)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_allclose(got, augment(*args), rtol=0, atol=1e-5)


def test_numpy_code_under_device_context_dry_run(monkeypatch):
    """tests/cuda/gpu/test_ndimage.py's NumPy pipeline under ``with torch.device(DEV)``, run
    here with DEV = "cpu": one graph, every tensor on the device, the eager result."""
    from tests.cuda.gpu import test_ndimage as on_gpu
    monkeypatch.setattr(on_gpu, "DEV", "cpu")
    on_gpu.test_numpy_code_under_cuda_device()


# ------------------------------------------------------------ what cannot enter a graph
def test_output_array_fullgraph_error_else_eager():
    x = np.random.default_rng(0).standard_normal((5, 6))

    def f(x, out):
        nn.zoom(x, 2, order=3, output=out)
        return out
    out = np.empty((10, 12))
    with pytest.raises(Exception, match="argument 'output'") as err:
        torch.compile(f, fullgraph=True, backend="aot_eager")(x, out)
    assert "zoom" in str(err.value)
    got = torch.compile(f, backend="aot_eager")(x, out)  # a graph break, then eager
    assert got is out
    np.testing.assert_array_equal(out, nn.zoom(x, 2, order=3))


@pytest.mark.parametrize("call,argname", [
    (lambda x: nn.zoom([[1.0, 2.0], [3.0, 4.0]], 2) + x[:4, :4], "input"),
    (lambda x: nn.zoom(x, np.array([2.0, 2.0])), "zoom"),
    (lambda x: nn.rotate(x, 10, axes=np.array([0, 1])), "axes"),
    (lambda x: nn.affine_transform(x, np.eye(2), output_shape=np.array([3, 3])),
     "output_shape"),
])
def test_untraceable_arguments_named(call, argname):
    x = np.random.default_rng(1).standard_normal((5, 6))
    with pytest.raises(Exception, match=f"argument '{argname}'"):
        torch.compile(call, fullgraph=True, backend="aot_eager")(x)
    np.testing.assert_array_equal(torch.compile(call, backend="aot_eager")(x), call(x))


def test_mapping_with_an_untraceable_call():
    """A mapping that calls what dynamo cannot trace (scipy.special's ufuncs) breaks the
    graph there: an error under fullgraph=True, else that call runs eagerly on the index
    arrays and the result is the eager one."""
    special = pytest.importorskip("scipy.special")
    x = np.random.default_rng(6).standard_normal((6, 7))

    def f(x):
        return nn.geometric_transform(x, lambda o: (o[0] + special.cosdg(30 * o[1]), o[1]),
                                      order=3, mode="nearest")
    with pytest.raises(Exception):
        torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    np.testing.assert_allclose(torch.compile(f, backend="aot_eager")(x), f(x), rtol=0,
                               atol=1e-12)


def test_checks_at_trace_time():
    """Bad orders and modes, and an array angle that would set the shape, fail while tracing
    with the eager function's message (no data is read)."""
    x = np.ones((5, 6))
    for fn, msg in [(lambda x: nn.zoom(x, 2, order=9), "order: spline order 9"),
                    (lambda x: nn.shift(x, 1, mode="edge"), "mode: boundary mode 'edge'"),
                    (lambda x: nn.map_coordinates(x, np.ones((3, 4))), "coordinates: invalid"),
                    (lambda x: nn.rotate(x, np.array(3.0)), "angle: an array angle")]:
        with pytest.raises(RuntimeError, match=msg):
            torch.compile(fn, fullgraph=True, backend="aot_eager")(x)


# ------------------------------------------------------------ torch tensors, DLPack
def test_torch_tensors_compiled():
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((6, 7, 5)))
    c = torch.from_numpy(rng.uniform(0, 5, (3, 4, 4)))

    def f(x, c):
        return nn.map_coordinates(x, c, order=3, mode="reflect") * 2 + \
            nn.zoom(x, 0.5, order=1).sum()
    _no_break(f, x, c)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, c)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, f(x, c), rtol=0, atol=1e-12)


def _round_trip(xp, to_numpy):
    """Eager calls on `xp`'s arrays come back as `xp`'s arrays, equal to the NumPy results;
    `xp`'s coordinates with NumPy data give NumPy (the data's library)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 7)).astype(np.float32)
    c = rng.uniform(0, 6, (2, 3, 4)).astype(np.float32)
    x, xc = xp.asarray(a), xp.asarray(c)
    for got, ref, kind in [
            (nn.map_coordinates(x, xc, order=3), nn.map_coordinates(a, c, order=3), type(x)),
            (nn.zoom(x, 1.5, order=2, mode="mirror"), nn.zoom(a, 1.5, order=2, mode="mirror"),
             type(x)),
            (nn.spline_filter(x, output=np.float64), nn.spline_filter(a), type(x)),
            (nn.map_coordinates(a, xc, order=1), nn.map_coordinates(a, c, order=1),
             np.ndarray)]:
        assert type(got) is kind
        got = to_numpy(got)
        # (the dtype the library keeps: JAX without x64 makes float64 float32)
        like = ref if kind is np.ndarray else to_numpy(xp.asarray(ref))
        assert got.dtype == like.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    with pytest.raises(TypeError, match="output: an array to write into"):
        nn.zoom(x, 2, output=xp.asarray(np.empty((12, 14), np.float32)))


def test_dlpack_array_api_strict():
    xp = pytest.importorskip("array_api_strict")
    _round_trip(xp, lambda a: np.from_dlpack(a))


def test_dlpack_jax():
    jnp = pytest.importorskip("jax.numpy")
    _round_trip(jnp, np.asarray)


@pytest.mark.parametrize("name, shape, kwargs", [
    ("map_coordinates", (6, 5), dict(
        coordinates=np.random.default_rng(0).uniform(-1, 6, (2, 5, 3)), order=3,
        mode="nearest", cval=0.0)),
    ("zoom", (6, 5), dict(zoom=1.5, order=1, mode="grid-constant", cval=2.0)),
    ("spline_filter", (6, 5), dict(order=5, mode="mirror")),
    ("affine_transform", (6, 5), dict(matrix=np.array([[0.9, 0.1], [-0.1, 1.1]]), order=2,
                                      mode="reflect")),
    # pipelines that permute axes (issue 41): the real result's strides are the fake's
    ("rotate", (6, 5, 4), dict(angle=17.0, axes=(0, 2), reshape=False, order=1)),
    ("zoom", (6, 5, 4), dict(zoom=(2, 1, 1), order=1)),
])
def test_front_end_op_passes_opcheck(name, shape, kwargs):
    """The front end's own op (nitorch_jit_ndimage::call): schema, fake kernel and dispatch
    agree, as for every op of ours (its arguments encoded as the traced route encodes them)."""
    from nitorch_jit.ndimage import _routes
    arrays, numbers, spec = [], [], {}
    for key, value in dict(input=np.random.default_rng(1).standard_normal(shape),
                           **kwargs).items():
        spec[key] = _routes._encode(value, arrays, numbers)
    args = (name, arrays, numbers, repr(spec))
    torch.library.opcheck(_routes.call_op, args)
    eager = getattr(nn, name)(**{k: (arrays[0].numpy() if k == "input" else v)
                                 for k, v in dict(input=None, **kwargs).items()})
    np.testing.assert_allclose(_routes.call_op(*args).numpy(), eager, rtol=0, atol=1e-12)
