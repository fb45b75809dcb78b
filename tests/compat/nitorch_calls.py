"""Calls of NITorch's public ``spatial`` API on seeded random data, saved to a file: run once
with ``NI_COMPILED_BACKEND=TS`` (NITorch's TorchScript) and once through nitorch_jit.compat,
then compared by test_nitorch_client.py.

    python nitorch_calls.py OUT.pt [--compat]

The cases leave out where NITorch's TorchScript disagrees with its own C sources
(third_party/nitorch/README.vendored.md), which our kernels follow: dst1/dst2 bounds (its sign
pattern), anisotropic orders (its grid gradients), coordinates exactly on a half voxel
(nearest ties), the Lamé weights of regulariser_grid (swapped), solve_grid's default stop,
coordinates within 0.05 voxel outside the image with extrapolate=False (TS takes 1e-5), and
the field bending energy at a dct2 boundary (TS treats the boundary second differences
otherwise; the interior and dft agree). Two more found here, checked against torch-interpol
by the test instead: TS's 1-D resampling at orders >= 2 is wrong (a unit impulse pulled at
order 2 gives 0.5 one voxel off), and its grid FMG rejects a diagonal grid Hessian.
"""
import sys

if "--compat" in sys.argv:
    import nitorch_jit.compat
    nitorch_jit.compat.install(monai=False)

import torch  # noqa: E402

import nitorch  # noqa: E402
from nitorch import spatial  # noqa: E402

torch.manual_seed(0)
F64 = torch.float64
BOUNDS = ["replicate", "dct1", "dct2", "dft", "zero"]
SHAPES = {1: [7], 2: [6, 5], 3: [5, 4, 6]}


def grid_of(shape, spread, inside=False):
    g = spatial.identity_grid(shape, dtype=F64)[None]
    g = g + spread * (torch.rand(g.shape, dtype=F64) - 0.5)
    if inside:  # keep out of the bands where TS and C round the range test differently
        hi = torch.tensor([n - 1 for n in shape], dtype=F64)
        g = torch.where((g > -0.1) & (g < 0), g - 0.1, g)
        g = torch.where((g > hi) & (g < hi + 0.1), g + 0.1, g)
    return g


out = {"backend": nitorch.compiled_backend}
for dim, shape in SHAPES.items():
    x = torch.randn(1, 2, *shape, dtype=F64)
    for order in range(8):
        for bound in BOUNDS:
            for extrap in (True, False):
                g = grid_of(shape, 3.0, inside=not extrap)
                key = f"{dim}d-o{order}-{bound}-{'ext' if extrap else 'in'}"
                xi, gi = x.clone().requires_grad_(), g.clone().requires_grad_()
                y = spatial.grid_pull(xi, gi, interpolation=order, bound=bound,
                                      extrapolate=extrap)
                w = torch.randn_like(y)
                (y * w).sum().backward()
                out[f"pull-{key}"] = y.detach()
                out[f"in-{key}"] = (x, g, w)
                out[f"pull-dx-{key}"] = xi.grad
                if order > 0:  # nearest has no grid gradient worth comparing
                    out[f"pull-dg-{key}"] = gi.grad
                v = torch.randn(1, 2, *shape, dtype=F64)
                out[f"in-push-{key}"] = v
                out[f"push-{key}"] = spatial.grid_push(v, g, shape, interpolation=order,
                                                       bound=bound, extrapolate=extrap)
                out[f"count-{key}"] = spatial.grid_count(g, shape, interpolation=order,
                                                         bound=bound, extrapolate=extrap)
                if order > 0:
                    out[f"grad-{key}"] = spatial.grid_grad(x, g, interpolation=order,
                                                           bound=bound, extrapolate=extrap)

img = torch.randn(1, 1, 12, 10, 8, dtype=F64)
out["resize"] = spatial.resize(img, factor=1.7, interpolation=3, prefilter=False)

# regularisers: field (membrane + bending) and grid (absolute, membrane, bending)
f = torch.randn(2, 10, 9, 8, dtype=F64)
out["regulariser"] = spatial.regulariser(f, membrane=0.3, bending=0.05, voxel_size=[1, 1.5, 2],
                                         bound="dft", dim=3)
out["regulariser_membrane"] = spatial.regulariser(f, membrane=0.3, voxel_size=[1, 1.5, 2],
                                                  bound="dct2", dim=3)
v = torch.randn(1, 10, 9, 8, 3, dtype=F64)
out["regulariser_grid"] = spatial.regulariser_grid(v, absolute=0.1, membrane=0.4, bending=0.05,
                                                   voxel_size=[1, 1.5, 2], bound="dft")

# solvers: the problem and both solutions (the test computes the residuals itself)
g = torch.randn(1, 2, 16, 16, 16, dtype=F64)
h = torch.rand(1, 2, 16, 16, 16, dtype=F64) + 0.5
out["solve_field"] = spatial.solve_field(h, g, membrane=0.5, bending=0.1, bound="dct2",
                                         dim=3, max_iter=16, tolerance=0)
out["solve_field_fmg"] = spatial.solve_field_fmg(h, g, membrane=0.5, bending=0.1, dim=3,
                                                 bound="dct2")
gg = torch.randn(1, 16, 16, 16, 3, dtype=F64)
# a packed symmetric Hessian (diagonal, then upper triangle): TS's grid FMG rejects a diagonal one
hh = torch.cat([torch.rand(1, 16, 16, 16, 3, dtype=F64) + 0.5,
                0.1 * torch.rand(1, 16, 16, 16, 3, dtype=F64)], -1)
out["solve_grid_fmg"] = spatial.solve_grid_fmg(hh, gg, absolute=0.01, membrane=0.1,
                                               bending=0.2, bound="dft")
out["problem"] = dict(g=g, h=h, gg=gg, hh=hh)
torch.save(out, sys.argv[1])
