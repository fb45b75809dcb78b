"""scipy's test_interpolation.py and test_splines.py (installed wheel) against nitorch_jit.ndimage.

The classes are imported, not copied; conftest.py substitutes their ``ndimage`` module and
lists the tests we skip, with the reason.
"""
import pytest

_theirs = pytest.importorskip("scipy.ndimage.tests.test_interpolation")

TestBoundaries = _theirs.TestBoundaries
TestSpline = _theirs.TestSpline
TestGeometricTransform = _theirs.TestGeometricTransform
TestGeometricTransformExtra = _theirs.TestGeometricTransformExtra
TestMapCoordinates = _theirs.TestMapCoordinates
TestAffineTransform = _theirs.TestAffineTransform
TestShift = _theirs.TestShift
TestZoom = _theirs.TestZoom
TestRotate = _theirs.TestRotate
test_spline_filter_vs_matrix_solution = pytest.importorskip(
    "scipy.ndimage.tests.test_splines").test_spline_filter_vs_matrix_solution


def test_substitution_is_active():
    """The fixture of conftest.py really swaps scipy's module for ours in their tests."""
    import nitorch_jit.ndimage
    import scipy.ndimage.tests.test_splines as splines
    assert _theirs.ndimage is nitorch_jit.ndimage
    assert splines.ndimage is nitorch_jit.ndimage
