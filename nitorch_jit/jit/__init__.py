"""The JIT loader: compile C++/CUDA sources on first use into a versioned per-user cache.

Nothing here knows what the libraries compute; callers describe a library with a ModuleSpec.
"""
from .batch import load_all
from .build import BuildError, expected_seconds, explain, find_cached, handle, load
from .cache import CacheError
from .key import ModuleSpec, compute_key, entry_name
from .toolchain import ToolchainError

__all__ = ["BuildError", "CacheError", "ModuleSpec", "ToolchainError", "compute_key",
           "entry_name", "expected_seconds", "explain", "find_cached", "handle", "load",
           "load_all"]
