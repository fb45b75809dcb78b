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
