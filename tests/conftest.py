import os
import tempfile

# The suite passes whatever of our variables the user has set (NI_USE_CUDA=0 is our own advice
# for CPU-only machines): tests set what they need. Kept: the suite's own switches, and
# NI_JIT_SANITIZE, the build mode the sanitizer check runs the kernel tests under.
KEPT = {"NI_JIT_TEST_CACHE", "NI_JIT_REQUIRE_MONAI", "NI_JIT_SHARED", "NI_JIT_SANITIZE",
        "NI_JIT_TEST_SERVED",
        "NI_JIT_TEST_PREBUILT"}
for _name in [n for n in os.environ if n.startswith("NI_") and n not in KEPT]:
    del os.environ[_name]
os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
# pytest-xdist runs a worker per core, and each worker's OpenMP threads (torch's and ours) would
# spin at every barrier on the cores the other workers need: passive waits, unless the user
# chose. Measured on 2 cores, the kernel tests: 84-96 s wall, 154-176 CPU-s spinning; 76-78 s,
# 136-140 CPU-s passive. Thread counts, and so the threaded paths, are unchanged. Set before
# the workers (and every subprocess) start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _kept_test_cache():
    """The suite's cache kept between runs: a folder beside the user's own cache
    (``~/.cache/nitorch_jit-tests`` on Linux), or None where there is no usable home."""
    try:
        import platformdirs
        path = platformdirs.user_cache_dir("nitorch_jit") + "-tests"
    except (ImportError, RuntimeError, KeyError, OSError):
        return None
    return path if os.path.isabs(path) else None


# The suite's one cache, prebuilt at the start (pytest_sessionstart below), so that no test
# pays for a compile another test paid for; tests of first use, cold caches, faults and
# upgrades make caches of their own. It is kept between runs (its entries are keyed like any:
# changed sources, flags or torch build new ones, and the prebuild clears the stale), so a
# second run compiles nothing; NI_JIT_TEST_CACHE=DIR picks another folder (an empty one: a cold
# run, as CI's). Set here, in the environment, so that pytest-xdist's workers (and every
# subprocess) share it.
if not os.environ.get("NI_JIT_TEST_CACHE"):
    os.environ["NI_JIT_TEST_CACHE"] = _kept_test_cache() or ""
_MADE_CACHE = not os.environ.get("NI_JIT_TEST_CACHE")
if _MADE_CACHE:  # no usable home: a folder for this run, removed after it
    os.environ["NI_JIT_TEST_CACHE"] = tempfile.mkdtemp(prefix="nitorch_jit_test_cache_")
os.environ["NI_JIT_CACHE_DIR"] = os.environ["NI_JIT_TEST_CACHE"]

import pytest  # noqa: E402

PREBUILD_RECORD = ".suite-prebuild.json"


