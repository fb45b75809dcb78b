"""NI_JIT_SANITIZE (issue 40): the flags of a sanitized build, their place in the cache key, and
the error that names LD_PRELOAD where the sanitizer runtime is not loaded. Builds nothing;
scripts/check_sanitizers.sh runs the kernels so built."""
import shutil

import pytest

from nitorch_jit import jit
from nitorch_jit.backends import compiled
from nitorch_jit.jit import toolchain

GCC = toolchain.Compiler("g++", "gcc", "12.2.0", "", "linux", "x86_64")
CLANG = toolchain.Compiler("clang++", "clang", "14.0.6", "", "linux", "x86_64")
CL = toolchain.Compiler("cl", "msvc", "19.38", "", "win32", "AMD64")


@pytest.mark.parametrize("value", [None, "", "0", "off"])
def test_off(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("NI_JIT_SANITIZE", raising=False)
    else:
        monkeypatch.setenv("NI_JIT_SANITIZE", value)
    assert toolchain.sanitizer_flags(GCC) == []


@pytest.mark.parametrize("value, names", [("1", "address,undefined"), ("on", "address,undefined"),
                                          ("undefined,address", "address,undefined"),
                                          ("undefined", "undefined"), ("address", "address")])
def test_flags(monkeypatch, value, names):
    monkeypatch.setenv("NI_JIT_SANITIZE", value)
    common = [f"-fsanitize={names}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
              "-g1", "-O1"]
    assert toolchain.sanitizer_flags(GCC, check_runtime=False) == common
    assert toolchain.sanitizer_flags(CLANG, check_runtime=False) == common + ["-shared-libsan"]


def test_bad_values(monkeypatch):
    monkeypatch.setenv("NI_JIT_SANITIZE", "address,thread")
    with pytest.raises(toolchain.ToolchainError, match="unknown sanitizer.*thread"):
        toolchain.sanitizer_flags(GCC, check_runtime=False)
    monkeypatch.setenv("NI_JIT_SANITIZE", "1")
    with pytest.raises(toolchain.ToolchainError, match="gcc or clang"):
        toolchain.sanitizer_flags(CL, check_runtime=False)


def test_runtime_not_preloaded_names_ld_preload(monkeypatch):
    """This process did not start with ASan's runtime: a clear error, never a load that would
    end the process (gcc's runtime aborts) or fail on undefined symbols (clang's)."""
    monkeypatch.setenv("NI_JIT_SANITIZE", "1")
    with open("/proc/self/maps") as f:
        if "asan" in f.read():
            pytest.skip("this process runs with ASan's runtime")
    for cc in (GCC, CLANG):
        with pytest.raises(toolchain.ToolchainError,
                           match="LD_PRELOAD=.*ASAN_OPTIONS=detect_leaks=0"):
            toolchain.sanitizer_flags(cc)
    # gcc's UBSan runtime is a needed library of the build: it loads by itself
    monkeypatch.setenv("NI_JIT_SANITIZE", "undefined")
    assert toolchain.sanitizer_flags(GCC)[0] == "-fsanitize=undefined"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_sanitized_builds_have_their_own_cache_entries(monkeypatch):
    """The flags are in the specs of kernel libraries and bindings, so in the key."""
    monkeypatch.setenv("CXX", "g++")
    name = "regsolve.reg_matvec.float64.any"
    monkeypatch.delenv("NI_JIT_SANITIZE", raising=False)
    plain = (compiled.kernel_spec(name), compiled.module_spec("regsolve", "cpu"))
    monkeypatch.setenv("NI_JIT_SANITIZE", "undefined")  # gcc: no runtime to preload
    sanitized = (compiled.kernel_spec(name), compiled.module_spec("regsolve", "cpu"))
    for a, b in zip(plain, sanitized):
        assert "-fsanitize=undefined" in b.cflags and "-fsanitize=undefined" not in a.cflags
        assert jit.entry_name(jit.compute_key(a)) != jit.entry_name(jit.compute_key(b))
