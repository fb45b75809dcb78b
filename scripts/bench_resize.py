"""Speed of the spline prefilter and of resize against peers, measured in one run.

    python scripts/bench_resize.py [--threads 2] [--size 128] [--repeat 7]

Prints one table: the time of each routine (min over --repeat runs after warm-up) and the
ratio peer / ours. Goals (issue): spline_coeff_nd order 3 >= 5x scipy.ndimage.spline_filter
and >= 2.5x torch-interpol's; resize x2 cubic with prefilter (edge anchor) >= 3x
torch-interpol's resize.
"""
import argparse
import time

import numpy as np
import torch


def timeit(fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import nitorch_jit
    from nitorch_jit import backend
    from nitorch_jit.ops import splinc

    try:
        from nitorch_jit.ops import resize as resize_ops
    except ImportError:
        resize_ops = None
    try:
        import interpol
    except ImportError:
        interpol = None
    try:
        import scipy.ndimage as ndi
    except ImportError:
        ndi = None

    n = args.size
    torch.manual_seed(0)
    x = torch.randn(n, n, n)
    print(f"# {n}^3 float32, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"nitorch_jit {nitorch_jit.__version__}")
    rows = []

    # ---- spline prefilter, order 3, dct2 (scipy: mirror/reflect; same cost)
    backend.ensure("splinc", "cpu")
    ours = timeit(lambda: splinc.spline_coeff_nd(x, 3, "dct2"), args.repeat)
    rows.append(("spline_coeff_nd o3 (nitorch_jit)", ours, None, None))
    if ndi is not None:
        xn = x.numpy()
        t = timeit(lambda: ndi.spline_filter(xn, 3, mode="reflect", output=np.float32),
                   args.repeat)
        rows.append(("  scipy.ndimage.spline_filter o3", t, t / ours, 5.0))
    if interpol is not None:
        t = timeit(lambda: interpol.spline_coeff_nd(x, 3, bound="dct2", dim=3), args.repeat)
        rows.append(("  interpol.spline_coeff_nd o3", t, t / ours, 2.5))

    # ---- resize x2, cubic, prefilter, edge anchor
    if resize_ops is not None:
        xb = x[None, None]
        backend.ensure("resize", "cpu")
        ours = timeit(lambda: resize_ops.resize(xb, factor=2, anchor="e", interpolation=3,
                                                prefilter=True), args.repeat)
        rows.append(("resize x2 o3 prefilter edge (nitorch_jit)", ours, None, None))
        if interpol is not None:
            t = timeit(lambda: interpol.resize(xb, factor=2, anchor="e", interpolation=3,
                                               prefilter=True), max(2, args.repeat // 2), 1)
            rows.append(("  interpol.resize", t, t / ours, 3.0))
        if ndi is not None:
            xn = x.numpy()
            t = timeit(lambda: ndi.zoom(xn, 2, order=3, mode="reflect", grid_mode=True,
                                        output=np.float32), max(2, args.repeat // 2), 1)
            rows.append(("  scipy.ndimage.zoom grid_mode", t, t / ours, None))

    print(f"{'routine':46s} {'ms':>9s} {'peer/ours':>10s} {'goal':>6s}")
    for name, t, ratio, goal in rows:
        r = "" if ratio is None else f"{ratio:9.2f}x"
        g = "" if goal is None else (f">={goal:g}x" + ("" if ratio >= goal else " MISSED"))
        print(f"{name:46s} {1e3 * t:9.2f} {r:>10s} {g:>6s}")


if __name__ == "__main__":
    main()
