#!/usr/bin/env bash
# Two real PyTorch releases sharing one cache root: the second rebuilds the binding into a new
# entry and reuses the torch-free kernel library of the first (issue 31), both bindings coexist,
# going back to the first loads without a build, and `cache clear --stale` in one environment
# removes the other's binding and keeps the kernels.
#
# usage: scripts/check_torch_upgrade.sh            (venvs and cache under $WORK, default /tmp)
#   TORCH_A / TORCH_B   torch versions (default 2.13.0 and 2.14.1)
#   WORK                where the venvs and the shared cache live
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_A=${TORCH_A:-2.13.0}
TORCH_B=${TORCH_B:-2.14.1}
WORK=${WORK:-/tmp/nitorch_jit_upgrade}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
CACHE="$WORK/cache"
rm -rf "$CACHE" "$WORK/dist"

echo "== building the wheel"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" . >/dev/null
WHEEL=$(ls "$WORK"/dist/nitorch_jit-*.whl)
case "$WHEEL" in *py3-none-any.whl) ;; *) echo "FAIL: not a pure wheel: $WHEEL"; exit 1;; esac
LISTING=$(unzip -l "$WHEEL")  # (not piped into grep -q: pipefail would see unzip's SIGPIPE)
for f in core/bounds.h lines/filter.h pushpull/cpu/pull.cpp pushpull/cpu/kernels.def pushpull/cpu/avx2/select.h pushpull/cuda/binding.cpp pushpull/cuda/kernels.def; do
    grep -q "nitorch_jit/csrc/$f" <<<"$LISTING" || { echo "FAIL: wheel lacks csrc/$f"; exit 1; }
done

venv() {  # venv DIR TORCH_VERSION
    if [ ! -x "$1/bin/python" ] || ! "$1/bin/python" -c "import torch,sys; sys.exit(torch.__version__.split('+')[0] != '$2')" 2>/dev/null; then
        rm -rf "$1"; "$PY" -m venv "$1"
        "$1/bin/pip" install -q "torch==$2" numpy ninja platformdirs filelock 2>&1 | grep -v "^WARNING: Location" || true
    fi
    "$1/bin/pip" install -q --force-reinstall --no-deps "$WHEEL" 2>&1 | grep -v "^WARNING: Location" || true
}
echo "== venv A: torch $TORCH_A"; venv "$WORK/venv-a" "$TORCH_A"
echo "== venv B: torch $TORCH_B"; venv "$WORK/venv-b" "$TORCH_B"

CALL='import torch, nitorch_jit as nj
x = torch.arange(60.).reshape(1, 1, 3, 4, 5); g = torch.tensor([[[[[0.5, 1.25, 2.0]]]]])
print(torch.__version__, nj.grid_pull(x, g).item(), nj.compiled_backend)'
run() {  # run VENV -> stderr in $WORK/err
    (cd "$WORK" && NI_JIT_CACHE_DIR="$CACHE" NI_USE_CUDA=0 "$1/bin/python" -c "$CALL" 2>"$WORK/err")
}
fail() { echo "FAIL: $*"; cat "$WORK/err"; exit 1; }
entries() { ls -d "$CACHE"/pushpull-cpu-* 2>/dev/null | wc -l; }      # bindings
kernels() { ls -d "$CACHE"/pushpull.*-cpu-* 2>/dev/null | wc -l; }     # torch-free kernels

echo "== 1. torch $TORCH_A, cold cache: the binding and the one kernel the call needs"
run "$WORK/venv-a"; grep -q "compiling the binding of 'pushpull'" "$WORK/err" || fail "no build"
grep -q "compiling grid_pull for 3-D order-1 float32" "$WORK/err" || fail "no kernel build"
[ "$(entries)" = 1 ] || fail "expected 1 binding"
[ "$(kernels)" = 1 ] || fail "expected 1 kernel library, got $(kernels)"
echo "== 2. torch $TORCH_B, same cache: rebuilds the binding only, reuses the kernel"
run "$WORK/venv-b"; grep -q "torch changed" "$WORK/err" || fail "no rebuild after the torch change"
grep -q "compiling grid_pull" "$WORK/err" && fail "the kernel was rebuilt after the torch change"
[ "$(entries)" = 2 ] || fail "expected 2 bindings"
[ "$(kernels)" = 1 ] || fail "expected the 1 kernel library, reused, got $(kernels)"
echo "== 3. back to torch $TORCH_A: loads without a build"
run "$WORK/venv-a"; [ ! -s "$WORK/err" ] || fail "expected a silent cache hit"
echo "== 4. both entries listed"
NI_JIT_CACHE_DIR="$CACHE" "$WORK/venv-a/bin/nitorch-jit" cache list
echo "== 5. cache clear --stale under torch $TORCH_A removes only torch $TORCH_B's binding"
NI_JIT_CACHE_DIR="$CACHE" "$WORK/venv-a/bin/nitorch-jit" cache clear --stale
[ "$(entries)" = 1 ] || fail "expected 1 binding left"
[ "$(kernels)" = 1 ] || fail "the kernel library (reachable from both) was removed"
ls "$CACHE" | grep -q "torch$TORCH_A" || fail "torch $TORCH_A's entry was removed"
run "$WORK/venv-a"; [ ! -s "$WORK/err" ] || fail "torch $TORCH_A's entry no longer loads"
echo "PASS: torch upgrade rebuilds the binding only, kernels reused, entries coexist, stale entries clear"
