"""Speed of the kernels built by clang against the same kernels built by gcc, in one run (issue 40).

    python scripts/bench_compilers.py [--compilers g++,clang++] [--threads 2] [--size3 128]
        [--size2 512] [--repeat 5] [--rounds 2] [--only NAME,...] [--record FILE]

(a smoke run: --size3 16 --size2 32 --repeat 1 --rounds 1)

Each compiler builds every kernel library it needs into a cache of its own (``CXX=...``,
``NI_JIT_CACHE_DIR=...``) in a worker process that times the C backend's calls of
bench_pushpull.py and bench_solvers.py (the "ours" rows), and the interpolation orders and
prefilter orders around them. The workers take turns, compiler after compiler, for `--rounds`
rounds, so that a burst of load from elsewhere touches every compiler alike; each case keeps its
minimum over every round. The table gives each compiler's best time and its ratio to the first
compiler's. Goal (issue 40): every ratio <= 1.3.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

REG_KW = dict(membrane=1e-3, bending=0.1, lame=(0.05, 0.2))


def cases(size3, size2):
    """{name: callable}: the calls timed, on data made once per worker."""
    import torch

    import nitorch_jit as nj
    from nitorch_jit.bench.data import registration_data, synthetic
    ops = torch.ops.nitorch_jit
    img3, grid3 = synthetic(size3, 3)
    img2, grid2 = synthetic(size2, 2)
    img8, _ = synthetic(size3, 3, channels=8)
    shape3 = list(img3.shape[2:])
    rep3, rep2 = [0] * 3, [0] * 2
    y3 = ops.grid_pull(img3, grid3, [1] * 3, rep3, True)
    x_req, g_req = img3.clone().requires_grad_(), grid3.clone().requires_grad_()

    def fwd_bwd():
        out = nj.grid_pull(x_req, g_req, interpolation=1, bound="replicate", extrapolate=True)
        out.backward(torch.ones_like(out))

    v, g, h = registration_data(size3)
    out = {}
    for order in (1, 2, 3, 5):
        out[f"pull 3-D o{order}"] = (
            lambda o=order: ops.grid_pull(img3, grid3, [o] * 3, rep3, True))
    out["pull 3-D o1, 8 channels"] = lambda: ops.grid_pull(img8, grid3, [1] * 3, rep3, True)
    for order in (1, 3):
        out[f"pull 2-D o{order}"] = (
            lambda o=order: ops.grid_pull(img2, grid2, [o] * 2, rep2, True))
        out[f"push 3-D o{order}"] = (
            lambda o=order: ops.grid_push(img3, grid3, shape3, [o] * 3, rep3, True))
    out["grad 3-D o1"] = lambda: ops.grid_grad(img3, grid3, [1] * 3, rep3, True)
    out["pull_backward 3-D o1"] = (
        lambda: ops.grid_pull_backward(y3, img3, grid3, [1] * 3, rep3, True))
    out["pull fwd+bwd 3-D o1"] = fwd_bwd
    for order in (3, 7):
        out[f"spline_coeff 3-D o{order}"] = (
            lambda o=order: nj.spline_coeff_nd(img3[0, 0], o, dim=3))
    out["resize x2 3-D o1"] = lambda: nj.resize(img3, factor=2, interpolation=1)
    out["regulariser_grid"] = lambda: nj.regulariser_grid(v, **REG_KW)
    out["solve_grid_fmg (cg)"] = lambda: nj.solve_grid_fmg(h, g, **REG_KW)
    out["solve_grid_fmg (relax)"] = lambda: nj.solve_grid_fmg(h, g, optim="relax", **REG_KW)
    out["solve_grid (cg, 8 iterations)"] = (
        lambda: nj.solve_grid(h, g, max_iter=8, tolerance=0, **REG_KW))
    return out


def worker(args):
    """Time every case in this process (its compiler from CXX); print {name: best ms}."""
    import torch

    from nitorch_jit.bench import backend_for, measure
    torch.set_num_threads(args.threads)
    for module in ("pushpull", "splinc", "resize", "regsolve"):
        backend_for(module, "cpu", require_compiled=True)
    todo = cases(args.size3, args.size2)
    only = set(args.only.split(",")) if args.only else None
    result = {}
    for name, fn in todo.items():
        if only and name not in only:
            continue
        with torch.no_grad() if "bwd" not in name else _nothing():
            result[name] = measure(fn, repeat=args.repeat, warmup=1).best_ms
    print(json.dumps(result))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def compiler_banner(cxx):
    try:
        text = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return None
    return text.splitlines()[0] if text else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compilers", default="g++,clang++",
                    help="comma-separated C++ compilers; the first is the reference")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size3", type=int, default=128)
    ap.add_argument("--size2", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", help="comma-separated case names (default: every case)")
    ap.add_argument("--record", metavar="FILE",
                    help="also write the table as a documentation record (docs/benchmarks/data)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    compilers = [c.strip() for c in args.compilers.split(",") if c.strip()]
    for cxx in compilers:
        if shutil.which(cxx) is None:
            ap.error(f"--compilers: {cxx!r} is not on PATH (Debian: apt install clang libomp-dev)")
    caches = {cxx: tempfile.mkdtemp(prefix=f"nj_bench_{os.path.basename(cxx)}_")
              for cxx in compilers}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(args.threads),
           "--size3", str(args.size3), "--size2", str(args.size2), "--repeat", str(args.repeat)]
    if args.only:
        cmd += ["--only", args.only]
    best = {cxx: {} for cxx in compilers}
    try:
        for rnd in range(args.rounds):
            for cxx in compilers:
                env = dict(os.environ, CXX=cxx, NI_JIT_CACHE_DIR=caches[cxx])
                env.pop("NI_COMPILED_BACKEND", None)
                print(f"round {rnd + 1}/{args.rounds}: {cxx}", file=sys.stderr, flush=True)
                res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if res.returncode:
                    sys.exit(f"the worker built by {cxx} failed:\n{res.stderr[-3000:]}")
                for name, ms in json.loads(res.stdout.strip().splitlines()[-1]).items():
                    best[cxx][name] = min(ms, best[cxx].get(name, math.inf))
    finally:
        for cache in caches.values():
            shutil.rmtree(cache, ignore_errors=True)

    import torch

    from nitorch_jit.bench.report import print_table, write_record
    ref = compilers[0]
    headers = ["case", *(f"{c} ms" for c in compilers),
               *(f"{c} / {ref}" for c in compilers[1:]), "goal"]
    rows, ratios = [], {c: [] for c in compilers[1:]}
    for name, t_ref in best[ref].items():
        row = [name, *(f"{best[c][name]:.2f}" for c in compilers)]
        for c in compilers[1:]:
            r = best[c][name] / t_ref
            ratios[c].append(r)
            row.append(f"{r:.2f}")
        rows.append(row + ["<= 1.3"])
    for c in compilers[1:]:
        geo = math.exp(sum(map(math.log, ratios[c])) / len(ratios[c]))
        worst = max(ratios[c])
        print(f"{c} / {ref}: geometric mean {geo:.2f}, worst {worst:.2f}")
    banners = "; ".join(f"{c}: {compiler_banner(c)}" for c in compilers)
    print(f"bench_compilers: {args.size3}^3 / {args.size2}^2 float32, {args.threads} threads, "
          f"torch {torch.__version__}, best of {args.repeat} x {args.rounds} rounds; {banners}")
    print_table(rows, headers)
    write_record(args.record, "Kernels built by clang against gcc", headers, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
