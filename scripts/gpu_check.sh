#!/usr/bin/env bash
# One command for a GPU machine: build the CUDA kernels (pushpull, splinc, resize, regsolve) for
# the GPU present, run the CUDA tests, run the GPU benchmarks, print a summary. Runs from the
# source tree (no install, no network), with a fresh cache in a temporary folder (so
# platformdirs is never needed).
#
# usage: scripts/gpu_check.sh
#   PYTHON                 interpreter with torch (CUDA build), ninja, numpy, pytest (default python)
#   TORCH_CUDA_ARCH_LIST   default: mine (the visible GPU)
#   MAX_JOBS               parallel compile jobs (default: number of cores)
#   KEEP=1                 keep the temporary cache and logs
#   GPU_CHECK_OUT=DIR      also copy the logs and bench.json there
#   GPU_CHECK_TESTS="..."  pytest targets instead of the default list
#   GPU_CHECK_BENCH=0      build and test only
# Exit status: 0 all tests passed and the speed targets were met, 1 a step failed, 2 the tests
# passed but a speed target was missed.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
command -v "$PY" >/dev/null 2>&1 || PY=python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nitorch_jit_gpu_check.XXXXXX")
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NI_JIT_CACHE_DIR="$WORK/cache"
export NI_JIT_TEST_CACHE="$NI_JIT_CACHE_DIR"   # the test suite reuses the libraries built here
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-mine}
export MAX_JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 8)}
unset NI_COMPILED_BACKEND NI_USE_CUDA
mkdir -p "$NI_JIT_CACHE_DIR"
T0=$(date +%s)
STATUS=0

