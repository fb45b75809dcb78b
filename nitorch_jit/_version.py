"""The package version, written once: read by pyproject.toml (setuptools' dynamic version), by
the package root and by the cache key (jit/key.py), which therefore needs no import of the root."""
__version__ = "0.1.0"
