"""Fixtures of the pushpull tests: the compiled CPU kernels and the pure-PyTorch twin."""
import pytest
import torch

from nitorch_jit import backends


@pytest.fixture(scope="module")
def C():
    """torch.ops.nitorch_jit with the compiled CPU kernels registered."""
    assert backends.ensure("pushpull", "cpu") == "C", backends.status()
    return torch.ops.nitorch_jit


@pytest.fixture(scope="module")
def TORCH():
    """The pure-PyTorch kernels of the pushpull module."""
    return pytest.importorskip("nitorch_jit.torch_impl.pushpull")
