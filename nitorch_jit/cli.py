"""nitorch-jit info | build | cache list/clear/path | bench | reslice"""
import argparse
import os
import shutil
import platform
import sys

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


def _kernel_and_bundle_names(module, device):
    names = backends.compiled.kernel_names(module, device)
    return names + [b for b in backends.compiled.bundle_names(module, device) if b not in names]


class _CurrentKernels:
    """The torch-free kernel entries this environment would build today (every
    ``compiled.kernel_names`` specialisation and ``bundle_names`` bundle of every module):
    their entry names and keys, and
    the devices whose keys could be computed (a device without its toolkit cannot tell)."""

    def __init__(self):
        self.names, self.keys, self.devices = set(), {}, set()
        # CUDA kernels are built for the GPUs of whoever called: every arch list the cache
        # holds is current (a shared cache serves several GPUs); only sources, flags, compiler
        # or toolkit make one stale
        cuda_archs = {tuple(e.manifest["key"].get("archs") or ()) for e in cache.entries()
                      if e.manifest["key"].get("kind") == "torch-free"
                      and e.manifest["key"].get("device") == "cuda"}
        for device, arch_lists in (("cpu", [None]), ("cuda", sorted(cuda_archs))):
            try:
                keys = {(n, archs): jit.compute_key(
                            backends.compiled.kernel_spec(n, device, list(archs or ()) or None))
                        for archs in arch_lists
                        for m in MODULES for n in _kernel_and_bundle_names(m, device)}
            except backends.compiled.BUILD_ERRORS:
                continue
            if not keys:
                continue
            self.devices.add(device)
            self.keys.update({(n, device): k for (n, _), k in keys.items()})
            self.names.update(jit.entry_name(k) for k in keys.values())

    def reason(self, entry):
        """None if a current key reaches torch-free `entry`, else why not."""
        if not cache.unreachable([entry], self.names, self.devices):
            return None
        old = entry.manifest["key"]
        new = self.keys.get((old.get("module"), old.get("device")))
        if new is None:
            return "no such kernel now"
        return ", ".join(sorted(k for k in set(new) | set(old) if old.get(k) != new.get(k)))


def stale_reason(entry, kernels=None):
    """None if `entry` matches this environment and sources, else the fields that differ.

    A torch-free kernel entry is judged by `kernels` (a ``_CurrentKernels``): current when a
    key of today reaches it, whatever torch is loaded."""
    old = entry.manifest["key"]
    if old.get("kind") == "torch-free":
        return (kernels or _CurrentKernels()).reason(entry)
    archs = ";".join(old.get("archs") or []) or None
    # a binding is judged against a build of its own kind (stable ABI or classic headers),
    # whichever kind NI_JIT_BINDING asks for today
    abi = "stable" if old.get("kind") == "stable-abi" else "classic"
    new, _ = _try(lambda: jit.compute_key(backends.module_spec(old["module"], old["device"],
                                                               archs, abi)))
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


def _compiler_lines():
    """What ``info`` says of the C++ compiler: its kind and version, how the CPU kernels run
    threads (OpenMP or torch's own parallel_for, and why), the fast paths, the C++ runtime."""
    cc = toolchain.compiler()
    abi, _ = _try(backends.compiled.binding_abi)
    threads, err = _try(lambda: backends.compiled.threads("pushpull", "cpu", abi=abi))
    return [f"compiler: {cc.describe()}, building for {cc.target} {cc.machine}",
            f"threads: {threads or err}",
            f"fast paths: {toolchain.fast_paths(cc)}",
            _runtime_note()]


def _devices():
    """The device types ``info`` previews: cpu, and those this torch has (cuda, mps, xpu)."""
    devices = ["cpu"] + (["cuda"] if torch.version.cuda else [])
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        devices.append("xpu")
    return devices


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
            for line in _compiler_lines():
                print(f"  {'':10s}{line}")
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
    abi, err = _try(backends.compiled.binding_abi)
    target = ".".join(map(str, backends.compiled.STABLE_ABI_FROM))
    print(f"  {'bindings':11s}" + (
        f"CPU: torch's stable ABI {target} (seconds to build), keyed on this torch (an "
        f"upgrade rebuilds them, and only them)" if abi == "stable" else
        f"CPU: classic headers, keyed on this torch (an upgrade rebuilds them)" if abi else
        f"MISCONFIGURED: {err}")
        + (("; CUDA: the same" if abi == "stable" else
            "; CUDA: classic headers, keyed on this torch") if torch.version.cuda else ""))
    print("backend per device (NI_COMPILED_BACKEND="
          f"{os.environ.get('NI_COMPILED_BACKEND', '') or 'unset'})")
    for d in _devices():
        for m in _modules_with_sources("cpu"):
            if d == "cuda" and m not in _modules_with_sources("cuda"):
                print(f"  {d:5s} {m:10s} TORCH: no CUDA sources for this module yet")
                continue
            which, why = backends.preview(m, d)
            print(f"  {d:5s} {m:10s} {which}: {why}")
            if which == "C":
                line = _kernels_line(m, d)
                if line:
                    print(f"  {'':5s} {'':10s} {line}")
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


