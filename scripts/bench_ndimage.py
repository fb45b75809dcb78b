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
"""
import argparse

import numpy as np
import torch

from nitorch_jit.bench import measure, ratio
from nitorch_jit.bench.data import affine_matrix
from nitorch_jit.bench.report import markdown_row, print_markdown


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--affine-shape", type=int, nargs=3, default=[256, 256, 176])
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed calls of each (the best counts; default one, as it runs)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

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


if __name__ == "__main__":
    main()
