"""The loader's lines on stderr, each written whole, and the terminal's one status line.

A build says what it does in lines ("nitorch_jit: compiling ...", "... built in 2.1 s"); on a
terminal, a status line rewritten in place (``\\r``) shows the time spent. Builds run side by
side (a binding and a kernel library in two threads, a prebuild's pool, several processes on
one terminal or one log), so every write of this module is a whole line:

- In this process, one lock orders every write (a line, the status line, its erasure), and a
  line is one write call: no other thread's text can fall between its words and its newline.
  The status line is one for all builds in progress ("  ... 2 builds, 5 s"), and on a terminal
  a line first erases it ("\\r" then "erase to the end of the line"), in the same write.
- Across processes no lock is shared; a line is one ``write(2)`` of all its bytes to the
  stream's file descriptor (after the stream's own buffer is flushed, to keep its order).
  POSIX makes a write of at most PIPE_BUF bytes (4096 on Linux, 512 at least) to a pipe atomic:
  never mixed with another writer's bytes. A file opened to append (``2>>log``) puts each write
  whole at the end; one file description shared by the processes (``2>log``) has its writes
  serialised by Linux (since 3.14); Linux's tty layer takes one write whole too. Our lines are
  a few words and a path, far under PIPE_BUF; only a longer one (a path of thousands of
  characters, into a pipe) could be split by the kernel. On a terminal, every line starts by
  erasing the current row, so another process's status line never runs into it either.
A stream without a file descriptor (a StringIO, pytest's capsys) gets one ``write`` call.
"""
import os
import sys
import threading
import time

PREFIX = "nitorch_jit: "
_ERASE = "\r\x1b[K"  # to the start of the row, and erase it

_LOCK = threading.RLock()  # every write of the process; reentrant: Elapsed holds it to draw
_SHOWN = [False]  # a status line is on the terminal now
_BUILDS = {}  # id of an Elapsed -> its start: the builds the status line counts


def _reset_after_fork():
    """A child forked while another thread held the lock would wait for it forever."""
    global _LOCK
    _LOCK = threading.RLock()
    _SHOWN[0] = False
    _BUILDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False


def _emit(stream, text):
    """One write of `text` to `stream` (the caller holds the lock)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        fd = None
    try:
        if fd is None:
            stream.write(text)
            stream.flush()
            return
        stream.flush()  # what the stream holds was written before: it goes first
        data = text.encode(getattr(stream, "encoding", None) or "utf-8", "backslashreplace")
        while data:  # one write; a rest only after a signal cut it short
            data = data[os.write(fd, data):]
    except (OSError, ValueError):  # a closed or broken stderr must not fail the build it reports
        pass


def write(text, stream=None):
    """Write `text`, whole lines, in one write, above the status line.

    Parameters
    ----------
    text : str
        One or more lines; a missing final newline is added (the next writer starts a line).
    stream : file, optional
        Default: ``sys.stderr`` at the time of the call.

    Returns
    -------
    None
        A closed or broken stream is ignored: it must not fail the build whose line it is.

    Examples
    --------
    >>> import io
    >>> from nitorch_jit.jit import progress
    >>> out = io.StringIO()
    >>> progress.write("ninja: no work to do", out)
    >>> out.getvalue()
    'ninja: no work to do\\n'
    """
    stream = sys.stderr if stream is None else stream
    if stream is None:  # no stderr at all (pythonw)
        return
    if not text.endswith("\n"):
        text += "\n"
    with _LOCK:
        tty = _isatty(stream)
        _emit(stream, (_ERASE if tty else "") + text)
        if tty:
            _SHOWN[0] = False


def say(msg, stream=None):
    """Write the line ``nitorch_jit: <msg>`` whole (see ``write``).

    Parameters
    ----------
    msg : str
    stream : file, optional
        As for ``write``.

    Returns
    -------
    None

    Examples
    --------
    >>> import sys
    >>> from nitorch_jit.jit import progress
    >>> progress.say("built splinc in 2.1 s", sys.stdout)
    nitorch_jit: built splinc in 2.1 s
    """
    write(PREFIX + msg + "\n", stream)


def status(text, stream=None):
    """Show `text` as the terminal's status line, in place of the one shown (one write).

    Parameters
    ----------
    text : str
        One line, without a newline.
    stream : file, optional
        A terminal; default ``sys.stderr``.

    Returns
    -------
    None
        Nothing is shown where there is no stderr (pythonw).

    Examples
    --------
    >>> import io
    >>> from nitorch_jit.jit import progress
    >>> out = io.StringIO()
    >>> progress.status("  ... 3 s", out); progress.clear(out)
    >>> out.getvalue()
    '\\r  ... 3 s\\x1b[K\\r\\x1b[K'
    """
    stream = sys.stderr if stream is None else stream
    if stream is None:
        return
    with _LOCK:
        _emit(stream, "\r" + text + "\x1b[K")
        _SHOWN[0] = True


def clear(stream=None):
    """Erase the status line, if one is shown.

    Parameters
    ----------
    stream : file, optional
        The terminal of the status line; default ``sys.stderr``.

    Returns
    -------
    None
        Nothing is written when no status line is shown.

    Examples
    --------
    >>> import io
    >>> from nitorch_jit.jit import progress
    >>> out = io.StringIO()
    >>> progress.clear(out)
    >>> out.getvalue()
    ''
    """
    stream = sys.stderr if stream is None else stream
    with _LOCK:
        if _SHOWN[0] and stream is not None:
            _emit(stream, _ERASE)
        _SHOWN[0] = False


class Elapsed:
    """The elapsed-time indicator of one build on the terminal: a single status line for all
    the builds of the process in progress ("  ... 4 s", "  ... 2 builds, 5 s": since the
    first of them started), erased when the last one ends.

    Parameters
    ----------
    stream : file, optional
        A terminal; default ``sys.stderr``.

    Examples
    --------
    >>> import io
    >>> from nitorch_jit.jit import progress
    >>> out = io.StringIO()
    >>> with progress.Elapsed(out) as elapsed:
    ...     elapsed.tick()
    >>> out.getvalue()
    '\\r  ... 0 s\\x1b[K\\r\\x1b[K'
    """

    def __init__(self, stream=None):
        self.stream = sys.stderr if stream is None else stream
        with _LOCK:
            _BUILDS[id(self)] = time.monotonic()

    def tick(self):
        """Redraw the status line with the time of the builds in progress."""
        with _LOCK:
            if id(self) not in _BUILDS:
                return
            count, seconds = len(_BUILDS), time.monotonic() - min(_BUILDS.values())
            status(f"  ... {seconds:.0f} s" if count == 1 else
                   f"  ... {count} builds, {seconds:.0f} s", self.stream)

    def close(self):
        """This build ended: the last one to end erases the status line."""
        with _LOCK:
            _BUILDS.pop(id(self), None)
            if not _BUILDS:
                clear(self.stream)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
