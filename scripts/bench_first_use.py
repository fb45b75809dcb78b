"""First use in seconds (issue 31): what a first call waits for, in CAL, measured in one run.

CAL is the wall time to compile and link one minimal classic torch op (ATen/core/Tensor.h +
torch/library.h, one function, one TORCH_LIBRARY_IMPL block) into a .so with our flags (-O3
-fPIC, the -std torch's cpp_extension passes, OpenMP where torch uses it), timed once before
the cases and once after them; the smaller is the unit. Every case is a fresh process, timed
by the harness around its whole run (measure_process: wall, nothing subtracted), in a cache
root of its own (NI_JIT_CACHE_DIR):
- grid_pull: the first 3-D order-1 float32 grid_pull on a cold cache;
- each other family's first call (prefilter, resize, regulariser, 2-D order-3 grid_push,
  solver), twice: fully cold, and on a copy of the cache the first grid_pull left ("warm
  binding": what a previous family already built is there); then the README's full-multigrid
  solver on a cold cache, the first use of two modules at once (regsolve and resize: two
  families, so 2 CAL);
- upgrade: the first grid_pull under another torch (--upgrade-python) on a copy of that warm
  cache (skipped with a note without --upgrade-python);
- build: `nitorch-jit build --no-cuda` from cold (absolute seconds recorded);
- warm: a fresh process on the warm cache, judged on its in-process first call;
- cuda: for each module, under a CUDA torch (--cuda-python; no GPU needed), what a first CUDA
  call compiles before it could launch: its binding, and the kernel it asks for, for one arch
  (--cuda-arch), in a cold cache (a classic binding: up to 2 CAL, as the issue allows).
The children run this tree's nitorch_jit (PYTHONPATH), whatever main holds; each prints its
own call time (the harness's stopwatch), and the table says what each case built (from the
manifests).

usage: python scripts/bench_first_use.py [--upgrade-python /tmp/venv214/bin/python]
       [--cuda-python /tmp/venv214/bin/python] [--cases grid_pull families upgrade build warm
       cuda] [--record FILE] [--keep]
a smoke run of the script itself (nothing compiles; CAL given, not measured):
       python scripts/bench_first_use.py --backend TORCH --cal 10 --cases grid_pull warm
--record FILE writes the table as a record of the documentation's benchmark pages
(docs/benchmarks/data/first_use-<date>.json, rendered by docs/benchmarks/first-use.md).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from nitorch_jit.bench import measure_process
from nitorch_jit.bench.report import print_table, write_record
from nitorch_jit.jit import toolchain

HERE = Path(__file__).resolve().parent.parent  # the tree whose nitorch_jit the children run

# The one op whose compile is the unit: the classic headers, one function, one IMPL block.
CAL_SOURCE = """\
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace {
at::Tensor identity(const at::Tensor& x) { return x; }
}

