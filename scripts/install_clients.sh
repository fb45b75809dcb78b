#!/usr/bin/env bash
# Install the clients that tests/compat runs against, into the active Python: MONAI (with
# parameterized, which its tests use) from PyPI, and NITorch as pure Python from the vendored
# copy in ../shared/third_party/nitorch (NITorch is not on PyPI). Without ../shared (a user's
# checkout) only MONAI is installed and the NITorch tests skip.
#
# Usage: scripts/install_clients.sh [SHARED]   (default: NI_JIT_SHARED, else ../shared)
set -euo pipefail
REPO=$(realpath "$(dirname "$0")/..")
SHARED=${1:-${NI_JIT_SHARED:-$REPO/../shared}}
[ -d "$SHARED/third_party" ] || SHARED=/work/shared
quiet() { grep -v "^WARNING: Location" || true; }
python -m pip install -q monai parameterized 2>&1 | quiet
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
