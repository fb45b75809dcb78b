#!/usr/bin/env bash
# The kernels under both compilers and both sanitizers (issue 40), for CI beside the suite:
#   1. gcc (g++) and then clang (clang++), each with NI_JIT_SANITIZE=1 (ASan + UBSan, the
#      runtime preloaded) and a fresh cache: the kernel tests of every module (pushpull,
#      splinc, resize and the lines engine they share, regsolve). Any report fails: UBSan is
#      built with -fno-sanitize-recover, ASan halts on its first error, and the log is
#      searched for "runtime error" / "ERROR: AddressSanitizer" all the same.
#   2. clang without sanitizers: the same tests, on torch's threads (OMP_NUM_THREADS=2).
#   3. differential: a fixed set of float64 outputs (scripts/compiler_diff.py) from the gcc
#      build and from the clang build, in separate processes, equal to 1e-10.
# Installs clang, libomp-dev and libclang-rt-14-dev with apt when they are missing (as root).
#
#   scripts/check_sanitizers.sh [PYTHON]     (default: python on PATH)
#
# NI_SANITIZE_TESTS overrides the test selection (pytest arguments); NI_SANITIZE_KEEP=1 keeps
# the work folder (caches, logs). Exit status: 0 when every step passed.
set -uo pipefail

PY=${1:-python}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nj_sanitizers.XXXXXX")
[ "${NI_SANITIZE_KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
START=$(date +%s)
say() { echo "check_sanitizers [$(( $(date +%s) - START )) s]: $*"; }

# ------------------------------------------------------------------ what it needs
need=()
command -v clang++ >/dev/null || need+=(clang)
dpkg -s libomp-dev >/dev/null 2>&1 || need+=(libomp-dev)
if ! command -v clang++ >/dev/null \
    || [ ! -f "$(clang++ -print-file-name="libclang_rt.asan-$(uname -m).so")" ]; then
  need+=(libclang-rt-14-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    "${need[@]}" >/dev/null || { say "FAILED: apt-get install ${need[*]}"; exit 1; }
fi
for tool in g++ clang++; do
  command -v $tool >/dev/null || { say "FAILED: $tool is not installed"; exit 1; }
done

# The kernel tests: every compiled kernel of each module against its pure-PyTorch twin and
# closed forms (the lines engine is splinc's and resize's); not the API or client suites. Left
# out: the slow cases and the larger repeats of the fast paths (the same kernels, larger), and
# the comparisons with scipy and torch-interpol (peers, the same kernel calls as the twin's).
if [ -n "${NI_SANITIZE_TESTS:-}" ]; then
  read -r -a ARGS <<< "$NI_SANITIZE_TESTS"
else
  ARGS=(tests/ops/pushpull/test_c.py tests/ops/pushpull/test_fast.py
        tests/ops/splinc/test_splinc.py tests/ops/resize/test_resize.py
        tests/ops/regsolve/test_c.py -m "not slow" -k "not scipy and not interpol and not larger")
fi

failed=()
# run LABEL ENV...: the kernel tests in a fresh cache, with ENV
run() {
  local label=$1; shift
  local log="$WORK/$label.log" t0=$(date +%s)
  say "$label: ${*}"
  # the suite's conftest prebuilds this cache (nitorch-jit build: every module's kernels, in
  # parallel) and runs the tests on pytest-xdist's workers; the sanitizers write their reports
  # into files (a worker's stderr may be lost when it dies), searched with the log
  env "$@" NI_JIT_TEST_CACHE="$WORK/cache-$label" OMP_NUM_THREADS=2 \
    UBSAN_OPTIONS="print_stacktrace=1:log_path=$WORK/report-$label" \
    "$PY" -m pytest -q -x -p no:cacheprovider "${ARGS[@]}" > "$log" 2>&1
  local rc=$?
  local reports
  reports=$(cat "$log" "$WORK/report-$label".* 2>/dev/null | grep -cE \
    "runtime error|ERROR: AddressSanitizer|SUMMARY: (Address|UndefinedBehavior)Sanitizer")
  if [ $rc -ne 0 ] || [ "$reports" -gt 0 ]; then
    say "$label: FAILED (exit $rc, $reports sanitizer reports) in $(( $(date +%s) - t0 )) s; log:"
    cat "$log" "$WORK/report-$label".* 2>/dev/null \
      | grep -E -A30 "runtime error|ERROR: AddressSanitizer" | head -80
    tail -30 "$log"
    failed+=("$label")
  else
    say "$label: passed in $(( $(date +%s) - t0 )) s ($(tail -1 "$log"))"
  fi
}

# libstdc++ after the runtime: ASan intercepts C++ throws and resolves the real __cxa_throw at
# start, where python has not loaded libstdc++ yet (else a binding's first exception ends the
# process: "CHECK failed ... real___cxa_throw")
GCC_RT="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so.6)"
CLANG_RT="$(clang++ -print-file-name="libclang_rt.asan-$(uname -m).so")"
CLANG_RT="$CLANG_RT $(clang++ -print-file-name=libstdc++.so.6)"
# detect_leaks=0: Python itself leaks at exit
run gcc-asan-ubsan CXX=g++ NI_JIT_SANITIZE=1 LD_PRELOAD="$GCC_RT" \
  ASAN_OPTIONS="detect_leaks=0:log_path=$WORK/report-gcc-asan-ubsan"
run clang-asan-ubsan CXX=clang++ NI_JIT_SANITIZE=1 LD_PRELOAD="$CLANG_RT" \
  ASAN_OPTIONS="detect_leaks=0:log_path=$WORK/report-clang-asan-ubsan"
run clang CXX=clang++

# ------------------------------------------------------------------ gcc and clang agree
say "differential: float64 outputs of the gcc build and of the clang build"
ok=1
for cxx in g++ clang++; do
  cache="$WORK/cache-diff-$cxx"
  [ $cxx = clang++ ] && cache="$WORK/cache-clang"  # its kernels are built: reuse them
  env CXX=$cxx NI_JIT_CACHE_DIR="$cache" NI_COMPILED_BACKEND=C \
    "$PY" scripts/compiler_diff.py compute "$WORK/$cxx.pt" > "$WORK/diff-$cxx.log" 2>&1 \
    || { ok=0; say "differential: compute with $cxx FAILED"; tail -30 "$WORK/diff-$cxx.log"; }
done
if [ $ok = 1 ]; then
  "$PY" scripts/compiler_diff.py compare "$WORK/g++.pt" "$WORK/clang++.pt" || ok=0
fi
[ $ok = 1 ] || failed+=(differential)

say "done in $(( $(date +%s) - START )) s"
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "every step passed"
