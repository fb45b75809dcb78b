"""Speed of nitorch_jit.ndimage against scipy.ndimage, same calls, same NumPy data, one run.

    python scripts/bench_ndimage.py [--threads 2] [--size 128] [--affine-shape 256 256 176]
        [--repeat 1]

Each workload is one call of ours (after one warm-up call on a tiny array, which loads the
compiled kernels) and one call of scipy's (single-threaded, as it runs; --repeat N: the best
of N each), timed with the conversions from and to NumPy included (our functions take and
return NumPy arrays). Also prints the largest difference between the two outputs. Goals (issue #12):

| workload | goal vs scipy |
|---|---|
| map_coordinates order 3, 128^3, float64 | >= 10x |
| map_coordinates order 3, 128^3, float32 | >= 10x |
| zoom x2, order 3, 128^3 | >= 30x |
| affine_transform order 1, 256x256x176 | >= 10x |
| spline_filter order 3, 128^3 | >= 5x |

--pipeline: a NumPy augmentation as a user writes it (random rotation, zoom and elastic
displacement of a 128^3 float32 volume at order 3, NumPy arithmetic between the calls; the
random parameters are arrays, so new draws do not recompile), three ways: scipy.ndimage, ours
eager, ours inside torch.compile (CPU, warm), plus the first compile. Goals (issue #26):
compiled >= 10x scipy, compiled no slower than eager, first compile <= 30 s. --device cuda:
the compiled column runs under ``with torch.device("cuda")`` (torch.compile moves the NumPy
arrays to the GPU and the result back; our CUDA kernels in the graph); eager and scipy are
NumPy on the CPU, as NumPy code runs without torch.compile.

--grid: issue 41's augmentation (rotation, normalisation, zoom, then a displacement on a grid
built with the zoomed result's dtype) at --size^3 and (4 --size)^2, float32, eager and inside
torch.compile (CPU, warm), with its graph breaks (goal: 0, and compiled no slower than eager).
"""
import argparse

import numpy as np
import torch

