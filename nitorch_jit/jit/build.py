"""Load a library from the cache, building it first if needed.

One build per entry at a time across processes where the filesystem can lock (an OS-level file
lock, released by the kernel if the holder dies; without one, builds may run twice but stay
correct), one load per entry and process (a thread lock per entry, so that different entries
build side by side: a prebuild's pool, two threads of a program), builds in a private folder
published by an atomic rename, and one progress line on stderr so the first call never looks
hung.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import cache, key as keymod, progress, toolchain

_LOCK = threading.Lock()  # guards _ENTRY_LOCKS
_ENTRY_LOCKS = {}  # entry name -> its thread lock: one load per entry and process
_TORCH_LOAD_LOCK = threading.Lock()  # torch's list of loaded libraries is a plain set
_LOADED = {}  # entry name -> library path loaded in this process
_HANDLES = {}  # path -> ctypes handle of a torch-free library (kept open)

# a library built by torch.utils.cpp_extension: a classic binding (measured here 10-16 s on 2
# cores, CPU or CUDA, which has no device code), or a whole CUDA library (minutes)
DEFAULT_SECONDS = {"cpu": 15, "cuda": 180}
DEFAULT_TORCH_FREE_SECONDS = {"cpu": 5, "cuda": 15}
# a library with torch headers built by one compiler call (a binding on the stable ABI): one
# translation unit, no worker, no ninja (measured here at -O0, linked by gold: 2.1 s alone,
# 2-4 s beside a kernel's build on 2 cores; a CUDA binding by nvcc, 2-3.5 s)
DEFAULT_DIRECT_SECONDS = {"cpu": 3, "cuda": 4}


class BuildError(RuntimeError):
    """Compiling or loading a library failed; the message names the log."""


@dataclass
class Seat:
    """What a build gets from a pool of builds (``load_all``) that runs it beside others.

    Attributes
    ----------
    jobs : int
        Compilers it may run at once (ninja's MAX_JOBS in the worker).
    say : callable
        Prints a line without breaking the pool's progress line.
    stop : threading.Event
        Set when the pool is stopped (Ctrl-C): the compile is killed.
    """
    jobs: int
    say: object
    stop: object


def _say(msg):
    progress.say(msg)  # whole, beside other builds' lines (progress.py)


def verbose():
    """Whether NI_JIT_VERBOSE asks for the compiler's output on stderr.

    Returns
    -------
    bool
        False when unset, empty, 0, false or no.

    Examples
    --------
    >>> from nitorch_jit.jit import build
    >>> build.verbose() in (True, False)
    True
    """
    return os.environ.get("NI_JIT_VERBOSE", "0").strip().lower() not in ("", "0", "false", "no")


def _same_module(key):
    """Cached entries of the module and device of `key` (any environment)."""
    return [e for e in cache.entries()
            if e.manifest["key"].get("module") == key["module"]
            and e.manifest["key"].get("device") == key["device"]]


def _newest(entries):
    return max(entries, key=lambda e: e.manifest.get("built_at_epoch", 0))


def _why(name, key):
    """Why a build is needed, in a few words, from what the cache holds."""
    same = _same_module(key)
    for e in same:
        if e.path.name == name:
            return f"the cached library failed verification: {e.verify(key)}"
    if not same:
        return "no cached build"
    old = _newest(same).manifest["key"]
    if bool(old.get("stable_abi")) != bool(key.get("stable_abi")):  # NI_JIT_BINDING, or an old torch
        api = {True: "stable ABI", False: "classic headers"}
        return (f"the binding's torch API changed ({api[bool(old.get('stable_abi'))]} -> "
                f"{api[bool(key.get('stable_abi'))]}, torch {key.get('torch')})")
    if old.get("torch") != key.get("torch") or old.get("torch_git") != key.get("torch_git"):
        return f"torch changed ({old.get('torch')} -> {key.get('torch')})"
    changed = sorted(k for k in key if old.get(k) != key[k])
    if changed == ["sources"]:
        return "the sources changed"
    return "the environment changed (" + ", ".join(changed) + ")"


def explain(key):
    """What loading the library of `key` would do, in one line, without building anything.

    Parameters
    ----------
    key : dict
        From ``compute_key(spec)``.

    Returns
    -------
    str
        ``"cached build PATH"``, or ``"compiles on first use (WHY)"``.

    Examples
    --------
    >>> from nitorch_jit import jit
    >>> key = {"module": "none", "device": "cpu", "torch": "0", "torch_git": "0",
    ...        "python": "cpython-3.11"}
    >>> jit.explain(key)  # doctest: +ELLIPSIS
    'compiles on first use (...)'
    """
    cached = find_cached(key)
    if cached is not None:
        return f"cached build {cached.parent}"
    return f"compiles on first use ({_why(keymod.entry_name(key), key)})"


def find_cached(key):
    """The library of the first verified cached entry of `key`, or None; loads nothing.

    Parameters
    ----------
    key : dict
        As for ``explain``.

    Returns
    -------
    pathlib.Path or None

    Examples
    --------
    >>> from nitorch_jit import jit
    >>> jit.find_cached({"module": "none", "device": "cpu", "kind": "torch-free"}) is None
    True
    """
    for e in cache.find(keymod.entry_name(key)):
        if e.verify(key) is None:
            return e.library
    return None


def expected_seconds(key, entries=None, direct=False):
    """How long building the library of `key` should take, and where the figure comes from:
    the newest cached build of this module and device (in any environment); for a torch-free
    library, else the median of this machine's torch-free builds; else a typical figure.

    Parameters
    ----------
    key : dict
        From ``compute_key(spec)``.
    entries : list of cache.Entry, optional
        The cache's entries, when the caller has read them already (default: read them).
    direct : bool
        The library is built by one compiler call (``ModuleSpec.direct``): its typical figure
        is that of one translation unit.

    Returns
    -------
    seconds : float
    source : {'its last build', 'like its others here', 'typical'}

    Examples
    --------
    >>> from nitorch_jit.jit import build
    >>> build.expected_seconds({"module": "none", "device": "cpu"}, entries=[])
    (15, 'typical')
    """
    entries = cache.entries() if entries is None else entries
    timed = [e for e in entries if e.manifest.get("build_seconds")
             and e.manifest["key"].get("kind") == key.get("kind")
             and e.manifest["key"].get("module") == key.get("module")
             and e.manifest["key"].get("device") == key.get("device")
             and bool(e.manifest["key"].get("archs")) == bool(key.get("archs"))]
    if timed:
        return _newest(timed).manifest["build_seconds"], "its last build"
    if key.get("kind") == "torch-free":
        times = sorted(e.manifest["build_seconds"] for e in entries
                       if e.manifest["key"].get("kind") == "torch-free"
                       and e.manifest["key"].get("device") == key.get("device")
                       and e.manifest.get("build_seconds"))
        if times:
            return times[len(times) // 2], "like its others here"
        return DEFAULT_TORCH_FREE_SECONDS.get(key.get("device"), 10), "typical"
    # a CUDA library without archs holds no device code (a binding): a host compile
    device = "cpu" if key.get("device") == "cuda" and not key.get("archs") else key.get("device")
    if direct:
        return DEFAULT_DIRECT_SECONDS.get(device, 30), "typical"
    return DEFAULT_SECONDS.get(device, 60), "typical"


def _estimate(key, direct=False):
    """The estimate of the progress line: 'about 12 s (its last build)'."""
    seconds, source = expected_seconds(key, direct=direct)
    return f"about {max(1, round(seconds))} s" + ("" if source == "typical" else f" ({source})")


def _first_error(log_path):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for pattern in (r"\berror\b[:]", r"\berror\b", r"FAILED", r"Error"):
        for line in lines:
            if re.search(pattern, line, re.IGNORECASE if pattern != "Error" else 0):
                return line.strip()[:500]
    return (lines[-1].strip() if lines else "(empty log)")[:500]


class _NoLock:
    """Stands in for a lock the filesystem cannot give: publishing stays correct (one atomic
    rename of a complete folder); only duplicate work is no longer avoided."""

    def release(self):
        pass


_LOCKLESS = set()  # lock folders said to refuse locks (once each: a pool builds many entries)


def _without_lock(lock_path, what, err, say=_say):
    if lock_path.parent in _LOCKLESS:
        return _NoLock()
    _LOCKLESS.add(lock_path.parent)
    say(f"note: cannot lock {lock_path} ({type(err).__name__}: {err}); the filesystem may not "
         f"support locks (NFS without a lock daemon, Lustre without the flock mount option). "
         f"Going on without it: other processes may build {what} at the same time; each one "
         f"publishes a complete build and one of them is kept")
    return _NoLock()


# a lock the filesystem refuses: ENOLCK (no lock daemon), ENOSYS / EOPNOTSUPP (no flock),
# filelock's NotImplementedError (Lustre), EACCES/EROFS/EPERM (a lock folder we cannot write)
_NO_LOCK = (OSError, NotImplementedError)


def _acquire(locks, name, what, say=_say):
    """The build lock of entry `name` under `locks`, or a stand-in when locking fails."""
    import filelock
    lock_path = locks / f"{name}.lock"
    limit = float(os.environ.get("NI_JIT_LOCK_TIMEOUT", "3600"))
    start = time.monotonic()
    try:
        locks.mkdir(mode=0o700, exist_ok=True)
        lock = filelock.FileLock(str(lock_path))
        lock.acquire(timeout=1)
        return lock
    except filelock.Timeout:  # a TimeoutError, so an OSError: first
        pass
    except _NO_LOCK as err:
        return _without_lock(lock_path, what, err, say)
    say(f"waiting for another process that is building {what} (lock {lock_path}); "
         f"it is released as soon as that process ends")
    while True:
        waited = time.monotonic() - start
        if waited > limit:
            raise BuildError(
                f"gave up after {waited:.0f} s waiting for the build lock {lock_path} "
                f"(NI_JIT_LOCK_TIMEOUT={limit:.0f}); another process is still building {what}")
        try:
            lock.acquire(timeout=min(60, max(1, limit - waited)))
            say(f"the other build finished after {time.monotonic() - start:.0f} s")
            return lock
        except filelock.Timeout:
            say(f"still waiting for the build lock ({time.monotonic() - start:.0f} s)")
        except _NO_LOCK as err:
            return _without_lock(lock_path, what, err, say)


def _release(lock):
    try:
        lock.release()
    except _NO_LOCK:  # the lock is gone with its filesystem's support: nothing to undo
        pass


def _load_library(path, torch_free=False):
    if torch_free:  # a kernel library: its caller binds its entries (handle(path))
        _HANDLES[str(path)] = ctypes.CDLL(str(path))
        return
    import torch
    with _TORCH_LOAD_LOCK:
        torch.ops.load_library(str(path))


def handle(path):
    """The ctypes handle of the torch-free library at `path`, loaded by ``load``."""
    return _HANDLES[str(path)]


def _load_checked(path, torch_free=False):
    """Load a verified library; a stale NFS handle (another host replaced the file) gets one
    more try. Raises BuildError with the cause when it does not load."""
    for attempt in (0, 1):
        try:
            _load_library(path, torch_free)
            return
        except OSError as err:
            if attempt == 0 and "stale file handle" in str(err).lower():
                time.sleep(0.5)
                continue
            raise BuildError(_load_failure(path, err)) from err


def _load_failure(path, err):
    """Why an intact library does not load, and what to do: rebuilding the same sources in the
    same environment would fail the same way, so it is not rebuilt."""
    text = str(err)
    mount = cache.noexec_mount(path)
    if mount is not None or "failed to map segment" in text:
        where = f"{mount}, mounted noexec" if mount else "a filesystem that may forbid it (noexec)"
        hint = (f"It lies on {where}: programs cannot be run from there. Set "
                f"{cache.ENV_VAR} to a folder on another filesystem.")
    elif "GLIBCXX_" in text or "CXXABI_" in text:
        runtime = toolchain.compiler_cxx_runtime(toolchain.cxx_command())
        hint = ("It needs a newer C++ runtime than the one this process loaded: point CXX at a "
                "compiler of the loaded runtime's version"
                + (f", or start Python with LD_PRELOAD={runtime[0]}." if runtime else "."))
    elif "GLIBC_" in text:
        hint = ("It was built on a system with a newer C library: give each system image its "
                f"own cache root ({cache.ENV_VAR}).")
    else:
        hint = (f"If it was built elsewhere, remove {Path(path).parent} "
                f"('nitorch-jit cache clear') and it is built again on next use.")
    return (f"the library {path} is intact (its sha256 matches) but does not load: {text}. "
            f"{hint} It is not rebuilt: the same sources in the same environment would fail "
            f"the same way.")


def _stable_abi_flags(version):
    """The compiler and linker flags of a binding on torch's stable ABI `version` ("2.13"),
    from the torch loaded here, as torch.utils.cpp_extension would name them. The target keeps
    the binding to what that version's ABI has; the key's torch fields cover the headers."""
    import torch
    from torch.utils import cpp_extension
    major, minor = (int(v) for v in version.split("."))
    cflags = [f"-DTORCH_TARGET_VERSION=0x{major:02x}{minor:02x}000000000000",
              f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    cflags += [f"-isystem{d}" for d in cpp_extension.include_paths()]
    return cflags, [f"-L{d}" for d in cpp_extension.library_paths()] + ["-ltorch_cpu", "-lc10"]


def _torch_link(version):
    """What a CPU binding on torch's stable ABI `version` compiles and links with, for
    ``toolchain.shared_library_command``: (defines, torch's include folders, its library
    folders, its libraries), from the torch loaded here, as cpp_extension names them."""
    import torch
    from torch.utils import cpp_extension
    major, minor = (int(v) for v in version.split("."))
    defines = [f"-DTORCH_TARGET_VERSION=0x{major:02x}{minor:02x}000000000000"]
    if not toolchain.compiler().msvc:  # libstdc++'s dual ABI: a GNU-driver define only
        defines.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    return (defines, list(cpp_extension.include_paths()), list(cpp_extension.library_paths()),
            ["torch_cpu", "c10"])


def library_file(spec, folder):
    """The path of the library of `spec` in `folder`: its name and this platform's suffix
    (``toolchain.library_suffix``: '.so', '.pyd' on Windows, as cpp_extension names it).

    Parameters
    ----------
    spec : ModuleSpec
    folder : pathlib.Path

    Returns
    -------
    pathlib.Path
        In `folder`, which need not exist.

    Examples
    --------
    >>> from pathlib import Path
    >>> from nitorch_jit import jit
    >>> from nitorch_jit.jit import build
    >>> build.library_file(jit.ModuleSpec("a", "cpu", []), Path("/c")).stem
    'nitorch_jit_a_cpu'
    """
    return Path(folder) / f"{spec.library_name}{toolchain.library_suffix()}"


def _compiler_hint():
    """What to do when the compiler fails on our sources: name it, and what to install."""
    try:
        cc = toolchain.compiler().describe()
    except toolchain.ToolchainError:
        cc = "the C++ compiler"
    return (f"The compiler, {cc}, could not build it: install {toolchain.install_hint()}, "
            f"or point CXX at another compiler.")


def _compile_command(spec, tmp):
    """The one compiler call that builds a library of a `direct` spec (no Python started): its
    flags say everything (standard, defines, include folders, libraries). A CPU library is
    written by ``toolchain.shared_library_command`` in the flags of the compiler's kind (gcc,
    clang, Apple clang, MSVC). A CUDA library is
    built by the toolkit's nvcc, with the host compiler of the key, its device code for
    spec.archs, and the CUDA runtime shared (the one torch loaded, else the toolkit's);
    Linux only (nvcc's Windows host flags are not written here)."""
    if spec.device != "cuda":
        cc = toolchain.compiler()
        defines, system, lib_dirs, libs = _torch_link(spec.stable_abi) if spec.stable_abi \
            else ([], [], [], [])
        return toolchain.shared_library_command(
            cc, spec.sources, str(library_file(spec, tmp)), list(spec.cflags) + defines,
            system_include_dirs=system, include_dirs=spec.include_dirs, library_dirs=lib_dirs,
            libraries=libs, rpaths=toolchain.torch_rpaths(cc, lib_dirs),
            ldflags=spec.ldflags, object_dir=str(tmp))
    home, _ = toolchain.find_cuda_home()
    runtime = toolchain.cudart_dir(home)
    cmd = [str(Path(home) / "bin" / "nvcc"), "-shared", "-ccbin", toolchain.cxx_command(),
           "-Xcompiler", "-fPIC,-fvisibility=hidden"]
    cmd += list(spec.cflags) + toolchain.arch_flags(spec.archs)
    ld = ["-cudart", "shared"] + ([f"-L{runtime}", f"-Xlinker=-rpath,{runtime}"]
                                  if runtime else [])
    if spec.stable_abi:
        flags, ld_torch = _stable_abi_flags(spec.stable_abi)
        # nvcc takes a system include folder as a separate argument
        cmd += [a for f in flags
                for a in (["-isystem", f[len("-isystem"):]] if f.startswith("-isystem") else [f])]
        ld += ld_torch
    cmd += [f"-I{d}" for d in spec.include_dirs] + [str(s) for s in spec.sources]
    return cmd + ["-o", str(library_file(spec, tmp))] + list(spec.ldflags) + ld


def _run_compiler(spec, tmp, log_path, seat=None):
    """Run the worker (or, for a torch-free library, the compiler), streaming its output into
    the log; show elapsed time on a terminal (unless a pool's `seat` shows its own progress)."""
    env_extra = {"CXX": toolchain.cxx_command()}  # the compiler the key names
    env_extra.update(toolchain.msvc_env())  # cl's PATH, INCLUDE, LIB outside a developer prompt
    if seat is not None:  # the pool's share: its compilers, and no more
        env_extra["MAX_JOBS"] = str(seat.jobs)
    with_cuda = spec.device == "cuda"
    if with_cuda:
        home, _ = toolchain.find_cuda_home()
        env_extra["CUDA_HOME"] = home
        if spec.archs:  # a CUDA binding has none: it holds no device code
            env_extra["TORCH_CUDA_ARCH_LIST"] = ";".join(spec.archs)
    request = {
        "name": spec.library_name, "sources": [str(s) for s in spec.sources],
        # cpp_extension hands them to the compiler as they are: cl's dialect on Windows
        "cflags": toolchain.translate_flags(spec.cflags, toolchain.compiler()),
        "cuda_cflags": spec.cuda_cflags, "ldflags": spec.ldflags,
        "include_dirs": [str(d) for d in spec.include_dirs], "build_dir": str(tmp),
        "with_cuda": with_cuda, "env": env_extra,
    }
    req_path = tmp / "request.json"
    req_path.write_text(json.dumps(request, indent=2))
    worker = Path(__file__).with_name("_worker.py")
    if spec.direct:
        argv = _compile_command(spec, tmp)
    else:
        argv = [sys.executable, str(worker), str(req_path), str(os.getpid())]
    shown = verbose()  # the compiler output, on stderr too
    tty = sys.stderr.isatty() and not shown and seat is None
    with open(log_path, "w") as log:
        # its own session (process group): the whole compile (worker, ninja, compilers) can
        # be stopped as one, by us on an exception or by the worker when we die (_worker.py)
        if shown or spec.direct:
            log.write(" ".join(argv) + "\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=dict(os.environ, **env_extra),
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if shown:
                    progress.write(line)
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        elapsed = progress.Elapsed() if tty else None  # one status line for all builds
        try:
            while proc.poll() is None:
                if elapsed is not None:
                    elapsed.tick()
                if seat is not None and seat.stop.is_set():
                    raise BuildError(f"stopped compiling {spec.what}: the build was stopped")
                try:
                    proc.wait(timeout=0.5 if seat is not None else 1)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:  # Ctrl-C (the worker's session does not get the terminal's)
            _stop_group(proc)
            raise
        finally:
            if elapsed is not None:
                elapsed.close()
        t.join()
    return proc.returncode


def _stop_group(proc):
    """Kill the worker's process group (worker, ninja, compilers) and reap the worker."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()
    proc.wait()


def _entry_lock(name):
    with _LOCK:
        return _ENTRY_LOCKS.setdefault(name, threading.RLock())


def load(spec, seat=None, build=True):
    """Make sure the library of `spec` is loaded in this process; return its path.

    Loads of different entries may run at once (in threads); one entry is loaded once per
    process, and built once per cache root where the filesystem can lock.

    Parameters
    ----------
    spec : ModuleSpec
    seat : Seat, optional
        Given by a pool of builds (``load_all``): the build runs quietly (the pool shows the
        progress), with the pool's share of compilers, and stops when the pool stops.
    build : bool
        False: load a cached build only, and return None where there is none.

    Returns
    -------
    pathlib.Path or None

    Raises ToolchainError (a tool is missing), CacheError (no usable root) or BuildError.

    Examples
    --------
    >>> from nitorch_jit import jit
    >>> spec = jit.ModuleSpec("none", "cpu", [], torch_free=True)
    >>> jit.load(spec, build=False) is None   # nothing cached, nothing built
    True
    """
    key = keymod.compute_key(spec)
    name = keymod.entry_name(key)
    with _entry_lock(name):
        if name in _LOADED:
            return _LOADED[name]
        path = _load_cached(name, key, spec.torch_free)
        if path is None:
            if not build:
                return None
            path = _build(spec, key, name, seat)
        _LOADED[name] = path
        return path


def _load_cached(name, key, torch_free=False):
    """Load the first verified entry `name`; None when there is none. A verified library that
    does not load raises BuildError with its cause (unless another copy loads)."""
    failure = None
    for entry in cache.find(name):
        if entry.verify(key) is None:
            try:
                _load_checked(entry.library, torch_free)
            except BuildError as err:
                failure = failure or err
                continue
            return entry.library
    if failure is not None:
        raise failure
    return None


def _build(spec, key, name, seat=None):
    root = cache.writable_root()
    if not spec.direct:  # the worker's torch.utils.cpp_extension runs ninja
        toolchain.find_ninja()
    what = spec.what
    lock = _acquire(root / ".locks", name, what, _say if seat is None else seat.say)
    try:
        path = _load_cached(name, key, spec.torch_free)  # built by another while we waited
        if path is not None:
            return path
        archs = f" for sm {', '.join(spec.archs)}" if spec.archs else ""
        if seat is None:  # a pool says what it builds in its own progress line
            _say(f"compiling {what}{archs}, {_estimate(key, spec.direct)}, once: "
                 f"{_why(name, key)}; into {root / name}")
        mismatch = toolchain.runtime_mismatch(toolchain.cxx_command())
        if mismatch and seat is None:  # a pool warns once, before it starts
            _say(f"warning: {mismatch}; the library may fail to load or crash. Point CXX at a "
                 f"compiler of the loaded runtime's version, or start Python with "
                 f"LD_PRELOAD={toolchain.compiler_cxx_runtime(toolchain.cxx_command())[0]}")
        tmp = cache.private_folder(root, name)
        log_path = tmp / "build.log"
        start = time.monotonic()
        try:
            rc = _run_compiler(spec, tmp, log_path, seat)
        except BaseException:
            cache.keep_failed(tmp, name)
            raise
        seconds = time.monotonic() - start
        library = library_file(spec, tmp)
        if rc != 0 or not library.exists():
            log = cache.keep_failed(tmp, name)
            raise BuildError(
                f"compiling {what} failed: {_first_error(log)}\n"
                f"Full log: {log}\n(NI_JIT_VERBOSE=1 shows the compiler's output as it runs; "
                f"'nitorch-jit info' checks the toolchain.) {_compiler_hint()}")
        cache.write_manifest(tmp, key, library, seconds)
        # the published entry, a verified one published meanwhile, or our own private build
        folder = cache.publish(tmp, root / name, key)
        if not (folder / library.name).exists():  # another process repairing a corrupt entry
            path = _load_cached(name, key, spec.torch_free)  # replaced ours: load its build
            if path is not None:
                return path
        _load_checked(folder / library.name, spec.torch_free)
        if folder != root / name or seat is None:
            (_say if seat is None else seat.say)(
                f"built {what}{archs} in {seconds:.1f} s"
                + ("" if folder == root / name else
                   f" (loaded from {folder}: the entry could not be published)"))
        return folder / library.name
    finally:
        _release(lock)
