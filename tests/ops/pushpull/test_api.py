"""The public resampling API: argument handling, broadcasting, dtypes, autograd, torch.compile."""
import itertools

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit.codes import BOUND_NAMES

from tests.cuda.cases import OpLog

torch.manual_seed(0)


def rand_grid(shape, n=3, dtype=torch.float64, spread=1.5):
    dim = len(shape)
    return torch.rand([*([n] * dim), dim], dtype=dtype) * (torch.tensor(shape, dtype=dtype) - 1 + 2 * spread) - spread


# ----------------------------------------------------------------------------- gradcheck
@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", range(8))
def test_gradcheck_all_ops(dim, order):
    bound = BOUND_NAMES[(order + dim) % 7]
    shape = [5, 4, 3][:dim]
    img = torch.randn([1, 2, *shape], dtype=torch.float64, requires_grad=True)
    grid = rand_grid(shape, n=2).unsqueeze(0).requires_grad_()
    kw = dict(interpolation=order, bound=bound, extrapolate=True)
    gc = dict(eps=1e-6, atol=1e-5, rtol=1e-4)
    assert torch.autograd.gradcheck(lambda x, g: nj.grid_pull(x, g, **kw), (img, grid), **gc)
    assert torch.autograd.gradcheck(lambda x, g: nj.grid_grad(x, g, **kw), (img, grid), **gc)
    vals = torch.randn([1, 2, *grid.shape[1:-1]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, g: nj.grid_push(x, g, shape, **kw), (vals, grid), **gc)
    assert torch.autograd.gradcheck(lambda g: nj.grid_count(g, shape, **kw), (grid,), **gc)


def test_gradient_only_for_what_requires_it():
    img = torch.randn(1, 1, 6, 6, dtype=torch.float64, requires_grad=True)
    grid = rand_grid([6, 6]).unsqueeze(0)
    nj.grid_pull(img, grid).sum().backward()
    assert img.grad is not None and grid.grad is None


# ----------------------------------------------------------------------------- semantics
def test_batch_broadcasting_matches_a_loop():
    img = torch.randn(2, 1, 3, 7, 6, dtype=torch.float64)          # batch (2, 1), C = 3
    grid = torch.stack([rand_grid([7, 6], n=4) for _ in range(5)])  # batch (5,)
    out = nj.grid_pull(img, grid, interpolation=3, bound="dct2")
    assert out.shape == (2, 5, 3, 4, 4)
    for i, j in itertools.product(range(2), range(5)):
        ref = nj.grid_pull(img[i, 0], grid[j], interpolation=3, bound="dct2")
        assert torch.allclose(out[i, j], ref, atol=1e-12)


def test_noncontiguous_inputs():
    img = torch.randn(1, 8, 9, 2, dtype=torch.float64).movedim(-1, 1)  # channels strided
    grid = rand_grid([8, 9], n=5).transpose(0, 1).unsqueeze(0)          # non-contiguous grid
    assert not img.is_contiguous() and not grid.is_contiguous()
    out = nj.grid_pull(img, grid, interpolation=2, bound="dft")
    ref = nj.grid_pull(img.contiguous(), grid.contiguous(), interpolation=2, bound="dft")
    assert torch.equal(out, ref)


def test_count_is_push_of_ones_and_push_is_adjoint():
    grid = rand_grid([6, 5, 4], n=3).unsqueeze(0)
    ones = torch.ones(1, 1, 3, 3, 3, dtype=torch.float64)
    kw = dict(interpolation=3, bound="dst1", extrapolate=False)
    assert torch.allclose(nj.grid_count(grid, [6, 5, 4], **kw), nj.grid_push(ones, grid, [6, 5, 4], **kw))
    x = torch.randn(1, 2, 6, 5, 4, dtype=torch.float64)
    y = torch.randn(1, 2, 3, 3, 3, dtype=torch.float64)
    for pre in (False, True):
        lhs = (nj.grid_pull(x, grid, prefilter=pre, **kw) * y).sum()
        rhs = (x * nj.grid_push(y, grid, [6, 5, 4], prefilter=pre, **kw)).sum()
        assert torch.allclose(lhs, rhs, rtol=1e-10), pre


@pytest.mark.parametrize("order,bound", [(2, "dct2"), (3, "dct1"), (5, "dft"), (7, "dct2"), (4, "dst2")])
def test_prefilter_makes_pull_interpolate(order, bound):
    img = torch.randn(1, 1, 7, 6, dtype=torch.float64)
    grid = nj.identity_grid([7, 6], dtype=torch.float64)[None]
    out = nj.grid_pull(img, grid, interpolation=order, bound=bound, prefilter=True)
    assert torch.allclose(out, img, atol=1e-10)


def test_half_types_computed_in_float32():
    img = torch.randn(1, 1, 8, 8)
    grid = rand_grid([8, 8], n=4, dtype=torch.float32)[None]
    ref = nj.grid_pull(img, grid, interpolation=3)
    for dt in (torch.float16, torch.bfloat16):
        out = nj.grid_pull(img.to(dt), grid.to(dt), interpolation=3)
        assert out.dtype == dt
        assert torch.allclose(out.float(), ref, atol=0.1, rtol=0.05)


def test_label_maps_pulled_per_label():
    labels = torch.zeros(1, 1, 8, 8, dtype=torch.long)
    labels[..., 2:6, 2:6] = 3
    labels[..., 3:5, 3:5] = 7
    grid = nj.identity_grid([8, 8], dtype=torch.float32)[None] + 0.2
    out = nj.grid_pull(labels, grid, interpolation=1, bound="replicate", extrapolate=True)
    assert out.dtype == torch.long
    assert set(out.unique().tolist()) <= {0, 3, 7}
    assert torch.equal(out, labels)  # a small shift keeps every voxel's majority label


def test_nonfinite_coordinates_contribute_nothing():
    img = torch.randn(1, 1, 5, 5, dtype=torch.float64)
    grid = torch.tensor([[[[float("nan"), 1.0], [2.0, float("inf")], [1.5, 2.5]]]], dtype=torch.float64)
    out = nj.grid_pull(img, grid, interpolation=3, bound="dct2", extrapolate=True)
    assert out[..., :2].eq(0).all() and out[..., 2].ne(0).all()
    pushed = nj.grid_push(torch.ones(1, 1, 1, 3, dtype=torch.float64), grid, [5, 5], extrapolate=True)
    assert torch.isfinite(pushed).all()


def test_identity_and_affine_grid():
    g = nj.identity_grid([3, 4])
    assert g.shape == (3, 4, 2) and g[2, 3].tolist() == [2.0, 3.0]
    mat = torch.tensor([[2.0, 0, 1], [0, 1, -1], [0, 0, 1]])
    a = nj.affine_grid(mat, [3, 4])
    assert torch.allclose(a[..., 0], 2 * g[..., 0] + 1) and torch.allclose(a[..., 1], g[..., 1] - 1)


def test_option_aliases_and_per_dim_lists():
    img = torch.randn(1, 1, 6, 5, 4, dtype=torch.float64)
    grid = rand_grid([6, 5, 4]).unsqueeze(0)
    a = nj.grid_pull(img, grid, interpolation=["cubic", 1, "nearest"], bound=["reflect", "wrap", "zeros"])
    b = nj.grid_pull(img, grid, interpolation=[3, 1, 0], bound=["dct2", "dft", "zero"])
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------- bad input
BAD = [
    (lambda: nj.grid_pull(torch.randn(4, 4), torch.rand(1, 2, 2, 2)), ValueError, "input"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 4)), ValueError, "grid"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.ones(1, 2, 2, 2, dtype=torch.long)), TypeError, "grid"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4, dtype=torch.float64), torch.rand(1, 2, 2, 2)), TypeError, "grid"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4, device="meta"), torch.rand(1, 2, 2, 2)), ValueError, "grid"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 0, 4), torch.rand(1, 2, 2, 2)), ValueError, "input"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 0, 2, 2)), ValueError, "grid"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 2), bound="sticky"), ValueError, "bound"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 2), interpolation=9), ValueError, "interpolation"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 2), interpolation="bicubic"), ValueError, "interpolation"),
    (lambda: nj.grid_pull(torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 2), bound=[0, 1, 2]), ValueError, "bound"),
    (lambda: nj.grid_pull(torch.randn(2, 1, 4, 4), torch.rand(3, 2, 2, 2)), ValueError, "broadcast"),
    (lambda: nj.grid_pull([1.0], torch.rand(1, 2, 2, 2)), TypeError, "input"),
    (lambda: nj.grid_push(torch.randn(1, 1, 3, 3), torch.rand(1, 2, 2, 2)), ValueError, "input"),
    (lambda: nj.grid_push(torch.randn(1, 1, 2, 2), torch.rand(1, 2, 2, 2), shape=[4]), ValueError, "shape"),
    (lambda: nj.grid_count(torch.rand(1, 2, 2, 2), shape="big"), TypeError, "shape"),
]


