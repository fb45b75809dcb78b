"""The benchmark harness: one clock for every script under scripts/ and `nitorch-jit bench`.

DESIGN.md's policy, written once: the same data for every contender, ``torch.set_num_threads``
fixed, warm-up calls, the minimum of several runs, and ratios measured in the same run, with
"ours" timed before and after its peers so that a burst of load from another process does not
decide the ratio. One unit: milliseconds. On CUDA the clock is a pair of CUDA events
(synchronised); on the CPU it is ``time.perf_counter`` (wall) and ``time.process_time`` (CPU
time of this process, all threads).

- :func:`measure` times in-process callables; :func:`stopwatch` times one block once;
- :func:`measure_process` times a whole command (wall and child CPU time);
- :func:`ratio`, :func:`copy_bandwidth`, :func:`backend_for`, :func:`optional` (a peer that may
  be missing) and :func:`open_device` are the helpers the scripts share;
- ``nitorch_jit.bench.data`` makes the workloads, ``nitorch_jit.bench.report`` prints them,
  ``nitorch_jit.bench.cli`` is ``nitorch-jit bench``.
"""
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

__all__ = ["ProcessRun", "Stopwatch", "Timing", "backend_for", "copy_bandwidth", "measure",
           "measure_process", "open_device", "optional", "ratio", "stopwatch"]


@dataclass
class Timing:
    """What :func:`measure` found for one callable (milliseconds per call).

    ``best_ms``: the minimum wall time over the samples of the kept block; ``cpu_ms``: the
    minimum process CPU time over the same samples (None on CUDA); ``first_ms``: the wall time
    of the very first call (a first use: compile, cache fill); ``times_ms``: every sample of
    the kept block; ``result``: what the last call returned (with ``keep_result=True``).
    """
    best_ms: float
    cpu_ms: float = None
    first_ms: float = None
    times_ms: list = field(default_factory=list)
    result: object = field(default=None, repr=False)

    @property
    def median_ms(self):
        return statistics.median(self.times_ms)

    @property
    def p95_ms(self):
        """The 95th percentile of the samples (the sample at rank floor(0.95 n))."""
        t = sorted(self.times_ms)
        return t[min(len(t) - 1, int(0.95 * len(t)))]

    def as_dict(self):
        return {"best_ms": self.best_ms, "cpu_ms": self.cpu_ms, "first_ms": self.first_ms,
                "median_ms": self.median_ms, "samples": len(self.times_ms)}


def _device(device):
    return torch.device(device if device is not None else "cpu")


class Stopwatch:
    """Wall (and, on the CPU, process CPU) milliseconds of one block; see :func:`stopwatch`."""

    def __init__(self, device=None):
        self.device = _device(device)
        self.wall_ms = self.cpu_ms = None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            self._events[0].record()
        else:
            self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self._events[1].record()
            self._events[1].synchronize()
            self.wall_ms = self._events[0].elapsed_time(self._events[1])
        else:
            self.wall_ms = (time.perf_counter() - self._wall) * 1e3
            self.cpu_ms = (time.process_time() - self._cpu) * 1e3
        return False


def stopwatch(device=None):
    """Time one block once: a context manager whose ``wall_ms`` / ``cpu_ms`` are set on exit.

    Parameters
    ----------
    device : str or torch.device, optional
        'cuda...': the block is timed with CUDA events (the device synchronised before and
        after; ``cpu_ms`` stays None). Default: the CPU clocks.

    Returns
    -------
    Stopwatch
        ``wall_ms`` and ``cpu_ms`` (milliseconds) once the block has run.

    Examples
    --------
    >>> from nitorch_jit.bench import stopwatch
    >>> with stopwatch() as sw:
    ...     _ = sum(range(1000))
    >>> sw.wall_ms >= 0 and sw.cpu_ms >= 0
    True
    """
    return Stopwatch(device)


def _per(value, name):
    return value[name] if isinstance(value, dict) else value


def _block(fn, repeat, warmup, number, device, keep_result):
    """Warm-up calls, then `repeat` samples of `number` calls each: a Timing."""
    first, out = None, None
    times, cpus = [], []
    for i in range(warmup + repeat):
        with Stopwatch(device) as sw:
            for _ in range(number if i >= warmup else 1):
                out = fn()
        if first is None:
            first = sw.wall_ms / (number if warmup == 0 else 1)
        if i >= warmup:
            times.append(sw.wall_ms / number)
            if sw.cpu_ms is not None:
                cpus.append(sw.cpu_ms / number)
    return Timing(min(times), min(cpus) if cpus else None, first, times,
                  out if keep_result else None)


