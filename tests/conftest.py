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
