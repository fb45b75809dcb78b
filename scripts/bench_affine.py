"""Speed and memory of affine_pull (no grid) against grid_pull on the materialised grid.

    python scripts/bench_affine.py [--threads 2] [--size 128] [--mem-size 256] [--repeat 5]

Speed (issue #11, section 3): the same points (a rotation of 10 degrees, a zoom of 1.05 and a
shift, float32, bound zero, extrapolate off) resampled at 128^3 with orders 1 and 3 by
 - affine_pull(x, A, shape): coordinates computed in the kernel;
 - grid_pull(x, grid) with the grid [*shape, 3] already built (the kernel alone);
 - affine_grid(A, shape) + grid_pull (what a user without affine_pull runs).
Goal: affine_pull >= 1.5x faster than grid_pull. Best of --repeat runs each after a warm-up,
one process; affine_pull timed before and after grid_pull (nitorch_jit.bench.measure).

Memory: a 256^3 float32 order-3 resample, each way in a fresh subprocess: the peak resident
memory (VmHWM, reset through /proc/self/clear_refs, Linux) above what the process holds once
the input exists and the kernels are loaded, reported with the input and the output it must
hold. Goal: peak <= 1.2 x (input +
output). With prefilter=True the spline prefilter needs one coefficient copy of the input
(the input is left untouched), so that row's goal is one input more.
"""
import argparse
import json
import subprocess
import sys

import torch

from nitorch_jit.bench import measure, ratio
from nitorch_jit.bench.data import affine_matrix
from nitorch_jit.bench.report import print_markdown

MIB = 1 << 20


def matrix(shape, dtype=torch.float32):
    """Output voxel -> input voxel: 10 degrees about the centre, zoom 1.05, a shift."""
    return affine_matrix(shape, 10, 1.05, (1.5, -2.25, 0.75), dtype)


MEASURE = r"""
import json, sys, torch
from nitorch_jit import affine_grid, affine_pull, grid_pull
torch.set_num_threads(int(sys.argv[1]))
n, way, prefilter = int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
shape = [n, n, n]
from nitorch_jit.bench.data import affine_matrix
A = affine_matrix(shape, 10, 1.05, (1.5, -2.25, 0.75))
tiny = torch.randn(1, 1, 4, 4, 4)
affine_pull(tiny, A, [4, 4, 4], 3, prefilter=True)  # load the kernels
grid_pull(tiny, affine_grid(A, [4, 4, 4]), 3, prefilter=True)
x = torch.randn(1, 1, *shape)
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to the current RSS
    f.write("5")
if way == "affine":
    y = affine_pull(x, A, shape, 3, prefilter=prefilter)
else:
    y = grid_pull(x, affine_grid(A, shape), 3, prefilter=prefilter)
peak = status("VmHWM")
print(json.dumps({"base": base, "peak": peak,
                  "input": x.numel() * x.element_size(), "output": y.numel() * y.element_size()}))
"""


def memory(threads, n, way, prefilter):
    out = subprocess.run([sys.executable, "-c", MEASURE, str(threads), str(n), way,
                          "1" if prefilter else "0"], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # the peak above the resident memory once the input exists (libraries, input included)
    return r["input"], r["output"], r["peak"] - r["base"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--mem-size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from nitorch_jit import affine_grid, affine_pull, compiled_backend, grid_pull

    n = args.size
    shape = [n, n, n]
    x = torch.randn(1, 1, *shape)
    A = matrix(shape)
    print(f"nitorch_jit affine_pull vs grid_pull, {torch.get_num_threads()} threads, backend "
          f"{compiled_backend}, torch {torch.__version__}, float32, best of {args.repeat}")
    print()
    rows = []
    for order in (1, 3):
        grid = affine_grid(A, shape)
        t = measure({"affine": lambda: affine_pull(x, A, shape, order),
                     "grid": lambda: grid_pull(x, grid, order)}, repeat=args.repeat,
                    ours="affine")
        del grid
        t_both = measure(lambda: grid_pull(x, affine_grid(A, shape), order), repeat=args.repeat)
        t_aff, t_grid = t["affine"].best_ms, t["grid"].best_ms
        rows.append((f"{n}^3, order {order}", f"{t_aff:.1f}", f"{t_grid:.1f}",
                     f"{ratio(t_grid, t_aff):.2f}x", f"{t_both.best_ms:.1f}",
                     f"{ratio(t_both, t_aff):.2f}x", ">= 1.5x"))
    print_markdown(rows, ["workload", "affine_pull (ms)", "grid_pull, grid built (ms)", "ratio",
                          "affine_grid + grid_pull (ms)", "ratio", "goal"])

    m = args.mem_size
    print()
    print(f"Peak memory of a {m}^3 float32 order-3 resample (one fresh process each; extra = "
          f"peak resident memory above what the process held with the input)")
    print()
    rows = []
    for way in ("affine", "grid"):
        for prefilter in (False, True):
            inp, outp, extra = memory(args.threads, m, way, prefilter)
            name = "affine_pull" if way == "affine" else "affine_grid + grid_pull"
            goal = ("<= 1.2x" if not prefilter else "<= 1.2x + one input copy (coefficients)") \
                if way == "affine" else "-"
            rows.append((name, prefilter, f"{inp / MIB:.0f}", f"{outp / MIB:.0f}",
                         f"{extra / MIB:.0f}", f"{ratio(inp + extra, inp + outp):.2f}x", goal))
    print_markdown(rows, ["way", "prefilter", "input (MiB)", "output (MiB)", "extra (MiB)",
                          "(input + extra) / (input + output)", "goal"])


if __name__ == "__main__":
    main()
