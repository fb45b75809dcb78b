import os
import tempfile

# The suite compiles into its own cache (CI therefore compiles from scratch). Set
# NI_JIT_TEST_CACHE to reuse one between local runs.
_root = os.environ.get("NI_JIT_TEST_CACHE") or tempfile.mkdtemp(prefix="nitorch_jit_test_cache_")
os.environ["NI_JIT_CACHE_DIR"] = _root
os.environ.pop("NI_COMPILED_BACKEND", None)
