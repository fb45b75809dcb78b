"""Every compiler and platform (issue 40): the command lines that nitorch_jit.jit.toolchain
writes for each (OS, architecture, compiler), pinned by faking sys.platform, the machine and the
compiler's version answers; the OpenMP rule; failing soft when the compiler is missing or fails;
the provider of a device we have no kernels for.

Fast: nothing here compiles our sources, except the two fail-soft cases at the end, which run
one process each (a binding build at most, into their own cache).

The conventions pinned are torch's own (facts, not code, from torch/utils/cpp_extension.py and
torch/_inductor/cpp_builder.py; ../shared/reference/platforms-facts.md):
- cpp_extension: the suffix LIB_EXT ('.pyd' on Windows, '.so' elsewhere, macOS included);
  ``-undefined dynamic_lookup`` on macOS; on Windows ``/MD /EHsc``, ``/std:c++20`` and
  ``link /DLL`` against c10/torch_cpu's import libraries; MSVC's environment from setuptools.
- cpp_builder: on Windows ``/EHsc /Zc:__cplusplus /permissive- -DNOMINMAX``, ``/LD /link``,
  ``/Fe`` for the output, ``/openmp``; on macOS OpenMP as ``-Xclang -fopenmp`` against torch's
  own ``lib/`` (``-lomp``), and no ``-march=native``.
"""
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from nitorch_jit import backends, jit
from nitorch_jit.backends import compiled, portable
from nitorch_jit.jit import build, toolchain

REPO = Path(__file__).resolve().parents[2]
TORCH = Path(torch.__file__).resolve().parent
INCLUDES = list(cpp_extension.include_paths())
LIBS = list(cpp_extension.library_paths())
TARGET = "-DTORCH_TARGET_VERSION=0x020d000000000000"
CXX11 = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"

BANNERS = {
    "linux-gcc": ("g++", "g++ (Debian 12.2.0-14+deb12u1) 12.2.0", "linux", "x86_64"),
    "linux-clang": ("clang++", "Debian clang version 14.0.6", "linux", "x86_64"),
    "linux-aarch64-gcc": ("g++", "g++ (Debian 12.2.0-14) 12.2.0", "linux", "aarch64"),
    "darwin-arm64": ("c++", "Apple clang version 15.0.0 (clang-1500.3.9.4)", "darwin", "arm64"),
    "win32-msvc": ("cl", "Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33130 for x64",
                   "win32", "AMD64"),
}


