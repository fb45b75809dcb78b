"""Speed of the regulariser and of the FMG solver on a displacement grid, against peers, in one run.

    python scripts/bench_solvers.py [--threads 2] [--size 128] [--repeat 5] [--no-compile-time]
        [--record FILE]   (the table as a record of docs/benchmarks/data)

(a smoke run: --size 16 --repeat 1 --no-compile-time)

Workload (issue #9): a size^3 displacement field, float32, membrane 1e-3, bending 0.1,
lame (0.05, 0.2), a full voxel-wise Hessian (6 values): the Gauss-Newton Hessian of
registration, ∇I ∇Iᵀ of a smooth random image, zero outside a ball (an object in a field of
view; see nitorch_jit.bench.data.registration_data); the FMG-vs-PCG row is repeated with that
Hessian everywhere and with a random full-rank one. Rows:

- regulariser_grid, ours (the backend this process loads, normally C) against
  (a) the same operator written with torch.nn.functional.conv3d the way a user would
      (one grouped 5^3 conv for the per-component terms, one 3->3 channel 3^3 conv for the
      elastic cross terms, circular padding = our default bound dft), checked equal to ours;
  (b) the TORCH backend (the pure-PyTorch twin), timed in a subprocess with
      NI_COMPILED_BACKEND=TORCH so that it is the real backend, same data.
  Also the effective bandwidth of ours (one read of v, one write of the result) against this
  machine's copy bandwidth (torch copy_ of the same tensor).
- solve_grid_fmg with default settings, ours against the TORCH backend (subprocess).
- time to a relative residual of 1e-3: FMG (cycles added until reached) against PCG alone.
- the first-use compile of the regsolve CPU module, in a fresh cache (subprocess).

Goals: regulariser_grid >= 10x conv3d and >= 5x TORCH; FMG >= 5x TORCH; FMG to 1e-3 >= 5x
sooner than PCG; compile <= 45 s.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

from nitorch_jit.bench import backend_for, copy_bandwidth, measure, measure_process, ratio
from nitorch_jit.bench.data import REG_KW as KW
from nitorch_jit.bench.data import conv_operator, conv_regulariser
from nitorch_jit.bench.data import registration_data as data
from nitorch_jit.bench.report import print_table, write_record


def residual(x, g, h):
    import nitorch_jit as nj
    r = g - nj.regulariser_grid(x, hessian=h, **KW)
    return float(r.double().norm() / g.double().norm())


def time_fmg_to(g, h, target, max_cycles=12):
    """(seconds, setting, residual) of the fastest FMG setting that reaches `target`: for each
    smoother setting, the fewest cycles that reach it."""
    import nitorch_jit as nj
    best = (float("inf"), "not reached", float("nan"))
    for optim, nb_iter in (("cg", 2), ("cg", 4), ("relax", 2)):
        for cycles in range(1, max_cycles + 1):
            run = measure(lambda: nj.solve_grid_fmg(h, g, nb_cycles=cycles, optim=optim,
                                                    nb_iter=nb_iter, **KW),
                          repeat=1, warmup=0, keep_result=True)
            t = run.best_ms / 1e3
            res = residual(run.result, g, h)
            if res <= target:
                if t < best[0]:
                    best = (t, f"{optim}, nb_iter={nb_iter}, nb_cycles={cycles}", res)
                break
    return best


def time_pcg_to(g, h, target, max_iter=20000):
    import nitorch_jit as nj
    run = measure(lambda: nj.solve_grid(h, g, max_iter=max_iter, tolerance=target, **KW),
                  repeat=1, warmup=0, keep_result=True)
    return run.best_ms / 1e3, residual(run.result, g, h)


def measure_backend(size, repeat, which):
    """Timings of this process's backend: {'reg': s, 'fmg': s, 'fmg_res': r}."""
    import nitorch_jit as nj
    v, g, h = data(size)
    out = {}
    nj.regulariser_grid(v[..., :4, :4, :4, :], **KW)  # load / compile outside the timing
    if "reg" in which:
        out["reg"] = measure(lambda: nj.regulariser_grid(v, **KW), repeat=repeat).best_ms / 1e3
    if "fmg" in which:
        out["fmg"] = measure(lambda: nj.solve_grid_fmg(h, g, **KW),
                             repeat=max(1, repeat // 2)).best_ms / 1e3
        out["fmg_res"] = residual(nj.solve_grid_fmg(h, g, **KW), g, h)
    return out


def subprocess_torch(size, repeat, which):
    env = dict(os.environ, NI_COMPILED_BACKEND="TORCH")
    cmd = [sys.executable, __file__, "--worker", ",".join(which), "--size", str(size),
           "--repeat", str(repeat), "--threads", str(torch.get_num_threads())]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def compile_time():
    """The first-use build of the regsolve CPU module in a fresh process and cache (the build
    alone, timed in that process)."""
    with tempfile.TemporaryDirectory() as cache:
        code = ("from nitorch_jit.bench import backend_for, stopwatch\n"
                "with stopwatch() as sw:\n"
                "    backend_for('regsolve', 'cpu', require_compiled=True)\n"
                "print(sw.wall_ms / 1e3)")
        res = measure_process([sys.executable, "-c", code], env={"NI_JIT_CACHE_DIR": cache})
        if res.returncode:
            return f"failed: {res.stderr.strip().splitlines()[-1]}"
        return f"{float(res.stdout.strip().splitlines()[-1]):.1f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-compile-time", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--record", metavar="FILE",
                    help="also write the table as a documentation record (docs/benchmarks/data)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(measure_backend(args.size, args.repeat, args.worker.split(","))))
        return 0

    import nitorch_jit as nj
    v, g, h = data(args.size)
    ours = measure_backend(args.size, args.repeat, ["reg", "fmg"])
    name = backend_for("regsolve", "cpu")
    print(f"bench_solvers: {args.size}^3 x 3 float32 grid, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, ours = {name}", flush=True)

    diag, cross = conv_operator()
    ref = conv_regulariser(v, diag, cross)
    mine = nj.regulariser_grid(v, **KW)
    err = float((ref - mine).abs().max() / mine.abs().max())
    t_conv = measure(lambda: conv_regulariser(v, diag, cross), repeat=args.repeat).best_ms / 1e3
    # copy bandwidth on 256 MB, well beyond the caches (a 25 MB copy runs from L3 here)
    copy_rate = copy_bandwidth("cpu", args.repeat, 1 << 28) * 1e9
    nbytes = 2 * v.numel() * v.element_size()

    twin = subprocess_torch(args.size, max(1, args.repeat // 2), ["reg", "fmg"])
    t_fmg_to, setting, res_fmg = time_fmg_to(g, h, 1e-3)
    t_pcg_to, res_pcg = time_pcg_to(g, h, 1e-3)
    others = []
    for kind in ("gauss-newton", "random"):
        hk = data(args.size, hessian=kind)[2]
        others.append((kind, time_fmg_to(g, hk, 1e-3), time_pcg_to(g, hk, 1e-3)))

    rows = [
        ("regulariser_grid", f"{ours['reg'] * 1e3:.1f} ms", "conv3d (grouped 5^3 + 3x3 cross)",
         f"{t_conv * 1e3:.1f} ms", f"{ratio(t_conv, ours['reg']):.1f}x", f"max rel diff {err:.1e}"),
        ("regulariser_grid", f"{ours['reg'] * 1e3:.1f} ms", "TORCH backend",
         f"{twin['reg'] * 1e3:.1f} ms", f"{ratio(twin['reg'], ours['reg']):.1f}x", ""),
        ("regulariser_grid bandwidth", f"{nbytes / ours['reg'] / 1e9:.2f} GB/s",
         "copy_ (256 MB)", f"{copy_rate / 1e9:.2f} GB/s",
         f"{nbytes / ours['reg'] / copy_rate:.2f} of copy", "read v + write Lv"),
        ("solve_grid_fmg (defaults)", f"{ours['fmg'] * 1e3:.0f} ms", "TORCH backend",
         f"{twin['fmg'] * 1e3:.0f} ms", f"{ratio(twin['fmg'], ours['fmg']):.1f}x",
         f"residual {ours['fmg_res']:.1e} / {twin['fmg_res']:.1e}"),
        ("to residual 1e-3: FMG", f"{t_fmg_to * 1e3:.0f} ms ({setting})", "PCG",
         f"{t_pcg_to * 1e3:.0f} ms", f"{ratio(t_pcg_to, t_fmg_to):.1f}x",
         f"residual {res_fmg:.1e} / {res_pcg:.1e}"),
    ]
    for kind, (tf, setting_k, rf), (tp, rp) in others:
        rows.append((f"same, {kind} Hessian", f"{tf * 1e3:.0f} ms ({setting_k})", "PCG",
                     f"{tp * 1e3:.0f} ms", f"{ratio(tp, tf):.1f}x",
                     f"residual {rf:.1e} / {rp:.1e}"))
    if not args.no_compile_time:
        rows.append(("first-use compile, regsolve CPU", compile_time(), "", "", "",
                     "fresh cache"))
    headers = ["routine", "ours", "peer", "peer time", "ratio", "note"]
    print_table(rows, headers)
    write_record(args.record, "Regularisers and solvers, CPU", headers, rows,
                 plot={"workload": [0], "peer": 2, "ratio": 4})
    return 0


if __name__ == "__main__":
    sys.exit(main())
