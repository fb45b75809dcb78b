"""Build many libraries as one pool (a prebuild): hundreds of entries in one process.

Each entry is built exactly as ``build.load`` builds it (its lock, its private folder, its
atomic publish, its integrity check, loaded once); the pool runs up to MAX_JOBS (else one per
CPU) compilers at once, longest builds first, and shows one progress line and a done line
instead of two lines per entry. A library built by one compiler call (``spec.direct``) takes
one compiler; one built through the worker takes as many as it has translation units, up to
the pool's size, and its ninja is told so.
"""
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import build, cache, key as keymod, progress, toolchain

_NON_TTY_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal
_FAILURES = (toolchain.ToolchainError, cache.CacheError, build.BuildError, OSError)


@dataclass
class Outcome:
    """What became of one spec of ``load_all``.

    Attributes
    ----------
    spec : ModuleSpec
    path : pathlib.Path or None
        The loaded library (None when it failed).
    built : bool
        Compiled by this pool (False: it was cached, or it failed).
    error : Exception or None
    """
    spec: object
    path: Path = None
    built: bool = False
    error: Exception = None


def max_jobs():
    """Compilers a pool runs at once: MAX_JOBS, else the number of CPUs.

    Returns
    -------
    int
        At least 1.

    Examples
    --------
    >>> from nitorch_jit.jit import batch
    >>> batch.max_jobs() >= 1
    True
    """
    value = os.environ.get("MAX_JOBS", "").strip()
    if not value:
        return os.cpu_count() or 1
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ValueError(f"MAX_JOBS={value!r}: expected a whole number of compilers >= 1")
    return jobs


def _weight(spec, jobs):
    """Compilers that building `spec` keeps busy."""
    return 1 if spec.direct else max(1, min(len(spec.sources), jobs))


def _wall_estimate(seconds, weights, jobs):
    """Wall time of the pool by the same longest-first greedy schedule it runs (each build's
    time as if its compilers shared its work)."""
    free_at = [0.0] * jobs
    for s, w in zip(seconds, weights):
        free_at.sort()
        start = free_at[w - 1]
        for i in range(w):
            free_at[i] = start + s
    return max(free_at, default=0.0)


def _summary(specs):
    """'the binding of X and 20 torch-free libraries', naming the few big ones."""
    big = [s.what for s in specs if not s.torch_free]
    small = len(specs) - len(big)
    parts = big if len(big) <= 2 else [f"{len(big)} libraries"]
    if small:
        parts.append(f"{small} torch-free librar{'y' if small == 1 else 'ies'}")
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


class _Progress:
    """One progress line: rewritten in place on a terminal, else repeated every ~10 s; every
    write goes through progress.py (whole lines, one status line for the process)."""

    def __init__(self, total, stream):
        self.total, self.stream = total, stream
        self.tty = stream.isatty() and not build.verbose()
        self.start = time.monotonic()
        self.last = self.start

    def line(self, done, failed):
        fails = f", {failed} FAILED" if failed else ""
        return f"{done}/{self.total} built{fails}, {time.monotonic() - self.start:.0f} s"

    def update(self, done, failed, force=False):
        now = time.monotonic()
        if self.tty:
            progress.status(progress.PREFIX + self.line(done, failed), self.stream)
        elif force or now - self.last >= _NON_TTY_EVERY:
            progress.say(self.line(done, failed), self.stream)
            self.last = now

    def say(self, msg):
        """A line of a build (a warning, a wait) above the progress line."""
        progress.say(msg, self.stream)

    def close(self):
        progress.clear(self.stream)


def _say(stream, msg):
    progress.say(msg, stream)