def _kernels_line(module, device):
    """What a call of `module` on `device` compiles besides its binding: 'kernels: 3 of 20
    cached; a call compiles the one it needs, about 2 s'. None for a module without kernels."""
    names = backends.compiled.kernel_names(module, device)
    if not names:
        return None
    spec = backends.compiled.kernel_spec
    # a specialisation is cached when its own library or its bundle (a prebuild's) is
    keys, err = _try(lambda: [(jit.compute_key(spec(n, device)),
                               jit.compute_key(spec(backends.compiled.bundle_of(n), device)))
                              for n in names])
    if keys is None:
        return f"kernels: cannot tell ({err})"
    missing = [k for k, b in keys if jit.find_cached(k) is None and jit.find_cached(b) is None]
    # CUDA kernels are built for an arch list (the visible GPU's, else torch's whole list)
    archs = keys[0][0].get("archs")
    what = f"kernels for sm {';'.join(archs)}" if archs else "kernels"
    if not missing:
        return f"{what}: all {len(keys)} specialisations cached"
    seconds, source = jit.expected_seconds(missing[0])
    how = "" if source == "typical" else f" ({source})"
    return (f"{what}: {len(keys) - len(missing)} of {len(keys)} specialisations cached; a call "
            f"compiles the one it needs, about {max(1, round(seconds))} s{how}")


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


def _check_cuda():
    """Raise if this CUDA toolkit cannot build for this torch (as loading a module would)."""
    home, _ = toolchain.find_cuda_home()
    toolchain.check_cuda_versions(toolchain.nvcc_version(home), torch.version.cuda)


def _build_plan(modules, devices, archs):
    """[(module, device, specs)]: each module's library first, then its kernel libraries;
    and the number of modules that cannot even be described (said on stderr)."""
    plan, failed = [], 0
    for d in devices:
        cuda_error = _try(_check_cuda)[1] if d == "cuda" else None
        for m in modules or _modules_with_sources(d):
            if d == "cuda" and m not in _modules_with_sources("cuda"):
                print(f"{m} ({d}): no CUDA sources yet, skipped")
                continue
            specs, err = (None, cuda_error) if cuda_error else _try(lambda: [
                backends.module_spec(m, d, archs)] + [
                backends.compiled.kernel_spec(n, d)
                for n in backends.compiled.bundle_names(m, d)])
            if specs is None:
                print(f"{m} ({d}): FAILED: {err}", file=sys.stderr)
                failed += 1
                continue
            plan.append((m, d, specs))
    return plan, failed


