"""torch-interpol's dependents, unchanged, on nitorch_jit's kernels (nitorch_jit.compat serving
``interpol``) against torch-interpol 0.3.0 itself (eager PyTorch on torch >= 2.10), per sample.

    python scripts/bench_interpol.py [--size 160] [--threads 1,2] [--only cornucopia,torchio]
        [--repeat 3] [--json out.json] [--workdir DIR]
    (a smoke run: --size 24 --threads 1 --repeat 1)

Rows, on a 1 x size^3 float32 volume (smooth random), one sample at a time:

- cornucopia 0.5.1: ``RandomAffineElasticTransform(order=3)``, ``RandomElasticTransform(order=3)``,
  ``RandomMulFieldTransform()``, and ``SynthFromLabelTransform()`` on a label map (8 labels);
- TorchIO 2.0.0a2 on a ``ScalarImage`` subject: ``Affine(degrees=(-15, 15), scales=(0.9, 1.1))``
  and ``ElasticDeformation()`` (2.0's names for 1.x's RandomAffine / RandomElasticDeformation),
  with ``image_interpolation=3`` (interpol's grid_pull, prefilter, dct2) and 1 (TorchIO's own
  grid_sample: reported, no goal).

Each side runs in its own process (the compat must be installed before a client imports
interpol), timed by nitorch_jit.bench.measure: ours with a warm-up at full size (its first
use loads or builds our kernels) and the best of --repeat samples; interpol (5-30 s a sample)
with a warm-up at 24^3 and one sample. Every sample seeds ``random``, NumPy and torch the same
way, so both sides draw the same random transform. As the harness times ours before and after
its peers, the ours process runs before and after the interpol one and the better is kept; the
first also profiles. The whole run takes about 6 minutes on a quiet 2-core machine (15 at a
load of 7).

Columns: seconds per sample of each side (wall, and the process CPU time of all its threads,
which moves less with the load of a shared machine) and their ratios (goal >= 10x at order 3);
``in ours``, the share of the compat side's sample inside nitorch_jit (cProfile of one more
sample: the inclusive time of the client's calls into nitorch_jit); the largest own times of
that profile (a built-in or torch function named with the first caller outside torch that
spent the most in it), which show where a client's own code caps the ratio; ``max diff``, max |ours - interpol| / range of the first
sample's output. Wall times move with a shared machine's load (``load1``: the 1-minute
load average after each row); compare the two sides of a row, not rows of different runs.
"""
import argparse
import cProfile
import json
import os
import pstats
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIDES = ("ours", "interpol")
# row name -> (client, order or None: the rows with a goal have order 3)
ROWS = {
    "cornucopia RandomAffineElasticTransform(order=3)": ("cornucopia", 3),
    "cornucopia RandomElasticTransform(order=3)": ("cornucopia", 3),
    "cornucopia RandomMulFieldTransform()": ("cornucopia", 3),
    "cornucopia SynthFromLabelTransform(), label map": ("cornucopia", 3),
    "TorchIO Affine(image_interpolation=3)": ("torchio", 3),
    "TorchIO ElasticDeformation(image_interpolation=3)": ("torchio", 3),
    "TorchIO Affine(image_interpolation=1)": ("torchio", 1),
    "TorchIO ElasticDeformation(image_interpolation=1)": ("torchio", 1),
}


# ------------------------------------------------------------------------------------------
# the worker: one side, one thread count, in its own process


