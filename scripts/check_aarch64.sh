#!/usr/bin/env bash
# Linux aarch64, run for real under emulation (issue 40, item 4).
#
# Cross-builds the kernel libraries and bindings with g++-aarch64-linux-gnu and runs a subset
# of the kernel tests of every module (C against the TORCH twin) in an aarch64 CPython with
# torch's aarch64 wheel from PyPI, under qemu-user. The emulated Python's JIT calls the cross
# compiler through CXX: qemu-user runs an x86-64 program that a guest execve()s natively, so
# nothing in the loader knows it is cross-compiling.
#
#   scripts/check_aarch64.sh [extra pytest arguments]
#
# Environment:
#   NJ_AARCH64_DIR    work folder: downloads, sysroot, wheels, kernel cache
#                     (default /tmp/nitorch_jit_aarch64); kept between runs, so a second run
#                     downloads nothing and reuses the kernels whose sources did not change
#   NJ_AARCH64_TORCH  torch release (default 2.10.0: the newest on PyPI whose aarch64 wheel is
#                     CPU-only; 2.11 and later are CUDA builds that need ~3 GB of nvidia
#                     wheels to import, so they run the classic binding, not the stable ABI)
#   NJ_AARCH64_FRESH  1: clear the kernel cache first (a cold build of everything)
#   PYTHON            host Python with pip, for the downloads (default: the repo's .venv, else python3)
#
# Needs root for apt (it installs g++-aarch64-linux-gnu, qemu-user, ninja-build once).
# Prints one summary line; exits non-zero on any failure or when no test ran.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${NJ_AARCH64_DIR:-/tmp/nitorch_jit_aarch64}
TORCH_VERSION=${NJ_AARCH64_TORCH:-2.10.0}
PY_VER=3.11  # Debian bookworm's python3.11 is the sysroot's interpreter
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=python3; fi
fi
T0=$(date +%s)
say() { echo "[check_aarch64 +$(( $(date +%s) - T0 ))s] $*" >&2; }
mkdir -p "$WORK"

# ------------------------------------------------------------------ host tools (apt)
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v ninja >/dev/null || need+=(ninja-build)  # the classic binding's build (cpp_extension)
# apt-get download of arm64 packages needs the architecture in dpkg's list
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
  need+=(__update__)
