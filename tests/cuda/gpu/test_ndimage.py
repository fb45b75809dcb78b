"""nitorch_jit.ndimage on a GPU (issue 26): CUDA tensors go straight in and come back as CUDA
tensors, eager or inside torch.compile, equal to the NumPy results on the CPU (1e-10 in
float64, 1e-5 in float32); NumPy code compiled under ``with torch.device("cuda")`` is one
graph whose arrays, our op included, are all on the GPU (no host copy inside it), and gives
the CPU's result. Every test needs a CUDA device (a dry run on the CPU sets DEV to "cpu").
"""
import numpy as np
import pytest
import torch

from nitorch_jit import ndimage as nn

from tests.cuda.cases import gpu

DEV = "cuda"  # (a dry run of these tests on the CPU sets it to "cpu")
TOL = {np.float64: 1e-10, np.float32: 1e-5}


def _calls(rng, dtype):
    """(name, function of NumPy-or-tensor arrays, its arrays): one call of each function."""
    x = rng.standard_normal((12, 11, 10)).astype(dtype)
    c = rng.uniform(-2, 12, (3, 7, 6)).astype(dtype)
    m = np.array([[0.95, 0.1, 0], [-0.1, 1.05, 0.02], [0.05, 0, 0.9]])
    return [
        ("map_coordinates", lambda x, c: nn.map_coordinates(x, c, order=3, mode="nearest"),
         (x, c)),
        ("map_coordinates 5 grid-wrap", lambda x, c: nn.map_coordinates(
            x, c, order=5, mode="grid-wrap"), (x, c)),
        ("spline_filter", lambda x: nn.spline_filter(x, order=4, output=x.dtype), (x,)),
        ("spline_filter1d", lambda x: nn.spline_filter1d(x, order=7, axis=1,
                                                         output=x.dtype), (x,)),
        ("zoom", lambda x: nn.zoom(x, (1.5, 0.8, 1), order=3, mode="mirror"), (x,)),
        ("shift", lambda x: nn.shift(x, (0.5, -1.2, 2), order=2, mode="grid-constant",
                                     cval=1.5), (x,)),
        ("rotate", lambda x: nn.rotate(x, 25, axes=(1, 2), order=1, mode="reflect"), (x,)),
        ("affine_transform", lambda x, m: nn.affine_transform(x, m, (0.5, -1, 1), order=3),
         (x, m)),
        ("geometric_transform", lambda x: nn.geometric_transform(
            x, lambda o: (o[0] * 0.9, o[1] + 0.5, o[2] - 0.25), order=3, mode="wrap"), (x,)),
    ]


def _tensors(arrays):
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(DEV) for a in arrays)


def _close(got, ref, dtype):
    assert isinstance(got, torch.Tensor) and got.device.type == torch.device(DEV).type
    got = got.cpu().numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=TOL[dtype])


@gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cuda_tensors_eager_and_compiled(dtype):
    for name, fn, arrays in _calls(np.random.default_rng(0), dtype):
        ref = fn(*arrays)
        tensors = _tensors(arrays)
        _close(fn(*tensors), ref, dtype)
        _close(torch.compile(fn, fullgraph=True, backend="aot_eager")(*tensors), ref, dtype)


def augment(vol, params, coarse):
    """The NumPy augmentation of scripts/bench_ndimage.py, small, with NumPy's functions
    instead of operators (np.subtract, not -): under a device context torch 2.13's dynamo
    fails on ndarray operators (pytorch/pytorch#140884), not on the functions."""
    n = vol.shape
    x = nn.rotate(vol, params[0], axes=(1, 2), reshape=False, order=3, mode="nearest")
    centre = np.divide(np.subtract(np.array(n, dtype=np.float64), 1), 2)
    scale = np.divide(np.full(3, 1.0), params[1])
    x = nn.affine_transform(x, scale, np.subtract(centre, np.multiply(scale, centre)),
                            order=3, mode="nearest")
    x = np.divide(np.subtract(x, np.mean(x)), np.add(np.std(x), 1e-6))
    disp = nn.zoom(coarse, (1,) + tuple(s / c for s, c in zip(n, coarse.shape[1:])), order=3)
    coords = np.add(np.indices(n, dtype=np.float32), disp)
    return nn.map_coordinates(x, coords, order=3, mode="nearest")


@gpu
def test_numpy_code_under_cuda_device():
    """torch.compile'd NumPy code under ``with torch.device(DEV)``: the graph takes and makes
    tensors on DEV only (our op's included: no host copy inside it), its result is a NumPy
    array equal to the eager CPU one, and new data does not recompile."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward
    compiled = torch.compile(augment, fullgraph=True, backend=backend)
    rng = np.random.default_rng(1)
    for _ in range(2):
        args = (rng.standard_normal((16, 18, 14)).astype(np.float32),
                np.array([rng.uniform(-20, 20), rng.uniform(0.9, 1.1)]),
                rng.uniform(-2, 2, (3, 4, 4, 4)).astype(np.float32))
        with torch.device(DEV):
            got = compiled(*args)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_allclose(got, augment(*args), rtol=0, atol=1e-4)
    assert len(graphs) == 1
    gm, inputs = graphs[0]
    assert all(t.device.type == torch.device(DEV).type for t in inputs
               if isinstance(t, torch.Tensor) and t.dim())
    ops = [n for n in gm.graph.nodes if n.op == "call_function"
           and "nitorch_jit_ndimage" in str(n.target)]
    assert len(ops) == 4
    for node in gm.graph.nodes:
        val = node.meta.get("example_value")
        if isinstance(val, torch.Tensor) and val.dim():
            assert val.device.type == torch.device(DEV).type, node.format_node()
