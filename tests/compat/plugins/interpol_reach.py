"""pytest plugin: record which tests reach ``interpol`` (whichever module serves that name: the
original, or nitorch_jit.compat's) and write, to the file named by ``INTERPOL_REACH_OUT``, a
first line ``# interpol functions from: MODULES`` (where the callables of the ``interpol``
namespace were defined before the plugin wrapped them: ``interpol.api``... for interpol itself,
``nitorch_jit.compat.interpol_api`` through the compat), then their node ids, one a line.

It wraps the callables of the ``interpol`` namespace, which is how TorchIO (``import interpol``
inside its resampling functions) and cornucopia (``import interpol`` at the top of its modules)
call it. Load it after the compat plugin, if any."""
import functools
import os

REACHED = set()
SERVED = set()  # the modules that define interpol's public callables


def _recording(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        test = os.environ.get("PYTEST_CURRENT_TEST")
        if test:  # "path::name (call)"
            REACHED.add(test.rsplit(" ", 1)[0])
        return fn(*args, **kwargs)
    return wrapper


def pytest_configure(config):
    import interpol

    for name in dir(interpol):
        obj = getattr(interpol, name)
        if callable(obj) and not isinstance(obj, type) and not name.startswith("_"):
            SERVED.add(getattr(obj, "__module__", None) or "?")
            setattr(interpol, name, _recording(obj))


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("INTERPOL_REACH_OUT")
    if out:
        with open(out, "w") as f:
            f.write(f"# interpol functions from: {', '.join(sorted(SERVED))}\n")
            f.write("".join(f"{t}\n" for t in sorted(REACHED)))
