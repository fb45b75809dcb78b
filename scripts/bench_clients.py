"""NITorch and MONAI, unchanged, on nitorch_jit's kernels (nitorch_jit.compat) against their own
backends, on real data, in one run. Prints a markdown table (and writes JSON with --json).

Sections (each independent: a failure is a row of the table, the others still run):

register   ``nitorch register`` of Colin27's T1 (shared/data/colin27/ch2bet.nii.gz) onto the MNI152
           2009 template shipped with nilearn (``load_mni152_template``, offline), at 2 mm (both
           resampled to 2 mm) and at 1 mm: an affine pre-registration, then affine + ``@nonlin
           svf`` (interleaved), MSE loss, Gauss-Newton, 2 pyramid levels, ``--cpu`` (default
           threads). Each run is a subprocess: ``NI_COMPILED_BACKEND=TS nitorch register ...``
           (NITorch's TorchScript backend, the baseline) and ``python -m nitorch_jit.compat
           nitorch register ...`` (ours, after a tiny warm-up run that builds or loads our
           compiled modules; its time, compile included if any, is reported apart). Wall time of
           the process, TS/ours, final objective (last value printed by -v 1) of each.
           ``--profile`` adds a cProfile run of the ours side: share of the time spent inside
           nitorch_jit (inclusive time of the calls NITorch makes into the served module
           nitorch._C.spatial, i.e. nitorch_jit/compat/, from outside nitorch_jit) of the total.
reslice    ``nitorch reslice`` of Colin27 onto the 1 mm MNI grid through an affine (.lta) and
           through a smooth displacement field (voxels), orders 1 and 3, TS against compat:
           process wall and CPU time, max |TS - ours| / range(TS output), and the same off the
           edge of the field of view (voxels where exactly one side is 0: NITorch's C semantics,
           which ours follow, keep points up to 5e-2 voxel outside, its TS backend 1e-5).
monai      MONAI ``Rand3DElasticd`` and ``RandAffined`` (prob 1) on a 160^3 float32 image,
           1 thread, mode bilinear (order 1) and bicubic (order 3; where MONAI's default path
           refuses 'bicubic' in 3-D, its int mode 3, i.e. scipy), ms per sample (min of
           repeats after a warm-up), each in its own process: (a) MONAI's default path (no
           BUILD_MONAI: torch grid_sample), (b) BUILD_MONAI=1 with nitorch_jit.compat serving
           monai._C, (c) BUILD_MONAI=1 with MONAI's own compiled monai._C, built from
           shared/third_party/monai-csrc into --monai-build (never installed: a sys.meta_path
           finder serves the .so in that process only). Also the max difference of (b) and (c)
           against (a) and each other, relative to the range, on the first (seeded) sample.
nitorch_c  NITorch's own C++ backend (``NI_COMPILED_BACKEND=C pip install``) in a separate venv
           (--c-venv, built from a copy of shared/third_party/nitorch with a time limit): if it
           builds, ``_C.spatial.grid_pull`` / ``grid_push`` at orders 1 and 3 and ``fmg_grid`` on
           128^3 float32, 1 thread (CPU ms, min of repeats), against
           ``nitorch_jit.compat.nitorch`` on the same calls;
           if it does not, the first error of the build is the row.

Run (from the repository root, in the venv that has nitorch, monai, nilearn, nibabel)::

    python scripts/bench_clients.py [--only register,reslice,monai,nitorch_c] [--json out.json]
        [--profile] [--max-minutes 15] [--nonlin svf[,shoot]] [--iters 2,2,1]
        [--levels 2mm,1mm] [--parallel-sides] [--workdir DIR]
        [--monai-variants default,compat,monai_c] [--monai-resample-only]
    python scripts/bench_clients.py --tables-from a.json b.json   # merge earlier runs' tables

A section that one run cannot fit (a slow machine) can be run on its own with --only, each
with --json, and the tables merged with --tables-from.

Times are wall-clock times on whatever machine this runs on: on a shared machine they move with
its load, so compare the two sides of one row, not rows of different runs. The ``*_cpu*``
columns (CPU time of the process, user + system, from /usr/bin/time; in the 1-thread workers,
the process CPU time of nitorch_jit.bench.measure, which the kernel worker that also runs in
NITorch's venv loads from its file) move much less with the load; ``load1`` is the 1-minute
load average when the row was made. ``--parallel-sides`` runs the two register processes at once, so that both
see the same load.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from nitorch_jit.bench import measure_process, stopwatch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HARNESS = os.path.join(REPO, "nitorch_jit", "bench", "__init__.py")  # the kernel worker's clock
SHARED = os.environ.get("NJT_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
COLIN = os.path.join(SHARED, "data", "colin27", "ch2bet.nii.gz")
NITORCH_SRC = os.path.join(SHARED, "third_party", "nitorch")
MONAI_CSRC = os.path.join(SHARED, "third_party", "monai-csrc")
SECTIONS = ("register", "reslice", "monai", "nitorch_c")

ROWS = []  # dicts: section, case, ...


def row(section, case, **kw):
    r = {"section": section, "case": case}
    r.update(kw)
    r["load1"] = round(os.getloadavg()[0], 1)  # the machine's load when the row was made
    ROWS.append(r)
    print(f"[{section}] {case}: " + ", ".join(f"{k}={v}" for k, v in kw.items()), flush=True)
    return r


def fmt(x, spec="{:.3g}"):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    return spec.format(x)


def run_proc(cmd, env=None, timeout=None, cwd=None, log=None):
    """Run cmd (nitorch_jit.bench.measure_process); return (wall s, returncode or None on
    time-out, stdout, stderr, CPU s of the child or None)."""
    r = measure_process(cmd, env=env, timeout=timeout, cwd=cwd, log=log)
    cpu = None if r.cpu_ms is None else r.cpu_ms / 1e3
    return r.wall_ms / 1e3, r.returncode, r.stdout, r.stderr, cpu


def first_error(text, n=3):
    """The first lines of text that look like an error (compiler or Python)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"error:|Error\b|error\b", line) and "warning" not in line.lower():
            return " | ".join(s.strip() for s in lines[i:i + n])
    return " | ".join(s.strip() for s in lines[-n:])


