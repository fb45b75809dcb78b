"""Differential check of two compilers' builds (issue 40): a fixed set of float64 outputs of
the compiled kernels (pull / push / grad at several orders and bounds, with and without
extrapolation, spline_coeff, resize, the regularisers, the solvers), computed in this
process with the compiler of CXX, saved; then two saved sets compared to 1e-10.

    CXX=g++     python scripts/compiler_diff.py compute gcc.pt
    CXX=clang++ python scripts/compiler_diff.py compute clang.pt
    python scripts/compiler_diff.py compare gcc.pt clang.pt

Each `compute` runs in its own process: one compiler per process, as the cache key has it.
Used by scripts/check_sanitizers.sh.
"""
import argparse
import os
import sys

import torch

F64 = torch.float64
# one per distinct kernel library the cases need: orders 1 and 3 in 3-D take the fast-path
# libraries (o1d3, o3d3), mixed and high orders the generic one, [1, 1] the 2-D one
ORDERS = [1, 3, [0, 2, 5], 7]
BOUNDS = ["dct2", "dft", "zero", ["dst1", "replicate", "dct1"]]


def cases():
    """name -> a function of no argument returning a float64 tensor."""
    import nitorch_jit as nj
    g = torch.Generator().manual_seed(40)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=F64)

    img = rnd(1, 2, 9, 10, 11)
    shape = (9, 10, 11)
    base = torch.stack(torch.meshgrid(*[torch.arange(n, dtype=F64) for n in (7, 8, 6)],
                                      indexing="ij"), -1)[None]
    grid = base * 1.3 - 1 + rnd(1, 7, 8, 6, 3)  # some points outside the field of view
    out = {}
    for order in ORDERS:
        for bound in BOUNDS:
            for extrapolate in (False, True):
                key = f"o{order}-{bound}-e{int(extrapolate)}".replace(" ", "")
                opts = dict(interpolation=order, bound=bound, extrapolate=extrapolate)
                out[f"pull-{key}"] = lambda o=opts: nj.grid_pull(img, grid, **o)
                out[f"push-{key}"] = lambda o=opts: nj.grid_push(img[..., :7, :8, :6], grid,
                                                                  shape, **o)
                out[f"grad-{key}"] = lambda o=opts: nj.grid_grad(img, grid, **o)
    img2, grid2 = img[:, :, 0], grid[:, :, :, 0, :2]
    out["pull2d-o1"] = lambda: nj.grid_pull(img2, grid2, 1, "dct2")
    out["push2d-o1"] = lambda: nj.grid_push(img2[..., :7, :8], grid2, (10, 11), 1, "dct2")
    for order in (2, 3, 5, 7):
        for bound in ("dct2", "dft", "dct1"):
            out[f"coeff-o{order}-{bound}"] = lambda o=order, b=bound: nj.spline_coeff_nd(
                img, o, b, dim=3)
    for factor in (2, 0.5, [1.5, 0.7, 2]):
        for order in (1, 3):
            out[f"resize-{factor}-o{order}".replace(" ", "")] = \
                lambda f=factor, o=order: nj.resize(img, factor=f, interpolation=o)
    v = rnd(1, 8, 9, 10, 3)
    for name, opts in {"membrane": dict(membrane=1e-1, absolute=1e-3),
                       "bending": dict(bending=0.1, membrane=1e-3),
                       "lame": dict(lame=(0.05, 0.2), membrane=1e-3)}.items():
        out[f"regulariser_grid-{name}"] = lambda o=opts: nj.regulariser_grid(v, **o)
    out["regulariser-field"] = lambda: nj.regulariser(img, membrane=0.1, bending=0.01, dim=3)
    h = torch.rand(1, 8, 9, 10, 6, generator=g, dtype=F64) * 0.1
    h[..., :3] += 1
    for optim in ("cg", "relax"):
        out[f"solve_grid-{optim}"] = lambda o=optim: nj.solve_grid(
            h, v, membrane=1e-3, bending=0.1, optim=o, max_iter=8)
    out["solve_grid_fmg"] = lambda: nj.solve_grid_fmg(h, v, membrane=1e-3, bending=0.1)
    return out


def compute(path):
    os.environ.setdefault("NI_COMPILED_BACKEND", "C")
    results = {name: fn().detach().clone() for name, fn in cases().items()}
    torch.save(results, path)
    print(f"{len(results)} outputs with CXX={os.environ.get('CXX', '(default)')} -> {path}")


def compare(a_path, b_path, tol):
    a, b = torch.load(a_path), torch.load(b_path)
    bad = sorted(set(a) ^ set(b))
    worst = ("", 0.0)
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.shape != y.shape:
            bad.append(f"{name}: shapes {tuple(x.shape)} != {tuple(y.shape)}")
            continue
        err = float(((x - y).abs() / (1 + y.abs())).max()) if x.numel() else 0.0
        if not err <= tol:  # NaN fails too
            bad.append(f"{name}: max |a-b|/(1+|b|) = {err:.3g}")
        if err > worst[1]:
            worst = (name, err)
    print(f"{len(a)} outputs compared: largest difference {worst[1]:.3g} ({worst[0] or '-'}), "
          f"tolerance {tol:g}")
    for line in bad:
        print("  DIFFERS:", line)
    return 1 if bad else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compute", help="compute the outputs with the compiler of CXX")
    c.add_argument("out")
    d = sub.add_parser("compare", help="compare two saved sets")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--tol", type=float, default=1e-10)
    args = parser.parse_args(argv)
    if args.cmd == "compute":
        compute(args.out)
        return 0
    return compare(args.a, args.b, args.tol)


if __name__ == "__main__":
    sys.exit(main())
