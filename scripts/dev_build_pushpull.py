"""Scratch builder for the pushpull CPU kernels (development only; the JIT loader replaces it).

    python scripts/dev_build_pushpull.py            # build (or reuse) and print the time
    from scripts.dev_build_pushpull import load     # in tests / benchmarks
"""
import glob
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.environ.get("NJ_DEV_BUILD_DIR", "/tmp/nj_pushpull_dev_build")

_loaded = False


def load(verbose=False):
    """Build csrc/pushpull/*.cpp into one library registering the CPU kernels, and load it."""
    global _loaded
    if _loaded:
        return
    import torch
    import torch.utils.cpp_extension as ext
    import nitorch_jit.ops.library  # noqa: F401  (defines the schemas)

    os.makedirs(BUILD_DIR, exist_ok=True)
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "pushpull", "*.cpp")))
    ext.load(
        name="nj_pushpull_dev",
        sources=sources,
        extra_include_paths=[os.path.join(ROOT, "csrc", "include")],
        extra_cflags=["-O3", "-std=c++17", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        build_directory=BUILD_DIR,
        is_python_module=False,
        verbose=verbose,
    )
    _loaded = True


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    t = time.time()
    load(verbose="-v" in sys.argv)
    print(f"loaded in {time.time() - t:.1f} s")