def _fake_compiler(folder, name, banner, compiles=False):
    """A compiler on PATH that answers as the real one: --version (cl: its banner on stderr
    when run alone); any other call fails, or, with `compiles`, runs the real g++."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if name.lower() in ("cl", "cl.exe"):
        body = f'if [ $# -eq 0 ]; then echo "{banner}" >&2; exit 0; fi\nexit 2\n'
    else:
        rest = 'exec g++ "$@"' if compiles else 'echo "fake: error: cannot compile" >&2; exit 1'
        body = f'case "$1" in\n  --version) echo "{banner}";;\n  *) {rest};;\nesac\n'
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def platform_of(tmp_path, monkeypatch):
    """Make this process look like one of BANNERS: sys.platform, platform.machine(), and its
    compiler on PATH (found by the real toolchain code)."""
    def fake(which):
        name, banner, target, machine = BANNERS[which]
        # Windows: shutil.which looks for cl with an extension of PATHEXT
        path = _fake_compiler(tmp_path / "bin" / which,
                              name + (".EXE" if target == "win32" else ""), banner)
        monkeypatch.setenv("PATHEXT", ".EXE")
        monkeypatch.setattr(sys, "platform", target)
        monkeypatch.setattr(platform, "machine", lambda: machine)
        monkeypatch.setenv("PATH", str(path.parent))
        if name == toolchain.default_cxx_name():  # c++ on macOS, cl on Windows: CXX unset
            monkeypatch.delenv("CXX", raising=False)
        else:
            monkeypatch.setenv("CXX", name)
        monkeypatch.setenv("VSCMD_ARG_TGT_ARCH", "x64")  # as in a developer prompt
        toolchain.msvc_env.cache_clear()
        # the gold probe runs the compiler: pinned here as found (Linux) or not
        monkeypatch.setattr(toolchain, "fast_linker_flags", lambda cxx: ["-fuse-ld=gold"]
                            if target == "linux" else [])
        return toolchain.compiler()
    yield fake
    toolchain.msvc_env.cache_clear()


def _kernel_spec(src):
    # a torch-free kernel library, with the flags compiled.kernel_spec writes (GNU syntax)
    return jit.ModuleSpec("demo.op.float32.any", "cpu", [src], [REPO / "csrc"],
                          cflags=["-O3", "-std=c++17", "-DNJ_KERNEL_LIB"], torch_free=True,
                          direct=True)


def _binding_spec(src):
    # a binding on torch's stable ABI, as compiled._stable_binding_spec writes it
    return jit.ModuleSpec("demo", "cpu", [src], [REPO / "csrc"],
                          cflags=["-O0", "-std=c++20", "-DNJ_STABLE_ABI"], direct=True,
                          stable_abi="2.13")


# ----------------------------------------------------------------------------- the compilers
@pytest.mark.parametrize("which, kind, version", [
    ("linux-gcc", "gcc", "12.2.0"), ("linux-clang", "clang", "14.0.6"),
    ("darwin-arm64", "apple-clang", "15.0.0"), ("win32-msvc", "msvc", "19.38.33130")])
def test_compiler_kind_and_version(platform_of, which, kind, version):
    cc = platform_of(which)
    assert (cc.kind, cc.version, cc.target) == (kind, version, BANNERS[which][2])
    assert cc.describe().endswith(f"{version} ({cc.path})")
    assert Path(cc.path).stem == BANNERS[which][0]  # cl when CXX is unset on Windows


def test_classify_other_banners():
    assert toolchain.classify("clang version 17.0.1 (https://github.com/llvm/llvm-project)") \
        == ("clang", "17.0.1")
    assert toolchain.classify("Homebrew clang version 18.1.8") == ("clang", "18.1.8")
    assert toolchain.classify("c++ (GCC) 11.2.0\nCopyright (C) 2021") == ("gcc", "11.2.0")
    assert toolchain.classify("") == ("gcc", "")  # unknown: the GNU driver's syntax


def test_this_machines_compiler_is_named():
    cc = toolchain.compiler()
    assert cc.kind in toolchain.KINDS and cc.version and os.path.isabs(cc.path)


# ----------------------------------------------------------------------------- command lines
def test_linux_gcc_command_lines(platform_of, tmp_path):
    cc = platform_of("linux-gcc")
    src, csrc = REPO / "csrc" / "x.cpp", REPO / "csrc"
    out = tmp_path / "nitorch_jit_demo_op_float32_any_cpu.so"
    assert build._compile_command(_kernel_spec(src), tmp_path) == [
        cc.path, "-shared", "-fPIC", "-fvisibility=hidden", "-O3", "-std=c++17",
        "-DNJ_KERNEL_LIB", f"-I{csrc}", str(src), "-o", str(out)]
    assert build._compile_command(_binding_spec(src), tmp_path) == [
        cc.path, "-shared", "-fPIC", "-fvisibility=hidden", "-O0", "-std=c++20",
        "-DNJ_STABLE_ABI", TARGET, CXX11, *[f"-isystem{d}" for d in INCLUDES], f"-I{csrc}",
        str(src), "-o", str(tmp_path / "nitorch_jit_demo_cpu.so"),
        *[f"-L{d}" for d in LIBS], "-ltorch_cpu", "-lc10", "-fuse-ld=gold"]


def test_linux_clang_command_lines_are_gccs(platform_of, tmp_path):
    # clang takes the GNU driver's flags: the same line, its own compiler
    src = REPO / "csrc" / "x.cpp"
    gcc = build._compile_command(_binding_spec(src), tmp_path)[1:] \
        if platform_of("linux-gcc") else None
    cc = platform_of("linux-clang")
    line = build._compile_command(_binding_spec(src), tmp_path)
    assert line[0] == cc.path and Path(line[0]).name == "clang++" and line[1:] == gcc


def test_aarch64_linux_has_no_x86_flags(platform_of, tmp_path):
    cc = platform_of("linux-aarch64-gcc")
    line = build._compile_command(_kernel_spec(REPO / "csrc" / "x.cpp"), tmp_path)
    assert not [f for f in line if f.startswith(("-m", "-march"))]  # clang >= 16 rejects them
    assert toolchain.fast_paths(cc).startswith("portable (aarch64")


def test_darwin_arm64_apple_clang_command_lines(platform_of, tmp_path):
    cc = platform_of("darwin-arm64")
    src, csrc = REPO / "csrc" / "x.cpp", REPO / "csrc"
    # a kernel library: ld64 wants consent to undefined symbols (cpp_extension, cpp_builder)
    assert build._compile_command(_kernel_spec(src), tmp_path) == [
        cc.path, "-shared", "-fPIC", "-fvisibility=hidden", "-O3", "-std=c++17",
        "-DNJ_KERNEL_LIB", f"-I{csrc}", str(src), "-o",
        str(tmp_path / "nitorch_jit_demo_op_float32_any_cpu.so"), "-undefined",
        "dynamic_lookup"]
    # a binding: torch's libraries, an rpath to them (dyld resolves @rpath/libc10.dylib to the
    # copy torch loaded), no gold (ld64), '.so' as cpp_extension names it on macOS
    assert build._compile_command(_binding_spec(src), tmp_path) == [
        cc.path, "-shared", "-fPIC", "-fvisibility=hidden", "-O0", "-std=c++20",
        "-DNJ_STABLE_ABI", TARGET, CXX11, *[f"-isystem{d}" for d in INCLUDES], f"-I{csrc}",
        str(src), "-o", str(tmp_path / "nitorch_jit_demo_cpu.so"),
        *[f"-L{d}" for d in LIBS], "-ltorch_cpu", "-lc10", *[f"-Wl,-rpath,{d}" for d in LIBS],
        "-undefined", "dynamic_lookup"]
    assert toolchain.fast_paths(cc).startswith("portable (arm64")


def test_win32_msvc_command_lines(platform_of, tmp_path):
    cc = platform_of("win32-msvc")
    src, csrc = REPO / "csrc" / "x.cpp", REPO / "csrc"
    head = [cc.path, "/nologo", "/LD", "/MD", "/EHsc", "/Zc:__cplusplus", "/permissive-",
            "-DNOMINMAX"]
    objs = f"/Fo{tmp_path}{os.sep}"  # a folder: one .obj per source, not in the cwd
    assert build._compile_command(_kernel_spec(src), tmp_path) == head + [
        "/O2", "/std:c++17", "-DNJ_KERNEL_LIB", f"-I{csrc}", str(src), objs,
        f"/Fe{tmp_path / 'nitorch_jit_demo_op_float32_any_cpu.pyd'}", "/link", "/DLL"]
    # a binding: /std:c++20 (torch >= 2.13's headers: MSVC refuses them under c++17), no
    # libstdc++ define, torch's import libraries, no rpath (torch adds its DLL folder)
    assert build._compile_command(_binding_spec(src), tmp_path) == head + [
        "/Od", "/std:c++20", "-DNJ_STABLE_ABI", TARGET, *[f"-I{d}" for d in INCLUDES],
        f"-I{csrc}", str(src), objs, f"/Fe{tmp_path / 'nitorch_jit_demo_cpu.pyd'}", "/link",
        "/DLL", *[f"/LIBPATH:{d}" for d in LIBS], "torch_cpu.lib", "c10.lib"]
    assert toolchain.fast_paths(cc).startswith("portable (MSVC")


def test_msvc_flags_are_torchs_own():
    """Each MSVC flag we give is one that cpp_extension or inductor's cpp_builder gives (they
    write them with or without the slash)."""
    text = (TORCH / "utils" / "cpp_extension.py").read_text() \
        + (TORCH / "_inductor" / "cpp_builder.py").read_text()
    cl = toolchain.Compiler("cl", "msvc", "19.38", "", "win32", "AMD64")
    line = toolchain.shared_library_command(cl, ["a.cpp"], "a.pyd", ["-O3", "-std=c++20"],
                                            libraries=["c10"])
    for flag in ["/LD", "/MD", "/EHsc", "/Zc:__cplusplus", "/permissive-", "-DNOMINMAX",
                 "/O2", "/std:c++20", "/link", "/DLL"]:
        # cpp_builder writes a define without its -D, and a flag without its slash
        assert flag in line and flag.replace("-D", "").lstrip("/-").split(":")[0] in text, flag
    assert "c10.lib" in line and "/Fe" in text and "/Fo" in text


def test_translate_flags_refuses_what_msvc_would_ignore():
    cl = toolchain.Compiler("cl", "msvc", "19.38", "", "win32", "AMD64")
    with pytest.raises(toolchain.ToolchainError, match="-mavx2.*_MSVC_FLAGS"):
        toolchain.translate_flags(["-mavx2"], cl)
    gcc = toolchain.Compiler("g++", "gcc", "12", "", "linux", "x86_64")
    assert toolchain.translate_flags(["-mavx2"], gcc) == ["-mavx2"]


def test_library_suffix_is_cpp_extensions():
    assert toolchain.library_suffix() == cpp_extension.LIB_EXT
    assert [toolchain.library_suffix(p) for p in ("linux", "darwin", "win32")] == \
        [".so", ".so", ".pyd"]


def test_classic_binding_flags_follow_openmp(monkeypatch):
    monkeypatch.delenv("NI_JIT_SANITIZE", raising=False)  # its flags would join these
    omp = toolchain.OpenMP(True, ("-Xclang", "-fopenmp", "-I/t/include"),
                           ("-L/t/lib", "-lomp", "-Wl,-rpath,/t/lib"), "test")
    monkeypatch.setattr(toolchain, "openmp", lambda cc=None: omp)
    spec = compiled.module_spec("resize", "cpu", abi="classic")
    assert spec.cflags == ["-O3", "-Xclang", "-fopenmp", "-I/t/include"]
    assert spec.ldflags == ["-L/t/lib", "-lomp", "-Wl,-rpath,/t/lib"]
    off = toolchain.OpenMP(False, (), (), "off: test", warn=True)
    monkeypatch.setattr(toolchain, "openmp", lambda cc=None: off)
    spec = compiled.module_spec("resize", "cpu", abi="classic")
    assert spec.cflags == ["-O3"] and spec.ldflags == []


# ----------------------------------------------------------------------------- OpenMP
def _cc(which):
    name, banner, target, machine = BANNERS[which]
    kind, version = toolchain.classify(banner)
    return toolchain.Compiler(name, kind, version, banner, target, machine)


def test_openmp_rule_per_compiler(tmp_path):
    torch_root = tmp_path / "torch"
    (torch_root / "lib").mkdir(parents=True)
    plan = toolchain.openmp_plan
    # gcc: libgomp, the runtime of torch's Linux wheels (one soname, one copy)
    gcc = plan(_cc("linux-gcc"), "gomp", torch_root)
    assert (gcc.on, gcc.cflags, gcc.ldflags) == (True, ("-fopenmp",), ("-fopenmp",))
    # clang: its OpenMP needs LLVM's libomp; beside torch's libgomp that is a second runtime
    off = plan(_cc("linux-clang"), "gomp", torch_root)
    assert not off.on and off.warn and "second OpenMP runtime" in off.why and not off.cflags
    assert plan(_cc("linux-clang"), "llvm", torch_root).cflags == ("-fopenmp",)
    # Apple clang: torch's own libomp.dylib, or nothing (never Homebrew's: a second copy)
    assert not plan(_cc("darwin-arm64"), "llvm", torch_root).on
    (torch_root / "lib" / "libomp.dylib").write_bytes(b"")
    mac = plan(_cc("darwin-arm64"), "llvm", torch_root)
    assert mac.cflags == ("-Xclang", "-fopenmp", f"-I{torch_root / 'include'}")
    assert mac.ldflags == (f"-L{torch_root / 'lib'}", "-lomp",
                           f"-Wl,-rpath,{torch_root / 'lib'}")
    assert plan(_cc("win32-msvc"), "intel", torch_root).cflags == ("/openmp",)
    # torch without OpenMP: at::parallel_for calls into torch, nothing to compile
    none = plan(_cc("linux-gcc"), None, torch_root)
    assert (none.on, none.cflags, none.ldflags) == (False, (), ())


def test_openmp_flags_are_inductors():
    text = (TORCH / "_inductor" / "cpp_builder.py").read_text()
    assert "-Xclang" in text and '"omp"' in text and "openmp" in text


def test_openmp_probe_off_when_the_compiler_cannot(tmp_path, monkeypatch):
    fake = _fake_compiler(tmp_path / "bin", "g++", BANNERS["linux-gcc"][1])
    cc = toolchain.Compiler(str(fake), "gcc", "12.2.0", "", "linux", "x86_64")
    monkeypatch.setattr(toolchain, "torch_openmp_runtime", lambda: "gomp")
    got = toolchain.openmp(cc)
    assert not got.on and got.warn and "cannot build OpenMP code" in got.why
    assert "fake: error" in got.why and not got.cflags


def test_openmp_probe_is_kept_under_the_cache_root(tmp_path, monkeypatch):
    """A process that loads a cached classic binding compiles nothing: the probe's answer is
    kept (per compiler and flags), and read back by the next process."""
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "g++"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho x >> {calls}\necho "fake: error: no omp.h" >&2\nexit 1\n')
    fake.chmod(0o755)
    cc = toolchain.Compiler(str(fake), "gcc", "12.2.0", "fake", "linux", "x86_64")
    for _ in range(2):  # two "processes"
        toolchain._probe_openmp.cache_clear()
        assert "no omp.h" in toolchain._probe_openmp(cc, ("-fopenmp",), ("-fopenmp",))
    assert calls.read_text().count("x") == 1
    assert len(list((tmp_path / "cache" / ".probes").glob("openmp-*.json"))) == 1
    toolchain._probe_openmp.cache_clear()


def test_openmp_probe_of_this_compiler():
    got = toolchain.openmp()
    assert got.on == (got.cflags != ()) and got.why
    if toolchain.compiler().kind == "gcc" and toolchain.torch_openmp_runtime() == "gomp":
        assert got.on and got.cflags == ("-fopenmp",)


def test_openmp_off_warns_once(monkeypatch):
    off = toolchain.OpenMP(False, (), (), "off: a test", warn=True)
    monkeypatch.setattr(toolchain, "openmp", lambda cc=None: off)
    monkeypatch.setattr(compiled, "binding_abi", lambda asked=None: asked or "classic")
    monkeypatch.setattr(compiled, "_OMP_WARNED", [])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for module in ("resize", "splinc"):
            compiled._warn_openmp(module, "cpu")
    assert [str(w.message) for w in seen] == ["nitorch_jit: OpenMP off: a test"]
    assert "on, torch's own" in compiled.threads("resize", "cpu", abi="stable")
    assert compiled.threads("resize", "cpu", abi="classic") == "off: a test"


# ----------------------------------------------------------------------------- failing soft
@pytest.mark.parametrize("target, words", [
    ("linux", "apt install g++"), ("darwin", "xcode-select --install"),
    ("win32", "Build Tools")])
def test_no_compiler_names_what_to_install(monkeypatch, tmp_path, target, words):
    monkeypatch.setattr(sys, "platform", target)
    monkeypatch.setenv("VSCMD_ARG_TGT_ARCH", "x64")
    toolchain.msvc_env.cache_clear()
    name = toolchain.default_cxx_name()
    with pytest.raises(toolchain.ToolchainError, match=words) as err:
        toolchain._which_cxx(name, str(tmp_path))
    assert f"'{name}' is not on PATH" in str(err.value)
    toolchain.msvc_env.cache_clear()


def test_a_compiler_that_does_not_run_names_what_to_install(tmp_path):
    bad = tmp_path / "c++"
    bad.write_text("#!/bin/sh\nexit 1\n")  # macOS's c++ shim without the Command Line Tools
    bad.chmod(0o755)
    with pytest.raises(toolchain.ToolchainError, match="does not run.*install"):
        toolchain._which_cxx(str(bad), str(tmp_path))


PULL = """
import json, torch, warnings
warnings.simplefilter("always")
import nitorch_jit
x = torch.arange(24.).reshape(1, 1, 4, 6)
g = torch.tensor([[[[1.5, 2.25]]]])
print("RESULT", json.dumps([nitorch_jit.grid_pull(x, g).item(), nitorch_jit.compiled_backend]))
"""


def _run(tmp_path, cxx, **env):
    # MONAI's compiled routines would stand in before TORCH: hide an installed monai
    (tmp_path / "hide" / "monai").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hide" / "monai" / "__init__.py").write_text("raise ImportError('hidden')\n")
    e = dict(os.environ, NI_JIT_CACHE_DIR=str(tmp_path / "cache"), CXX=str(cxx),
             PYTHONPATH=f"{tmp_path / 'hide'}{os.pathsep}{REPO}")
    e.pop("NI_COMPILED_BACKEND", None)
    e.pop("NI_JIT_SANITIZE", None)  # a sanitized build needs its runtime preloaded
    e.update(env)
    return subprocess.run([sys.executable, "-c", PULL], env=e, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_a_compiler_that_fails_warns_once_and_uses_torch(tmp_path):
    fake = _fake_compiler(tmp_path / "bin", "g++", "g++ (Debian 4.8.5-1) 4.8.5")
    proc = _run(tmp_path, fake)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    assert line == f"RESULT [{1.5 * 6 + 2.25}, \"TORCH\"]"
    assert proc.stderr.count("compiled kernels are unavailable on CPU") == 1
    assert "Traceback" not in proc.stderr
    assert "could not build it: install a C++ compiler: Debian/Ubuntu 'apt install g++'" \
        in proc.stderr
    # asked for C by name: the error is right
    proc = _run(tmp_path, fake, NI_COMPILED_BACKEND="C")
    assert proc.returncode != 0 and "NI_COMPILED_BACKEND=C" in proc.stderr


@pytest.mark.slow  # builds a binding (3 s alone, 20-30 s on a busy 2-core machine)
def test_a_compiler_that_fails_on_the_kernels_only_warns_once_and_uses_torch(tmp_path):
    """The binding builds (the real g++), a kernel library does not (say, a compiler that
    lacks what the kernels use): the first call's kernel build fails beside the binding's,
    and the call is served by TORCH, with one warning, not by a failing binding."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "g++"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -DNJ_KERNEL_LIB ] && '
                    '{ echo "fake: error: no kernels today" >&2; exit 1; }; done\n'
                    'exec g++ "$@"\n')
    fake.chmod(0o755)
    proc = _run(tmp_path, fake)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    assert line == f"RESULT [{1.5 * 6 + 2.25}, \"TORCH\"]"
    assert proc.stderr.count("compiled kernels are unavailable on CPU") == 1
    assert "no kernels today" in proc.stderr and "Overriding" not in proc.stderr