TORCH_LIBRARY_IMPL(nitorch_jit_cal, CPU, m) { m.impl("identity", &identity); }
"""

# The "before": `nitorch-jit build --no-cuda` took 153 s where CAL was 10.0 s.
BUILD_BEFORE_CAL = 15.3

# name -> (what it is, tensors made before the clock starts, the call timed)
CALLS = {
    "grid_pull": ("first 3-D order-1 float32 grid_pull",
                  "x = torch.rand(1, 1, 8, 8, 8); g = torch.rand(1, 4, 4, 4, 3) * 7",
                  "nj.grid_pull(x, g, interpolation=1, bound='dct2')"),
    "prefilter": ("first prefilter (3-D order-3 spline_coeff_nd)",
                  "x = torch.rand(1, 1, 8, 8, 8)",
                  "nj.spline_coeff_nd(x, interpolation=3)"),
    "resize": ("first resize (3-D, factor 2, order 1)",
               "x = torch.rand(1, 1, 8, 8, 8)",
               "nj.resize(x, factor=2.0, interpolation=1)"),
    "regulariser": ("first regulariser (3-D membrane)",
                    "x = torch.rand(1, 1, 8, 8, 8)",
                    "nj.regulariser(x, membrane=1.0)"),
    "grid_push": ("first 2-D order-3 float32 grid_push",
                  "x = torch.rand(1, 1, 8, 8); g = torch.rand(1, 8, 8, 2) * 7",
                  "nj.grid_push(x, g, interpolation=3)"),
    "solver": ("first solver (3-D solve_field, membrane, CG)",
               "h = torch.rand(1, 8, 8, 8) + 1; g = torch.randn(1, 8, 8, 8)",
               "nj.solve_field(h, g, membrane=0.1)"),
    "solver_fmg": ("first full-multigrid solver (3-D solve_grid_fmg: the first use of two "
                   "modules, regsolve and resize)",
                   "h = torch.rand(1, 8, 8, 8, 6) + 1; g = torch.randn(1, 8, 8, 8, 3)",
                   "nj.solve_grid_fmg(h, g, membrane=1e-3, bending=0.1, lame=(0.05, 0.2))"),
}
FAMILIES = ["prefilter", "resize", "regulariser", "grid_push", "solver"]
# CUDA, without a GPU: what a first call of each module compiles before it could launch (its
# binding, and beside it the kernel its call asks for): module -> (op, orders), float32
CUDA_CALLS = {"pushpull": ("grid_pull", [1, 1, 1]), "splinc": ("spline_coeff_nd", [3, 3, 3]),
              "resize": ("resize", [1, 1, 1]), "regsolve": ("reg_matvec", [1, 1, 1])}
CASES = ["grid_pull", "families", "upgrade", "build", "warm", "cuda"]
MARK = "FIRST_USE "  # the line a child prints its own times on

# the children time their first call with the harness's stopwatch (its import comes before)
CHILD = """\
import json
import torch, nitorch_jit as nj
from nitorch_jit.bench import stopwatch
{setup}
with stopwatch() as sw:
    {call}
print({mark!r} + json.dumps({{"torch": torch.__version__, "call_s": sw.wall_ms / 1e3}}))
"""


CUDA_CHILD = """\
import json
import torch, nitorch_jit as nj
from nitorch_jit import backends
from nitorch_jit.backends import compiled
from nitorch_jit.bench import stopwatch
module, op, orders = {module!r}, {op!r}, {orders!r}
# what the public function does first (binding, and its likely kernel beside it), then the
# kernel the binding asks for when the call launches (waits for the build under way)
with stopwatch() as sw:
    backends.ensure_eager(module, "cuda", kernel=(op, torch.float32, orders))
    name = compiled.likely_kernel(module, "cuda", op, torch.float32, orders)
    compiled.load_kernel(compiled.load_module(module, "cuda"), name)
print({mark!r} + json.dumps({{"torch": torch.__version__, "call_s": sw.wall_ms / 1e3}}))
"""


def child_code(name):
    """The program a fresh process runs for the call `name` of CALLS."""
    _, setup, call = CALLS[name]
    return CHILD.format(setup=setup, call=call, mark=MARK)


def cxx_std():
    """The -std flag torch's cpp_extension builds with (c++20 where its source passes it)."""
    from torch.utils import cpp_extension
    text = Path(cpp_extension.__file__).read_text(encoding="utf-8")
    return "-std=c++20" if "-std=c++20" in text else "-std=c++17"


def cal_command(src, out):
    """The compile + link command of the CAL op, with our builds' flags and torch's paths."""
    from torch.utils import cpp_extension
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    omp = toolchain.openmp_flags()
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    return [toolchain.cxx_command(), "-O3", "-fPIC", cxx_std(), *omp,
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes, "-shared", str(src), "-o", str(out),
            *omp, f"-L{libdir}", "-lc10", "-ltorch_cpu", "-ltorch"]


