"""The loader's lines on stderr stay whole when builds run side by side (issue 41): two builds
that start together, in threads (a log, a terminal with its elapsed-time line) and in two
processes writing to one pipe. The builds run the real build path with a stand-in compiler
(a few lines of Python that write the library once both compiles have started), so each case
takes well under a second.
"""
import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from nitorch_jit import jit
from nitorch_jit.jit import build, cache, progress

REPO = Path(__file__).resolve().parents[2]
COMPILING = re.compile(r"nitorch_jit: compiling (module 'side\d' for CPU), about \d+ s.*, "
                       r"once: .+; into \S+")
BUILT = re.compile(r"nitorch_jit: built (module 'side\d' for CPU) in \d+\.\d s")


class Recorder:
    """A stderr without a file descriptor (so each write call arrives as one item); a terminal
    when `tty`. `indicator` is set once an elapsed-time line has been drawn."""

    def __init__(self, tty):
        self.tty, self.writes, self.indicator = tty, [], threading.Event()
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            self.writes.append(text)
        if text.startswith("\r  ..."):
            self.indicator.set()
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return self.tty


def screen(text):
    """The lines a terminal shows for `text` (carriage return, erase to the end of the line,
    newline), and the row left under the cursor."""
    lines, row, col = [], [], 0
    for token in re.findall(r"\x1b\[K|\r|\n|[^\r\n\x1b]+", text):
        if token == "\r":
            col = 0
        elif token == "\x1b[K":
            del row[col:]
        elif token == "\n":
            lines.append("".join(row))
            row, col = [], 0
        else:
            row[col:col + len(token)] = token
            col += len(token)
    return lines, "".join(row)


# the stand-in compiler: says it started, waits (up to 30 s) until the other one has, and
# writes the library
STAND_IN = """
import os, sys, time
starts, name, library = sys.argv[1:]
open(os.path.join(starts, name), "w").close()
for _ in range(600):
    if len(os.listdir(starts)) >= 2:
        break
    time.sleep(0.05)
open(library, "w").write("library")
"""


@pytest.fixture
def side_by_side(monkeypatch, tmp_path):
    """build.load runs for real into tmp_path/cache, with a stand-in compiler that finishes
    only when both builds have started it (so they overlap) and a loader that loads nothing."""
    starts = tmp_path / "starts"
    starts.mkdir()

    def command(spec, tmp):
        return [sys.executable, "-c", STAND_IN, str(starts), spec.name,
                str(tmp / f"{spec.library_name}.so")]
    monkeypatch.setattr(build, "_compile_command", command)
    monkeypatch.setattr(build, "_load_library", lambda path, torch_free=False: None)
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(cache, "_SAID", set())
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NI_JIT_VERBOSE", raising=False)
    # a fresh define: a key of its own, so each test starts cold
    return [jit.ModuleSpec(f"side{i}", "cpu", [REPO / "tests/jit/data/tiny_op.cpp"], [],
                           cflags=[f"-DSIDE_{uuid.uuid4().hex}"], torch_free=True, direct=True)
            for i in (1, 2)]


def _load_in_threads(specs, after=None):
    """Load each spec in a thread of its own; the second starts when `after` is set (else at
    once). Returns the errors."""
    errors = []

    def run(spec):
        try:
            jit.load(spec)
        except BaseException as err:  # noqa: BLE001 -- reported by the test
            errors.append(err)
    first = threading.Thread(target=run, args=(specs[0],))
    first.start()
    if after is not None:
        assert after.wait(60), "the first build drew no elapsed-time line"
    second = threading.Thread(target=run, args=(specs[1],))
    second.start()
    first.join()
    second.join()
    return errors


def _whole(lines, specs):
    """Every line is a compiling or a built line, and each build has one of each."""
    said = {"compiling": [], "built": []}
    for line in lines:
        m = COMPILING.fullmatch(line) or BUILT.fullmatch(line)
        assert m, f"a line split or joined with another: {line!r}"
        said["compiling" if m.re is COMPILING else "built"].append(m.group(1))
    whats = sorted(s.what for s in specs)
    assert sorted(said["compiling"]) == whats and sorted(said["built"]) == whats, said


def test_two_builds_side_by_side_write_each_line_in_one_write(side_by_side, monkeypatch):
    stderr = Recorder(tty=False)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert _load_in_threads(side_by_side) == []
    for text in stderr.writes:  # print() writes a line's text, then its newline: two writes
        assert text.endswith("\n") and text.count("\n") == 1, stderr.writes
    _whole("".join(stderr.writes).splitlines(), side_by_side)


def test_a_line_never_runs_into_the_elapsed_time_of_another_build(side_by_side, monkeypatch):
    stderr = Recorder(tty=True)
    monkeypatch.setattr(sys, "stderr", stderr)
    # the second build starts saying its line while the first one's elapsed time is shown
    assert _load_in_threads(side_by_side, after=stderr.indicator) == []
    lines, row = screen("".join(stderr.writes))
    _whole(lines, side_by_side)
    assert row == "", f"the elapsed-time line was left on the terminal: {row!r}"
    for text in stderr.writes:  # a line whole, or the status line whole (in place, erased)
        assert re.fullmatch(r"(\r\x1b\[K)?nitorch_jit: [^\r\n]+\n|\r  \.\.\. [^\r\n]+\x1b\[K"
                            r"|\r\x1b\[K", text), text


def test_many_threads_lines_and_status_lines_stay_whole(monkeypatch):
    stderr = Recorder(tty=True)
    monkeypatch.setattr(sys, "stderr", stderr)
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    barrier = threading.Barrier(8)

    def run(t):
        barrier.wait()
        with progress.Elapsed() as elapsed:
            for i in range(50):
                elapsed.tick()
                progress.say(f"thread {t} line {i} " + "x" * (i % 7))
    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(saved)
    lines, row = screen("".join(stderr.writes))
    assert row == ""
    assert sorted(lines) == sorted(f"nitorch_jit: thread {t} line {i} " + "x" * (i % 7)
                                   for t in range(8) for i in range(50))


WRITER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("progress", sys.argv[1])
progress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(progress)  # progress.py alone: no torch to import
sys.stdin.readline()  # both processes are up: start together
for i in range(300):
    progress.say(f"process {sys.argv[2]} line {i} " + sys.argv[2] * (500 + 7 * i))
"""


def test_two_processes_writing_to_one_pipe_write_whole_lines():
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, progress.__file__, name],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=write)
             for name in "ab"]
    os.close(write)
    for p in procs:
        p.stdin.write(b"go\n")
        p.stdin.close()
    with os.fdopen(read, "rb") as pipe:  # read while they write (a pipe holds 64 KiB)
        out = pipe.read().decode()
    assert [p.wait() for p in procs] == [0, 0]
    # lines of 500 to 2600 bytes, under PIPE_BUF (4096 on Linux): each write lands whole
    expected = sorted(f"nitorch_jit: process {n} line {i} " + n * (500 + 7 * i)
                      for n in "ab" for i in range(300))
    assert sorted(out.splitlines()) == expected
