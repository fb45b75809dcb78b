"""Small calls (issue 19): p95 and median of many tiny calls, at default threads and at 1 thread.

Registration pyramids, scaling-and-squaring, DataLoader workers and histogram pushes make many
calls on small grids, where a parallel region's barrier and the Python call path dominate.
Each call is timed on its own (nitorch_jit.bench.measure), 400 calls after a warm-up, float64:
pull / push / grad at orders 1 and 3 on a 2-D 40 x 60 grid (2,400 points) and a 3-D 16^3
grid (4,096 points), each into an image of the grid's shape, beside F.grid_sample where it
applies (bilinear / bicubic, border, align_corners=True); the call overhead (a pull of one
point, order 1); and the cost of one TORCH relax sweep in matvec units (32^3 x 2 field,
membrane + bending, diagonal Hessian, dct2; 4 sweeps per call, as solve_field runs them).

    python scripts/bench_small_calls.py [--busy] [--calls 400] [--quick]

--busy keeps one core busy with a spinning process while measuring, as on a shared machine.
Goals: p95 at default threads <= 2x p95 at 1 thread on every row; overhead <= 20 us;
a TORCH relax sweep <= 4 matvecs.
"""
import argparse
import multiprocessing as mp
import time
import warnings

import torch

import nitorch_jit as nj
from nitorch_jit.bench import backend_for, measure, ratio
from nitorch_jit.bench.data import synthetic, voxel_to_grid_sample
from nitorch_jit.bench.report import print_table

warnings.filterwarnings("ignore")


def spin():
    while True:
        pass


def stats(fn, calls, threads):
    """(median, p95) of `calls` single-call wall times, in ms, at `threads` threads."""
    t = measure(fn, repeat=calls, warmup=max(10, calls // 20), threads=threads)
    return t.median_ms, t.p95_ms


def data(shape, seed=0):
    """A float64 image of `shape` and a grid of its shape: identity + uniform(-1, 1)."""
    return synthetic(shape, dtype=torch.float64, disp=1.0, seed=seed)


def cases():
    """(label, ours, grid_sample peer or None) for every row."""
    out = []
    for shape in ([40, 60], [16, 16, 16]):
        img, grid = data(shape)
        dim = len(shape)
        n = grid[0, ..., 0].numel()
        gs_grid = voxel_to_grid_sample(grid, shape)
        for order in (1, 3):
            kw = dict(interpolation=order, bound="replicate", extrapolate=True)
            mode = {1: "bilinear", 3: "bicubic" if dim == 2 else None}[order]
            peer = None
            if mode is not None:
                peer = (lambda m=mode, i=img, g=gs_grid: torch.nn.functional.grid_sample(
                    i, g, mode=m, padding_mode="border", align_corners=True))
            tag = f"{dim}-D {n:,} pts, order {order}"
            out.append((f"pull {tag}", lambda kw=kw, i=img, g=grid: nj.grid_pull(i, g, **kw),
                        peer))
            out.append((f"push {tag}",
                        lambda kw=kw, i=img, g=grid, s=shape: nj.grid_push(i, g, s, **kw), None))
            out.append((f"grad {tag}", lambda kw=kw, i=img, g=grid: nj.grid_grad(i, g, **kw),
                        None))
    img1 = torch.randn(1, 1, 8, 8, dtype=torch.float64)
    pt = torch.full([1, 1, 1, 2], 3.25, dtype=torch.float64)
    gs_pt = voxel_to_grid_sample(pt, [8, 8])
    out.append(("pull 1 point, order 1 (overhead)",
                lambda: nj.grid_pull(img1, pt, interpolation=1),
                lambda: torch.nn.functional.grid_sample(img1, gs_pt, mode="bilinear",
                                                        align_corners=True)))
    return out


def relax_sweep_in_matvecs(repeat=5, sweeps=4):
    """One TORCH reg_relax_ sweep / one TORCH reg_matvec, same system (32^3 x 2 field). The
    sweeps are timed as solve_field(optim='relax') runs them, 4 per call (its check_every):
    the per-call set-up (voxel blocks, padded copy) is shared by the 4."""
    from nitorch_jit.ops import regularisers as R
    from nitorch_jit.ops import solvers as S
    from nitorch_jit.torch_impl import regsolve as twin
    g = torch.Generator().manual_seed(0)
    shape = [32] * 3
    grad = torch.randn([1, 2] + shape, generator=g, dtype=torch.float64)
    hess = torch.rand([1, 2] + shape, generator=g, dtype=torch.float64) + 0.1
    p = S.field_problem(hess, grad, None, 3, 0, 1e-3, 0.1, 1, 1, "dct2")
    period = R.colour_periods(p.taps, p.shape, p.bound)
    x = torch.zeros_like(p.x)
    t = measure({"matvec": lambda: twin.reg_matvec(x, p.hessian, None, p.taps),
                 "relax": lambda: twin.reg_relax_(x, p.hessian, p.x, None, p.taps, period,
                                                  sweeps)}, repeat=repeat)
    t_mv, t_rx = t["matvec"].best_ms, t["relax"].best_ms / sweeps
    return t_rx, t_mv, period


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", action="store_true", help="keep one core busy while measuring")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 20 calls per cell, one timed relax sweep")
    args = ap.parse_args()
    if args.quick:
        args.calls = 20
    default_threads = torch.get_num_threads()
    kinds = {m: backend_for(m, "cpu") for m in ("pushpull", "regsolve")}
    spinner = None
    if args.busy:
        spinner = mp.get_context("spawn").Process(target=spin, daemon=True)
        spinner.start()
        time.sleep(0.5)
    try:
        print(f"torch {torch.__version__}, float64, {args.calls} calls per cell, ms; "
              f"default threads = {default_threads}; "
              f"{'one core kept busy' if args.busy else 'no busy process'}; "
              f"backend {kinds['pushpull']}")
        rows = []
        for label, ours, peer in cases():
            cell = {}
            for nt in (default_threads, 1):
                cell[nt, "ours"] = stats(ours, args.calls, nt)
                cell[nt, "peer"] = stats(peer, args.calls, nt) if peer else None
            (md, pd), (m1, p1) = cell[default_threads, "ours"], cell[1, "ours"]
            peer_txt = "-"
            if peer:
                (gmd, gpd), (gm1, gp1) = cell[default_threads, "peer"], cell[1, "peer"]
                peer_txt = f"{gpd:.3f} / {gp1:.3f} (med {gm1:.3f})"
            rows.append((label, f"{pd:.3f}", f"{md:.3f}", f"{p1:.3f}", f"{m1:.3f}",
                         f"{ratio(pd, p1):.2f}", peer_txt))
            if "overhead" in label:
                overhead = m1 * 1e3
        print_table(rows, ["call", f"p95 {default_threads} thr", f"median {default_threads} thr",
                           "p95 1 thr", "median 1 thr", "p95 ratio (goal <= 2)",
                           "grid_sample p95 dflt / 1 thr (median 1 thr)"])
        print(f"call overhead (1-point pull, 1 thread, median): {overhead:.1f} us (goal <= 20)")
        t_rx, t_mv, period = relax_sweep_in_matvecs(1 if args.quick else 5)
        print(f"TORCH relax sweep (32^3 x 2, membrane + bending, colours {period}): "
              f"{t_rx:.1f} ms = {t_rx / t_mv:.1f} matvecs of {t_mv:.1f} ms (goal <= 4)")
    finally:
        if spinner is not None:
            spinner.terminate()
            spinner.join()


if __name__ == "__main__":
    main()