def load_all(specs, jobs=None):
    """Build (where needed) and load the libraries of `specs`, up to `jobs` compilers at once.

    Every entry is built as ``load`` builds one (lock, private folder, atomic publish,
    verification), so a pool and the calls of other processes may meet on the same entries.
    stderr gets a start line, one progress line ("12/41 built, 35 s": in place on a terminal,
    else every ~10 s) and a done line with the wall time; a failure is returned, not raised.

    Parameters
    ----------
    specs : list of ModuleSpec
    jobs : int, optional
        Compilers at once (default: ``max_jobs()``, from MAX_JOBS or the CPU count).

    Returns
    -------
    list of Outcome
        One per spec, in the order of `specs`.

    Raises CacheError when no root can be built into and something must be built;
    KeyboardInterrupt stops every compile of the pool (nothing partial is published).

    Examples
    --------
    >>> from nitorch_jit import jit
    >>> jit.load_all([])
    []
    """
    jobs = max_jobs() if jobs is None else jobs
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    stream = sys.stderr
    start = time.monotonic()
    outcomes = [Outcome(spec) for spec in specs]
    by_name, keys = {}, {}  # entry name -> indices into specs; entry name -> key
    for i, spec in enumerate(specs):
        try:
            key = keymod.compute_key(spec)
        except _FAILURES as err:
            outcomes[i].error = err
            continue
        name = keymod.entry_name(key)
        by_name.setdefault(name, []).append(i)
        keys[name] = key
    todo = []
    for name, indices in by_name.items():
        try:
            path = build.load(specs[indices[0]], build=False)
        except _FAILURES as err:
            path, outcomes[indices[0]].error = None, err
        if path is not None:
            outcomes[indices[0]].path = path
        elif outcomes[indices[0]].error is None:
            todo.append(name)
    cached = sum(o.path is not None for o in outcomes)
    if not todo:
        if by_name:
            _say(stream, f"nothing to build: {len(by_name)} librar"
                         f"{'y' if len(by_name) == 1 else 'ies'} cached "
                         f"({time.monotonic() - start:.1f} s)")
        return _spread(outcomes, by_name)

    root = cache.writable_root()
    mismatch = toolchain.runtime_mismatch(toolchain.cxx_command())
    if mismatch:
        _say(stream, f"warning: {mismatch}; the libraries may fail to load or crash. Point CXX "
                     f"at a compiler of the loaded runtime's version")
    entries = cache.entries()
    seconds = {n: build.expected_seconds(keys[n], entries, specs[by_name[n][0]].direct)[0]
               for n in todo}
    todo.sort(key=lambda n: -seconds[n])  # longest first: the pool ends with short builds
    weight = {n: _weight(specs[by_name[n][0]], jobs) for n in todo}
    about = _wall_estimate([seconds[n] for n in todo], [weight[n] for n in todo], jobs)
    _say(stream, f"compiling {_summary([specs[by_name[n][0]] for n in todo])} into {root}, "
                 f"{jobs} compiler{'s' if jobs > 1 else ''} at a time, about {about:.0f} s"
                 + (f" ({cached} already cached)" if cached else ""))

    progress = _Progress(len(todo), stream)
    stop = threading.Event()
    cond = threading.Condition()
    state = {"free": jobs, "done": 0, "failed": 0}
    threads = []

    def run(name, w):
        outcome = outcomes[by_name[name][0]]
        try:
            outcome.path = build.load(outcome.spec, build.Seat(w, progress.say, stop))
            outcome.built = True
        except BaseException as err:  # noqa: BLE001 -- reported with the others, never lost
            outcome.error = err
        finally:
            with cond:
                state["free"] += w
                state["done"] += 1
                state["failed"] += outcome.error is not None
                cond.notify_all()

    pending = list(todo)
    try:
        progress.update(0, 0)
        while True:
            with cond:
                while pending and state["free"] >= weight[pending[0]]:
                    name = pending.pop(0)
                    state["free"] -= weight[name]
                    t = threading.Thread(target=run, args=(name, weight[name]), daemon=True,
                                         name=f"nitorch_jit build {name}")
                    t.start()
                    threads.append(t)
                if not pending and state["done"] == len(todo):
                    break
                cond.wait(timeout=1.0)
                done, failed = state["done"], state["failed"]
            progress.update(done - failed, failed)
    except BaseException:  # Ctrl-C: every compile of the pool is killed, nothing published
        stop.set()
        for t in threads:  # a build waiting for another process's lock is left behind
            t.join(timeout=5)
        progress.close()
        raise
    for t in threads:
        t.join()
    progress.close()
    built = sum(o.built for o in outcomes)
    failed = sum(outcomes[by_name[n][0]].error is not None for n in todo)
    _say(stream, f"built {built} of {len(todo)} libraries in {time.monotonic() - start:.1f} s"
                 + (f"; {failed} FAILED" if failed else "")
                 + (f"; {cached} were cached" if cached else ""))
    return _spread(outcomes, by_name)


def _spread(outcomes, by_name):
    """Specs that name the same entry share its outcome."""
    for indices in by_name.values():
        first = outcomes[indices[0]]
        for i in indices[1:]:
            outcomes[i].path, outcomes[i].error = first.path, first.error
    return outcomes
