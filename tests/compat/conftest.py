"""Fixtures of the client tests (helpers in clients.py)."""
import shutil

import pytest

from tests.compat.clients import need, need_shared


@pytest.fixture(scope="session")
def monai_tree(tmp_path_factory):
    """A folder with MONAI's ``tests/`` at its root, as MONAI runs them."""
    need("monai")
    need("parameterized")
    src = need_shared("third_party", "monai-tests", "tests")
    root = tmp_path_factory.mktemp("monai")
    shutil.copytree(src, root / "tests")
    return root