fi
if [ ${#need[@]} -gt 0 ]; then
  say "apt: installing ${need[*]}"
  apt-get update -q >/dev/null
  pkgs=("${need[@]/__update__/}")
  if [ -n "${pkgs[*]// /}" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${pkgs[*]} >/dev/null
  fi
fi

# ------------------------------------------------------------------ sysroot (Debian arm64)
# python3.11 and the libraries it and torch load, unpacked (no dpkg database, no maintainer
# scripts): qemu -L maps the guest's /lib and /usr onto it.
SYSROOT=$WORK/sysroot
if [ ! -f "$SYSROOT/.done" ]; then
  say "sysroot: downloading python$PY_VER and its libraries for arm64"
  rm -rf "$SYSROOT" "$WORK/debs"
  mkdir -p "$WORK/debs" "$SYSROOT"
  # the dependency closure, arm64 packages only (dpkg, tar, perl... are not needed to run)
  mapfile -t debs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances --no-pre-depends \
      "python$PY_VER:arm64" libstdc++6:arm64 libgomp1:arm64 2>/dev/null \
    | grep -v '^[ <]' | grep ':arm64$' | grep -vE '^(dpkg|tar|install-info|perl|libperl)' | sort -u)
  (cd "$WORK/debs" && apt-get download "${debs[@]}" >/dev/null 2>&1) \
    || { say "apt-get download failed (try apt-get update)"; exit 2; }
  for d in "$WORK"/debs/*.deb; do dpkg-deb -x "$d" "$SYSROOT"; done
  touch "$SYSROOT/.done"
fi

# ------------------------------------------------------------------ wheels (PyPI, aarch64)
SITE=$WORK/site-torch$TORCH_VERSION
# setuptools: torch's cpp_extension imports it (the classic binding's build), and torch's
# wheel requires it only from Python 3.12
REQS="numpy scipy pytest filelock platformdirs typing-extensions sympy networkx jinja2 fsspec setuptools"
if [ "$(cat "$SITE/.done" 2>/dev/null)" != "$REQS" ]; then
  say "wheels: torch $TORCH_VERSION and the test dependencies for manylinux aarch64"
  mkdir -p "$WORK/wheels"
  pd=("$PYTHON" -m pip download -q --only-binary=:all: --python-version "$PY_VER"
      --implementation cp --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64
      --platform manylinux2014_aarch64 -d "$WORK/wheels")
  # pip judges a requirement's markers by the host (x86_64), so torch's would pull CUDA
  # wheels in: torch and torch-interpol (which requires torch) come without their own
  "${pd[@]}" --no-deps "torch==$TORCH_VERSION" torch-interpol 2>&1 | grep -v '^WARNING: Location' || true
  "${pd[@]}" $REQS 2>&1 | grep -v '^WARNING: Location' || true
  rm -rf "$SITE"; mkdir -p "$SITE"
  # one folder on PYTHONPATH (a wheel is a zip of its site-packages tree); the torch wheel
  # of another release, if the cache holds one, stays out
  for w in "$WORK"/wheels/*.whl; do
    case $(basename "$w") in torch-*) [[ $(basename "$w") == torch-$TORCH_VERSION-* ]] || continue;; esac
    unzip -q -o "$w" -d "$SITE"
  done
  [ -d "$SITE/torch" ] || { say "no aarch64 wheel of torch $TORCH_VERSION"; exit 2; }
  echo "$REQS" > "$SITE/.done"
fi

# ------------------------------------------------------------------ the emulated python
# sys.executable is this launcher (qemu's -0 sets argv[0]), so what the JIT starts with
# sys.executable (the classic binding's build worker) is emulated too
mkdir -p "$WORK/bin"
cat > "$WORK/bin/python3" <<EOF
#!/bin/sh
exec qemu-aarch64 -L "$SYSROOT" -0 "\$0" "$SYSROOT/usr/bin/python$PY_VER" "\$@"
EOF
chmod +x "$WORK/bin/python3"

CACHE=$WORK/kernel-cache
[ "${NJ_AARCH64_FRESH:-0}" = 1 ] && rm -rf "$CACHE"
mkdir -p "$CACHE"

# ------------------------------------------------------------------ portable code vectorises
# One kernel unit (regsolve's: the lanes of GCC vector types and the plain loops) compiled as
# the JIT does, with the vectoriser's report; and NEON arithmetic in it
say "vectoriser: regsolve's kernel unit for aarch64"
VEC=$WORK/vec; mkdir -p "$VEC"
aarch64-linux-gnu-g++ -O3 -std=c++17 -shared -fPIC -fvisibility=hidden -DNJ_KERNEL_LIB \
  -DNJ_KERNEL_reg_relax_ -DNJ_KERNEL_reg_matvec -DNJ_KERNEL_T=double -I"$REPO/csrc" \
  "$REPO/csrc/regsolve/cpu/kernels.cpp" -o "$VEC/regsolve.so" -fopt-info-vec-optimized 2> "$VEC/regsolve.vec"
vec_loops=$(grep -c "csrc/.*loop vectorized" "$VEC/regsolve.vec" || true)
neon() {  # NEON (vector-register) floating-point arithmetic instructions in a library
  aarch64-linux-gnu-objdump -d --no-show-raw-insn "$1" \
    | awk '{print $2, $3}' | grep -cE '^(fmla|fmls|fmul|fadd|fsub|fdiv|fsqrt|fmax|fmin|fneg|fabs) v' || true
}
say "vectoriser: $vec_loops loops of csrc/ vectorised, $(neon "$VEC/regsolve.so") NEON float instructions"
# the x86 paths must compile out: no AVX2 function may be left in an aarch64 library
avx_left=$(aarch64-linux-gnu-nm -C "$VEC/regsolve.so" | grep -ci avx2 || true)

# ------------------------------------------------------------------ the kernel tests
# C against the TORCH twin for every module and kernel family, a subset: everything runs
# emulated (~25x the CPU time of native). Measured on the 2-core CI VM under load (cold run,
# 2026-12-06): 267 tests in 980 s, of which resize's scipy.ndimage.zoom oracle took 227 s for
# 15 cases (an oracle, not the twin: left to the native suite); the prebuild of every kernel
# library and binding (tests/conftest.py) ~1260 s; each emulated torch import ~3-5 min.
TESTS=(
  # pushpull: the six grid ops (pull/push/dot units), float64 and float32, strides, backward
  "tests/ops/pushpull/test_c.py::test_vs_torch"
  "tests/ops/pushpull/test_c.py::test_float32"
  "tests/ops/pushpull/test_c.py::test_float32_linear_pull_vectorised"
  # regsolve: matvec, precond, relax (one kernel unit), float32, both vector builds
  "tests/ops/regsolve/test_c.py::test_matvec_random_taps"
  "tests/ops/regsolve/test_c.py::test_matvec_every_bound_per_axis"
  "tests/ops/regsolve/test_c.py::test_matvec_noncontiguous_and_float32"
  "tests/ops/regsolve/test_c.py::test_long_rows_both_vector_builds"
  "tests/ops/regsolve/test_c.py::test_precond_random_taps"
  "tests/ops/regsolve/test_c.py::test_relax_random_taps"
  "tests/ops/regsolve/test_c.py::test_relax_periods_and_strides"
  # resize: resize and resize_adjoint (restrict), prefilter, float32
  "tests/ops/resize/test_resize.py::test_c_vs_torch"
  "tests/ops/resize/test_resize.py::test_c_strided_and_float32"
  "tests/ops/resize/test_resize.py::test_restrict_is_adjoint"
  # splinc: spline_coeff, 1-4 dims, strides, float32
  "tests/ops/splinc/test_splinc.py::test_c_vs_torch"
  "tests/ops/splinc/test_splinc.py::test_c_vs_torch_strided"
  "tests/ops/splinc/test_splinc.py::test_c_vs_torch_planes"
  "tests/ops/splinc/test_splinc.py::test_vs_scipy"
)
say "tests: ${#TESTS[@]} groups in aarch64 python $PY_VER, torch $TORCH_VERSION, under qemu-user"
# -o addopts=: one process, not the suite's pytest-xdist workers (each would import torch
# under emulation, minutes apiece; the aarch64 site has no xdist)
JUNIT=$WORK/junit.xml
rm -f "$JUNIT"
T1=$(date +%s)
set +e
(cd "$REPO" && env PYTHONPATH="$SITE:$REPO" PYTHONDONTWRITEBYTECODE= \
   CXX=aarch64-linux-gnu-g++ NI_USE_CUDA=0 NI_JIT_TEST_CACHE="$CACHE" \
   "$WORK/bin/python3" -m pytest -q -p no:cacheprovider -o addopts= -m "not slow" --junitxml="$JUNIT" \
   "${TESTS[@]}" "$@")
rc=$?
set -e
T2=$(date +%s)

# ------------------------------------------------------------------ what the JIT built
libs=$(find "$CACHE" -name '*.so' -not -path '*/.tmp*' 2>/dev/null | sort)
n_libs=$(printf '%s\n' $libs | grep -c . || true)
non_arm=0
declare -A neon_of=()
for l in $libs; do
  aarch64-linux-gnu-readelf -h "$l" 2>/dev/null | grep -q 'Machine: *AArch64' || non_arm=$((non_arm + 1))
  avx_left=$((avx_left + $(aarch64-linux-gnu-nm -C "$l" 2>/dev/null | grep -ci avx2 || true)))
  # kernel libraries only (<module>.<op>.<dtype>.<variant>-cpu-...): NEON per module
  entry=$(basename "$(dirname "$l")")
  case $entry in *.*.*.*-cpu-*)
    m=${entry%%.*}; neon_of[$m]=$(( ${neon_of[$m]:-0} + $(neon "$l") ));;
  esac
done
neon_summary=""
for m in $(printf '%s\n' "${!neon_of[@]}" | sort); do neon_summary+=" $m=${neon_of[$m]}"; done

# the suite's prebuild (tests/conftest.py: every kernel library and binding, by the project's
# own `nitorch_jit build`, in the emulated Python), where the conftest runs one
prebuild=$("$PYTHON" - "$CACHE/.suite-prebuild.json" <<'EOF'
import json, sys
try:
    print("ok" if json.load(open(sys.argv[1]))["returncode"] == 0 else "FAILED")
except (OSError, ValueError, KeyError):
    print("none")
EOF
)
[ "$prebuild" = FAILED ] && say "prebuild failed: $CACHE/.suite-prebuild.json"

# ------------------------------------------------------------------ summary
counts=$("$PYTHON" - "$JUNIT" <<'EOF'
import sys, collections, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("no-junit 0 0"); sys.exit()
per = collections.defaultdict(lambda: [0, 0])
for case in root.iter("testcase"):
    module = case.get("classname", "").split(".")[2:3] or ["?"]
    bad = any(c.tag in ("failure", "error") for c in case)
    skipped = any(c.tag == "skipped" for c in case)
    if skipped:
        continue
    per[module[0]][0 if not bad else 1] += 1
ok = sum(v[0] for v in per.values()); bad = sum(v[1] for v in per.values())
print(" ".join(f"{m}={v[0]}/{v[0] + v[1]}" for m, v in sorted(per.items())), ok, bad)
EOF
)
read -r -a parts <<< "$counts"
passed=${parts[-2]}; failed=${parts[-1]}
per_module="${parts[*]:0:${#parts[@]}-2}"
status=PASS
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ] || [ "$non_arm" -ne 0 ] \
   || [ "$avx_left" -ne 0 ] || [ "$vec_loops" -eq 0 ] || [ "$prebuild" = FAILED ]; then
  status=FAIL
fi
echo "check_aarch64: $status torch $TORCH_VERSION aarch64 (qemu): $passed passed, $failed failed" \
     "($per_module); prebuild $prebuild; $n_libs aarch64 libraries built (non-aarch64: $non_arm, AVX2 symbols: $avx_left);" \
     "regsolve unit: $vec_loops loops vectorised; NEON float instructions in the kernel libraries:${neon_summary:- none}; tests $((T2 - T1)) s, total $(( $(date +%s) - T0 )) s"
[ "$status" = PASS ]
