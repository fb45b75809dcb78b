"""``python -m nitorch_jit.compat PROGRAM [ARGS]`` (also ``nitorch-jit run``): run a program with
the compat installed, as ``coverage run`` does: a console script on PATH (``nitorch register
...``), a ``.py`` file, or ``-m MODULE``."""
import os
import runpy
import shutil
import sys
import sysconfig

from . import install

USAGE = """usage: python -m nitorch_jit.compat [--no-nitorch] [--no-monai] [--no-interpol] PROGRAM [ARGS ...]
       python -m nitorch_jit.compat [--no-nitorch] [--no-monai] [--no-interpol] -m MODULE [ARGS ...]

Runs PROGRAM (a console script on PATH such as `nitorch`, or a .py file) or MODULE with
nitorch_jit serving NITorch's nitorch._C.spatial, MONAI's monai._C (set BUILD_MONAI=1 for
MONAI to use it) and torch-interpol's functions."""


def _find_command(program):
    """A console script named `program`: first in the running interpreter's scripts folder
    (a venv's bin/ that a job script or a cron line calls without activating it), then on
    PATH."""
    folders = []
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if folder and folder not in folders:
            folders.append(folder)
    for folder in folders:
        found = shutil.which(program, path=folder)
        if found:
            return found
    return shutil.which(program)


def _script(program):
    """The Python file to run for `program`: a path, or a console script (``_find_command``)."""
    path = program if os.path.sep in program or program.endswith(".py") else \
        _find_command(program)
    if path is None or not os.path.isfile(path):
        raise SystemExit(f"nitorch_jit.compat: {program!r} is neither a file nor a command in "
                         f"this Python's scripts folder or on PATH\n\n{USAGE}")
    with open(path, "rb") as f:
        head = f.read(256)
    if b"\0" in head:
        raise SystemExit(f"nitorch_jit.compat: {path} is not a Python program (a console "
                         f"script or a .py file is needed: the compat lives in this "
                         f"interpreter)")
    return path


def main(argv=None):
    """Run the program of `argv` (default: sys.argv[1:]) with the compat installed.

    Parameters
    ----------
    argv : list[str], optional
        ``[--no-nitorch] [--no-monai] [--no-interpol] PROGRAM [ARGS]`` or
        ``... -m MODULE [ARGS]``.

    Returns
    -------
    int or None
        The program's exit status, when it returns instead of exiting.

    Examples
    --------
    It installs the compat for the rest of its process (and sets ``sys.argv``), before the
    program imports its clients: a process of its own, as ``python -m nitorch_jit.compat``.

    >>> import subprocess, sys
    >>> code = "from nitorch_jit.compat.run import main; main(['-m', 'this'])"
    >>> out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    >>> out.returncode, out.stdout.splitlines()[0]
    (0, 'The Zen of Python, by Tim Peters')
    """
    args = list(sys.argv[1:] if argv is None else argv)
    flags = {"--no-nitorch": False, "--no-monai": False, "--no-interpol": False}
    while args and args[0] in flags:
        flags[args.pop(0)] = True
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    install(nitorch=not flags["--no-nitorch"], monai=not flags["--no-monai"],
            interpol=not flags["--no-interpol"])
    if args[0] == "-m":
        if len(args) < 2:
            raise SystemExit(f"nitorch_jit.compat: -m needs a module name\n\n{USAGE}")
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return None
    path = _script(args[0])
    sys.argv = [path] + args[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    runpy.run_path(path, run_name="__main__")
    return None
