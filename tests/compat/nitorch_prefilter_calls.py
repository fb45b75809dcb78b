"""NITorch's spline prefilter, which ``nitorch._C.grid`` takes from ``interpol.coeff`` whatever
its compiled backend: ``nitorch.spatial.spline_coeff``, ``spline_coeff_nd`` and ``grid_pull(...,
prefilter=True)`` (values and input gradients) on seeded float64 data, saved to a file. Run once
with torch-interpol itself (``NI_COMPILED_BACKEND=TS``) and once through nitorch_jit.compat
(``--compat``), then compared by test_interpol_clients.py.

    python nitorch_prefilter_calls.py OUT.pt [--compat]

The calls run under cProfile, and the file also says which functions of nitorch_jit NITorch's
own ``nitorch/_C/grid.py`` called, how many calls reached a function of the torch-interpol
package's files (none through the compat, which swaps interpol's functions for ours), and the
modules of the prefilter functions ``nitorch/_C/grid.py`` imported.
"""
import cProfile
import importlib.metadata
import os
import pstats
import sys

if "--compat" in sys.argv:
    import nitorch_jit.compat
    nitorch_jit.compat.install(monai=False)

import torch  # noqa: E402

import nitorch  # noqa: E402
from nitorch import spatial  # noqa: E402

F64 = torch.float64
# interpol 0.3.0's prefilter has dct1, dct2 and dft (zero as dct1, replicate as dct2); dst1
# and dst2 raise NotImplementedError there
BOUNDS = ["replicate", "dct1", "dct2", "dft", "zero"]
SHAPES = {2: [9, 8], 3: [7, 6, 8]}


def calls():
    torch.manual_seed(0)
    out = {}
    for dim, shape in SHAPES.items():
        x = torch.randn(2, *shape, dtype=F64)
        g = spatial.identity_grid(shape, dtype=F64)
        g = g + 2.0 * (torch.rand(g.shape, dtype=F64) - 0.5)
        for order in range(2, 8):
            for bound in BOUNDS:
                key = f"{dim}d-o{order}-{bound}"
                out[f"coeff-{key}"] = spatial.spline_coeff(x, order, bound, dim=-2)
                out[f"coeff_nd-{key}"] = spatial.spline_coeff_nd(x, order, bound, dim=dim)
                xi = x.clone().requires_grad_()
                y = spatial.grid_pull(xi, g, interpolation=order, bound=bound,
                                      extrapolate=True, prefilter=True)
                y.pow(2).sum().backward()
                out[f"pull-{key}"] = y.detach()
                out[f"pull-dx-{key}"] = xi.grad
    return out


def original_interpol_dir():
    dist = importlib.metadata.distribution("torch-interpol")
    return os.path.realpath(str(dist.locate_file("interpol"))) + os.sep


result = {"backend": nitorch.compiled_backend}
prof = cProfile.Profile()
result.update(prof.runcall(calls))
stats = pstats.Stats(prof).stats
grid_py = os.path.join("nitorch", "_C", "grid.py")
theirs = original_interpol_dir()
result["ours_called_by_grid_py"] = sorted(
    f"{os.path.basename(f[0])}:{f[2]}" for f, v in stats.items()
    if "nitorch_jit" + os.sep in f[0] and any(grid_py in c[0] for c in v[4]))
result["original_interpol_calls"] = sum(
    v[1] for f, v in stats.items() if os.path.realpath(f[0]).startswith(theirs))
# the functions NITorch's _C/grid.py imported from interpol.coeff
grid = sys.modules["nitorch._C.grid"]
result["grid_py_prefilter"] = [grid.spline_coeff.__module__, grid.spline_coeff_nd.__module__]
torch.save(result, sys.argv[1])