def pytest_sessionstart(session):
    """Prebuild the suite's cache with the project's own parallel prebuild (the controller
    only, under pytest-xdist; a warm cache builds nothing). Its time is reported at the end.
    NI_JIT_TEST_PREBUILT=0 skips it (a test run that compiles on demand)."""
    import time
    session.config._nj_started = time.time()
    if hasattr(session.config, "workerinput") or session.config.option.collectonly or \
            os.environ.get("NI_JIT_TEST_PREBUILT", "1") == "0":
        return
    import subprocess
    import sys
    t0 = time.perf_counter()
    # one process: the stale entries of a kept cache go (other sources, flags, torch), then
    # the parallel prebuild fills what is missing (nothing, on a second run)
    code = ("import sys; from nitorch_jit import cli; cli.main(['cache', 'clear', '--stale']); "
            "sys.exit(cli.main(['build', '--no-cuda']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=3600)
    session.config._nj_prebuild = (time.perf_counter() - t0, res.returncode,
                                   (res.stdout + res.stderr)[-3000:])
    # for tests/jit/test_prebuild.py (the workers of pytest-xdist see files, not the config)
    import json
    from pathlib import Path
    (Path(os.environ["NI_JIT_CACHE_DIR"]) / PREBUILD_RECORD).write_text(json.dumps(
        {"returncode": res.returncode, "output": res.stdout + res.stderr}))
    # nested test runs (the TORCH-backend reruns) use the cache as it is
    os.environ["NI_JIT_TEST_PREBUILT"] = "0"


def pytest_unconfigure(config):
    """The cache this run made is removed with it (the controller's, not a worker's)."""
    if _MADE_CACHE and not hasattr(config, "workerinput"):
        import shutil
        shutil.rmtree(os.environ["NI_JIT_TEST_CACHE"], ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The suite's budget, visible: the prebuild's wall time, and every compile of the run
    (the build seconds of each cache entry written during it, from its manifest)."""
    import json
    from pathlib import Path
    if hasattr(config, "workerinput"):
        return
    tr = terminalreporter
    prebuild = getattr(config, "_nj_prebuild", None)
    if prebuild is not None:
        seconds, rc, tail = prebuild
        tr.write_line(f"nitorch_jit: prebuilt the suite's cache in {seconds:.1f} s"
                      + ("" if rc == 0 else f" (FAILED, exit {rc}; tests compile on demand):\n"
                         + tail))

    def compiled(manifests, since=0.0):
        seconds = []
        for manifest in manifests:
            try:
                record = json.loads(manifest.read_text())
                # a real build's (tests write made-up manifests, with no sha256, too)
                if manifest.stat().st_mtime >= since and record.get("sha256"):
                    seconds.append(float(record["build_seconds"]))
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return len(seconds), sum(seconds)

    # the builds of this run (a kept cache holds earlier runs' too)
    since = getattr(config, "_nj_started", 0.0)
    count, total = compiled(Path(os.environ["NI_JIT_CACHE_DIR"]).glob("*/manifest.json"), since)
    tr.write_line(f"nitorch_jit: the suite's cache got {count} builds, {total:.0f} s of "
                  f"compiling (summed over parallel builds), in {os.environ['NI_JIT_CACHE_DIR']}")
    # the tests' own caches (cold-cache, fault and upgrade tests) under pytest's temporary
    # folder, the workers' included
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        count, total = compiled(factory.getbasetemp().rglob("manifest.json"))
        tr.write_line(f"nitorch_jit: the tests' own caches hold {count} builds, {total:.0f} s of "
                      f"compiling")


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
    import sys
    from pathlib import Path
    from tests.compat.clients import REPO, SHARED
    if importlib.util.find_spec("monai") is None:
        _monai_unavailable("monai is not installed (scripts/install_clients.sh installs it)")
    csrc = SHARED / "third_party" / "monai-csrc" if SHARED else None
    if csrc is None or not csrc.is_dir():
        _monai_unavailable("MONAI's C++ sources (../shared/third_party/monai-csrc) are absent: "
                           "a user's checkout")
    # a kept test cache keeps the build too (ninja rebuilds nothing when nothing changed)
    import torch
    tag = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    build = Path(os.environ["NI_JIT_TEST_CACHE"]) / f"monai_build-{tag}"
    # one build at a time into the folder: pytest-xdist's workers each ask for it, and the
    # second reuses the first's (ninja rebuilds nothing)
    import filelock
    build.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(build) + ".lock"):
        # the script's python is this one (an unactivated venv's python runs the suite too)
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        res = subprocess.run(["bash", str(REPO / "scripts" / "build_monai.sh"), str(csrc),
                              str(build)],
                             env=dict(os.environ, MONAI_INSTALL="0", MONAI_RESAMPLE_ONLY="1",
                                      MONAI_OPT="-O1", PATH=path),
                             capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        _monai_unavailable("MONAI's own _C did not build here:\n"
                           + res.stdout[-2000:] + res.stderr[-2000:])
    return res.stdout.strip().splitlines()[-1]


def pytest_collection_modifyitems(config, items):
    """A test that uses MONAI's own _C is slow (the quick tier leaves out its build, a minute).

    Under pytest-xdist the slow tests are dealt out first, a file at a time: worksteal gives
    worker k the k-th of n equal blocks of this list and later moves tests from the end of a
    busy worker's block to an idle one, so each block starts with every n-th file's slow tests
    (client suites, nested runs, builds; a file's tests together and in their order, as some
    share a module's cache) and ends with short ones. The run then ends on short tests on
    every worker, not on one finishing the long ones alone (320 s of a 1107 s run, with all
    of them in one block)."""
    for item in items:
        if "monai_own_c" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return
    files = {}  # the slow tests of each file, in collection order
    for item in items:
        if item.get_closest_marker("slow") is not None:
            files.setdefault(item.nodeid.split("::")[0], []).append(item)
    fast = [i for i in items if i.get_closest_marker("slow") is None]
    dealt = [[] for _ in range(workers)]
    for k, tests in enumerate(files.values()):
        dealt[k % workers] += tests
    blocks, remaining = [], len(items)
    for k in range(workers):
        size = remaining // (workers - k)  # worksteal's first split
        remaining -= size
        take = max(0, size - len(dealt[k]))
        blocks += dealt[k] + fast[:take]
        fast = fast[take:]
    items[:] = blocks + fast


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With NI_JIT_REQUIRE_MONAI=1, a skipped test that needs MONAI's own _C fails."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_MONAI and report.skipped and "monai_own_c" in getattr(item, "fixturenames", ()):
        report.outcome = "failed"
        report.longrepr = f"NI_JIT_REQUIRE_MONAI=1 but this test skipped: {report.longrepr}"