# ----------------------------------------------------------------------------- devices
def test_devices_without_kernels_get_the_twins():
    assert [p.NAME for p in backends.plan("pushpull", None, "mps")] == ["TORCH"]
    assert [p.NAME for p in backends.plan("regsolve", None, "xpu")] == ["TORCH"]
    assert [p.NAME for p in backends.plan("pushpull", None, "cpu")] == ["C", "MONAI", "TORCH"]
    # asked for by name, C's error names the device (no silent copy to the CPU)
    assert [p.NAME for p in backends.plan("pushpull", "C", "mps")] == ["C"]
    with pytest.raises(backends.BackendError, match="device type 'mps'.*pure-PyTorch"):
        compiled.module_spec("pushpull", "mps")
    assert [portable.dispatch_key(d) for d in ("cpu", "cuda", "mps", "xpu", "privateuseone")] \
        == ["CPU", "CUDA", "MPS", "XPU", "PrivateUse1"]
    assert portable.dispatch_key("nonesuch") is None
    which, why = backends.preview("resize", "mps")
    assert which == "TORCH" and "no compiled kernels for MPS" in why


def test_mps_tensors_get_the_twins_registered_for_mps(monkeypatch):
    """ensure() registers the twins for the MPS dispatch key (possible without a Mac): no
    compiler is asked, no warning. Running them on an MPS tensor needs a Mac
    (docs/guide/platforms.md)."""
    monkeypatch.delenv("NI_COMPILED_BACKEND", raising=False)
    monkeypatch.setenv("CXX", "/nonexistent/c++")  # never asked for
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: there is nothing to fix
        assert backends.ensure("resize", "mps") == "TORCH"
    assert backends.chosen("resize", "mps")[1] == \
        "the pure-PyTorch kernels (nitorch_jit.torch_impl) (no compiled kernels for MPS)"
    # asked for C by name: an error that names the device
    monkeypatch.setenv("NI_COMPILED_BACKEND", "C")
    with pytest.raises(backends.BackendError, match="NI_COMPILED_BACKEND=C.*device type 'mps'"):
        backends.ensure("splinc", "mps")
