"""The cases of torch-interpol's own test suite, run through nitorch_jit's public API.

Read from balbasty/torch-interpol (interpol/tests/, commit bab3b86); the cases and tolerances
are theirs, the code is ours:

- test_gradcheck_pushpull.py: ``torch.autograd.gradcheck`` in float64 of grid_pull,
  grid_push, grid_count and grid_grad, with respect to the image and the grid, for D = 1, 2, 3;
  orders 0, 1, 2 with each of the seven bounds, orders 3..7 with dct2 only (their integer 3,
  dct2 in torch-interpol's numbering); 3 voxels per dim, batch 2, one channel, the grid the
  identity plus a standard normal displacement, extrapolate=True. Tolerances: gradcheck's
  defaults (eps 1e-6, atol 1e-5) with rtol=1, nondet_tol=1e-3, check_undefined_grad=False;
  run on 1 thread and on 10 (here with the threads made to split the points, on a subset of
  the cases: see THREADED_CASES). rtol=1 accepts an analytical gradient of zero, so each case
  is checked at rtol=1e-4, the tolerance of our own gradchecks, which implies theirs.
- test_coeff.py: resizing to the same shape gives the input back (``torch.allclose``
  defaults) for lengths 1, 2, 3, 7, 9, 11, bounds dct1, dct2, dft and orders 0..7.

Their bounds are integers in torch-interpol's numbering; here they are translated to names
through the table of that numbering in nitorch_jit.codes (an integer would be refused).
"""
import inspect

import numpy
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
    # theirs accepts any analytical gradient between 0 and twice the numerical one (rtol=1);
    # checked at the tolerance of our own gradchecks, which implies theirs (|a - n| <= atol +
    # 1e-4 |n| is within atol + |n|), in one gradcheck, not two
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


# Their 10-thread cases: 27 points are far below the work a thread gets (parallel_min_work),
# so at 10 threads every call ran on one, the paths above again. Here the threads split the
# points for real (parallel_min_work=1: the threaded pulls, and the pushes' private copies and
# their sum), on one bound per order of 0-2 and on orders 3 and 7; their suite's own run of
# every case on 10 threads is tests/compat/test_interpol.py.
THREADED_CASES = [(0, 0), (1, 3), (2, 6), (3, 3), (7, 3)]


@pytest.mark.slow
@pytest.mark.parametrize("threads", [10], indirect=True)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("case", THREADED_CASES, ids=_case_id)
def test_gradcheck_10_threads(threads, op, dim, case, knobs):
    knobs(parallel_min_work=1)
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


# ----------------------------------------------------------------------------- bound arguments
# Ported code passes bounds as integers or as its package's enum members. Integers are refused
# everywhere (the numberings differ); enum members are read by their names. Every public
# function with a `bound` parameter needs a call here (checked below), so a new one is covered.
def _bound_calls():
    gen = torch.Generator().manual_seed(11)
    img = torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=gen)
    grid = (nj.identity_grid([3, 3], dtype=torch.float64)
            + torch.randn(3, 3, 2, dtype=torch.float64, generator=gen))[None]
    vals = torch.randn(1, 2, 3, 3, dtype=torch.float64, generator=gen)
    disp = torch.randn(1, 5, 4, 2, dtype=torch.float64, generator=gen)
    hess = torch.rand(1, 2, 5, 4, dtype=torch.float64, generator=gen) + 1
    hess_grid = torch.rand(1, 5, 4, 2, dtype=torch.float64, generator=gen) + 1
    reg = dict(membrane=0.5, bending=0.1)
    mat = torch.tensor([[1.2, 0.3, -0.8], [-0.2, 0.9, 0.4]], dtype=torch.float64)

    def reslice(b):
        nib = pytest.importorskip("nibabel")
        moving = nib.Nifti1Image(img[0, 0, :, :, None].expand(5, 4, 3).numpy(), numpy.eye(4))
        aff = numpy.eye(4)
        aff[:3, 3] = [0.3, -0.4, 0.2]
        out = nj.reslice(moving, ((5, 4, 3), aff), order=3, bound=b, extrapolate=True)
        return torch.as_tensor(numpy.asarray(out.dataobj))

    return {
        "grid_pull": lambda b: nj.grid_pull(img, grid, 3, b, True),
        "pull": lambda b: nj.pull(img, grid, 3, b, True),
        "grid_push": lambda b: nj.grid_push(vals, grid, [5, 4], 3, b, True),
        "push": lambda b: nj.push(vals, grid, [5, 4], 3, b, True),
        "grid_count": lambda b: nj.grid_count(grid, [5, 4], 3, b, True),
        "count": lambda b: nj.count(grid, [5, 4], 3, b, True),
        "grid_grad": lambda b: nj.grid_grad(img, grid, 3, b, True),
        "affine_pull": lambda b: nj.affine_pull(img, mat, [3, 3], 3, b, True),
        "affine_push": lambda b: nj.affine_push(vals, mat, [5, 4], 3, b, True),
        "resize": lambda b: nj.resize(img, factor=1.5, interpolation=3, bound=b),
        "restrict": lambda b: nj.restrict(img, factor=2, interpolation=3, bound=b),
        "prolong": lambda b: nj.prolong(img, bound=b),
        "resize_grid": lambda b: nj.resize_grid(disp, factor=1.5, interpolation=3, bound=b),
        "spline_coeff": lambda b: nj.spline_coeff(img, 3, b),
        "spline_coeff_nd": lambda b: nj.spline_coeff_nd(img, 3, b, dim=2),
        "regulariser": lambda b: nj.regulariser(img, bound=b, **reg),
        "regulariser_grid": lambda b: nj.regulariser_grid(disp, bound=b, **reg),
        "solve_field": lambda b: nj.solve_field(hess, img, bound=b, **reg),
        "solve_field_fmg": lambda b: nj.solve_field_fmg(hess, img, bound=b, **reg),
        "solve_grid": lambda b: nj.solve_grid(hess_grid, disp, bound=b, **reg),
        "solve_grid_fmg": lambda b: nj.solve_grid_fmg(hess_grid, disp, bound=b, **reg),
        "reslice": reslice,
    }


