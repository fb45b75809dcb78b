#!/usr/bin/env bash
# Install the clients that tests/compat runs against, into the active Python: MONAI (with
# parameterized, which its tests use) and cornucopia 0.5.1 (its tests ship in the wheel) from
# PyPI, NITorch as pure Python and TorchIO 2.0.0a2 from the vendored copies in
# ../shared/third_party (neither is on PyPI; TorchIO's dependencies come from PyPI). Without
# ../shared (a user's checkout) only the PyPI clients are installed and the others' tests skip.
# The torch already installed is pinned: no client's requirement may replace it.
#
# Usage: scripts/install_clients.sh [SHARED]   (default: NI_JIT_SHARED, else ../shared)
set -euo pipefail
REPO=$(realpath "$(dirname "$0")/..")
SHARED=${1:-${NI_JIT_SHARED:-$REPO/../shared}}
[ -d "$SHARED/third_party" ] || SHARED=/work/shared
quiet() { grep -v "^WARNING: Location" || true; }
PIN=$(mktemp)
trap 'rm -f "$PIN"' EXIT
python -c "import torch; print('torch==' + torch.__version__)" > "$PIN"
python -m pip install -q -c "$PIN" monai parameterized "cornucopia==0.5.1" 2>&1 | quiet
if [ -d "$SHARED/third_party/nitorch" ]; then
  # NITorch's setup.py writes build/ and egg-info into its tree: build from a copy; without
  # NI_COMPILED_BACKEND it compiles nothing (pure Python, its TorchScript backend)
  python -m pip install -q setuptools versioneer 2>&1 | quiet
  T=$(mktemp -d)
  cp -r "$SHARED/third_party/nitorch" "$T/nitorch-src"
  env -u NI_COMPILED_BACKEND python -m pip install -q --no-build-isolation --no-deps \
    "$T/nitorch-src" 2>&1 | grep -v "^WARNING: Location\|Deprecat\|!!\|\*\*\*\|^\s*$\|^  " || true
  rm -rf "$T"
  python -c "import importlib.util as u; assert u.find_spec('nitorch'), 'NITorch did not install'"
  echo "installed NITorch (pure Python) from $SHARED/third_party/nitorch"
else
  echo "no $SHARED/third_party/nitorch: NITorch's tests will skip"
fi
if [ -d "$SHARED/third_party/torchio" ]; then
  # from a copy, as NITorch (../shared is read-only in CI); its build backend (uv_build) and
  # its dependencies come from PyPI
  T=$(mktemp -d)
  cp -r "$SHARED/third_party/torchio" "$T/torchio-src"
  python -m pip install -q -c "$PIN" "$T/torchio-src" 2>&1 | quiet
  rm -rf "$T"
  python -c "import importlib.util as u; assert u.find_spec('torchio'), 'TorchIO did not install'"
  echo "installed TorchIO 2.0.0a2 from $SHARED/third_party/torchio"
else
  echo "no $SHARED/third_party/torchio: TorchIO's tests will skip"
fi