def measure(fns, *, repeat=5, warmup=1, device="cpu", threads=None, ours=None, interleave=True,
            number=1, keep_result=False):
    """Time callables the way every benchmark here does: warm-up, then the best of `repeat`.

    Parameters
    ----------
    fns : dict[str, callable] or callable
        The contenders, each called without arguments, in the dict's order. A single callable
        is timed alone and its Timing returned (not a dict).
    repeat : int or dict[str, int]
        Timed samples of each callable (a dict: per name, e.g. fewer for a slow peer).
    warmup : int or dict[str, int]
        Untimed calls before the samples of each block (its first is ``first_ms``).
    device : str or torch.device
        Where the callables run: on CUDA each sample is timed with CUDA events (the device
        synchronised around it); on the CPU with ``perf_counter`` and ``process_time``.
    threads : int, optional
        ``torch.set_num_threads`` while timing (restored after).
    ours : str, optional
        The name of our own callable: it is timed first, and (with `interleave`) again after
        its peers, and the better of its two blocks is kept.
    interleave : bool
        Time `ours` before and after its peers (default) rather than once.
    number : int
        Calls per sample, back to back (the sample is their mean): on a GPU this hides the
        launch gaps of short kernels.
    keep_result : bool
        Keep what the last call returned in ``Timing.result``.

    Returns
    -------
    dict[str, Timing] or Timing
        Milliseconds per call: ``best_ms``, ``cpu_ms``, ``first_ms``, ``times_ms``
        (``median_ms``, ``p95_ms``), in the order of `fns`.

    Examples
    --------
    >>> import torch
    >>> from nitorch_jit.bench import measure, ratio
    >>> x = torch.randn(64, 64)
    >>> t = measure({"ours": lambda: x + 1, "peer": lambda: x.add(1)}, repeat=3,
    ...             ours="ours", threads=1)
    >>> sorted(t), t["ours"].best_ms > 0, len(t["peer"].times_ms)
    (['ours', 'peer'], True, 3)
    >>> ratio(t["peer"], t["ours"]) > 0
    True
    >>> measure(lambda: x.sum(), repeat=2, warmup=0).best_ms > 0
    True
    """
    single = callable(fns)
    if single:
        fns = {"fn": fns}
    device = _device(device)
    names = list(fns)
    order = names
    if ours is not None:
        if ours not in fns:
            raise KeyError(f"ours={ours!r} is not one of {names}")
        peers = [n for n in names if n != ours]
        order = [ours] + peers + ([ours] if interleave and peers else [])
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        res = {}
        for name in order:
            t = _block(fns[name], _per(repeat, name), _per(warmup, name), number, device,
                       keep_result)
            if name in res:  # ours, second block: keep the better one, its first use stays
                t.first_ms = res[name].first_ms
                if t.best_ms >= res[name].best_ms:
                    continue
            res[name] = t
    finally:
        torch.set_num_threads(saved)
    return res["fn"] if single else {n: res[n] for n in names}


def ratio(peer, ours):
    """peer / ours of two times (Timing, or milliseconds): how many times faster ours is.

    Parameters
    ----------
    peer, ours : Timing or float
        A Timing counts by its ``best_ms``.

    Returns
    -------
    float
        The ratio; NaN where either is missing (None) or ours is 0.

    Examples
    --------
    >>> from nitorch_jit.bench import ratio
    >>> ratio(30.0, 10.0), ratio(None, 10.0)
    (3.0, nan)
    """
    a = peer.best_ms if isinstance(peer, Timing) else peer
    b = ours.best_ms if isinstance(ours, Timing) else ours
    if a is None or b is None or b == 0:
        return math.nan
    return a / b


