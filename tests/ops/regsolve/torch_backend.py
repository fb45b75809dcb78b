"""A pytest plugin that makes the process choose the TORCH backend (the root conftest clears
NI_COMPILED_BACKEND at import, so it is set once the session starts) and reports who served."""
import os


def pytest_sessionstart(session):
    os.environ["NI_COMPILED_BACKEND"] = "TORCH"


def pytest_sessionfinish(session, exitstatus):
    from nitorch_jit import backends
    print("\nSERVED BY", sorted({b for b, _ in backends.status().values()}))
