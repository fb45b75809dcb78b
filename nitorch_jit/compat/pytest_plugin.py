"""pytest plugin: ``python -m pytest -p nitorch_jit.compat.pytest_plugin ...`` runs a test suite
(NITorch's, MONAI's, torch-interpol's) with the compat installed before anything imports the
clients. It is not registered as an entry point, so it never loads unless asked for; importing
it does nothing (``--doctest-modules nitorch_jit`` imports every module of the package, and
the examples expect a process without the compat)."""
from . import install, patched, served


def pytest_addoption(parser, pluginmanager):
    # the first hook pytest calls on a plugin, as it registers it (-p: before the plugins of
    # entry points are imported), not pytest_configure: other plugins' configure hooks may
    # import the clients
    install()


def pytest_report_header(config):
    return f"nitorch_jit.compat serves: {', '.join(served() + patched())}"