COMPILE_MSG = re.compile(r"nitorch_jit: (?:waiting for another process that is building|"
                         r"building|compiling)[^\n]*", re.I)


def compile_seen(stderr):
    """nitorch_jit's own messages about a first-use build (or a wait for one) in a run's
    stderr: such a run's wall time includes it (its CPU time does not include a wait)."""
    found = COMPILE_MSG.findall(stderr or "")
    return ("first-use build/wait seen: " + found[0][13:90]) if found else None


def env_ours():
    return {"NI_COMPILED_BACKEND": None}


def env_ts():
    return {"NI_COMPILED_BACKEND": "TS"}


def compat_cmd(*args):
    return [sys.executable, "-m", "nitorch_jit.compat", *args]


def nitorch_exe():
    exe = os.path.join(os.path.dirname(sys.executable), "nitorch")
    return exe if os.path.exists(exe) else shutil.which("nitorch") or "nitorch"


# ------------------------------------------------------------------------------------------------
# data


def prepare_data(work):
    """MNI152 2009 (nilearn, offline) at 1 and 2 mm, Colin27 at 1 and 2 mm, as float32 .nii.gz."""
    import nibabel as nib
    import numpy as np
    from nibabel.processing import resample_to_output
    paths = {k: os.path.join(work, k + ".nii.gz") for k in ("mni1", "mni2", "colin1", "colin2",
                                                            "mni6", "colin6")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    from nilearn.datasets import load_mni152_template
    for r in (1, 2):
        t = load_mni152_template(resolution=r)  # shipped in nilearn's package data
        nib.save(nib.Nifti1Image(np.asarray(t.get_fdata(), np.float32), t.affine), paths[f"mni{r}"])
    c = nib.load(COLIN)
    c = nib.Nifti1Image(np.asarray(c.dataobj, np.float32), c.affine)
    nib.save(c, paths["colin1"])
    for name, src, vx in (("colin2", c, 2), ("colin6", c, 6), ("mni6", nib.load(paths["mni1"]), 6)):
        r = resample_to_output(src, voxel_sizes=vx, order=1)
        nib.save(nib.Nifti1Image(np.asarray(r.get_fdata(), np.float32), r.affine), paths[name])
    return paths


# ------------------------------------------------------------------------------------------------
# 1. nitorch register

OBJ = re.compile(r"\((affine|nonlin)\)\s*\|\s*(\d+)\s*\|[^|=]*=\s*([-+]?\d[\d.]*(?:e[-+]?\d+)?)")


def objectives(text):
    """The objective of every step printed by `-v 1` (affine and nonlin steps, all levels)."""
    return [float(m[2]) for m in OBJ.findall(text)]


def parse_objective(text):
    """(last objective, number of steps printed) from `-v 1` output."""
    objs = objectives(text)
    return (objs[-1] if objs else None), len(objs)


def register_args(fix, mov, out, nonlin, iters, levels):
    na, nn, ni = iters
    return ["register", "--cpu", "-v", "1", "-o", out,
            "@loss", "mse", "@@fix", fix, "@@mov", mov,
            "@affine", "affine", "@@optim", "gn", "-n", str(na),
            "@nonlin", nonlin, "@@optim", "gn", "-n", str(nn),
            "@optim", "i", "-n", str(ni),
            "@pyramid", "--levels", levels]


def kernel_share(prof_path):
    """Share of total time inside nitorch_jit: calls entering nitorch_jit/ from outside."""
    import pstats
    st = pstats.Stats(prof_path)
    total = st.total_tt

    def ours(func):
        return ("nitorch_jit" + os.sep) in func[0]

    compat = os.path.join("nitorch_jit", "compat") + os.sep
    runner = ("__init__.py", "__main__.py", "run.py", "pytest_plugin.py")

    def kernel(func):
        """A function of the served modules (what NITorch calls: grid_pull, fmg_grid...), not
        the runner, the import finder nor a module body. Entries from outside are counted
        once: our own internals re-entered through torch (autograd's apply) are not entries."""
        return (compat in func[0] and os.path.basename(func[0]) not in runner
                and func[2] != "<module>")

    entries = {}
    for func, (cc, nc, tt, ct, callers) in st.stats.items():
        if not kernel(func):
            continue
        for caller, val in callers.items():
            if not ours(caller) and isinstance(val, tuple):
                entries[func] = entries.get(func, 0.0) + val[3]
    top = sorted(((t, f) for f, t in entries.items()), reverse=True)[:5]
    return (sum(entries.values()), total,
            [(f"{os.path.basename(f[0])}:{f[2]}", t) for t, f in top])


def section_register(args, work):
    paths = prepare_data(work)
    nitorch = nitorch_exe()
    iters = tuple(int(i) for i in args.iters.split(","))
    cap = args.max_minutes * 60
    # warm-up: a tiny pair at 6 mm on the ours side, so that compile time is not in the runs
    for nonlin in ([] if args.no_warmup else args.nonlin.split(",")):
        out = os.path.join(work, f"warm_{nonlin}")
        os.makedirs(out, exist_ok=True)
        cmd = compat_cmd("nitorch", *register_args(paths["mni6"], paths["colin6"], out, nonlin,
                                                   (1, 1, 1), "0:2"))
        wall, rc, so, se, cpu = run_proc(cmd, env=env_ours(), timeout=1800,
                                    log=os.path.join(work, f"warm_{nonlin}.log"))
        row("register", f"warm-up ours, 6 mm {nonlin} (1,1,1)", ours_s=wall, ours_cpu_s=cpu,
            note=compile_seen(se) or "no build (cached)", rc=rc)
    for res in [lv for lv in args.levels.split(",") if lv]:
        r = res.replace("mm", "")
        fix, mov = paths[f"mni{r}"], paths[f"colin{r}"]
        for nonlin in args.nonlin.split(","):
            case = f"{res} affine+{nonlin}"
            res_row = {"iters": f"affine gn -n {iters[0]}, {nonlin} gn -n {iters[1]}, "
                                f"@optim i -n {iters[2]}, levels {args.pyramid}"}
            jobs = {}
            for side in ("ts", "ours"):
                out = os.path.join(work, f"reg_{r}_{nonlin}_{side}")
                os.makedirs(out, exist_ok=True)
                rargs = register_args(fix, mov, out, nonlin, iters, args.pyramid)
                if side == "ts":
                    cmd, env = [nitorch, *rargs], env_ts()
                else:
                    cmd, env = compat_cmd("nitorch", *rargs), env_ours()
                log = os.path.join(work, f"reg_{r}_{nonlin}_{side}.log")
                jobs[side] = (cmd, env, log)
            if args.parallel_sides:  # both at once: the same machine load for both sides
                from concurrent.futures import ThreadPoolExecutor
                with ThreadPoolExecutor(2) as pool:
                    futs = {side: pool.submit(run_proc, cmd, env=env, timeout=cap, log=log)
                            for side, (cmd, env, log) in jobs.items()}
                    done = {side: f.result() for side, f in futs.items()}
                res_row["sides"] = "run concurrently"
            else:
                done = {side: run_proc(cmd, env=env, timeout=cap, log=log)
                        for side, (cmd, env, log) in jobs.items()}
                res_row["sides"] = "run one after the other"
            for side in ("ts", "ours"):
                wall, rc, so, se, cpu = done[side]
                obj, n = parse_objective(so)
                res_row[f"{side}_iters_printed"] = n
                if rc is None:
                    res_row[f"{side}_s"] = f"> {args.max_minutes:g} min"
                    res_row[f"{side}_obj"] = (f"(cut; last {obj:.6g} at it. {n})"
                                              if obj is not None else "(cut)")
                elif rc != 0:
                    res_row[f"{side}_s"] = f"failed rc={rc}"
                    res_row[f"{side}_error"] = first_error(se)
                    res_row[f"{side}_obj"] = obj
                else:
                    res_row[f"{side}_s"] = wall
                    res_row[f"{side}_obj"] = obj
                res_row[f"{side}_cpu_s"] = cpu
                if side == "ours" and compile_seen(se):
                    res_row["ours_note"] = compile_seen(se)
            ts, ours = res_row.get("ts_s"), res_row.get("ours_s")
            if isinstance(ts, float) and isinstance(ours, float):
                res_row["ratio"] = ts / ours
                if res_row.get("ts_cpu_s") and res_row.get("ours_cpu_s"):
                    res_row["cpu_ratio"] = res_row["ts_cpu_s"] / res_row["ours_cpu_s"]
            elif isinstance(ts, str) and ts.startswith(">") and isinstance(ours, float):
                res_row["ratio"] = f"> {args.max_minutes * 60 / ours:.3g}"
            a, b = res_row.get("ts_obj"), res_row.get("ours_obj")
            if isinstance(a, float) and isinstance(b, float):
                res_row["obj_rel_diff"] = abs(a - b) / max(abs(a), 1e-30)
            # the two trajectories compared step by step, up to the last step both printed
            # (where one side was cut, this compares them there)
            ts_objs, ours_objs = (objectives(done[s_][2]) for s_ in ("ts", "ours"))
            k = min(len(ts_objs), len(ours_objs))
            if k:
                diffs = [abs(x - y) / max(abs(x), 1e-30) for x, y in zip(ts_objs, ours_objs)]
                res_row["obj_at_common_step"] = (
                    f"step {k}: TS {ts_objs[k - 1]:.6g}, ours {ours_objs[k - 1]:.6g}, "
                    f"rel diff {diffs[k - 1]:.2%}; max rel diff over steps 1-{k} {max(diffs):.2%}")
            row("register", case, **res_row)
    if args.profile:
        r = args.profile_level.replace("mm", "")
        nonlin = args.nonlin.split(",")[0]
        out = os.path.join(work, f"reg_{r}_{nonlin}_prof")
        os.makedirs(out, exist_ok=True)
        prof = os.path.join(work, "register_ours.prof")
        cmd = [sys.executable, "-m", "cProfile", "-o", prof, "-m", "nitorch_jit.compat",
               nitorch, *register_args(paths[f"mni{r}"], paths[f"colin{r}"], out, nonlin, iters,
                                       args.pyramid)]
        wall, rc, so, se, cpu = run_proc(cmd, env=env_ours(), timeout=cap,
                                    log=os.path.join(work, "register_prof.log"))
        if rc != 0 or not os.path.exists(prof):
            row("register", f"profile ours {r} mm {nonlin}", error=first_error(se), rc=rc)
        else:
            inside, total, top = kernel_share(prof)
            row("register", f"profile ours {r} mm {nonlin}", ours_s=wall,
                ours_note=compile_seen(se),
                note=f"inside nitorch_jit (calls into nitorch._C.spatial) {inside:.1f} s of "
                     f"{total:.1f} s profiled "
                     f"({100 * inside / total:.0f} %); top: "
                     + ", ".join(f"{n} {t:.1f}s" for n, t in top[:3]))


# ------------------------------------------------------------------------------------------------
# 2. nitorch reslice


def section_reslice(args, work):
    import nibabel as nib
    import numpy as np
    paths = prepare_data(work)
    nitorch = nitorch_exe()
    # an affine (rotation 8 deg about z, 5 deg about x, shift) saved by NITorch itself (LTA)
    lta = os.path.join(work, "reslice_affine.lta")
    code = ("import sys, math, torch; from nitorch import io\n"
            "a, b = math.radians(8), math.radians(5)\n"
            "rz = torch.tensor([[math.cos(a), -math.sin(a), 0, 0],"
            " [math.sin(a), math.cos(a), 0, 0],"
            " [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.float64)\n"
            "rx = torch.tensor([[1, 0, 0, 0], [0, math.cos(b), -math.sin(b), 0],"
            " [0, math.sin(b), math.cos(b), 0], [0, 0, 0, 1]], dtype=torch.float64)\n"
            "m = rz @ rx; m[:3, 3] = torch.tensor([4.3, -3.1, 2.2])\n"
            "io.transforms.savef(m, sys.argv[1], type=1)\n")
    wall, rc, so, se, cpu = run_proc([sys.executable, "-c", code, lta], env=env_ts(), timeout=300)
    if rc != 0:
        row("reslice", "prepare affine", error=first_error(se))
        lta = None
    # a smooth displacement field (voxels) on the MNI 1 mm grid, up to ~3 voxels
    disp = os.path.join(work, "reslice_disp.nii.gz")
    if not os.path.exists(disp):
        from scipy.ndimage import gaussian_filter
        mni = nib.load(paths["mni1"])
        rng = np.random.default_rng(0)
        d = np.stack([gaussian_filter(rng.standard_normal(mni.shape), 8) for _ in range(3)], -1)
        d *= 3 / np.abs(d).max()
        nib.save(nib.Nifti1Image(d.astype(np.float32), mni.affine), disp)
    cases = []
    if lta:
        cases += [(f"affine, order {o}", ["-l", lta], o) for o in (1, 3)]
    cases += [(f"displacement, order {o}", ["-d", disp], o) for o in (1, 3)]
    for name, trf, order in cases:
        try:
            outs, res = {}, {}
            for side in ("ts", "ours"):
                out = os.path.join(work, f"resliced_{side}_{len(ROWS)}.nii.gz")
                rargs = ["reslice", paths["colin1"], *trf, "-t", paths["mni1"], "-i", str(order),
                         "-o", out]
                cmd = [nitorch, *rargs] if side == "ts" else compat_cmd("nitorch", *rargs)
                wall, rc, so, se, cpu = run_proc(cmd, env=env_ts() if side == "ts" else env_ours(),
                                            timeout=args.max_minutes * 60)
                if rc != 0:
                    raise RuntimeError(f"{side}: rc={rc}: {first_error(se)}")
                res[f"{side}_s"] = wall
                res[f"{side}_cpu_s"] = cpu
                if side == "ours" and compile_seen(se):
                    res["ours_note"] = compile_seen(se)
                outs[side] = np.asarray(nib.load(out).dataobj, np.float64)
            a, b = outs["ts"], outs["ours"]
            rng_ = float(a.max() - a.min())
            res["ratio"] = res["ts_s"] / res["ours_s"]
            if res["ts_cpu_s"] and res["ours_cpu_s"]:
                res["cpu_ratio"] = res["ts_cpu_s"] / res["ours_cpu_s"]
            res["maxdiff_rel_range"] = float(np.abs(a - b).max()) / rng_
            # NITorch's own TS and C backends differ at the edge of the field of view: a point
            # up to 5e-2 voxel outside is in bounds for C (and ours), 1e-5 for TS
            edge = (a == 0) != (b == 0)
            res["fov_edge_voxels"] = int(edge.sum())
            res["maxdiff_rel_range_off_edge"] = float(np.abs(a - b)[~edge].max()) / rng_
            res["note"] = f"1 mm MNI grid {a.shape}, process wall time incl. imports"
            row("reslice", name, **res)
        except Exception as e:  # noqa: BLE001 -- reported as a row
            row("reslice", name, error=f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------------------------------------
# 3. MONAI

def build_monai_c(build_dir, timeout=3600, resample_only=False):
    """Build MONAI's monai._C into build_dir (not installed) with scripts/build_monai.sh.
    Returns (.so path, seconds)."""
    os.makedirs(build_dir, exist_ok=True)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_monai.sh")
    wall, rc, so, se, cpu = run_proc(["bash", script, MONAI_CSRC, build_dir],
                                env={"MONAI_INSTALL": "0",
                                     "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
                                     "MONAI_RESAMPLE_ONLY": "1" if resample_only else "0"},
                                timeout=timeout, log=os.path.join(build_dir, "bench_build.log"))
    lines = so.strip().splitlines()
    if rc != 0 or not lines or not lines[-1].endswith(".so"):
        raise RuntimeError(f"MONAI _C build failed (rc={rc}): {first_error(se + so)}")
    return lines[-1].strip(), wall


MONAI_WORKER = r'''
import importlib.machinery, importlib.util, json, os, sys
variant, so_path, out_npy, mode, repeat = sys.argv[1:6]
repeat = int(repeat)
mode = int(mode) if mode.isdigit() else mode
if variant == "compat":
    import nitorch_jit.compat
    nitorch_jit.compat.install(nitorch=False, monai=True)
elif variant == "monai_c":
    class _Finder:
        def find_spec(self, fullname, path=None, target=None):
            if fullname != "monai._C":
                return None
            loader = importlib.machinery.ExtensionFileLoader(fullname, so_path)
            # a spec with a location, so that the module gets a __file__ (MONAI's
            # optional_import wants one)
            return importlib.util.spec_from_file_location(fullname, so_path, loader=loader)
    sys.meta_path.insert(0, _Finder())
from nitorch_jit.bench import measure  # the harness's clock (imports nothing of MONAI's)
import numpy as np
import torch
torch.set_num_threads(1)
import monai
from monai.config import USE_COMPILED
from monai.transforms import Rand3DElasticd, RandAffined
served = None
if USE_COMPILED:
    import monai._C as C
    served = getattr(C, "__nitorch_jit_compat__", False) and "nitorch_jit" or C.__file__
n = 160
g = torch.Generator().manual_seed(0)
x = torch.randn(1, 1, n // 8, n // 8, n // 8, generator=g)
img = torch.nn.functional.interpolate(x, size=(n, n, n), mode="trilinear", align_corners=True)[0]
img = img.float().contiguous()
res = {"use_compiled": bool(USE_COMPILED), "served": served, "mode": mode}
tfs = {
    "Rand3DElasticd": Rand3DElasticd(keys="img", sigma_range=(5, 7), magnitude_range=(50, 100),
                                     prob=1.0, mode=mode, padding_mode="border"),
    "RandAffined": RandAffined(keys="img", prob=1.0, rotate_range=(0.3, 0.3, 0.3),
                               scale_range=(0.1, 0.1, 0.1), translate_range=(5, 5, 5),
                               mode=mode, padding_mode="border"),
}
for name, tf in tfs.items():
    tf.set_random_state(seed=0)
    first = []  # the first (seeded) sample, compared across variants

    def run():
        y = tf({"img": img})["img"]
        if not first:
            first.append(y)
    t = measure(run, repeat=repeat, warmup=1)  # min wall and min CPU time of the repeats
    y = first[0]
    np.save(out_npy.replace(".npy", f"_{name}.npy"),
            np.asarray(y.detach().cpu().numpy(), np.float32))
    res[name] = {"ms": t.best_ms, "cpu_ms": t.cpu_ms, "first_ms": t.first_ms,
                 "dtype": str(y.dtype)}
print("RESULT " + json.dumps(res))
'''


def section_monai(args, work):
    import numpy as np
    wanted = args.monai_variants.split(",")
    so_path, note_c = None, None
    try:
        if "monai_c" not in wanted:
            raise LookupError("not asked (--monai-variants)")
        cached = sorted(glob.glob(os.path.join(args.monai_build, "_C*.so")))
        if cached and not args.rebuild_monai:
            so_path, note_c = cached[0], "MONAI _C: reused build in " + args.monai_build
        else:
            so_path, wall = build_monai_c(args.monai_build,
                                          resample_only=args.monai_resample_only)
            note_c = f"MONAI _C: built in {wall:.0f} s" + (
                " (resampling half only)" if args.monai_resample_only else "")
        row("monai", "MONAI's own _C", note=f"{note_c} ({so_path})")
    except Exception as e:  # noqa: BLE001
        row("monai", "MONAI's own _C", error=f"{type(e).__name__}: {e}")
    variants = [("default", {"BUILD_MONAI": None}), ("compat", {"BUILD_MONAI": "1"})]
    if so_path:
        variants.append(("monai_c", {"BUILD_MONAI": "1"}))
    variants = [v for v in variants if v[0] in wanted]
    for order, modes in ((1, ["bilinear"]), (3, ["bicubic", 3])):
        results, outs = {}, {}
        for variant, env in variants:
            npy = os.path.join(work, f"monai_{variant}_{order}.npy")
            env = dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                       NI_COMPILED_BACKEND=None)
            errors = []
            for mode in modes:  # order 3: 'bicubic', else MONAI's int spline order
                wall, rc, so, se, cpu = run_proc(
                    [sys.executable, "-c", MONAI_WORKER, variant, so_path or "", npy, str(mode),
                     str(args.repeat)], env=env, timeout=args.max_minutes * 60,
                    log=os.path.join(work, f"monai_{variant}_{order}_{mode}.log"))
                m = re.search(r"^RESULT (.+)$", so, re.M)
                if rc == 0 and m:
                    results[variant] = json.loads(m.group(1))
                    results[variant]["errors"] = errors
                    outs[variant] = npy
                    break
                errors.append(f"mode={mode!r}: " + (first_error(se) if rc is not None else
                                                   f"> {args.max_minutes:g} min"))
            else:
                results[variant] = {"error": "; ".join(errors)}
        for tf in ("Rand3DElasticd", "RandAffined"):
            r = {}
            for variant, _ in variants:
                v = results.get(variant, {})
                r[f"{variant}_ms"] = v[tf]["ms"] if tf in v else v.get("error", "—")
                r[f"{variant}_cpu_ms"] = v[tf]["cpu_ms"] if tf in v else None
                if tf in v:
                    r[f"{variant}_path"] = (v.get("served") or "not compiled") + \
                        f", mode={v['mode']!r}, {v[tf]['dtype']}" + \
                        ("; " + "; ".join(v["errors"]) if v.get("errors") else "")
            if isinstance(r.get("default_ms"), float) and isinstance(r.get("compat_ms"), float):
                r["default/ours"] = r["default_ms"] / r["compat_ms"]
                r["default/ours_cpu"] = r["default_cpu_ms"] / r["compat_cpu_ms"]
            if isinstance(r.get("monai_c_ms"), float) and isinstance(r.get("compat_ms"), float):
                r["monai_c/ours"] = r["monai_c_ms"] / r["compat_ms"]
                r["monai_c/ours_cpu"] = r["monai_c_cpu_ms"] / r["compat_cpu_ms"]
            diffs = {}
            loaded = {}
            for variant in outs:
                f = outs[variant].replace(".npy", f"_{tf}.npy")
                if os.path.exists(f):
                    loaded[variant] = np.load(f).astype(np.float64)
            for a, b in (("compat", "default"), ("compat", "monai_c")):
                if a in loaded and b in loaded and loaded[a].shape == loaded[b].shape:
                    rng_ = float(loaded[b].max() - loaded[b].min()) or 1.0
                    diffs[f"{a}-{b}"] = float(np.abs(loaded[a] - loaded[b]).max()) / rng_
            r["maxdiff_rel_range"] = ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()) or "—"
            row("monai", f"{tf}, 160^3, 1 thread, order {order}", **r)


