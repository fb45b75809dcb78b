"""pytest plugin: serve ``monai._C`` from MONAI's own build (the library named by
``MONAI_OWN_C``, built by ``MONAI_INSTALL=0 scripts/build_monai.sh``), for the A/B run
against nitorch_jit.compat. It answers before Python's own finders, like an installed one."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


class _OwnC(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "monai._C":
            return None
        lib = os.environ["MONAI_OWN_C"]
        return importlib.util.spec_from_file_location(
            fullname, lib, loader=importlib.machinery.ExtensionFileLoader(fullname, lib))


import torch  # noqa: E402,F401  (the extension links against torch's libraries)

# at import, not in pytest_configure: another plugin's configure hook may import monai first
sys.meta_path.insert(0, _OwnC())