def inputs(size):
    """The image ([1, size^3] float32, smooth) and the label map ([1, size^3] int64, 8 labels),
    made without interpol, the same on both sides."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    coarse = torch.randn([1, 9, 10, 10, 10], generator=g)
    fine = F.interpolate(coarse, size=[size] * 3, mode="trilinear", align_corners=True)[0]
    return fine[:1].contiguous(), fine[1:].argmax(0, keepdim=True)


def make_rows(size, only):
    """name -> (callable of one sample, its input maker for a size)"""
    rows = {}
    if "cornucopia" in only:
        import cornucopia as cc
        for name, make in [
                ("cornucopia RandomAffineElasticTransform(order=3)",
                 lambda: cc.RandomAffineElasticTransform(order=3)),
                ("cornucopia RandomElasticTransform(order=3)",
                 lambda: cc.RandomElasticTransform(order=3)),
                ("cornucopia RandomMulFieldTransform()", lambda: cc.RandomMulFieldTransform())]:
            rows[name] = (make(), lambda n: inputs(n)[0])
        rows["cornucopia SynthFromLabelTransform(), label map"] = (
            cc.SynthFromLabelTransform(), lambda n: inputs(n)[1])
    if "torchio" in only:
        import torchio as tio

        def subject(n):
            return tio.Subject(t1=tio.ScalarImage(inputs(n)[0]))
        for order in (3, 1):
            rows[f"TorchIO Affine(image_interpolation={order})"] = (
                tio.Affine(degrees=(-15, 15), scales=(0.9, 1.1), image_interpolation=order),
                subject)
            rows[f"TorchIO ElasticDeformation(image_interpolation={order})"] = (
                tio.ElasticDeformation(image_interpolation=order), subject)
    return rows


def first_tensor(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    return out["t1"].data  # a TorchIO Subject


def package_of(path):
    """The package a profiled function belongs to ('~': a built-in)."""
    if path == "~":
        return None
    parts = path.replace(os.sep, "/").split("/")
    for top in ("nitorch_jit", "cornucopia", "torchio", "interpol", "torch", "numpy", "einops"):
        if top in parts:
            return top
    return "other"


def label(func):
    path, line, name = func
    if path == "~":
        name = name.replace("<built-in method ", "").replace("<method ", "").rstrip(">")
        return name.replace("torch._ops.nitorch_jit.", "nitorch_jit op ").strip()
    return f"{package_of(path)}/{os.path.basename(path)}:{name}"


def payer(stats, func, hops=8):
    """The first caller outside torch's own Python that spent the most in `func`."""
    for _ in range(hops):
        callers = stats.stats[func][4]
        if not callers:
            break
        func = max(callers, key=lambda c: callers[c][3])
        if package_of(func[0]) not in (None, "torch"):
            break
    return func


def profile_shares(stats, client, top=3):
    """(share of the time inside nitorch_jit, [(where, share)] of the `top` largest own times).

    Inside nitorch_jit: the inclusive time of the calls that the client's own code makes into
    nitorch_jit's files (what it asked interpol for). The largest own times (cProfile's
    tottime) say where the rest goes: a built-in or a torch function is named with the first
    caller outside torch that spent the most in it, the line that pays for it."""
    total = stats.total_tt
    inside = 0.0
    own = []
    for func, (cc, nc, tt, ct, callers) in stats.stats.items():
        if package_of(func[0]) == "nitorch_jit":
            inside += sum(v[3] for c, v in callers.items() if package_of(c[0]) == client)
        where = label(func)
        if package_of(func[0]) in (None, "torch") and callers:
            where += " from " + label(payer(stats, func))
        own.append((where, tt / total))
    return inside / total, sorted(own, key=lambda wt: -wt[1])[:top]


def worker(args):
    if args.side == "ours":
        import nitorch_jit.compat
        nitorch_jit.compat.install()
    import numpy as np
    import torch

    from nitorch_jit.bench import measure

    torch.set_num_threads(args.threads)
    import interpol
    served = interpol.grid_pull.__module__  # the compat swaps interpol's functions for ours
    if served.startswith("nitorch_jit.") != (args.side == "ours"):
        raise SystemExit(f"side {args.side}: interpol.grid_pull is {served}'s")
    rows = make_rows(args.size, args.only.split(","))
    out = {"served": served, "threads": torch.get_num_threads(), "rows": {}}

    def seeded(transform, x):
        def sample():
            random.seed(0)
            np.random.seed(0)
            torch.manual_seed(0)
            return transform(x)
        return sample

    for name, (transform, make_input) in rows.items():
        client = ROWS[name][0]
        x = make_input(args.size)
        sample = seeded(transform, x)
        slow = args.side == "interpol" and ROWS[name][1] >= 2
        if slow:  # a warm-up on a small volume, then one sample
            seeded(transform, make_input(24))()
        # ours: a warm-up at full size, where our kernels load (or build)
        t = measure(sample, warmup=0 if slow else 1, repeat=1 if slow else args.repeat,
                    keep_result=True)
        torch.save(first_tensor(t.result).detach().clone(),
                   os.path.join(args.workdir, f"{args.side}_{args.threads}_{len(out['rows'])}.pt"))
        res = {"s": t.best_ms / 1e3, "cpu_s": t.cpu_ms / 1e3,
               "load1": round(os.getloadavg()[0], 1)}
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(sample)
            res["in_ours"], res["top_own_time"] = profile_shares(pstats.Stats(prof), client)
        out["rows"][name] = res
        print(f"[{args.side}, {args.threads} thr] {name}: {res}", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f)


