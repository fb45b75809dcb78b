"""First-use compile time of each CPU module and the cost of a cached first call.

Goals (issue 2): compiling the module grid_pull needs <= 45 s on a 2-core machine; in a fresh
process `import nitorch_jit` + the first cached call adds <= 0.2 s over `import torch`.
usage: python scripts/bench_jit.py [--repeat 5] [--modules pushpull splinc]

Each row is a fresh process (nitorch_jit.bench.measure_process, best of --repeat for the
import rows) in an empty compile cache of its own.
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
}


def run(code, env):
    """(wall s, stderr) of a fresh `python -c code`; exits with its stderr when it fails."""
    r = measure_process([sys.executable, "-c", code], env=env)
    if r.returncode:
        sys.exit(r.stderr)
    return r.wall_ms / 1e3, r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--modules", nargs="*", default=["pushpull"])
    args = ap.parse_args()
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
