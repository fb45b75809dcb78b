"""Load a library from the cache, building it first if needed.

One build per entry at a time across processes (an OS-level file lock, released by the kernel
if the holder dies), one load per process (a thread lock), builds in a private folder published
by an atomic rename, and one progress line on stderr so the first call never looks hung.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import cache, key as keymod, toolchain

_LOCK = threading.RLock()
_LOADED = {}  # entry name -> library path loaded in this process

DEFAULT_SECONDS = {"cpu": 40, "cuda": 180}


class BuildError(RuntimeError):
    """Compiling or loading a library failed; the message names the log."""


def _say(msg):
    print(f"nitorch_jit: {msg}", file=sys.stderr, flush=True)


def _verbose():
    return os.environ.get("NI_JIT_VERBOSE", "0").strip().lower() not in ("", "0", "false", "no")


def _why(name, key):
    """Why a build is needed, in a few words, from what the cache holds."""
    same = [e for e in cache.entries()
            if e.manifest["key"].get("module") == key["module"]
            and e.manifest["key"].get("device") == key["device"]]
    for e in same:
        if e.path.name == name:
            return f"the cached library failed verification: {e.verify(key)}"
    if not same:
        return "no cached build"
    last = max(same, key=lambda e: e.manifest.get("built_at_epoch", 0))
    old = last.manifest["key"]
    if old.get("torch") != key["torch"] or old.get("torch_git") != key["torch_git"]:
        return f"torch changed ({old.get('torch')} -> {key['torch']})"
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
    name = keymod.entry_name(key)
    for e in cache.find(name):
        if e.verify(key) is None:
            return f"cached build {e.path}"
    return f"compiles on first use ({_why(name, key)})"


def _estimate(key):
    times = [e.manifest.get("build_seconds") for e in cache.entries()
             if e.manifest["key"].get("module") == key["module"]
             and e.manifest["key"].get("device") == key["device"]]
    times = [t for t in times if t]
    return round(times[-1]) if times else DEFAULT_SECONDS.get(key["device"], 60)


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


def _acquire(lock_path, what):
    import filelock
    lock = filelock.FileLock(str(lock_path))
    limit = float(os.environ.get("NI_JIT_LOCK_TIMEOUT", "3600"))
    start = time.monotonic()
    try:
        lock.acquire(timeout=1)
        return lock
    except filelock.Timeout:
        pass
    _say(f"waiting for another process that is building {what} (lock {lock_path}); "
         f"it is released as soon as that process ends")
    while True:
        waited = time.monotonic() - start
        if waited > limit:
            raise BuildError(
                f"gave up after {waited:.0f} s waiting for the build lock {lock_path} "
                f"(NI_JIT_LOCK_TIMEOUT={limit:.0f}); another process is still building {what}")
        try:
            lock.acquire(timeout=min(60, max(1, limit - waited)))
            _say(f"the other build finished after {time.monotonic() - start:.0f} s")
            return lock
        except filelock.Timeout:
            _say(f"still waiting for the build lock ({time.monotonic() - start:.0f} s)")


def _load_library(path):
    import torch
    torch.ops.load_library(str(path))


def _run_compiler(spec, tmp, log_path):
    """Run the worker, streaming its output into the log; show elapsed time on a terminal."""
    env_extra = {"CXX": toolchain.cxx_command()}  # the compiler the key names
    with_cuda = spec.device == "cuda"
    if with_cuda:
        home, _ = toolchain.find_cuda_home()
        env_extra["CUDA_HOME"] = home
        env_extra["TORCH_CUDA_ARCH_LIST"] = ";".join(spec.archs)
    request = {
        "name": spec.library_name, "sources": [str(s) for s in spec.sources],
        "cflags": spec.cflags, "cuda_cflags": spec.cuda_cflags, "ldflags": spec.ldflags,
        "include_dirs": [str(d) for d in spec.include_dirs], "build_dir": str(tmp),
        "with_cuda": with_cuda, "env": env_extra,
    }
    req_path = tmp / "request.json"
    req_path.write_text(json.dumps(request, indent=2))
    worker = Path(__file__).with_name("_worker.py")
    verbose = _verbose()
    tty = sys.stderr.isatty() and not verbose
    with open(log_path, "w") as log:
        # its own session (process group): the whole compile (worker, ninja, compilers) can
        # be stopped as one, by us on an exception or by the worker when we die (_worker.py)
        proc = subprocess.Popen([sys.executable, str(worker), str(req_path), str(os.getpid())],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=dict(os.environ, **env_extra),
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if verbose:
                    sys.stderr.write(line)
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        start = time.monotonic()
        try:
            while proc.poll() is None:
                if tty:
                    sys.stderr.write(f"\r  ... {time.monotonic() - start:.0f} s")
                    sys.stderr.flush()
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:  # Ctrl-C (the worker's session does not get the terminal's)
            _stop_group(proc)
            raise
        t.join()
        if tty:
            sys.stderr.write("\r" + " " * 20 + "\r")
    return proc.returncode


def _stop_group(proc):
    """Kill the worker's process group (worker, ninja, compilers) and reap the worker."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()
    proc.wait()


