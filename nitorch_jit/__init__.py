"""nitorch_jit: spline resampling and friends, compiled on first use, with a pure-PyTorch twin."""
__version__ = "0.1.0"
