"""A pytest plugin that makes the process choose the TORCH backend (the root conftest clears
NI_COMPILED_BACKEND at import, so it is set once the session starts) and reports who served:
a line ``SERVED BY [...]`` appended to the file ``NI_JIT_TEST_SERVED`` names, by each process
that ran tests (pytest-xdist's workers each write their own; the controller runs none)."""
import os


def pytest_sessionstart(session):
    os.environ["NI_COMPILED_BACKEND"] = "TORCH"


def pytest_sessionfinish(session, exitstatus):
    from nitorch_jit import backends
    served = backends.status()
    out = os.environ.get("NI_JIT_TEST_SERVED")
    if out and served:
        # one short line in one append: whole, whatever the number of workers
        with open(out, "a") as f:
            f.write(f"SERVED BY {sorted({b for b, _ in served.values()})}\n")