def measure_cal(work):
    """Seconds to compile and link the CAL op once (the wall time of the compiler's process)."""
    folder = Path(tempfile.mkdtemp(prefix="cal_", dir=work))
    src = folder / "cal_op.cpp"
    src.write_text(CAL_SOURCE)
    cmd = cal_command(src, folder / "cal_op.so")
    run = measure_process(cmd)
    if run.returncode:
        sys.exit(f"the CAL op did not compile ({' '.join(cmd)}):\n{run.stderr}")
    shutil.rmtree(folder, ignore_errors=True)
    return run.wall_ms / 1e3


def entries(root):
    """{entry folder name: manifest} of the cache root `root` (missing root: empty)."""
    out = {}
    for manifest in sorted(Path(root).glob("*/manifest.json")):
        try:
            out[manifest.parent.name] = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
    return out


def built_since(root, before):
    """What a case built: '<module> <seconds> s' of each new entry of `root`, ', '-joined."""
    new = {k: v for k, v in entries(root).items() if k not in before}
    parts = [f"{v['key'].get('module', k)} {v.get('build_seconds', 0):.1f} s"
             for k, v in sorted(new.items(), key=lambda kv: kv[1].get("built_at_epoch", 0))]
    return ", ".join(parts) or "nothing"


def copy_root(src, work, tag):
    """A fresh cache root holding the entries of `src` (not its locks)."""
    dst = Path(tempfile.mkdtemp(prefix=f"root_{tag}_", dir=work))
    for name in entries(src):
        shutil.copytree(Path(src) / name, dst / name)
    return dst


def run_child(cmd, root, env, timeout):
    """Time a fresh process (wall s around its run, nothing subtracted) in cache root
    `root`. Returns (wall s, its printed times or None, what it built, error text or None)."""
    before = entries(root)
    changes = {**env, "NI_JIT_CACHE_DIR": str(root),
               "PYTHONPATH": os.pathsep.join(
                   p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)}
    # (a time-out ends the child's whole process group: the compilers it started too)
    run = measure_process(cmd, env=changes, timeout=timeout, cwd=HERE)
    wall = run.wall_ms / 1e3
    if run.returncode is None:
        return wall, None, built_since(root, before), f"timed out after {timeout:g} s"
    times = next((json.loads(ln[len(MARK):]) for ln in run.stdout.splitlines()
                  if ln.startswith(MARK)), None)
    error = None
    if run.returncode:
        error = f"exit {run.returncode}: " + (run.stderr.strip().splitlines() or ["?"])[-1]
        sys.stderr.write(run.stderr)
    return wall, times, built_since(root, before), error


def _load():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


