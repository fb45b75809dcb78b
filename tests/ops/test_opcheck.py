"""torch.library.opcheck over every operator of the ``nitorch_jit`` namespace.

opcheck tests each op's schema (declared mutations and aliasing), its fake (meta) kernel
against the real one, its autograd registration, and AOT dispatch with dynamic shapes. The
list of ops is read from the dispatcher after importing every module of nitorch_jit.ops, so a
new op is found without editing this file, and fails here until it has a sample input in
SAMPLES. Runs on the backend chosen for this process (C by default); the TORCH twin gets the
same checks in a subprocess.
"""
import importlib
import os
import pkgutil
import subprocess
import sys

import pytest
import torch

import nitorch_jit.ops
from nitorch_jit import backends
from nitorch_jit.backends import schemas
from nitorch_jit.ops import regularisers as R

F64 = torch.float64
NAMESPACE = "nitorch_jit"


def _defined_ops():
    """Every op of the namespace: the schemas of backends/schemas.py and any defined elsewhere."""
    for info in pkgutil.iter_modules(nitorch_jit.ops.__path__):
        importlib.import_module(f"nitorch_jit.ops.{info.name}")
    names = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas()
             if s.name.startswith(NAMESPACE + "::")}
    for ops in schemas.MODULES.values():
        names.update(ops)
    return sorted(names)


def _randn(*shape, grad=False, seed=0):
    x = torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))
    return x.requires_grad_(grad)


def _grid(batch, out, shape, grad=False, seed=1):
    g = torch.rand(batch, *out, len(shape), dtype=F64,
                   generator=torch.Generator().manual_seed(seed))
    g = g * (torch.tensor(shape, dtype=F64) + 1) - 1  # some points outside the image
    return g.requires_grad_(grad)


# pushpull: a 2-D image [2, 3, 5, 4] sampled at [2, 3, 2] points, mixed orders and bounds
# (kernel codes: these are the ops themselves, below the public parser)
S, O = [5, 4], [3, 2]
PP = ([3, 1], [2, 6], True)  # order, bound (dct2, zero), extrapolate


def _reg(grad=False):
    taps = R.taps(2, 2, [0.1, 0.2], [0.5, 1.0], [0.0, 0.0], [1.0, 2.0], [2, 5], weighted=True)
    x = _randn(2, 2, 5, 4, grad=grad, seed=5)
    h = (torch.rand(2, 3, 5, 4, dtype=F64) + 1).requires_grad_(grad)
    w = (torch.rand(2, 1, 5, 4, dtype=F64) + 0.5).requires_grad_(grad)
    return taps, x, h, w


def _affine(batch, dim=2, grad=False, seed=3):
    lin = 1.2 * torch.eye(dim, dtype=F64) + 0.3 * _randn(batch, dim, dim, seed=seed)
    return torch.cat([lin, _randn(batch, dim, 1, seed=seed + 1) - 0.5], -1).requires_grad_(grad)


# op name -> list of argument tuples. Inputs require grad where the op registers autograd, so
# that the registration is exercised; ops without autograd take plain tensors.
SAMPLES = {
    "grid_pull": lambda: [
        (_randn(2, 3, *S, grad=True), _grid(2, O, S, grad=True), *PP),
        (_randn(1, 2, 6, grad=True), _grid(1, [4], [6], grad=True), [7], [5], False)],
    "grid_push": lambda: [
        (_randn(2, 3, *O, grad=True), _grid(2, O, S, grad=True), S, *PP)],
    "grid_grad": lambda: [
        (_randn(2, 3, *S, grad=True), _grid(2, O, S, grad=True), *PP)],
    "grid_pushgrad": lambda: [
        (_randn(2, 3, *O, 2, grad=True), _grid(2, O, S, grad=True), S, *PP)],
    "grid_grad_dot": lambda: [
        (_randn(2, 3, *O, grad=True), _randn(2, 3, *S, grad=True, seed=2),
         _grid(2, O, S, grad=True), *PP)],
    "grid_hess_dot": lambda: [
        (_randn(2, 3, *O, 2), _randn(2, 3, *S, seed=2), _grid(2, O, S), *PP)],
    "grid_pull_backward": lambda: [
        (_randn(2, 3, *O), _randn(2, 3, *S, seed=2), _grid(2, O, S), *PP)],
    # affine ops: a [2, 2, 3] matrix (output voxel -> input voxel) instead of a grid
    "affine_pull": lambda: [
        (_randn(2, 3, *S, grad=True), _affine(2, grad=True), O, *PP),
        (_randn(1, 2, 6, grad=True), _affine(1, 1, grad=True), [4], [7], [5], False)],
    "affine_push": lambda: [
        (_randn(2, 3, *O, grad=True), _affine(2, grad=True), S, *PP)],
    "affine_grad_dot": lambda: [
        (_randn(2, 3, *O), _randn(2, 3, *S, seed=2), _affine(2), *PP)],
    "spline_coeff_nd": lambda: [
        (_randn(2, 3, 6, 5, grad=True), [3, 5], [2, 5], [2, 3], False),
        (_randn(2, 7, grad=True), [4], [1], [1], True)],
    "spline_coeff_nd_": lambda: [
        (_randn(2, 3, 6, 5), [3, 5], [2, 5], [2, 3], False)],
    "resize": lambda: [
        (_randn(1, 2, 5, 4, grad=True), [7, 3], [4 / 6, 1.5], [0.0, 0.0], [3, 1], [2, 2], True)],
    "resize_adjoint": lambda: [
        (_randn(1, 2, 7, 3, grad=True), [5, 4], [4 / 6, 1.5], [0.0, 0.0], [3, 1], [2, 2],
         True)],
    "reg_matvec": lambda: [
        (lambda t, x, h, w: (x, h, w, t))(*_reg(grad=True)),
        (lambda t, x, h, w: (x, None, None, t))(*_reg(grad=True))],
    "reg_precond": lambda: [
        (lambda t, x, h, w: (x, h, w, t))(*_reg())],
    "reg_relax_": lambda: [
        (lambda t, x, h, w: (x.clone(), h, x, w, t, R.colour_periods(t, [5, 4], [2, 5]), 2))(
            *_reg())],
}

OPS = _defined_ops()


def _load_kernels():
    for module in schemas.MODULES:
        backends.ensure(module, "cpu")


def test_samples_cover_every_op():
    assert {"grid_pull", "spline_coeff_nd", "resize", "reg_matvec"} <= set(OPS)  # found at all
    missing = sorted(set(OPS) - set(SAMPLES))
    assert not missing, f"no opcheck sample input for {missing}: add them to SAMPLES"
    stale = sorted(set(SAMPLES) - set(OPS))
    assert not stale, f"SAMPLES has inputs for ops that are not defined: {stale}"


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    if name not in SAMPLES:
        pytest.fail(f"no opcheck sample input for nitorch_jit::{name}: add one to SAMPLES")
    _load_kernels()
    op = getattr(torch.ops.nitorch_jit, name)
    for args in SAMPLES[name]():
        torch.library.opcheck(op, args)


@pytest.mark.skipif(os.environ.get("NI_COMPILED_BACKEND", "").upper() in ("TORCH", "TS"),
                    reason="already on the TORCH backend")
@pytest.mark.slow  # a nested test run
def test_opcheck_torch_backend():
    """The same checks with the pure-PyTorch kernels registered (one backend per process)."""
    env = dict(os.environ, NI_COMPILED_BACKEND="TORCH")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider",
                           f"{__file__}::test_opcheck"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
