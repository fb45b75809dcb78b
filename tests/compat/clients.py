"""Helpers of the client tests: where the vendored clients are, and how to run their suites.

The clients' own tests need ``../shared`` (NITorch's sources, MONAI's tests and C++ sources,
as CI has them beside the checkout) and the clients installed; without them these tests skip
with the reason. ``NI_JIT_SHARED`` points elsewhere.
"""
import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def shared_dir():
    for cand in (os.environ.get("NI_JIT_SHARED"), REPO.parent / "shared", "/work/shared"):
        if cand and (Path(cand) / "third_party").is_dir():
            return Path(cand)
    return None


SHARED = shared_dir()


def need(module):
    """Skip unless `module` can be imported (without importing it)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (CI installs it: scripts/install_clients.sh)")


def need_shared(*parts):
    if SHARED is None:
        pytest.skip("../shared (the vendored clients) is absent: a user's checkout")
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def client_env(**extra):
    """The environment of a client subprocess: our cache, plugins importable, no backend
    choice inherited unless asked."""
    env = dict(os.environ)
    for k in ("NI_COMPILED_BACKEND", "BUILD_MONAI"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PLUGINS), str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_pytest(args, cwd, env, timeout=1800):
    """Run pytest in a subprocess; return {nodeid: outcome} from its junit XML, and the log."""
    xml = Path(cwd) / f"junit-{os.getpid()}-{abs(hash(tuple(args)))}.xml"
    # -n0: one process (pytest-xdist is installed with the suite; the suite's own workers
    # have the cores already)
    cmd = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider",
           f"--junitxml={xml}", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    log = proc.stdout[-6000:] + proc.stderr[-3000:]
    if not xml.exists():
        raise AssertionError(f"pytest produced no report (exit {proc.returncode}):\n{log}")
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                          else "skipped" if "skipped" in kinds else "passed")
    xml.unlink()
    return outcomes, log


def counts(outcomes):
    out = {}
    for v in outcomes.values():
        out[v] = out.get(v, 0) + 1
    return out
