"""What the CPU output block cache (NI_JIT_OUTPUT_CACHE_MB) saves: the same calls with the cache
on (its default, 256 MiB per library) and off, alternately, in one process.

Outputs of 32 MiB or more are mapped afresh by glibc on every allocation, and the first write to
each page faults; the cache keeps freed blocks for the next output of the same size. Workloads:
an 8-channel 128^3 order-1 pull (64 MiB out) and reslice of a 256x256x176 float32 image at
orders 1 and 3 (46 MB out; order 3 also allocates its spline coefficients). Best of --repeat
calls per round; rounds alternate on / off so that drifts of the machine hit both.

    python scripts/bench_output_cache.py [--threads 2] [--rounds 3] [--repeat 7] [--size 128]
        [--quick]
"""
import argparse
import sys
import time

import torch

import nitorch_jit as nj
from nitorch_jit.bench import measure
from nitorch_jit.bench.data import RESLICE_SHAPE, reslice_workload, synthetic
from nitorch_jit.bench.report import print_table
from nitorch_jit.backends import tuning


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--size", type=int, default=128, help="edge of the pulled volume")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: a 16^3 pull, no reslice rows")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n = 16 if args.quick else args.size
    img8, grid = synthetic(n, 3, channels=8)
    mib = n ** 3 * 8 * 4 / 2 ** 20
    work = {f"{n}^3 x 8 ch pull order 1 ({mib:.0f} MiB out)":
            lambda: nj.grid_pull(img8, grid, 1, "replicate", True)}
    try:
        if args.quick:
            raise ImportError("--quick")
        import nibabel as nib
        data, moving_aff, target_aff = reslice_workload()
        moving = nib.Nifti1Image(data, moving_aff)
        for order in (1, 3):
            work[f"reslice order {order}, 256x256x176 (46 MB out)"] = (
                lambda o=order: nj.reslice(moving, (RESLICE_SHAPE, target_aff), order=o,
                                           bound="dct2", log=lambda s: None))
    except ImportError:
        print(f"the reslice rows are skipped ({'--quick' if args.quick else 'no nibabel'})",
              file=sys.stderr)
    on = tuning.current()["output_cache_mb"] or 256
    times = {(w, c): [] for w in work for c in (True, False)}
    for _ in range(args.rounds):
        for cached in (True, False):
            with tuning.override(output_cache_mb=on if cached else 0):
                for name, t in measure(work, repeat=args.repeat).items():
                    times[name, cached].append(t.best_ms)
    print(f"output block cache on ({on} MiB) and off, torch {torch.__version__}, "
          f"{args.threads} threads, {time.strftime('%Y-%m-%d %H:%M')}, best of {args.repeat} "
          f"per round, {args.rounds} rounds (ms: min-max over rounds)\n")
    rows = []
    for name in work:
        a, b = times[name, True], times[name, False]
        rows.append((name, f"{min(a):.1f}-{max(a):.1f}", f"{min(b):.1f}-{max(b):.1f}",
                     f"{min(b) / min(a):.2f}"))
    print_table(rows, ["workload", "cache on", "cache off", "off / on"])


if __name__ == "__main__":
    main()