@pytest.mark.parametrize("call,exc,word", BAD)
def test_bad_input_names_the_argument(call, exc, word):
    with pytest.raises(exc, match=word):
        call()


# ----------------------------------------------------------------------------- torch.compile
@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_torch_compile_fullgraph_no_graph_break():
    img = torch.randn(1, 2, 6, 6, 6, requires_grad=True)
    grid = (nj.identity_grid([6, 6, 6])[None] + torch.randn(1, 6, 6, 6, 3) * 0.5).requires_grad_()

    def fn(x, g):
        warped = nj.grid_pull(x, g, interpolation=3, bound="dct2", extrapolate=True)
        back = nj.grid_push(warped, g, [6, 6, 6], interpolation=1, bound="dct2")
        return (warped ** 2).sum() + back.mean() + nj.grid_grad(x, g).abs().sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = compiled(img, grid)
    ref = fn(img, grid)
    assert torch.allclose(out, ref, rtol=1e-5)
    gi, gg = torch.autograd.grad(out, (img, grid))
    ri, rg = torch.autograd.grad(ref, (img, grid))
    assert torch.allclose(gi, ri, rtol=1e-4, atol=1e-5) and torch.allclose(gg, rg, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- fused backward
@pytest.mark.parametrize("dim,order,bound", [(1, 3, "dct2"), (2, 1, "zero"), (3, 1, "replicate"),
                                             (3, [3, 1, 2], "dst1")])
def test_pull_backward_is_fused(dim, order, bound):
    """A plain backward of grid_pull that needs both gradients runs grid_pull_backward (one
    pass), with the same gradients as the separate ops; create_graph=True (double backward)
    and a single needed gradient keep the separate differentiable ops."""
    shape = [6, 5, 7][:dim]
    kw = dict(interpolation=order, bound=bound, extrapolate=True)
    img = torch.randn([2, 3, *shape], dtype=torch.float64, requires_grad=True)
    grid = rand_grid(shape, n=4).unsqueeze(0).requires_grad_()
    gout = torch.randn([2, 3, *grid.shape[1:-1]], dtype=torch.float64)
    with OpLog() as log:
        gi, gg = torch.autograd.grad(nj.grid_pull(img, grid, **kw), (img, grid), gout)
    assert "grid_pull_backward" in log.names, log.names
    assert "grid_push" not in log.names and "grid_grad_dot" not in log.names, log.names
    # the separate ops, through the same public call
    with OpLog() as log:
        ri, rg = torch.autograd.grad(nj.grid_pull(img, grid, **kw), (img, grid), gout,
                                     create_graph=True)
    assert "grid_pull_backward" not in log.names
    assert "grid_push" in log.names and "grid_grad_dot" in log.names, log.names
    torch.testing.assert_close(gi, ri.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gg, rg.detach(), rtol=1e-12, atol=1e-12)
    # only one gradient needed: its own op
    with OpLog() as log:
        (gi1,) = torch.autograd.grad(nj.grid_pull(img, grid.detach(), **kw), (img,), gout)
    assert log.names == ["grid_pull", "grid_push"], log.names
    torch.testing.assert_close(gi1, gi, rtol=1e-12, atol=1e-12)


def test_pull_backward_fused_float32_and_broadcast():
    """float32, a grid broadcast over the image batch, and .backward() into leaves."""
    img = torch.randn(3, 2, 8, 9, 7, requires_grad=True)
    grid = (nj.identity_grid([8, 9, 7])[None] + torch.rand(1, 8, 9, 7, 3) * 3 - 1.5).requires_grad_()
    out = nj.grid_pull(img, grid, interpolation=1, bound="dct2", extrapolate=True)
    with OpLog() as log:
        out.square().sum().backward()
    assert "grid_pull_backward" in log.names
    x, g = img.detach().double().requires_grad_(), grid.detach().double().requires_grad_()
    ref = nj.grid_pull(x, g, interpolation=1, bound="dct2", extrapolate=True)
    ri, rg = torch.autograd.grad(ref.square().sum(), (x, g), create_graph=True)
    torch.testing.assert_close(img.grad.double(), ri.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grid.grad.double(), rg.detach(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dim,order,bound", [(1, 3, "dct2"), (2, 3, "dct1"), (2, 1, "zero"),
                                             (3, [2, 1, 3], "dft")])
def test_gradgradcheck_pull_and_push(dim, order, bound):
    """Double backward (create_graph=True: the separate differentiable ops, grid_grad_dot's
    own backward included) through grid_pull and grid_push, image and grid."""
    shape = [5, 4, 3][:dim]
    img = torch.randn([1, 2, *shape], dtype=torch.float64, requires_grad=True)
    grid = rand_grid(shape, n=2).unsqueeze(0).requires_grad_()
    vals = torch.randn([1, 2, *grid.shape[1:-1]], dtype=torch.float64, requires_grad=True)
    kw = dict(interpolation=order, bound=bound, extrapolate=True)
    gc = dict(eps=1e-6, atol=1e-5, rtol=1e-4)
    assert torch.autograd.gradgradcheck(lambda x, g: nj.grid_pull(x, g, **kw), (img, grid), **gc)
    assert torch.autograd.gradgradcheck(lambda x, g: nj.grid_push(x, g, shape, **kw),
                                        (vals, grid), **gc)