def copy_bandwidth(device="cpu", repeat=5, nbytes=None):
    """The copy bandwidth of a device in GB/s (bytes read + written per second).

    Parameters
    ----------
    device : str or torch.device
        Where to copy.
    repeat : int
        Timed copies (the best counts).
    nbytes : int, optional
        Size of the copied buffer. Default: 1 GiB on CUDA, 256 MiB on the CPU (well beyond the
        caches).

    Returns
    -------
    float
        2 * nbytes / best time, in GB/s.

    Examples
    --------
    >>> from nitorch_jit.bench import copy_bandwidth
    >>> copy_bandwidth("cpu", repeat=1, nbytes=1 << 20) > 0
    True
    """
    device = _device(device)
    if nbytes is None:
        nbytes = 1 << 30 if device.type == "cuda" else 1 << 28
    src = torch.empty(nbytes // 4, device=device)
    src.uniform_()  # written: an untouched buffer reads the zero page
    dst = torch.empty_like(src)
    ms = measure(lambda: dst.copy_(src), repeat=repeat, device=device).best_ms
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def backend_for(module, device="cpu", *, require_compiled=False):
    """Build or load the kernels of a module (outside any timing) and say who serves it.

    Parameters
    ----------
    module : str
        'pushpull', 'splinc', 'resize' or 'regsolve'.
    device : str or torch.device
        The device type served.
    require_compiled : bool
        Load the compiled (C) library itself, raising when it cannot be built, rather than
        accept a fallback.

    Returns
    -------
    str
        'C', 'TORCH' or 'MONAI'.

    Examples
    --------
    >>> from nitorch_jit.bench import backend_for
    >>> backend_for("pushpull") in ("C", "TORCH", "MONAI")  # doctest: +SKIP
    True
    """
    from .. import backends
    if require_compiled:
        backends.load_module(module, str(device))
        return "C"
    return backends.ensure(module, device)


def optional(module):
    """Import an optional peer: the module, or None when it is not installed.

    Parameters
    ----------
    module : str
        Dotted module name ('interpol', 'scipy.ndimage', ...).

    Returns
    -------
    module or None
        The imported module; None where it is not installed.

    Examples
    --------
    >>> from nitorch_jit.bench import optional
    >>> optional("json").__name__, optional("no_such_peer_module")
    ('json', None)
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def open_device(name, who):
    """The device a benchmark runs on, and its name in words; a CUDA device asked for where
    there is none ends the program with status 1 (after a line on stderr).

    Parameters
    ----------
    name : str
        'cuda', 'cuda:1', 'cpu' (the CPU: a smoke run of a GPU script).
    who : str
        The script, for the message.

    Returns
    -------
    device : torch.device
    label : str
        The GPU's name, or 'CPU'.

    Examples
    --------
    >>> from nitorch_jit.bench import open_device
    >>> open_device("cpu", "bench_x")
    (device(type='cpu'), 'CPU')
    """
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"{who}: no CUDA device", file=sys.stderr)
        raise SystemExit(1)
    return device, torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


@dataclass
class ProcessRun:
    """One command timed by :func:`measure_process` (milliseconds)."""
    wall_ms: float
    cpu_ms: float  # user + system of the child and its children; None where unknown
    returncode: int  # None when the run was cut by its time-out
    stdout: str
    stderr: str


def measure_process(cmd, *, env=None, timeout=None, cwd=None, log=None):
    """Run a command to its end and time it: wall time and the child's CPU time.

    A different measurement from :func:`measure`: the whole process (imports, first-use
    builds, file input and output). The CPU time (user + system of the child, from
    /usr/bin/time where there is one) moves far less with the load of a shared machine than
    the wall time does.

    Parameters
    ----------
    cmd : list[str]
        The command.
    env : dict[str, str or None], optional
        Changes to this process's environment (None: the variable is removed).
    timeout : float, optional
        Seconds; a run past it is killed (its whole process group) and its returncode is None.
    cwd : str, optional
        Working directory.
    log : str, optional
        Also write the command, its stdout and its stderr to this file.

    Returns
    -------
    ProcessRun
        ``wall_ms``, ``cpu_ms`` (None without /usr/bin/time), ``returncode``, ``stdout``,
        ``stderr``.

    Examples
    --------
    >>> import sys
    >>> from nitorch_jit.bench import measure_process
    >>> r = measure_process([sys.executable, "-c", "print(6 * 7)"])
    >>> r.returncode, r.stdout.strip(), r.wall_ms > 0
    (0, '42', True)
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env = {k: v for k, v in full_env.items() if v is not None}
    tfile = None
    if os.path.exists("/usr/bin/time"):
        fd, tfile = tempfile.mkstemp(prefix="nitorch_jit_bench_time_")
        os.close(fd)
        cmd = ["/usr/bin/time", "-o", tfile, "-f", "%U %S", *cmd]
    with stopwatch() as sw:
        # its own process group, so that a time-out ends the program and not only /usr/bin/time
        p = subprocess.Popen(cmd, env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = None
    cpu = None
    if tfile:
        try:
            with open(tfile) as f:
                last = f.read().strip().splitlines()[-1].split()
            cpu = (float(last[0]) + float(last[1])) * 1e3
        except (OSError, IndexError, ValueError):
            pass
        os.unlink(tfile)
    if rc is not None and rc != 0 and err.rstrip().endswith("exit status " + str(rc)):
        err = err.rstrip().rsplit("\n", 1)[0]  # /usr/bin/time's own line
    if log:
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n" + out + "\n--- stderr ---\n" + err)
    return ProcessRun(sw.wall_ms, cpu, rc, out, err)