def cmd_build(args):
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        print(f"unknown module {unknown[0]!r}; known: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    root = _shared_root() if args.shared else None
    devices = ["cpu"]
    if args.cuda or (not args.no_cuda and torch.version.cuda and toolchain.cuda_enabled()
                     and _try(toolchain.find_cuda_home)[0]):
        devices.append("cuda")
    plan, failed = _build_plan(args.modules, devices, args.arch)
    # one pool for every library of every module: its progress line, then one line per module
    outcomes = iter(jit.load_all([spec for _, _, specs in plan for spec in specs]))
    for m, d, specs in plan:
        got = [next(outcomes) for _ in specs]
        library, kernels = got[0], got[1:]
        ok = sum(o.error is None for o in kernels)
        line = f"{m} ({d}): " + (str(library.path) if library.error is None else "FAILED")
        if kernels:
            line += f" + {ok} of {len(kernels)} kernel libraries"
        print(line)
        for o in got:
            if o.error is not None:
                print(f"{o.spec.name} ({d}): FAILED: {o.error}", file=sys.stderr)
        failed += any(o.error is not None for o in got)
    if root is not None:
        _print_shared(root)
    return 1 if failed else 0


def _module_of(entry):
    """The module an entry belongs to: its own, or for a kernel library '<module>.<op>.<dtype>'
    the part before the first dot."""
    return str(entry.manifest["key"].get("module", "?")).split(".")[0]


def _row(entry, reason, name=None):
    k = entry.manifest["key"]
    torch_free = k.get("kind") == "torch-free"
    torch_ = "-" if torch_free else k.get("torch")
    return (name or entry.path.name, k.get("device"), torch_,
            k["python"].split("-")[-1] if "python" in k else "-", k.get("nvcc") or "-",
            _fmt_size(entry.size()), _fmt_age(entry.age_seconds()),
            "yes" if reason is None else f"no ({reason})")


def _kernel_rows(entries, reasons):
    """One row per device for a module's kernel libraries: how many, their size, the newest,
    and how many no current key reaches."""
    rows = []
    for device in sorted({e.manifest["key"].get("device") for e in entries}):
        mine = [e for e in entries if e.manifest["key"].get("device") == device]
        stale = [reasons[e.path] for e in mine if reasons[e.path] is not None]
        why = sorted(set(stale))
        rows.append((f"{len(mine)} kernel librar{'y' if len(mine) == 1 else 'ies'}", device,
                     "-", "-", "-", _fmt_size(sum(e.size() for e in mine)),
                     _fmt_age(min(e.age_seconds() for e in mine)),
                     "yes" if not stale else f"no: {len(stale)} of {len(mine)} "
                                             f"({'; '.join(why[:3])})"))
    return rows


def cmd_cache_list(args):
    """`cache list`: the entries grouped by module, each module's library (binding) on its own
    line and its torch-free kernel libraries counted (one line each with --verbose)."""
    entries = cache.entries()
    if not entries:
        print(f"no entries in {', '.join(str(r) for r in cache.roots())}")
        return 0
    kernels = _CurrentKernels()
    reasons = {e.path: stale_reason(e, kernels) for e in entries}
    header = ("entry", "device", "torch", "python", "cuda", "size", "age", "matches")
    groups = {}
    for e in entries:
        groups.setdefault(_module_of(e), []).append(e)
    order = [m for m in MODULES if m in groups] + sorted(set(groups) - set(MODULES))
    table = []  # (module or None, row): a module's header line, then its rows
    for m in order:
        libs = [e for e in groups[m] if e.manifest["key"].get("kind") != "torch-free"]
        kerns = [e for e in groups[m] if e.manifest["key"].get("kind") == "torch-free"]
        table.append((m, f"{m}: {len(groups[m])} entr{'y' if len(groups[m]) == 1 else 'ies'}, "
                         f"{_fmt_size(sum(e.size() for e in groups[m]))}"))
        table += [(None, _row(e, reasons[e.path])) for e in libs]
        if args.verbose:
            table += [(None, _row(e, reasons[e.path], "  " + e.path.name)) for e in
                      sorted(kerns, key=lambda e: e.path.name)]
        elif kerns:
            table += [(None, row) for row in _kernel_rows(kerns, reasons)]
    rows = [header] + [row for head, row in table if head is None]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    fmt = lambda r: "  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    roots = sorted({str(e.path.parent) for e in entries})
    print(f"{len(entries)} entries in {', '.join(roots)}, "
          f"{_fmt_size(sum(e.size() for e in entries))}")
    print(fmt(header))
    for head, row in table:
        print(row if head is not None else fmt(row))
    if not args.verbose and any(e.manifest["key"].get("kind") == "torch-free" for e in entries):
        print("(kernel libraries are keyed on compiler, flags and sources, not on torch; "
              "--verbose lists each)")
    return 0


def cmd_cache(args):
    if args.action == "path":
        for r in cache.roots():
            print(r)
        return 0
    if args.action == "list":
        return cmd_cache_list(args)
    # clear
    root, err = _try(cache.writable_root)
    entries = [e for e in cache.entries() if root is not None and e.path.parent == root]
    if args.stale:  # other torch versions' libraries, and kernel libraries no key reaches
        kernels = _CurrentKernels()
        unreachable = {e.path for e in cache.unreachable(entries, kernels.names,
                                                         kernels.devices)}
        entries = [e for e in entries if e.path in unreachable or (
            e.manifest["key"].get("kind") != "torch-free" and stale_reason(e) is not None)]
    removed = 0
    for e in entries:  # read-only roots are never touched
        cache.remove_entry(e)
        removed += 1
        if args.verbose or e.manifest["key"].get("kind") != "torch-free":
            print(f"removed {e.path}")
    if root is not None:
        cache.clear_leftovers(root)
    kernels_removed = sum(e.manifest["key"].get("kind") == "torch-free" for e in entries)
    print(f"{removed} entr{'y' if removed == 1 else 'ies'} removed"
          + (" (stale only)" if args.stale else "")
          + (f", {kernels_removed} of them kernel libraries" if kernels_removed else ""))
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
        The sub-command parsed lands in ``cmd``, with its options beside it.

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
    b = sub.add_parser("build", help="prebuild every library of the modules into the cache "
                                      "(each binding and all its kernel libraries, as one "
                                      "pool of MAX_JOBS or one per CPU compilers)")
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
    c.add_argument("--stale", action="store_true",
                   help="clear: only the entries no current key reaches (libraries of another "
                        "torch, Python or compiler; kernel libraries of older sources)")
    c.add_argument("--verbose", "-v", action="store_true",
                   help="list: one line per kernel library; clear: name each one removed")
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