# ------------------------------------------------------------------------------------------
# the driver


def run_side(args, side, threads, work, profile=False):
    from nitorch_jit.bench import measure_process
    out = os.path.join(work, f"{side}_{threads}{'_profiled' if profile else ''}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--threads",
           str(threads), "--size", str(args.size), "--repeat", str(args.repeat), "--only",
           args.only, "--workdir", work, "--out", out] + (["--profile"] if profile else [])
    env = {"OMP_NUM_THREADS": str(threads), "NI_COMPILED_BACKEND": None}
    r = measure_process(cmd, env=env, timeout=args.max_minutes * 60,
                        log=os.path.join(work, f"{side}_{threads}.log"))
    if r.returncode != 0 or not os.path.exists(out):
        tail = (r.stderr or r.stdout or "").strip().splitlines()[-3:]
        raise RuntimeError(f"{side} ({threads} threads) failed, rc={r.returncode}: "
                           + " | ".join(tail))
    with open(out) as f:
        return json.load(f)


def max_diff(work, threads, index):
    import torch
    a = torch.load(os.path.join(work, f"ours_{threads}_{index}.pt")).double()
    b = torch.load(os.path.join(work, f"interpol_{threads}_{index}.pt")).double()
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} / {tuple(b.shape)}"
    return (a - b).abs().max().item() / max((b.max() - b.min()).item(), 1e-30)


def fmt_diff(d):
    return d if isinstance(d, str) else f"{d:.1e}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=160)
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--repeat", type=int, default=2, help="samples timed on the compat side")
    ap.add_argument("--only", default="cornucopia,torchio")
    ap.add_argument("--max-minutes", type=float, default=10, help="cap on each side's process")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--workdir", help="outputs and logs (default: a new temp dir)")
    ap.add_argument("--worker", choices=SIDES, dest="side", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        args.threads = int(args.threads)
        return worker(args)

    from nitorch_jit.bench.report import print_markdown, write_json
    work = args.workdir or tempfile.mkdtemp(prefix="bench_interpol_")
    os.makedirs(work, exist_ok=True)
    commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}, nitorch_jit {commit}, workdir {work}", flush=True)
    headers = ["row", "threads", "interpol 0.3.0 s (CPU s)", "ours s (CPU s)",
               "ratio wall / CPU", "in ours", "largest own times (ours, cProfile)", "max diff",
               "load1"]
    table = []
    for threads in (int(t) for t in args.threads.split(",")):
        ours_a = run_side(args, "ours", threads, work, profile=True)
        theirs = run_side(args, "interpol", threads, work)
        ours_b = run_side(args, "ours", threads, work)
        for index, name in enumerate(theirs["rows"]):
            a, b = ours_a["rows"][name], ours_b["rows"][name]
            ours = a if a["s"] <= b["s"] else b
            peer = theirs["rows"][name]
            rest = "; ".join(f"{w} {t:.0%}" for w, t in a["top_own_time"])
            table.append([name, threads, f"{peer['s']:.2f} ({peer['cpu_s']:.2f})",
                          f"{ours['s']:.3f} ({ours['cpu_s']:.3f})",
                          f"{peer['s'] / ours['s']:.0f}× / {peer['cpu_s'] / ours['cpu_s']:.0f}×",
                          f"{a['in_ours']:.0%}", rest,
                          fmt_diff(max_diff(work, threads, index)),
                          f"{peer['load1']}/{ours['load1']}"])
    print()
    print_markdown(table, headers)
    write_json(args.json, {"headers": headers, "rows": table, "workdir": work})
    return 0


if __name__ == "__main__":
    sys.exit(main())
