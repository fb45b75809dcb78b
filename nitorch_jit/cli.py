"""nitorch-jit info | build | cache list/clear/path | bench | reslice"""
import argparse
import os
import shutil
import platform
import sys
import time

import torch

from . import backends, jit
from .jit import cache, key as keymod, toolchain
from .backends import MODULES
from .io.cli import add_reslice_parser, cmd_reslice


def _modules_with_sources(device_type):
    return [m for m in MODULES if backends.compiled.sources(m, device_type)]


def _fmt_size(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _fmt_age(s):
    for unit, div in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= div:
            return f"{s / div:.0f} {unit}"
    return f"{s:.0f} s"


def _try(fn):
    try:
        return fn(), None
    except (toolchain.ToolchainError, jit.CacheError, backends.BackendError, OSError) as e:
        return None, str(e)


def stale_reason(entry):
    """None if `entry` matches this environment and sources, else the fields that differ."""
    old = entry.manifest["key"]
    archs = ";".join(old.get("archs") or []) or None
    new, _ = _try(lambda: jit.compute_key(backends.module_spec(old["module"], old["device"], archs)))
    if new is None:  # a tool is missing now: compare what can be computed
        new = keymod.environment()
    diffs = sorted(k for k in new if old.get(k) != new[k])
    return ", ".join(diffs) if diffs else None


def _runtime_note():
    """One line on the C++ runtime: the one loaded here vs the compiler's."""
    loaded = toolchain.loaded_cxx_runtime()
    built = toolchain.compiler_cxx_runtime(toolchain.cxx_command())
    if loaded is None or built is None:
        return "C++ runtime: not checked (not Linux / not libstdc++)"
    mismatch = toolchain.runtime_mismatch(toolchain.cxx_command())
    if mismatch:
        return (f"C++ runtime: MISMATCH: {mismatch}; point CXX at a compiler of that runtime's "
                f"version, or start Python with LD_PRELOAD={built[0]}")
    note = "" if os.environ.get("CXX") or toolchain.cxx_command() == shutil.which("c++") else \
        f" (c++ on PATH builds against a newer runtime; using {toolchain.cxx_command()})"
    return f"C++ runtime: builds against {built[0]}, loaded {loaded[0]}: compatible{note}"


def cmd_info(args):
    print(f"nitorch_jit {__import__('nitorch_jit').__version__}")
    print(f"torch       {torch.__version__} (git {torch.version.git_version[:10]}), "
          f"CUDA {torch.version.cuda or 'none (CPU build)'}, "
          f"GPU visible: {torch.cuda.is_available()}")
    print(f"python      {sys.executable} ({platform.python_version()}), {platform.system()} "
          f"{platform.machine()}")
    print("toolchain")
    for label, fn in [("c++", toolchain.find_cxx), ("ninja", toolchain.find_ninja)]:
        got, err = _try(fn)
        print(f"  {label:10s}{' | '.join(got) if got else 'MISSING: ' + err}")
        if label == "c++" and got:
            print(f"  {'':10s}{_runtime_note()}")
    home, err = _try(toolchain.find_cuda_home)
    if home:
        ver, verr = _try(lambda: toolchain.nvcc_version(home[0]))
        note = ""
        if ver and torch.version.cuda:
            _, merr = _try(lambda: toolchain.check_cuda_versions(ver, torch.version.cuda))
            note = f"  ({merr})" if merr else "  (matches torch)"
        print(f"  {'cuda':10s}{home[0]} (from {home[1]}), nvcc {ver or verr}{note}")
    else:
        print(f"  {'cuda':10s}not found: {err}")
    if not toolchain.cuda_enabled():
        print(f"  {'':10s}NI_USE_CUDA=0: CUDA builds are off")
    archs, err = _try(toolchain.parse_arch_list) if torch.version.cuda else \
        (None, "not applicable: this torch is a CPU-only build")
    src = os.environ.get("TORCH_CUDA_ARCH_LIST") or ("mine (default)" if torch.cuda.is_available()
                                                     else "torch's own list (no GPU visible)")
    print(f"  {'archs':10s}{', '.join(archs) if archs else err}  [TORCH_CUDA_ARCH_LIST: {src}]")
    print("cache")
    for r in cache.roots():
        print(f"  root      {r}: {cache.root_state(r).describe()}")
    target, err = _try(lambda: cache.writable_root(create=False))
    print(f"  builds    {'into ' + str(target) if target else 'NOWHERE: ' + err}")
    print(f"  entries   {len(cache.entries())} ('nitorch-jit cache list' shows them)")
    print("key of this environment")
    env = keymod.environment()
    cxx, _ = _try(toolchain.find_cxx)
    env["cxx"] = " | ".join(cxx) if cxx else "missing"
    for k, v in env.items():
        print(f"  {k:11s}{v}")
    print("backend per device (NI_COMPILED_BACKEND="
          f"{os.environ.get('NI_COMPILED_BACKEND', '') or 'unset'})")
    devices = ["cpu"] + (["cuda"] if torch.version.cuda else [])
    for d in devices:
        for m in _modules_with_sources("cpu"):
            if d == "cuda" and m not in _modules_with_sources("cuda"):
                print(f"  {d:5s} {m:10s} TORCH: no CUDA sources for this module yet")
                continue
            which, why = backends.preview(m, d)
            print(f"  {d:5s} {m:10s} {which}: {why}")
    knobs = ", ".join(f"{k}={('on' if v else 'off') if isinstance(v, bool) else int(v)}"
                      for k, v in backends.tuning.current().items())
    print(f"tuning knobs (from NI_JIT_* variables; README: Environment variables)\n  {knobs}")
    ok, line = backends.monai.describe()
    served = [m for m in MODULES if backends.monai.serves(m)]
    others = [m for m in MODULES if m not in served]
    print("MONAI (NI_COMPILED_BACKEND=MONAI, or the fallback when ours cannot be compiled)")
    print(f"  {'found':10s}{line if ok else 'no: ' + line}")
    print(f"  {'serves':10s}{', '.join(served)} (grid_pull, grid_push, "
          f"grid_count, grid_grad) with MONAI's compiled routines")
    print(f"  {'ours':10s}{', '.join(others)}: no MONAI equivalent, our kernels serve them")
    from .compat import interpol as compat_interpol, patched
    ver = compat_interpol.version()
    print(f"torch-interpol {ver or '(not installed)'}: served by nitorch_jit in this process: "
          f"{'yes' if 'interpol' in patched() else 'no'} (compat.install(), "
          f"`python -m nitorch_jit.compat PROGRAM` or the pytest plugin serve it)")
    return 0


def _shared_root():
    """build --shared: the first root of NI_JIT_CACHE_DIR, made the only root of this process
    (a hit in another root must not skip building into it)."""
    if not os.environ.get(cache.ENV_VAR, "").strip():
        raise jit.CacheError(f"build --shared builds into the first root of {cache.ENV_VAR}; "
                             f"set it, e.g. {cache.ENV_VAR}=/shared/nitorch_jit nitorch-jit "
                             f"build --shared")
    root = cache.roots()[0]
    os.environ[cache.ENV_VAR] = str(root)
    cache.writable_root()  # that root, or CacheError saying why it cannot be built into
    return root


def _print_shared(root):
    for problem in cache.share(root):
        print(f"warning: {problem}", file=sys.stderr)
    print(f"{root} and its entries are readable by everyone and writable by you only.")
    print("Users set (the shared root is searched first and never written; the second root is "
          "theirs, for whatever is not prebuilt):")
    print(f'  export {cache.ENV_VAR}="{root}{os.pathsep}${{XDG_CACHE_HOME:-$HOME/.cache}}'
          f'/nitorch_jit"')


def cmd_build(args):
    root = _shared_root() if args.shared else None
    devices = ["cpu"]
    if args.cuda or (not args.no_cuda and torch.version.cuda and toolchain.cuda_enabled()
                     and _try(toolchain.find_cuda_home)[0]):
        devices.append("cuda")
    rc = 0
    for d in devices:
        mods = args.modules or _modules_with_sources(d)
        for m in mods:
            if m not in MODULES:
                print(f"unknown module {m!r}; known: {', '.join(MODULES)}", file=sys.stderr)
                return 2
            if d == "cuda" and m not in _modules_with_sources("cuda"):
                print(f"{m} ({d}): no CUDA sources yet, skipped")
                continue
            t = time.monotonic()
            try:
                path = backends.load_module(m, d, args.arch)
                print(f"{m} ({d}): {path} [{time.monotonic() - t:.1f} s]")
            except (toolchain.ToolchainError, jit.BuildError, jit.CacheError,
                    backends.BackendError) as e:
                print(f"{m} ({d}): FAILED: {e}", file=sys.stderr)
                rc = 1
    if root is not None:
        _print_shared(root)
    return rc


def cmd_cache(args):
    if args.action == "path":
        for r in cache.roots():
            print(r)
        return 0
    if args.action == "list":
        rows = [("entry", "module", "device", "torch", "python", "cuda", "size", "age", "matches")]
        for e in cache.entries():
            k = e.manifest["key"]
            stale = stale_reason(e)
            rows.append((e.path.name, k.get("module"), k.get("device"), k.get("torch"),
                         k.get("python", "").split("-")[-1], k.get("nvcc") or "-",
                         _fmt_size(e.size()), _fmt_age(e.age_seconds()),
                         "yes" if stale is None else f"no ({stale})"))
        if len(rows) == 1:
            print(f"no entries in {', '.join(str(r) for r in cache.roots())}")
            return 0
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        return 0
    # clear
    root, err = _try(cache.writable_root)
    removed = 0
    for e in cache.entries():
        if root is None or e.path.parent != root:
            continue  # read-only roots are never touched
        if args.stale and stale_reason(e) is None:
            continue
        cache.remove_entry(e)
        removed += 1
        print(f"removed {e.path}")
    if root is not None:
        cache.clear_leftovers(root)
    print(f"{removed} entr{'y' if removed == 1 else 'ies'} removed"
          + (" (stale only)" if args.stale else ""))
    return 0


def cmd_bench(args):
    from .bench.cli import run_bench
    modules = ("pushpull", "splinc", "resize", "regsolve") if args.module == "all" \
        else (args.module,)
    return run_bench(size=args.size, threads=args.threads, repeat=args.repeat, modules=modules)


def build_parser():
    """The command line of ``nitorch-jit``: its sub-commands and their options.

    ``run`` is listed here for ``--help``; its arguments go untouched to the program it runs
    (see :func:`main`).

    Returns
    -------
    argparse.ArgumentParser

    Examples
    --------
    >>> from nitorch_jit.cli import build_parser
    >>> args = build_parser().parse_args(["build", "--no-cuda", "pushpull"])
    >>> args.cmd, args.modules, args.no_cuda
    ('build', ['pushpull'], True)
    """
    p = argparse.ArgumentParser(prog="nitorch-jit", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="run a program (nitorch register ..., a .py file, -m MODULE) "
                               "with NITorch and MONAI served by nitorch_jit (compat)",
                   add_help=False)
    sub.add_parser("info", help="toolchain, cache, key and which backend would load, and why")
    b = sub.add_parser("build", help="prebuild compiled modules into the cache")
    b.add_argument("modules", nargs="*", help=f"modules (default: all of {', '.join(MODULES)})")
    g = b.add_mutually_exclusive_group()
    g.add_argument("--cuda", action="store_true", help="also build CUDA libraries (error if impossible)")
    g.add_argument("--no-cuda", action="store_true", help="CPU libraries only")
    b.add_argument("--arch", help="CUDA archs, as TORCH_CUDA_ARCH_LIST (e.g. '8.0;9.0+PTX', 'Hopper')")
    b.add_argument("--shared", action="store_true",
                   help=f"build into the first root of {cache.ENV_VAR}, leave it readable by "
                        f"everyone and writable by you only, and print the {cache.ENV_VAR} "
                        f"line users set")
    c = sub.add_parser("cache", help="list, clear or locate cached builds")
    c.add_argument("action", choices=["list", "clear", "path"])
    c.add_argument("--stale", action="store_true", help="clear: only entries not matching this environment")
    bench = sub.add_parser("bench", help="compile if needed, then time C vs TORCH vs grid_sample")
    bench.add_argument("--size", type=int, default=128, help="edge of the 3-D volume (default 128)")
    bench.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    bench.add_argument("--repeat", type=int, default=5)
    bench.add_argument("--module", default="pushpull",
                       choices=["pushpull", "splinc", "resize", "regsolve", "all"],
                       help="what to time (default pushpull: resampling; regsolve: regulariser "
                            "and FMG solver; 'all' compiles and times every module)")
    add_reslice_parser(sub)
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # the program's own arguments must reach it untouched
        from .compat.run import main as run
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return {"info": cmd_info, "build": cmd_build, "cache": cmd_cache, "bench": cmd_bench,
                "reslice": cmd_reslice}[args.cmd](args)
    except (jit.CacheError, backends.BackendError) as e:
        print(f"nitorch-jit: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
