"""pytest plugin: ``python -m pytest -p nitorch_jit.compat.pytest_plugin ...`` runs a test suite
(NITorch's, MONAI's, torch-interpol's) with the compat installed before anything imports the
clients. It is not registered as an entry point, so it never loads unless asked for."""
from . import install, patched, served

# at import, not in pytest_configure: other plugins' configure hooks may import the clients
install()


def pytest_report_header(config):
    return f"nitorch_jit.compat serves: {', '.join(served() + patched())}"