TIMEOUT=""
command -v timeout >/dev/null 2>&1 && TIMEOUT="timeout"
limit() {  # limit SECONDS CMD...: run with a time limit when `timeout` exists
    local s=$1; shift
    if [ -n "$TIMEOUT" ]; then timeout "$s" "$@"; else "$@"; fi
}
cleanup() {
    if [ -n "${GPU_CHECK_OUT:-}" ]; then
        mkdir -p "$GPU_CHECK_OUT" && cp "$WORK"/*.txt "$WORK"/*.json "$GPU_CHECK_OUT"/ 2>/dev/null
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "== environment"
limit 120 "$PY" - <<'EOF' || { echo "FAIL: torch with CUDA is not usable"; exit 1; }
import sys, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible to torch")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, sm {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB")
from nitorch_jit.jit import toolchain
home, origin = toolchain.find_cuda_home()
print(f"nvcc {toolchain.nvcc_version(home)} at {home} ({origin}); ninja {toolchain.find_ninja()[1]}")
print(f"arch list: {toolchain.parse_arch_list()}")
EOF
# Python packages the machine lacks (nibabel for the reslice test), carried as wheels in .whl/
# (the device tool's README): installed offline into the work folder
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
        "$ROOT"/.whl/*.whl && export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
echo "cores: $(nproc 2>/dev/null || echo ?), MAX_JOBS=$MAX_JOBS, cache $NI_JIT_CACHE_DIR"

echo "== first CUDA use (issue 31): a fresh process, a cold cache, one 3-D order-1 float32 grid_pull"
# what a new user waits for: the CUDA binding (host compiler) and the one kernel library the call
# needs (nvcc, this GPU only), built side by side; then the same in a warm process
for run in cold warm; do
    limit 600 env NI_JIT_CACHE_DIR="$WORK/first_use_cache" NI_COMPILED_BACKEND=C "$PY" - "$run" \
        2>"$WORK/first_use_$run.log" <<'EOF' | tee -a "$WORK/first_use.txt" || { echo "FAIL: first CUDA use ($run)"; STATUS=1; }
import sys, time
t0 = time.monotonic()
import torch, nitorch_jit as nj
x = torch.randn(1, 2, 32, 32, 32, device="cuda")
g = torch.rand(1, 32, 32, 32, 3, device="cuda") * 31
torch.cuda.synchronize()
t = time.monotonic()
y = nj.grid_pull(x, g, interpolation=1, bound="dct2")
torch.cuda.synchronize()
call = time.monotonic() - t
ref = nj.grid_pull(x.cpu(), g.cpu(), interpolation=1, bound="dct2")
err = (y.cpu() - ref).abs().max().item()
assert err < 1e-4, err
print(f"FIRST_USE {sys.argv[1]}: first call {call:.1f} s, process {time.monotonic() - t0:.1f} s, "
      f"max |CUDA - CPU| {err:.1e}")
EOF
done
grep -h "compiling\|built" "$WORK"/first_use_cold.log | sed 's/^/  /'

echo "== build (every module, CUDA and CPU, in parallel)"
# one process per library; ninja inside each gets a share of the cores
JOBS_EACH=$(( MAX_JOBS / 4 )); [ $JOBS_EACH -lt 1 ] && JOBS_EACH=1
BUILD_FAIL=0
PIDS=()
for module in pushpull splinc resize regsolve; do
    for device in cuda cpu; do
        limit 900 env NI_COMPILED_BACKEND=C NI_JIT_VERBOSE=0 MAX_JOBS=$JOBS_EACH "$PY" - "$module" "$device" \
            >"$WORK/build_${module}_$device.log" 2>&1 <<'EOF' &
import sys, time
from nitorch_jit import backends
module, device = sys.argv[1:3]
t = time.monotonic()
assert backends.ensure(module, device) == "C", backends.status()
print(f"BUILD {module} {device} {time.monotonic() - t:.1f} s", flush=True)
assert "platformdirs" not in sys.modules, "platformdirs was imported"
EOF
        PIDS+=($!)
    done
done
for pid in "${PIDS[@]}"; do wait "$pid" || BUILD_FAIL=1; done
# the kernel libraries (CPU: per op, dtype and fast path; CUDA: per op and dtype), as one pool:
# what `nitorch-jit build` prebuilds for offline use; the tests then compile nothing
limit 600 "$PY" -m nitorch_jit build --cuda >"$WORK/build_kernels.log" 2>&1 || BUILD_FAIL=1
cat "$WORK"/build_*.log | tee "$WORK/build.txt"
if [ $BUILD_FAIL -ne 0 ]; then
    echo "FAIL: build (logs under $NI_JIT_CACHE_DIR/.failed)"; KEEP=1; exit 1
fi

echo "== tests"
# the real kernels on the GPU; not the host emulation (tests/cuda/emu/test_*.py) nor the
# compile-only check (the build above did it for real), which CI runs without a GPU
TESTS=${GPU_CHECK_TESTS:-tests/cuda/gpu/test_pushpull.py tests/cuda/gpu/test_lines.py tests/cuda/gpu/test_regsolve.py \
tests/cuda/gpu/test_ndimage.py \
tests/cuda/test_build.py tests/frontends/test_reslice.py::test_cuda_matches_cpu \
tests/jit/test_jit.py::test_arch_list_parsing tests/jit/test_jit.py::test_nvcc_wrapper_is_resolved}
# shellcheck disable=SC2086
limit 600 "$PY" -m pytest -q -o addopts= -p no:cacheprovider -rs --durations=5 -k "not builds_and_registers" \
    $TESTS 2>&1 | tee "$WORK/pytest.txt"
TESTS_RC=$?
[ $TESTS_RC -ne 0 ] && STATUS=1

if [ "${GPU_CHECK_BENCH:-1}" = 0 ]; then echo "benchmarks skipped (GPU_CHECK_BENCH=0)"; exit $STATUS; fi

echo "== benchmark"
limit 400 "$PY" scripts/bench_cuda.py --json "$WORK/bench.json" 2>&1 | tee "$WORK/bench.txt"
BENCH_RC=$?
[ $BENCH_RC -ne 0 ] && STATUS=1
limit 200 "$PY" scripts/bench_cuda_resize.py --json "$WORK/bench_resize.json" 2>&1 | tee "$WORK/bench_resize.txt"
[ $? -ne 0 ] && STATUS=1
limit 300 "$PY" scripts/bench_cuda_regsolve.py --json "$WORK/bench_regsolve.json" 2>&1 | tee "$WORK/bench_regsolve.txt"
[ $? -ne 0 ] && STATUS=1
# NumPy code compiled under `with torch.device("cuda")` (scripts/bench_ndimage.py --pipeline)
limit 300 "$PY" scripts/bench_ndimage.py --pipeline --device cuda --threads "$(nproc 2>/dev/null || echo 8)" 2>&1 | tee "$WORK/bench_ndimage.txt"
[ $? -ne 0 ] && STATUS=1
if [ $STATUS -eq 0 ] && grep -q "^TARGET .* MISS$" "$WORK/bench.txt"; then STATUS=2; fi

echo
echo "================ summary ================"
grep "^BUILD" "$WORK/build.txt" | sed 's/^BUILD /first build: /'
grep -h "^FIRST_USE" "$WORK/first_use.txt" 2>/dev/null | sed "s/^FIRST_USE /first CUDA use, /" || true
echo "tests: $(grep -E '(passed|failed|error)' "$WORK/pytest.txt" | tail -1) (exit $TESTS_RC)"
grep -E "^(bench_cuda:|copy bandwidth|vs grid_sample|TARGET|tiles off|ratio)" "$WORK/bench.txt" || echo "benchmark: no result (exit $BENCH_RC)"
grep -E "^(grid_sample|pull order|pull_backward|push order|grad_dot|affine_pull|grid_pull order|2-D)" "$WORK/bench.txt" | sed 's/^/  /' || true
echo "prefilter / resize (bench_cuda_resize.py):"
grep -E "^(check:|spline|resize|restrict| )" "$WORK/bench_resize.txt" | sed 's/^/  /' || true
echo "regulariser / FMG (bench_cuda_regsolve.py):"
grep -E "^(copy bandwidth|check:|case |regulariser|reg_|solve_grid|fmg| )" "$WORK/bench_regsolve.txt" | sed 's/^/  /' || true
echo "NumPy pipeline under torch.device(\"cuda\") (bench_ndimage.py --pipeline):"
grep -E "^(first compile|\| (compiled|eager|scipy) )" "$WORK/bench_ndimage.txt" | sed 's/^/  /' || true
echo "total: $(( $(date +%s) - T0 )) s, status $STATUS"
exit $STATUS