# ------------------------------------------------------------------------------------------------
# 4. NITorch's own C backend

# runs in the NITorch C venv too, where nitorch_jit is not installed: the harness's clock is
# loaded from its file (nitorch_jit/bench/__init__.py imports only the standard library and
# torch), the same for both sides of the comparison; CPU time of one thread
KERNEL_WORKER = r'''
import importlib.util, json, sys
import torch
which, size, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("harness", sys.argv[5])
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)
torch.set_num_threads(1)
if which == "nitorch_c":
    import nitorch._C.spatial as S
    assert "nitorch_jit" not in (getattr(S, "__file__", "") or ""), S.__file__
else:
    import nitorch_jit.compat.nitorch as S
origin = getattr(S, "__file__", "?")
g = torch.Generator().manual_seed(0)
shape = [size] * 3
img = torch.randn([1, 1] + shape, generator=g)
idt = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in shape],
                                 indexing="ij"), -1)
grid = (idt + (torch.rand(shape + [3], generator=g) * 2 - 1) * 2)[None].contiguous()

def best(fn):
    # 1 thread: the process CPU time, steadier than wall on a loaded machine
    t = harness.measure(fn, repeat=repeat, warmup=1, threads=1, keep_result=True)
    return t.cpu_ms, t.result

res = {"origin": origin}
outs = {}
bnd = [S.BoundType.dct2] * 3
for order in (1, 3):
    itp = [S.InterpolationType(order)] * 3
    res[f"grid_pull_{order}"], outs[f"pull{order}"] = best(
        lambda: S.grid_pull(img, grid, bnd, itp, 1))
    res[f"grid_push_{order}"], outs[f"push{order}"] = best(
        lambda: S.grid_push(img, grid, shape, bnd, itp, 1))
# fmg_grid: a displacement-field solve as in registration (bending + lame, cg, 2 cycles x 2 iters)
hess = torch.rand([1, 6] + shape, generator=g)
hess[:, :3] += 1
grad = torch.randn([1, 3] + shape, generator=g)
empty = torch.Tensor()
res["fmg_grid"], outs["fmg"] = best(lambda: S.fmg_grid(
    hess, grad, empty, empty, 1e-4, 1e-3, 0.2, 0.05, 0.2, [1., 1., 1.], [S.BoundType.dft] * 3,
    2, 2, 16, True))
torch.save(outs, sys.argv[4])
print("RESULT " + json.dumps(res))
'''


