#!/usr/bin/env bash
# The classic binding on the oldest torch we support (issue 31): torch 2.4, whose headers are
# the classic ones only and whose libraries use the old libstdc++ ABI, builds the pushpull
# binding from the same source as the stable one, shares the torch-free kernel libraries, and
# gives the TORCH twin's results to 1e-10 in float64.
#
# usage: scripts/check_oldest_torch.sh       (venv and cache under $WORK, default /tmp)
#   TORCH_OLD   torch version (default 2.4.1)
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_OLD=${TORCH_OLD:-2.4.1}
WORK=${WORK:-/tmp/nitorch_jit_upgrade}
PY=${PYTHON:-python3}
VENV="$WORK/venv-oldest"
CACHE="$WORK/cache-oldest"
mkdir -p "$WORK"; rm -rf "$CACHE"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_OLD')" 2>/dev/null; then
    rm -rf "$VENV"; "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q "torch==$TORCH_OLD" "numpy<2" ninja platformdirs filelock 2>&1 | grep -v "^WARNING: Location" || true
fi
"$VENV/bin/pip" install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true

NI_USE_CUDA=0 NI_COMPILED_BACKEND=C NI_JIT_CACHE_DIR="$CACHE" "$VENV/bin/python" - <<'PY'
import torch
import nitorch_jit as nj
from nitorch_jit.backends import compiled
from nitorch_jit.torch_impl import KERNELS as TWIN

assert compiled.binding_abi() == "classic", compiled.binding_abi()
torch.manual_seed(0)
worst = 0.0
for dim in (1, 2, 3):
    for order in (0, 1, 3):
        x = torch.randn(2, 3, *[6] * dim, dtype=torch.float64)
        g = torch.rand(2, *[5] * dim, dim, dtype=torch.float64) * 7 - 0.5
        v = torch.randn(2, 3, *[5] * dim, dtype=torch.float64)
        o, b = [order] * dim, [2] * dim
        pairs = [(nj.grid_pull(x, g, order, "dct2", True), TWIN["grid_pull"](x, g, o, b, True)),
                 (nj.grid_push(v, g, [6] * dim, order, "dct2", True),
                  TWIN["grid_push"](v, g, [6] * dim, o, b, True)),
                 (nj.grid_grad(x, g, order, "dct2", True), TWIN["grid_grad"](x, g, o, b, True))]
        worst = max([worst] + [(a - t).abs().max().item() for a, t in pairs])
print(f"torch {torch.__version__}, classic binding: worst |C - TORCH| in float64 = {worst:.2e}")
assert worst < 1e-10
try:
    torch.ops.nitorch_jit.grid_pull(torch.zeros(1, 1, 4), torch.zeros(1, 3, 2), [1], [2], True)
    raise SystemExit("FAIL: a bad grid was accepted")
except RuntimeError as err:
    assert str(err).startswith("grid must have D + 2 = 4 dims"), str(err)
PY
echo "PASS: the classic binding on torch $TORCH_OLD"
