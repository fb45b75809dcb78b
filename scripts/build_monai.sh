#!/usr/bin/env bash
# Build MONAI's compiled extension (monai._C) from its C++ sources, the way MONAI's setup.py
# does with BUILD_MONAI=1, and install it into the monai package of the active Python.
# Used to check nitorch_jit's MONAI backend against the real thing (tests/backends/test_monai.py).
#
# MONAI's sources are a peer, not part of nitorch_jit: they are read from MONAI_CSRC and built
# into BUILD_DIR, both outside this repository.
#
# Usage: scripts/build_monai.sh [MONAI_CSRC] [BUILD_DIR]
#   MONAI_RESAMPLE_ONLY=1 builds only the resampling half of monai._C (what MONAI's transforms
#   call): ext.cpp without its filtering and LLTM bindings, and resample/pushpull_cpu.cpp.
#   MONAI_OPT=-O1 compiles at that level, not MONAI's -O3 (the tests' oracle build: a third
#   less compiling, 44 s of CPU, not 66 s, on 2026-12-07; its calls are on test-sized images).
#   MONAI_INSTALL=0 builds without installing (the library stays in BUILD_DIR; the last line
#   printed is its path): tests/compat serves it to MONAI's tests for the A/B run.
#   MONAI_CSRC  MONAI's monai/csrc folder (default /work/shared/third_party/monai-csrc)
#   BUILD_DIR   where the build happens (default /work/monai_build)
# Needs: an installed `monai` (pip install --no-deps monai, same generation as the sources),
# torch, a C++ compiler and ninja. CPU only (MONAI's .cu files are not compiled).
set -euo pipefail
MONAI_CSRC=$(realpath "${1:-/work/shared/third_party/monai-csrc}")
BUILD_DIR=$(realpath -m "${2:-/work/monai_build}")
test -f "$MONAI_CSRC/ext.cpp" || {
  echo "no ext.cpp in $MONAI_CSRC: not MONAI's csrc folder" >&2; exit 2; }
REPO=$(realpath "$(dirname "$0")/..")
case "$BUILD_DIR/" in "$REPO"/*)
  echo "BUILD_DIR $BUILD_DIR is inside this repository: build MONAI outside it" >&2; exit 2;; esac
mkdir -p "$BUILD_DIR"
start=$(date +%s)
MONAI_CSRC="$MONAI_CSRC" BUILD_DIR="$BUILD_DIR" MONAI_INSTALL="${MONAI_INSTALL:-1}" \
  MONAI_RESAMPLE_ONLY="${MONAI_RESAMPLE_ONLY:-0}" python - <<'PY'
import glob, os, shutil, sys, sysconfig
import torch
from torch.utils import cpp_extension

csrc, build = os.environ["MONAI_CSRC"], os.environ["BUILD_DIR"]
import importlib.util
# find monai without importing it: its __init__ would load an installed monai._C, whose
# pybind11 types clash with the new build's
spec = importlib.util.find_spec("monai")
if spec is None:
    sys.exit("install MONAI's Python package first: pip install --no-deps monai")
major, minor, patch = (int("".join(c for c in p if c.isdigit()) or 0)
                       for p in torch.__version__.split("+")[0].split(".")[:3])
# what MONAI's setup.py passes: every .cpp, csrc on the include path, its torch-version define,
# the define naming ATen's parallel backend (its resampling code refuses to compile without
# one) and -fopenmp when torch uses OpenMP
sources = sorted(glob.glob(os.path.join(csrc, "**", "*.cpp"), recursive=True))
if os.environ["MONAI_RESAMPLE_ONLY"] == "1":
    src = open(os.path.join(csrc, "ext.cpp")).read()
    keep = [ln for ln in src.splitlines()
            if not any(k in ln for k in ("filtering", "lltm", "bilateral", "phl_", "tbf_",
                                         "tjbf_", "Bilateral", "Permutohedral"))]
    ext = os.path.join(build, "ext_resample.cpp")
    with open(ext, "w") as f:
        f.write("\n".join(keep) + "\n")
    sources = [ext, os.path.join(csrc, "resample", "pushpull_cpu.cpp")]
cflags = [f"-DMONAI_TORCH_VERSION={major * 10000 + minor * 100 + patch}"]
ldflags = []
info = torch._C._parallel_info()
if "OpenMP" in info:
    cflags += ["-DAT_PARALLEL_OPENMP=1", "-fopenmp"]
    ldflags.append("-fopenmp")
elif "TBB" in info:
    cflags.append("-DAT_PARALLEL_NATIVE_TBB=1")
else:
    cflags.append("-DAT_PARALLEL_NATIVE=1")
print(f"building monai._C from {len(sources)} sources in {csrc} into {build}", flush=True)
lib = cpp_extension.load(name="_C", sources=sources, extra_include_paths=[csrc],
                         extra_cflags=[os.environ.get("MONAI_OPT") or "-O3"] + cflags,
                         extra_ldflags=ldflags,
                         build_directory=build, verbose=False)
built = lib.__file__
if os.environ.get("MONAI_INSTALL", "1") == "0":
    print(built)
    sys.exit(0)
target = os.path.join(os.path.dirname(spec.origin), "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
shutil.copy2(built, target)
print(f"installed {built} as {target}")
PY
end=$(date +%s)
[ "${MONAI_INSTALL:-1}" = 0 ] && exit 0
python -c "import monai._C as C; print('import monai._C: ok, zero =', int(C.BoundType.zero))"
echo "build time: $((end - start)) s; build folder size: $(du -sh "$BUILD_DIR" | cut -f1)"