def section_nitorch_c(args, work):
    venv = args.c_venv
    py = os.path.join(venv, "bin", "python")
    status = None
    if not os.path.exists(py):
        wall, rc, so, se, cpu = run_proc(["python3", "-m", "venv", venv], timeout=300)
        wall2, rc2, so2, se2, _ = run_proc(
            [os.path.join(venv, "bin", "pip"), "install", "torch==2.13.0", "numpy", "scipy",
             "torch-interpol", "setuptools", "ninja"], timeout=1800)
        if rc2 != 0:
            row("nitorch_c", "venv", error=first_error(se2))
            return
    probe = "import nitorch._C.spatial as S; print('C_OK', S.__file__)"
    wall, rc, so, se, cpu = run_proc([py, "-c", probe], env={"NI_COMPILED_BACKEND": "C"},
                                     timeout=300)
    if "C_OK" not in so:
        src = os.path.join(tempfile.mkdtemp(prefix="nitorch_c_src_"), "nitorch")
        shutil.copytree(NITORCH_SRC, src)
        log = os.path.join(work, "nitorch_c_build.log")
        wall, rc, so, se, cpu = run_proc(
            [os.path.join(venv, "bin", "pip"), "install", "-v", "--no-build-isolation",
             "--no-deps", src], env={"NI_COMPILED_BACKEND": "C", "NI_USE_CUDA": "0"},
            timeout=args.c_build_minutes * 60, log=log)
        if rc != 0:
            text = so + se
            m = re.search(r"^.*\berror\b.*$", text, re.M | re.I)
            errs = [ln.strip() for ln in text.splitlines()
                    if re.search(r"(error:|Error:|TypeError|fatal error)", ln)]
            stv = run_proc([py, "-c", "import setuptools; print(setuptools.__version__)"],
                           timeout=120)[2].strip()
            row("nitorch_c", f"build NITorch C backend (setuptools {stv})",
                error=("timeout" if rc is None else f"rc={rc}") + f" after {wall:.0f} s; first "
                      f"error: {errs[0] if errs else (m.group(0) if m else '?')}", log=log)
            return
        status = f"built in {wall:.0f} s"
        wall, rc, so, se, cpu = run_proc([py, "-c", probe], env={"NI_COMPILED_BACKEND": "C"},
                                    timeout=300)
        if "C_OK" not in so:
            row("nitorch_c", "import NITorch C backend", error=first_error(se))
            return
    row("nitorch_c", "NITorch C backend", note=status or "already installed in " + venv)

    res = {}
    for which, exe in (("nitorch_c", py), ("ours", sys.executable)):
        out = os.path.join(work, f"kernels_{which}.pt")
        wall, rc, so, se, cpu = run_proc([exe, "-c", KERNEL_WORKER, which, str(args.size),
                                     str(args.repeat), out, HARNESS],
                                    env={"NI_COMPILED_BACKEND": "C", "OMP_NUM_THREADS": "1"},
                                    timeout=args.max_minutes * 60)
        m = re.search(r"^RESULT (.+)$", so, re.M)
        if rc != 0 or not m:
            row("nitorch_c", f"kernels {which}", error=first_error(se))
            return
        res[which] = (json.loads(m.group(1)), out)
    import torch
    a, b = torch.load(res["nitorch_c"][1]), torch.load(res["ours"][1])
    keys = {"grid_pull_1": "pull1", "grid_push_1": "push1", "grid_pull_3": "pull3",
            "grid_push_3": "push3", "fmg_grid": "fmg"}
    for k, o in keys.items():
        tc, to = res["nitorch_c"][0][k], res["ours"][0][k]
        d = (a[o] - b[o]).abs().max().item() / max((a[o].max() - a[o].min()).item(), 1e-30)
        row("nitorch_c", f"{k}, {args.size}^3 float32, 1 thread", c_cpu_ms=tc, ours_cpu_ms=to,
            ratio=tc / to, maxdiff_rel_range=d)


