"""First-use compile time of each CPU module and the cost of a cached first call.

Goals (issue 2): compiling the module grid_pull needs <= 45 s on a 2-core machine; in a fresh
process `import nitorch_jit` + the first cached call adds <= 0.2 s over `import torch`.
usage: python scripts/bench_jit.py [--repeat 5] [--modules pushpull splinc]
       python scripts/bench_jit.py --against OTHER_TREE [--rounds 2] [--modules ...]

Each row is a fresh process (nitorch_jit.bench.measure_process, best of --repeat for the
import rows) in an empty compile cache of its own. With --against (a source checkout of
another commit, e.g. `git worktree add /tmp/old REV`), each module's first-use compile is
timed in both trees, alternately, wall and the compilers' CPU time: the check that a change
to csrc/ does not make the first use slower.
"""
import argparse
import os
import re
import sys
import tempfile

from nitorch_jit.bench import measure_process

CALLS = {
    "pushpull": "import torch, nitorch_jit as nj; "
                "nj.grid_pull(torch.zeros(1, 1, 4, 4, 4), torch.zeros(1, 2, 2, 2, 3))",
    "splinc": "import torch, nitorch_jit as nj; nj.spline_coeff_nd(torch.zeros(1, 1, 4, 4, 4), 3)",
    "resize": "import torch, nitorch_jit as nj; nj.resize(torch.zeros(1, 1, 4, 4, 4), 2.0)",
    "regsolve": "import torch, nitorch_jit as nj; "
                "nj.regulariser(torch.zeros(1, 1, 4, 4, 4), membrane=1.0)",
}
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code, env):
    """(wall s, stderr) of a fresh `python -c code`; exits with its stderr when it fails."""
    r = measure_process([sys.executable, "-c", code], env=env)
    if r.returncode:
        sys.exit(r.stderr)
    return r.wall_ms / 1e3, r.stderr


def compare(other, modules, rounds):
    """First-use compile of each module in this tree and in `other`, alternately."""
    rows = []
    for m in modules:
        times = {"this tree": [], other: []}
        for _ in range(rounds):
            for tree in (HERE, other):
                env = {"NI_JIT_CACHE_DIR": tempfile.mkdtemp(prefix="nitorch_jit_bench_"),
                       "NI_COMPILED_BACKEND": None, "PYTHONPATH": tree}
                r = measure_process([sys.executable, "-c", CALLS[m]], env=env, cwd=tree)
                if r.returncode:
                    sys.exit(r.stderr)
                cpu = f"{r.cpu_ms / 1e3:.1f}" if r.cpu_ms is not None else "?"
                times["this tree" if tree == HERE else other].append(
                    f"{r.wall_ms / 1e3:.1f} ({cpu})")
        rows.append((m, ", ".join(times["this tree"]), ", ".join(times[other])))
    print(f"first use, cold cache: wall s (compilers' CPU s), {rounds} rounds, alternated")
    w = max(len(r[1]) for r in rows)
    print(f"{'module':9s}  {'this tree'.ljust(w)}  {other}")
    for r in rows:
        print(f"{r[0]:9s}  {r[1].ljust(w)}  {r[2]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--modules", nargs="*", default=["pushpull"])
    ap.add_argument("--against", help="another source tree to compare first-use compiles with")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: runs per tree")
    args = ap.parse_args()
    if args.against:
        return compare(os.path.abspath(args.against), args.modules, args.rounds)
    root = tempfile.mkdtemp(prefix="nitorch_jit_bench_")
    env = {"NI_JIT_CACHE_DIR": root, "NI_COMPILED_BACKEND": None}
    rows = []
    for m in args.modules:
        total, err = run(CALLS[m], env)
        built = re.search(r"built module '\w+' for CPU in ([\d.]+) s", err)
        rows.append((f"first use of {m} (cold cache): compile",
                     f"{float(built.group(1)):.1f} s" if built else "?"))
        rows.append((f"first use of {m} (cold cache): whole process", f"{total:.1f} s"))
    t_torch = min(run("import torch", env)[0] for _ in range(args.repeat))
    t_call = min(run(CALLS[args.modules[0]], env)[0] for _ in range(args.repeat))
    rows.append(("fresh process: import torch", f"{t_torch:.3f} s"))
    rows.append((f"fresh process: import nitorch_jit + first cached {args.modules[0]} call",
                 f"{t_call:.3f} s"))
    rows.append(("added over import torch (goal <= 0.2 s)", f"{t_call - t_torch:.3f} s"))
    w = max(len(r[0]) for r in rows)
    print(f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    for r in rows:
        print(f"{r[0].ljust(w)}  {r[1]}")


if __name__ == "__main__":
    main()