def load(spec):
    """Make sure the library of `spec` is loaded in this process; return its path.

    Raises ToolchainError (a tool is missing), CacheError (no usable root) or BuildError.
    """
    key = keymod.compute_key(spec)
    name = keymod.entry_name(key)
    with _LOCK:
        if name in _LOADED:
            return _LOADED[name]
        path = _load_cached(name, key)
        if path is None:
            path = _build(spec, key, name)
        _LOADED[name] = path
        return path


def _load_cached(name, key):
    for entry in cache.find(name):
        if entry.verify(key) is None:
            try:
                _load_library(entry.library)
            except OSError as e:
                _say(f"the cached library {entry.library} does not load ({e}); rebuilding")
                continue
            return entry.library
    return None


def _build(spec, key, name):
    root = cache.writable_root()
    toolchain.find_ninja()
    locks = root / ".locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    what = f"module '{spec.name}' for {spec.device.upper()}"
    lock = _acquire(locks / f"{name}.lock", what)
    try:
        path = _load_cached(name, key)  # someone else may have built it while we waited
        if path is not None:
            return path
        archs = f" for sm {', '.join(spec.archs)}" if spec.device == "cuda" else ""
        _say(f"compiling {what}{archs} ({_why(name, key)}) into {root / name}; "
             f"this takes about {_estimate(key)} s, once")
        mismatch = toolchain.runtime_mismatch(toolchain.cxx_command())
        if mismatch:
            _say(f"warning: {mismatch}; the library may fail to load or crash. Point CXX at a "
                 f"compiler of the loaded runtime's version, or start Python with "
                 f"LD_PRELOAD={toolchain.compiler_cxx_runtime(toolchain.cxx_command())[0]}")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-{os.getpid()}-", dir=root))
        log_path = tmp / "build.log"
        start = time.monotonic()
        try:
            rc = _run_compiler(spec, tmp, log_path)
        except BaseException:
            cache.keep_failed(tmp, name)
            raise
        seconds = time.monotonic() - start
        library = tmp / f"{spec.library_name}.so"
        if rc != 0 or not library.exists():
            log = cache.keep_failed(tmp, name)
            raise BuildError(
                f"compiling {what} failed: {_first_error(log)}\n"
                f"Full log: {log}\n(NI_JIT_VERBOSE=1 shows the compiler's output as it runs; "
                f"'nitorch-jit info' checks the toolchain.)")
        cache.write_manifest(tmp, key, library, seconds)
        final = root / name
        cache.publish(tmp, final)
        _load_library(final / library.name)
        _say(f"built {what}{archs} in {seconds:.1f} s")
        return final / library.name
    finally:
        lock.release()