BOUND_CALLS = _bound_calls()
PUBLIC_WITH_BOUND = sorted(
    name for name in nj.__all__ if name != "compiled_backend" and callable(getattr(nj, name))
    and not isinstance(getattr(nj, name), type)
    and "bound" in inspect.signature(getattr(nj, name)).parameters)


def test_every_public_bound_argument_has_a_case():
    assert PUBLIC_WITH_BOUND, "no public function with a bound parameter found"
    missing = sorted(set(PUBLIC_WITH_BOUND) - set(BOUND_CALLS))
    assert not missing, f"add a call to _bound_calls() for {missing}"


@pytest.mark.parametrize("name", PUBLIC_WITH_BOUND)
def test_integer_bound_is_refused(name):
    call = BOUND_CALLS[name]
    for bad in (2, 6, 0, [2], numpy.int64(2)):
        with pytest.raises((TypeError, ValueError), match="ambiguous") as info:
            call(bad)
        message = str(info.value)
        # the message explains the three numberings and says what to pass instead
        assert "bound" in message and "torch-interpol" in message and "MONAI" in message
        assert "nitorch_jit.BoundType" in message


@pytest.mark.parametrize("name", PUBLIC_WITH_BOUND)
def test_enum_members_select_the_named_bound(name):
    """Ours, torch-interpol's (when installed) and a stand-in for the pybind11 enums of
    NITorch's and MONAI's compiled modules (no import: read by name) give the named bound."""
    call = BOUND_CALLS[name]
    want = call("dft")
    assert not torch.equal(want, call("dct2"))  # the two bounds differ on these inputs
    members = [nj.BoundType.dft, nj.BoundType.wrap,
               _PybindLike("dft"), "DFT"]
    try:
        from interpol.bounds import BoundType as InterpolBound
        members.append(InterpolBound.wrap)
    except ImportError:
        pass
    for member in members:
        assert torch.equal(call(member), want), (name, member)


class _PybindLike:
    """Shaped like a pybind11 enum member: a class with __members__, a string .name, no int."""
    __members__ = {}

    def __init__(self, name):
        self.name = name


def test_monai_grid_sample_enums_as_monai_translates_them():
    """MONAI's GridSamplePadMode / GridSampleMode are read as MONAI translates them for its
    compiled routines: reflection -> dct1 (align_corners=True), border -> replicate,
    zeros -> zero; nearest / bilinear / bicubic -> orders 0 / 1 / 3."""
    utils = pytest.importorskip("monai.utils")
    img, grid = _data(2, seed=3)[:2]
    pad, mode = utils.GridSamplePadMode, utils.GridSampleMode
    for member, name in [(pad.REFLECTION, "dct1"), (pad.BORDER, "replicate"),
                         (pad.ZEROS, "zero")]:
        assert torch.equal(nj.grid_pull(img, grid, 1, member, True),
                           nj.grid_pull(img, grid, 1, name, True)), member
    for member, order in [(mode.NEAREST, 0), (mode.BILINEAR, 1), (mode.BICUBIC, 3)]:
        assert torch.equal(nj.grid_pull(img, grid, member, "dct2", True),
                           nj.grid_pull(img, grid, order, "dct2", True)), member


def test_enum_of_the_wrong_kind_is_refused():
    img, grid = _data(1, seed=4)[:2]
    with pytest.raises(ValueError, match="bound"):
        nj.grid_pull(img, grid, 1, nj.InterpolationType.nearest)
    with pytest.raises(ValueError, match="interpolation"):
        nj.grid_pull(img, grid, nj.BoundType.zero)
    # per-dim lists mix names and members
    assert torch.equal(nj.grid_pull(img, grid, 3, [nj.BoundType.dct1]),
                       nj.grid_pull(img, grid, 3, "mirror"))
    # orders stay integers (they agree everywhere), and our enum members work too
    want = nj.grid_pull(img, grid, 3, "dct2")
    for order in (nj.InterpolationType.cubic, numpy.int64(3), "cubic", "third"):
        assert torch.equal(nj.grid_pull(img, grid, order, "dct2"), want), order