from nitorch_jit.bench import measure, ratio, stopwatch
from nitorch_jit.bench.data import affine_matrix
from nitorch_jit.bench.report import markdown_row, print_markdown


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--affine-shape", type=int, nargs=3, default=[256, 256, 176])
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed calls of each (the best counts; default one, as it runs)")
    ap.add_argument("--pipeline", action="store_true",
                    help="time the augmentation pipeline (scipy / eager / torch.compile) only")
    ap.add_argument("--grid", action="store_true",
                    help="time issue 41's augmentation (its grid takes the dtype of our zoom's "
                         "result) in 3-D (--size^3) and 2-D ((4 --size)^2), eager / "
                         "torch.compile, CPU")
    ap.add_argument("--device", default="cpu", help="--pipeline: cpu or cuda")
    ap.add_argument("--warm-cache", action="store_true",
                    help="--pipeline: keep inductor's on-disk cache (default: a fresh one, so "
                         "the first compile is a first compile)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.pipeline:
        return pipeline(args)
    if args.grid:
        return grid_pipeline(args)

    import scipy
    import scipy.ndimage as sn

    import nitorch_jit
    from nitorch_jit import ndimage as nn

    rng = np.random.default_rng(0)
    n = args.size
    vol64 = rng.standard_normal((n, n, n))
    vol32 = vol64.astype(np.float32)
    coords64 = np.indices((n, n, n), dtype=np.float64) + rng.uniform(-2, 2, (3, n, n, n))
    coords32 = coords64.astype(np.float32)
    big = rng.standard_normal(tuple(args.affine_shape)).astype(np.float32)
    aff = affine_matrix(args.affine_shape, 10, 1.0, (3.5, -2.25, 1.0), torch.float64).numpy()
    rot, offset = aff[:, :3], aff[:, 3]

    # warm-up: load (or build) the kernels of every path
    w = rng.standard_normal((6, 6, 6))
    nn.map_coordinates(w, np.indices(w.shape, dtype=np.float64))
    nn.map_coordinates(w.astype(np.float32), np.indices(w.shape, dtype=np.float32))
    nn.zoom(w, 2)
    nn.affine_transform(w.astype(np.float32), rot, order=1)
    nn.spline_filter(w)

    work = [
        (f"map_coordinates order 3, {n}^3, float64 (coordinates float64, mode 'constant')",
         lambda m: m.map_coordinates(vol64, coords64, order=3), 10),
        (f"map_coordinates order 3, {n}^3, float32 (coordinates float32, mode 'constant')",
         lambda m: m.map_coordinates(vol32, coords32, order=3), 10),
        (f"zoom x2, order 3, {n}^3 -> {2 * n}^3, float32",
         lambda m: m.zoom(vol32, 2, order=3), 30),
        (f"affine_transform order 1, {'x'.join(map(str, args.affine_shape))}, float32, "
         f"rotation 10 deg + shift", lambda m: m.affine_transform(big, rot, offset, order=1), 10),
        (f"spline_filter order 3, {n}^3, float64", lambda m: m.spline_filter(vol64, order=3), 5),
    ]
    print(f"nitorch_jit {nitorch_jit.__version__} ({torch.get_num_threads()} threads, backend "
          f"{nitorch_jit.compiled_backend}), torch {torch.__version__}, scipy {scipy.__version__}"
          f", numpy {np.__version__}; one run each, conversions counted")
    print()
    print_markdown([], ["workload", "scipy (s)", "ours (s)", "speed-up", "goal", "max abs diff"])
    for name, fn, goal in work:
        t = measure({"ours": lambda: fn(nn), "scipy": lambda: fn(sn)}, repeat=args.repeat,
                    warmup=0, keep_result=True)
        o, s = t["ours"].result, t["scipy"].result
        diff = float(np.abs(o.astype(np.float64) - s.astype(np.float64)).max())
        r = ratio(t["scipy"], t["ours"])
        print(markdown_row([name, f"{t['scipy'].best_ms / 1e3:.3f}",
                            f"{t['ours'].best_ms / 1e3:.3f}", f"{r:.1f}x",
                            f">= {goal}x {'ok' if r >= goal else 'MISSED'}", f"{diff:.1e}"]),
              flush=True)


def augment(m, vol, params, coarse):
    """A random rotation (params[0] degrees about axis 0), zoom (params[1]) and elastic
    displacement (coarse: [3, 8, 8, 8] voxels, smoothly upsampled) of `vol`, with the
    ndimage module `m`, at order 3, NumPy arithmetic between the calls. (NumPy's functions
    rather than its operators: under ``with torch.device("cuda")`` torch 2.13's dynamo fails
    on ndarray operators, pytorch/pytorch#140884; on the CPU both forms trace.)"""
    n = vol.shape
    x = m.rotate(vol, params[0], axes=(1, 2), reshape=False, order=3, mode="nearest")
    centre = np.divide(np.subtract(np.array(n, dtype=np.float64), 1), 2)
    scale = np.divide(np.full(3, 1.0), params[1])
    x = m.affine_transform(x, scale, np.subtract(centre, np.multiply(scale, centre)), order=3,
                           mode="nearest")
    x = np.divide(np.subtract(x, np.mean(x)), np.add(np.std(x), 1e-6))
    disp = m.zoom(coarse, (1,) + tuple(s / c for s, c in zip(n, coarse.shape[1:])), order=3)
    coords = np.add(np.indices(n, dtype=np.float32), disp)
    y = m.map_coordinates(x, coords, order=3, mode="nearest")
    return np.clip(y, -3, 3).astype(np.float32)


def pipeline(args):
    """The augmentation three ways (see the module docstring)."""
    if not args.warm_cache:
        import os
        import tempfile
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_ndimage_")
    import scipy
    import scipy.ndimage as sn

    import nitorch_jit
    from nitorch_jit import ndimage as nn

    rng = np.random.default_rng(0)
    n = args.size
    vol = rng.standard_normal((n, n, n)).astype(np.float32)

    def draw():
        return (np.array([rng.uniform(-20, 20), rng.uniform(0.9, 1.1)]),
                rng.uniform(-3, 3, (3, 8, 8, 8)).astype(np.float32))
    where = torch.device(args.device)  # (on the CPU too: the CUDA run's code path)
    compiled = torch.compile(lambda v, p, c: augment(nn, v, p, c))

    def ours_compiled(p, c):
        with where:
            return compiled(vol, p, c)

    def ours_eager(p, c):  # eager NumPy code runs on the CPU (NumPy has no device)
        return augment(nn, vol, p, c)
    p, c = draw()
    with stopwatch(args.device) as sw:
        first = ours_compiled(p, c)
    first_s = sw.wall_ms / 1e3
    p, c = draw()  # new draws: no recompilation
    ours_compiled(p, c)
    print(f"nitorch_jit {nitorch_jit.__version__} ({torch.get_num_threads()} threads, backend "
          f"{nitorch_jit.compiled_backend}), torch {torch.__version__}, scipy "
          f"{scipy.__version__}, numpy {np.__version__}; {n}^3 float32, order 3, device "
          f"{args.device}")
    ref = augment(sn, vol, p, c)
    eager = ours_eager(p, c)
    comp = ours_compiled(p, c)
    print(f"first compile (and call): {first_s:.1f} s (goal <= 30 s "
          f"{'ok' if first_s <= 30 else 'MISSED'}); max |compiled - eager| "
          f"{float(np.abs(comp - eager).max()):.1e}, max |compiled - scipy| "
          f"{float(np.abs(comp - ref).max()):.1e}")
    fns = {"compiled": lambda: ours_compiled(p, c), "eager": lambda: ours_eager(p, c),
           "scipy": lambda: augment(sn, vol, p, c)}
    # (on CUDA, the compiled column includes NumPy's host arrays in and out of the graph)
    t = measure(fns, repeat={"compiled": args.repeat + 2, "eager": args.repeat + 2,
                             "scipy": args.repeat}, warmup={"compiled": 1, "eager": 1,
                                                             "scipy": 0},
                device=args.device, ours="compiled")
    print()
    print_markdown([], ["pipeline", "time (s)", "compiled's speed-up", "goal"])
    for name in fns:
        r = ratio(t[name], t["compiled"])
        goal = {"scipy": (">= 10x", r >= 10), "eager": (">= 1x", r >= 1 / 1.05),
                "compiled": ("", True)}[name]
        print(markdown_row([name, f"{t[name].best_ms / 1e3:.3f}", f"{r:.1f}x",
                            f"{goal[0]} {'ok' if goal[1] else 'MISSED'}" if goal[0] else ""]),
              flush=True)


def augment_grid(m, vol, disp, angle, scale):
    """Issue 41's augmentation (rank 2 or 3): rotation in the last plane, normalisation,
    zoom, a displacement on a grid of the zoomed result's dtype."""
    v = m.rotate(vol, angle, axes=(-2, -1), reshape=False, order=3, mode="nearest")
    v = (v - v.mean()) / (v.std() + 1e-6)
    v = m.zoom(v, scale, order=3, mode="nearest")
    n = v.shape
    grid = np.stack(np.meshgrid(*[np.arange(s, dtype=v.dtype) for s in n], indexing="ij"))
    out = m.map_coordinates(v, grid + disp[(slice(None),) + tuple(slice(s) for s in n)],
                            order=3, mode="reflect")
    return np.clip(out, -3.0, 3.0)


def grid_pipeline(args):
    """augment_grid eager and compiled (one graph: explain's count shown), 3-D and 2-D."""
    from nitorch_jit import ndimage as nn
    rng = np.random.default_rng(0)
    print_markdown([], ["augment_grid (float32)", "graph breaks", "eager (ms)",
                        "compiled (ms)", "compiled's speed-up", "goal >= 1x"])
    for shape in ((args.size,) * 3, (4 * args.size,) * 2):
        big = tuple(int(round(s * 1.2)) + 1 for s in shape)
        a = (rng.standard_normal(shape).astype(np.float32),
             rng.uniform(-1, 1, (len(shape),) + big).astype(np.float32), 10.0, 1.2)
        fn = lambda *b: augment_grid(nn, *b)  # noqa: E731 (one function object per rank)
        breaks = torch._dynamo.explain(fn)(*a).break_reasons
        compiled = torch.compile(fn, fullgraph=True)
        t = measure({"compiled": lambda: compiled(*a), "eager": lambda: fn(*a)},
                    repeat=args.repeat + 4, ours="compiled")
        r = ratio(t["eager"], t["compiled"])
        print(markdown_row([f"{'x'.join(map(str, shape))}", str(len(breaks)),
                            f"{t['eager'].best_ms:.1f}", f"{t['compiled'].best_ms:.1f}",
                            f"{r:.2f}x", "ok" if r >= 1 / 1.05 else "MISSED"]), flush=True)


if __name__ == "__main__":
    main()
