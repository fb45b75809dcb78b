"""The cases of torch-interpol's own test suite, run through nitorch_jit's public API.

Read from balbasty/torch-interpol (interpol/tests/, commit bab3b86); the cases and tolerances
are theirs, the code is ours:

- test_gradcheck_pushpull.py: ``torch.autograd.gradcheck`` in float64 of grid_pull,
  grid_push, grid_count and grid_grad, with respect to the image and the grid, for D = 1, 2, 3;
  orders 0, 1, 2 with each of the seven bounds, orders 3..7 with dct2 only (their integer 3,
  dct2 in torch-interpol's numbering); 3 voxels per dim, batch 2, one channel, the grid the
  identity plus a standard normal displacement, extrapolate=True. Tolerances: gradcheck's
  defaults (eps 1e-6, atol 1e-5) with rtol=1, nondet_tol=1e-3, check_undefined_grad=False;
  run on 1 thread and on 10. rtol=1 accepts an analytical gradient of zero, so each case
  is also checked at rtol=1e-4, the tolerance of our own gradchecks.
- test_coeff.py: resizing to the same shape gives the input back (``torch.allclose``
  defaults) for lengths 1, 2, 3, 7, 9, 11, bounds dct1, dct2, dft and orders 0..7.

Their bounds are integers in torch-interpol's numbering; here they are translated to names
through the table of that numbering in nitorch_jit.codes (an integer would be refused).
"""
import inspect

import pytest
import torch

import nitorch_jit as nj
from nitorch_jit.codes import PEER_BOUND_CODES

INTERPOL_BOUNDS = PEER_BOUND_CODES["torch-interpol and NITorch's TorchScript backend"]
DIMS = [1, 2, 3]
SIZE = 3
# (order, torch-interpol's bound code): every bound for orders 0-2, dct2 (3) for orders 3-7
ORDER_BOUNDS = [(o, b) for o in range(3) for b in range(7)] + [(o, 3) for o in range(3, 8)]
GRADCHECK = dict(rtol=1.0, raise_exception=True)
if "check_undefined_grad" in inspect.signature(torch.autograd.gradcheck).parameters:
    GRADCHECK["check_undefined_grad"] = False
if "nondet_tol" in inspect.signature(torch.autograd.gradcheck).parameters:
    GRADCHECK["nondet_tol"] = 1e-3
OPS = ["pull", "push", "count", "grad"]


def _case_id(case):
    order, bound = case
    return f"{order}-{INTERPOL_BOUNDS[bound]}"


def _data(dim, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (SIZE,) * dim
    grid = torch.randn([2, *shape, dim], dtype=torch.float64, generator=gen)
    grid = grid + nj.identity_grid(shape, dtype=torch.float64)
    vol = torch.randn([2, 1, *shape], dtype=torch.float64, generator=gen)
    return vol.requires_grad_(), grid.requires_grad_(), list(shape)


def _gradcheck(op, dim, order, bound, seed):
    vol, grid, shape = _data(dim, seed)
    name = INTERPOL_BOUNDS[bound]
    if op == "pull":
        fn, args = nj.grid_pull, (vol, grid, order, name, True)
    elif op == "push":
        fn, args = nj.grid_push, (vol, grid, shape, order, name, True)
    elif op == "count":
        fn, args = nj.grid_count, (grid, shape, order, name, True)
    else:
        fn, args = nj.grid_grad, (vol, grid, order, name, True)
    assert torch.autograd.gradcheck(fn, args, **GRADCHECK), (op, dim, order, name)
    # theirs accepts any analytical gradient between 0 and twice the numerical one (rtol=1);
    # the same cases at the tolerance of our own gradchecks
    assert torch.autograd.gradcheck(fn, args, **{**GRADCHECK, "rtol": 1e-4}), \
        (op, dim, order, name)


@pytest.fixture
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


# one thread; 3-D is the heavy part (up to 8^3 taps a point, 27 points, 2 x 81 parameters)
@pytest.mark.parametrize("threads", [1], indirect=True)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("case", ORDER_BOUNDS, ids=_case_id)
def test_gradcheck(threads, op, dim, case):
    order, bound = case
    _gradcheck(op, dim, order, bound, seed=order * 7 + bound)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1], indirect=True)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", ORDER_BOUNDS, ids=_case_id)
def test_gradcheck_3d(threads, op, case):
    order, bound = case
    _gradcheck(op, 3, order, bound, seed=order * 7 + bound)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [10], indirect=True)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("case", ORDER_BOUNDS, ids=_case_id)
def test_gradcheck_10_threads(threads, op, dim, case):
    order, bound = case
    _gradcheck(op, dim, order, bound, seed=order * 7 + bound + 100)


@pytest.mark.parametrize("length", [1, 2, 3, 7, 9, 11])
@pytest.mark.parametrize("bound", ["dct1", "dct2", "dft"])
@pytest.mark.parametrize("order", range(8))
def test_resize_same_shape_is_identity(length, bound, order):
    x = torch.randn([length], dtype=torch.double, generator=torch.Generator().manual_seed(length))
    y = nj.resize(x, shape=[length], bound=bound, interpolation=order)
    assert torch.allclose(x, y)


def test_interpol_numbering_table_matches_interpol():
    """The translation above agrees with torch-interpol's own enum, when it is installed; its
    members are accepted as they are, and select the same bound as the translated name."""
    bounds = pytest.importorskip("interpol.bounds")
    vol, grid, shape = _data(2, seed=5)
    for code, name in enumerate(INTERPOL_BOUNDS):
        member = bounds.BoundType(code)
        assert member.name == name
        a = nj.grid_pull(vol, grid, 3, member, True)
        b = nj.grid_pull(vol, grid, 3, name, True)
        assert torch.equal(a, b), name
