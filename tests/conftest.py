import os
import tempfile

# The suite compiles into its own cache (CI therefore compiles from scratch). Set
# NI_JIT_TEST_CACHE to reuse one between local runs.
_root = os.environ.get("NI_JIT_TEST_CACHE") or tempfile.mkdtemp(prefix="nitorch_jit_test_cache_")
os.environ["NI_JIT_CACHE_DIR"] = _root
os.environ.pop("NI_COMPILED_BACKEND", None)

import pytest  # noqa: E402


@pytest.fixture
def knobs():
    """knobs(name=value, ...) sets the kernels' tuning knobs (nitorch_jit.backends.tuning) for this
    test, in every loaded library; they are restored afterwards."""
    from nitorch_jit.backends import tuning
    saved = tuning.current()
    yield tuning.set_knobs
    tuning.set_knobs(**saved)


@pytest.fixture
def header_probe(tmp_path):
    """header_probe(source, *flags) compiles a torch-free C++ program against csrc/ (the
    headers the CUDA kernels include too) and returns its stdout; skips without a compiler."""
    import shutil
    import subprocess
    from pathlib import Path
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    include = str(Path(__file__).resolve().parents[1] / "csrc")

    def run(source, *flags):
        src, exe = tmp_path / "probe.cpp", tmp_path / "probe"
        src.write_text(source)
        subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Werror", *flags, "-I", include,
                        str(src), "-o", str(exe)], check=True)
        return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return run


# ---------------------------------------------------------------- MONAI's own compiled _C
# One build per test run of MONAI's resampling _C (from ../shared/third_party/monai-csrc, not
# installed into the monai package) serves tests/compat's A/B run and tests/backends'
# real-MONAI tests. Where it cannot build (no ../shared: a user's checkout) those tests skip
# with the reason; with NI_JIT_REQUIRE_MONAI=1 (.ci/run sets it) a failed build, or any skip
# of a test that uses it, is a failure.
REQUIRE_MONAI = os.environ.get("NI_JIT_REQUIRE_MONAI", "0") not in ("", "0")


def _monai_unavailable(why):
    if REQUIRE_MONAI:
        pytest.fail(f"NI_JIT_REQUIRE_MONAI=1 but MONAI's own _C is unavailable: {why}",
                    pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def monai_own_c(tmp_path_factory):
    """Path of MONAI's own compiled resampling library (monai._C without filtering / LLTM),
    built once per run; serve it with tests/compat/plugins/monai_own.py (``MONAI_OWN_C``)."""
    import importlib.util
    import subprocess
    from pathlib import Path
    from tests.compat.clients import REPO, SHARED
    if importlib.util.find_spec("monai") is None:
        _monai_unavailable("monai is not installed (scripts/install_clients.sh installs it)")
    csrc = SHARED / "third_party" / "monai-csrc" if SHARED else None
    if csrc is None or not csrc.is_dir():
        _monai_unavailable("MONAI's C++ sources (../shared/third_party/monai-csrc) are absent: "
                           "a user's checkout")
    # a kept test cache keeps the build too (ninja rebuilds nothing when nothing changed)
    build = (Path(os.environ["NI_JIT_TEST_CACHE"]) / "monai_build"
             if os.environ.get("NI_JIT_TEST_CACHE") else tmp_path_factory.mktemp("monai_build"))
    res = subprocess.run(["bash", str(REPO / "scripts" / "build_monai.sh"), str(csrc),
                          str(build)],
                         env=dict(os.environ, MONAI_INSTALL="0", MONAI_RESAMPLE_ONLY="1"),
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        _monai_unavailable("MONAI's own _C did not build here:\n"
                           + res.stdout[-2000:] + res.stderr[-2000:])
    return res.stdout.strip().splitlines()[-1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With NI_JIT_REQUIRE_MONAI=1, a skipped test that needs MONAI's own _C fails."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_MONAI and report.skipped and "monai_own_c" in getattr(item, "fixturenames", ()):
        report.outcome = "failed"
        report.longrepr = f"NI_JIT_REQUIRE_MONAI=1 but this test skipped: {report.longrepr}"