# ------------------------------------------------------------------------------------------------


def print_tables(rows):
    by = {}
    for r in rows:
        by.setdefault(r["section"], []).append(r)
    for section, rs in by.items():
        keys = []
        for r in rs:
            for k in r:
                if k not in ("section",) and k not in keys:
                    keys.append(k)
        print(f"\n### {section}\n")
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rs:
            cells = []
            for k in keys:
                v = r.get(k)
                if isinstance(v, float):
                    if k.endswith("_s"):
                        v = f"{v:.1f}"
                    elif k.endswith("_ms"):
                        v = f"{v:.0f}"
                    elif "diff" in k:
                        v = f"{v:.1e}"
                    elif k.endswith("obj"):
                        v = f"{v:.6g}"
                    else:
                        v = f"{v:.2f}"
                cells.append(str(v if v is not None else "—").replace("|", "/"))
            print("| " + " | ".join(cells) + " |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS),
                   help="comma-separated sections: " + ", ".join(SECTIONS))
    p.add_argument("--json", help="also write the rows as JSON to this path")
    p.add_argument("--profile", action="store_true",
                   help="register: profile one ours-side run, share of time in nitorch_jit")
    p.add_argument("--max-minutes", type=float, default=15,
                   help="cap on each subprocess; a run cut is reported as '> N min'")
    p.add_argument("--nonlin", default="svf", help="register: svf and/or shoot (comma list)")
    p.add_argument("--iters", default="2,2,1",
                   help="register: affine GN iters, nonlin GN iters, interleaved outer iters")
    p.add_argument("--parallel-sides", action="store_true",
                   help="register: run the TS and ours processes at the same time (both see "
                        "the same machine load; use on a shared machine)")
    p.add_argument("--no-warmup", action="store_true", help="register: skip the warm-up run")
    p.add_argument("--profile-level", default="2mm", help="register: resolution profiled")
    p.add_argument("--pyramid", default="0:2", help="register: @pyramid --levels")
    p.add_argument("--levels", default="2mm,1mm", help="register: resolutions (2mm, 1mm)")
    p.add_argument("--repeat", type=int, default=3, help="monai, nitorch_c: timed repeats")
    p.add_argument("--size", type=int, default=128, help="nitorch_c: volume size")
    p.add_argument("--workdir", help="data and outputs (default: a new temp dir)")
    p.add_argument("--monai-build", default="/tmp/monai_build",
                   help="where MONAI's _C is built (reused if there)")
    p.add_argument("--rebuild-monai", action="store_true")
    p.add_argument("--monai-resample-only", action="store_true",
                   help="build only the resampling half of MONAI's _C (ext.cpp without the "
                        "filtering/LLTM bindings + resample/pushpull_cpu.cpp): what the "
                        "transforms call, in a fraction of the build time")
    p.add_argument("--monai-variants", default="default,compat,monai_c",
                   help="monai: which of default (grid_sample), compat (ours), monai_c to run")
    p.add_argument("--c-venv", default="/tmp/venv_nitorch_c",
                   help="venv for NITorch's own C backend")
    p.add_argument("--c-build-minutes", type=float, default=20)
    p.add_argument("--tables-from", nargs="+", metavar="JSON",
                   help="print the tables of earlier --json files (merged) and exit")
    args = p.parse_args(argv)
    if args.tables_from:
        rows = []
        for path in args.tables_from:
            with open(path) as f:
                rows += json.load(f)["rows"]
        print_tables(rows)
        return 0
    work = args.workdir or tempfile.mkdtemp(prefix="bench_clients_")
    os.makedirs(work, exist_ok=True)
    try:
        commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    started = time.strftime('%Y-%m-%d %H:%M:%S %Z')
    print(f"workdir {work}; python {sys.executable}; nitorch_jit {commit}; {started}",
          flush=True)
    funcs = {"register": section_register, "reslice": section_reslice, "monai": section_monai,
             "nitorch_c": section_nitorch_c}
    for name in args.only.split(","):
        name = name.strip()
        if name not in funcs:
            row(name, "unknown section", error=f"choose from {', '.join(SECTIONS)}")
            continue
        with stopwatch() as sw:
            try:
                funcs[name](args, work)
            except Exception as e:  # noqa: BLE001 -- reported, the other sections go on
                row(name, "section failed", error=f"{type(e).__name__}: {e}",
                    trace=traceback.format_exc().splitlines()[-3:])
        print(f"[{name}] done in {sw.wall_ms / 1e3:.0f} s", flush=True)
    print_tables(ROWS)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "workdir": work, "nitorch_jit": commit,
                       "started": started, "rows": ROWS}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
