#!/usr/bin/env bash
# Two real PyTorch releases sharing one cache root (issue 31). A torch upgrade rebuilds the
# binding (keyed on torch, on the stable ABI as on the classic headers) into a new entry, saying
# "torch changed", and reuses the torch-free kernel library; going back loads the first binding
# silently; `cache clear --stale` in one environment removes the other torch's bindings and
# keeps its own and the kernels.
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
print(nj.grid_pull(x, g).item(), nj.compiled_backend)'
run() {  # run VENV -> stdout in $WORK/out, stderr in $WORK/err
    (cd "$WORK" && NI_JIT_CACHE_DIR="$CACHE" NI_USE_CUDA=0 "$1/bin/python" -c "$CALL" \
        >"$WORK/out" 2>"$WORK/err")
}
fail() { echo "FAIL: $*"; cat "$WORK/err"; exit 1; }
stable() { ls -d "$CACHE"/pushpull-cpu-stable* 2>/dev/null | wc -l; }   # stable-ABI bindings
classic() { ls -d "$CACHE"/pushpull-cpu-torch* 2>/dev/null | wc -l; }   # classic bindings
kernels() { ls -d "$CACHE"/pushpull.*-cpu-* 2>/dev/null | wc -l; }      # torch-free kernels
silent() { [ ! -s "$WORK/err" ] || fail "$1: expected a silent cache hit"; }
same() { [ "$(cat "$WORK/out")" = "$EXPECT" ] || fail "$1: got $(cat "$WORK/out"), expected $EXPECT"; }

echo "== 1. torch $TORCH_A, cold cache: the stable-ABI binding and the one kernel the call needs"
run "$WORK/venv-a"; grep -q "compiling the binding of 'pushpull' for CPU (stable ABI)" "$WORK/err" || fail "no build"
grep -q "compiling grid_pull for 3-D order-1 float32" "$WORK/err" || fail "no kernel build"
[ "$(stable)" = 1 ] && [ "$(kernels)" = 1 ] || fail "expected 1 binding and 1 kernel library"
EXPECT=$(cat "$WORK/out"); echo "   grid_pull -> $EXPECT"
# x[i, j, k] = 20 i + 5 j + k is linear: the order-1 pull at (0.5, 1.25, 2.0) is 18.25
[ "$EXPECT" = "18.25 C" ] || fail "torch $TORCH_A: got $EXPECT, expected 18.25 C"
echo "== 2. torch $TORCH_B, same cache: rebuilds the binding only, reuses the kernel"
T0=$(date +%s.%N); run "$WORK/venv-b"; T1=$(date +%s.%N)
grep -q "torch changed" "$WORK/err" || fail "no binding rebuild after the torch change"
grep -q "compiling grid_pull" "$WORK/err" && fail "the kernel was rebuilt after the torch change"
same "torch $TORCH_B"
[ "$(stable)" = 2 ] && [ "$(kernels)" = 1 ] || fail "expected 2 bindings and the 1 kernel, reused"
echo "   the upgraded process took $(awk "BEGIN{printf \"%.1f\", $T1 - $T0}") s, its binding rebuild included"
echo "== 3. back to torch $TORCH_A: loads its binding without a build"
run "$WORK/venv-a"; silent "torch $TORCH_A after $TORCH_B"; same "torch $TORCH_A"
echo "== 4. classic headers (NI_JIT_BINDING=classic): an upgrade rebuilds the binding only"
export NI_JIT_BINDING=classic
run "$WORK/venv-a"; grep -q "compiling the binding of 'pushpull' for CPU" "$WORK/err" || fail "no classic build"
grep -q "compiling grid_pull" "$WORK/err" && fail "the kernel was rebuilt for the classic binding"
same "torch $TORCH_A, classic"
run "$WORK/venv-b"; grep -q "torch changed" "$WORK/err" || fail "no rebuild after the torch change"
grep -q "compiling grid_pull" "$WORK/err" && fail "the kernel was rebuilt after the torch change"
same "torch $TORCH_B, classic"
[ "$(classic)" = 2 ] || fail "expected 2 classic bindings"
[ "$(kernels)" = 1 ] || fail "expected the 1 kernel library, reused, got $(kernels)"
echo "== 5. back to torch $TORCH_A: loads without a build"
run "$WORK/venv-a"; silent "classic, back to torch $TORCH_A"
unset NI_JIT_BINDING
echo "== 6. every entry listed"
NI_JIT_CACHE_DIR="$CACHE" "$WORK/venv-a/bin/nitorch-jit" cache list
echo "== 7. cache clear --stale under torch $TORCH_A removes only torch $TORCH_B's bindings"
NI_JIT_CACHE_DIR="$CACHE" "$WORK/venv-a/bin/nitorch-jit" cache clear --stale
[ "$(stable)" = 1 ] && [ "$(classic)" = 1 ] || fail "expected torch $TORCH_A's 2 bindings left"
ls "$CACHE" | grep "torch$TORCH_B" && fail "torch $TORCH_B's bindings were kept"
[ "$(kernels)" = 1 ] || fail "the kernel library (reachable from both) was removed"
run "$WORK/venv-a"; silent "torch $TORCH_A after clear --stale"; same "torch $TORCH_A at the end"
echo "PASS: a torch upgrade rebuilds the binding only (stable ABI and classic headers alike); kernels reused, entries coexist, stale entries clear"