class Table:
    """The rows as measured: case, process s, in-process call s, CAL ratio, goal, pass."""

    headers = ["case", "process s", "call s (in-process)", "CAL", "goal", "pass", "built"]

    def __init__(self, cal):
        self.cal = cal
        self.rows = []

    def add(self, case, wall, times, built, error, goal_cal=None, goal_s=None, judge="process"):
        """One row; the goal is ``goal_cal`` CAL or ``goal_s`` seconds of the process wall time
        (``judge='process'``) or of the child's in-process call (``judge='call'``)."""
        # the times as the record holds them: the ratio and the verdict read the same numbers
        wall = round(wall, 2)
        call = round(times["call_s"], 3) if times else None
        judged = call if judge == "call" else wall
        goal = (f"≤ {goal_cal:g} CAL" if goal_cal is not None else f"≤ {goal_s:g} s") + \
            (" (call)" if judge == "call" else "")
        if error or judged is None:
            verdict = f"error ({error})" if error else "error (no times printed)"
        else:
            ok = judged <= (goal_cal * self.cal if goal_cal is not None else goal_s)
            verdict = "pass" if ok else "FAIL"
        row = [case, f"{wall:.2f}", f"{call:.3f}" if call is not None else "—",
               f"{judged / self.cal:.2f}" if judged is not None else "—", goal, verdict, built]
        self.rows.append(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", choices=CASES, default=CASES,
                    help="which cases (default: all; 'upgrade' and 'warm' build their warm "
                         "cache with 'grid_pull' when it is not among them)")
    ap.add_argument("--upgrade-python", metavar="PYTHON",
                    help="a python whose torch differs (e.g. /tmp/venv214/bin/python): the "
                         "upgrade case; skipped without it")
    ap.add_argument("--cuda-python", metavar="PYTHON",
                    help="the cuda case: an interpreter whose torch is a CUDA build (default: "
                         "this one, if it is); no GPU is needed: nothing is launched")
    ap.add_argument("--cuda-arch", default="9.0", metavar="ARCH",
                    help="the cuda case: TORCH_CUDA_ARCH_LIST of its builds (default 9.0)")
    ap.add_argument("--cal", type=float, metavar="SECONDS",
                    help="use this CAL instead of measuring it (smoke runs)")
    ap.add_argument("--backend", default="C",
                    help="NI_COMPILED_BACKEND of the children (default C: a build error "
                         "raises; TORCH: a smoke run of the script, nothing compiles)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    ap.add_argument("--record", metavar="FILE",
                    help="also write the table as a documentation record (docs/benchmarks/data)")
    ap.add_argument("--keep", action="store_true", help="keep the cache roots (printed)")
    ap.add_argument("--cal-only", action="store_true",
                    help="measure CAL once, print its seconds and stop (.ci/run gives the "
                         "suite's time in CAL with it)")
    args = ap.parse_args()
    if args.cal_only:
        with tempfile.TemporaryDirectory(prefix="nitorch_jit_cal_") as work:
            print(f"{measure_cal(Path(work)):.2f}")
        return 0
    if args.cal is not None and args.cal <= 0:
        ap.error(f"--cal must be > 0 seconds, got {args.cal}")
    if args.upgrade_python and not shutil.which(args.upgrade_python):
        ap.error(f"--upgrade-python: {args.upgrade_python!r} is not an executable")
    started, load_before = time.gmtime(), _load()
    env = {"NI_COMPILED_BACKEND": args.backend, "NI_USE_CUDA": "0"}
    work = Path(tempfile.mkdtemp(prefix="nitorch_jit_first_use_"))
    py = sys.executable
    notes = []
    results = []  # (case, (wall, times, built, error), goal of Table.add)

    def case(name, run, **goal):
        results.append((name, run, goal))
        wall, times, built, error = run
        call = f"{times['call_s']:.3f} s" if times else "no call time"
        print(f"{name}: {wall:.2f} s, call {call}, built {built}"
              + (f", ERROR {error}" if error else ""), file=sys.stderr, flush=True)

    try:
        cals = [args.cal] if args.cal else [measure_cal(work)]
        print(f"CAL (before the cases): {cals[0]:.2f} s", file=sys.stderr, flush=True)
        # the first grid_pull's cache is the warm cache of the later cases (copied for each)
        warm_root = Path(tempfile.mkdtemp(prefix="root_grid_pull_", dir=work))
        if {"grid_pull", "families", "upgrade", "warm"} & set(args.cases):
            r = run_child([py, "-c", child_code("grid_pull")], warm_root, env, args.timeout)
            if "grid_pull" in args.cases:
                case(CALLS["grid_pull"][0] + ", cold cache", r, goal_cal=1)
        if "families" in args.cases:
            for name in FAMILIES:
                root = Path(tempfile.mkdtemp(prefix=f"root_{name}_", dir=work))
                r = run_child([py, "-c", child_code(name)], root, env, args.timeout)
                case(CALLS[name][0] + ", cold cache", r, goal_cal=1)
                root = copy_root(warm_root, work, name)
                r = run_child([py, "-c", child_code(name)], root, env, args.timeout)
                case(CALLS[name][0] + ", after the first grid_pull (warm binding)", r,
                     goal_cal=1)
            # the README's solver: two modules' first use at once, so two families' goals
            root = Path(tempfile.mkdtemp(prefix="root_solver_fmg_", dir=work))
            r = run_child([py, "-c", child_code("solver_fmg")], root, env, args.timeout)
            case(CALLS["solver_fmg"][0] + ", cold cache", r, goal_cal=2)
        if "upgrade" in args.cases:
            if not args.upgrade_python:
                notes.append("the upgrade case was skipped (no --upgrade-python)")
            else:
                root = copy_root(warm_root, work, "upgrade")
                r = run_child([args.upgrade_python, "-c", child_code("grid_pull")], root, env,
                              args.timeout)
                new = r[1]["torch"] if r[1] else "?"
                case(f"first grid_pull after torch {torch.__version__} -> {new}, warm cache", r,
                     goal_cal=0.5)
        if "build" in args.cases:
            root = Path(tempfile.mkdtemp(prefix="root_build_", dir=work))
            wall, _, _, error = run_child([py, "-m", "nitorch_jit", "build", "--no-cuda"], root,
                                          env, args.timeout)
            case("`nitorch-jit build --no-cuda`, cold cache",
                 (wall, None, f"{len(entries(root))} entries", error),
                 goal_cal=BUILD_BEFORE_CAL)
        if "cuda" in args.cases:
            cuda_py = args.cuda_python or (py if torch.version.cuda else None)
            if cuda_py is None:
                notes.append("the cuda case was skipped (a CPU torch and no --cuda-python)")
            else:
                cuda_env = {"NI_COMPILED_BACKEND": args.backend,
                            "TORCH_CUDA_ARCH_LIST": args.cuda_arch}
                for module, (op, orders) in CUDA_CALLS.items():
                    root = Path(tempfile.mkdtemp(prefix=f"root_cuda_{module}_", dir=work))
                    code = CUDA_CHILD.format(module=module, op=op, orders=orders, mark=MARK)
                    r = run_child([cuda_py, "-c", code], root, cuda_env, args.timeout)
                    # a classic binding (the CUDA ones) may take up to 2 CAL (the issue)
                    case(f"CUDA {module}: compile wait of a first {op} (float32, sm "
                         f"{args.cuda_arch}, no launch), cold cache", r, goal_cal=2)
        if "warm" in args.cases:
            runs = [run_child([py, "-c", child_code("grid_pull")], warm_root, env, args.timeout)
                    for _ in range(3)]
            failed = [r for r in runs if r[3] or not r[1]]
            best = failed[0] if failed else min(runs, key=lambda r: r[1]["call_s"])
            case("warm process: first grid_pull (best of 3 processes)", best, goal_s=0.5,
                 judge="call")
        if args.cal is None:
            cals.append(measure_cal(work))
            print(f"CAL (after the cases): {cals[1]:.2f} s", file=sys.stderr, flush=True)
            if max(cals) > 1.25 * min(cals):
                notes.append(f"CAL moved from {cals[0]:.1f} s to {cals[1]:.1f} s during the run "
                             "(the machine's load changed): each case's ratio is uncertain by "
                             "up to that factor")
    finally:
        if args.keep:
            print(f"cache roots kept under {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    table = Table(min(cals))
    for name, run, goal in results:
        table.add(name, *run, **goal)
    cal_text = (f"CAL = {min(cals):.2f} s (given)" if args.cal else
                f"CAL = {min(cals):.2f} s (min of {', '.join(f'{c:.2f}' for c in cals)} s: "
                "before and after the cases)")
    print(f"{cal_text}; torch {torch.__version__}; children on NI_COMPILED_BACKEND="
          f"{args.backend}; process s: wall of a fresh process, call s: the "
          "child's own time of its first call")
    print_table(table.rows, Table.headers)
    for note in notes:
        print("note:", note)
    write_record(args.record, "First use, in CAL", Table.headers, table.rows,
                 measured=f"one run, {time.strftime('%H:%M', started)}–"
                          f"{time.strftime('%H:%M', time.gmtime())} UTC, 1-minute load "
                          f"{load_before:.1f} at its start, {_load():.1f} at its end; "
                          f"{cal_text}; children on "
                          f"NI_COMPILED_BACKEND={args.backend}"
                          + "".join(f"; {n}" for n in notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
