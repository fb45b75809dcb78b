"""Run scipy's own interpolation tests (shipped in the scipy wheel) against nitorch_jit.ndimage.

Nothing of scipy's test code is copied here: test_scipy_interpolation.py imports the tests of
``scipy.ndimage.tests.test_interpolation`` and ``test_splines`` from the installed wheel, and
the fixture below substitutes those modules' ``ndimage`` global with ``nitorch_jit.ndimage``
for the duration of each test. scipy's conftest is not loaded, so the
``xp`` fixture (array API backend) is provided here: NumPy only.
"""
import os

import numpy as np
import pytest

# scipy tests that we skip, and why: {test function name: reason} (all parametrisations).
# Empty with scipy 1.17.1: all 991 tests of test_interpolation.py and the 18 of
# test_splines.py pass. A test that depends on scipy's approximate prefilter for
# 'reflect' / 'grid-mirror' / 'nearest' on short lines (ours is exact, see the docstring of
# nitorch_jit/ndimage/__init__.py) would go here with that reason.
SKIPS = {}


@pytest.fixture
def xp():
    return np


@pytest.fixture(autouse=True)
def _substitute_ndimage(monkeypatch):
    import scipy.ndimage.tests.test_interpolation as interpolation
    import scipy.ndimage.tests.test_splines as splines

    import nitorch_jit.ndimage as ours
    monkeypatch.setattr(interpolation, "ndimage", ours)
    monkeypatch.setattr(splines, "ndimage", ours)
    yield


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if not str(item.path).startswith(here):
            continue
        name = item.originalname if hasattr(item, "originalname") else item.name
        reason = SKIPS.get(name)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
