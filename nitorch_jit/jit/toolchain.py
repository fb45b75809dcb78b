"""Find the tools a build needs and say clearly what is missing.

Everything here is generic: compilers, ninja, the CUDA toolkit, GPU architectures.
Each finder raises :class:`ToolchainError` with a message that says what to do.

This is also the one place that knows the platforms (issue 40): which compiler a build uses
(gcc, clang, Apple clang, MSVC's cl: ``compiler()``), its flag syntax
(``shared_library_command``, ``translate_flags``), the library suffix (``library_suffix``),
OpenMP (``openmp``) and where the kernels' hand-written fast paths exist (``fast_paths``,
mirroring csrc/core/platform.h). Nothing else in the package branches on ``sys.platform`` or
on the compiler's kind. docs/guide/platforms.md says what has run where.
"""
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


class ToolchainError(RuntimeError):
    """A tool needed to compile is missing or unusable."""


def _run_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return (out.stdout or out.stderr).strip()


# ----------------------------------------------------------------------------- C++ compiler
def install_hint(target=None):
    """What to install to get a C++ compiler on platform `target`, in words a user can act on.

    Parameters
    ----------
    target : str, optional
        A ``sys.platform`` value (default: this one).

    Returns
    -------
    str
        Words for an error message: what to install, and how.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.install_hint("darwin")
    "the Xcode Command Line Tools: 'xcode-select --install'"
    """
    target = sys.platform if target is None else target
    if target == "darwin":
        return "the Xcode Command Line Tools: 'xcode-select --install'"
    if target == "win32":
        # cl is found without a developer prompt, as cpp_extension finds it (setuptools)
        return ("the Microsoft C++ Build Tools (https://visualstudio.microsoft.com/visual-cpp-"
                "build-tools/, workload 'Desktop development with C++')")
    return ("a C++ compiler: Debian/Ubuntu 'apt install g++', Fedora 'dnf install gcc-c++', "
            "conda 'conda install gxx_linux-64'")


def default_cxx_name(target=None):
    """The compiler a build uses when CXX is unset: ``cl`` on Windows (as torch's cpp_extension),
    ``c++`` elsewhere (gcc or clang on Linux, Apple clang on macOS).

    Parameters
    ----------
    target : str, optional
        The ``sys.platform`` built for (default: this one).

    Returns
    -------
    str
        A command, looked up on PATH.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.default_cxx_name("win32"), toolchain.default_cxx_name("linux")
    ('cl', 'c++')
    """
    return "cl" if _targets_windows(target) else "c++"


def _targets_windows(target):
    """Whether `target` (a ``sys.platform`` value; None: this one) is Windows."""
    return (sys.platform if target is None else target) == "win32"


def _is_cl(path):
    return Path(path).name.lower() in ("cl", "cl.exe")


def _version_text(path):
    """The compiler's version text: ``--version`` for gcc and clang; MSVC's cl has no such
    option and prints its banner on stderr when run with no argument."""
    if _is_cl(path):
        try:
            out = subprocess.run([path], capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ, **msvc_env()))
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = (out.stderr or "") + (out.stdout or "")
        return text.strip() if "Microsoft" in text else None
    return _run_version([path, "--version"])


def _which_cxx(cxx, path_env):
    if _is_cl(cxx) and shutil.which(cxx, path=path_env) is None:
        path_env = msvc_env().get("PATH", path_env)  # not in a developer prompt
    path = shutil.which(cxx, path=path_env)
    if path is None:
        raise ToolchainError(
            f"no C++ compiler: '{cxx}' is not on PATH. Install {install_hint()}, or point CXX "
            f"at one. Without it nitorch_jit can only use its pure-PyTorch backend "
            f"(NI_COMPILED_BACKEND=TORCH).")
    text = _version_text(path)
    if text is None:
        how = f"'{path}'" if _is_cl(path) else f"'{path} --version'"
        raise ToolchainError(f"the C++ compiler '{path}' does not run ({how} failed); "
                             f"install {install_hint()}, or point CXX at a working one")
    return path, text.splitlines()[0].strip()


def _libstdcxx_minor(path):
    """N of a libstdc++.so.6.0.N file (after symlinks), or None."""
    m = re.search(r"libstdc\+\+\.so\.6\.0\.(\d+)$", os.path.realpath(path))
    return int(m.group(1)) if m else None


def loaded_cxx_runtime():
    """(path, N) of the libstdc++.so.6.0.N loaded in this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libstdc++.so" in line:
                    path = line.split()[-1]
                    minor = _libstdcxx_minor(path)
                    if minor is not None:
                        return os.path.realpath(path), minor
    except OSError:
        pass
    return None


@functools.lru_cache(None)
def compiler_cxx_runtime(cxx):
    """(path, N) of the libstdc++.so.6.0.N that compiler `cxx` builds against, or None
    (not gcc-like, or not libstdc++)."""
    out = _run_version([cxx, "-print-file-name=libstdc++.so.6"])
    if not out or not os.path.isabs(out):
        return None
    minor = _libstdcxx_minor(out)
    return (os.path.realpath(out), minor) if minor is not None else None


def runtime_mismatch(cxx):
    """A message when `cxx` builds against a newer libstdc++ than the one this process loaded
    (e.g. a newer g++ in /opt or conda than the system runtime that torch came up with): its
    headers may need what the loaded runtime lacks; seen as a missing GLIBCXX_* symbol at
    load, or as a crash when a library formats a number. None when they agree or are unknown."""
    loaded, built = loaded_cxx_runtime(), compiler_cxx_runtime(cxx)
    if loaded is None or built is None or built[1] <= loaded[1]:
        return None
    return (f"'{cxx}' builds against {built[0]}, newer than the C++ runtime this Python process "
            f"loaded ({loaded[0]})")


def _cxx_candidates(path_env):
    """Other compilers worth trying when the default one does not match the loaded runtime."""
    names = ["g++", "c++", "/usr/bin/g++", "/usr/bin/c++"]
    for folder in path_env.split(os.pathsep) + ["/usr/bin"]:
        try:
            names += sorted((str(p) for p in Path(folder).glob("g++-[0-9]*")), reverse=True)
        except OSError:
            pass
    return names


@functools.lru_cache(None)
def _cxx_cached(cxx, path_env, explicit):
    path, version = _which_cxx(cxx, path_env)
    if not explicit and runtime_mismatch(path):
        # prefer a compiler whose runtime is the loaded one (or older): no CXX was given
        seen = {os.path.realpath(path)}
        for cand in _cxx_candidates(path_env):
            try:
                cpath, cversion = _which_cxx(cand, path_env)
            except ToolchainError:
                continue
            if os.path.realpath(cpath) in seen:
                continue
            seen.add(os.path.realpath(cpath))
            if compiler_cxx_runtime(cpath) is not None and not runtime_mismatch(cpath):
                return cpath, cversion
    return path, version


def cxx_command():
    """The command that builds use as CXX: CXX, else c++ on PATH (cl on Windows), else (when
    c++ builds against a newer libstdc++ than the loaded one) a matching g++ found instead."""
    explicit = os.environ.get("CXX")
    return _cxx_cached(explicit or default_cxx_name(), os.environ.get("PATH", ""),
                       bool(explicit))[0]


def find_cxx():
    """Return (resolved path, first line of --version) of the host C++ compiler."""
    path, version = _cxx_cached(os.environ.get("CXX") or default_cxx_name(),
                                os.environ.get("PATH", ""), bool(os.environ.get("CXX")))
    return os.path.realpath(path), version


# ----------------------------------------------------------------------------- platforms
KINDS = ("gcc", "clang", "apple-clang", "msvc")


@dataclass(frozen=True)
class Compiler:
    """The C++ compiler a build uses, and the platform it builds for.

    Attributes
    ----------
    path : str
        The command, as builds run it.
    kind : {'gcc', 'clang', 'apple-clang', 'msvc'}
        Its flag dialect and OpenMP runtime: gcc (libgomp), clang (LLVM's libomp), Apple clang
        (no ``-fopenmp`` driver flag; torch's bundled libomp), MSVC's cl (``/flags``).
        A compiler of unknown banner is taken as gcc (the GNU driver syntax).
    version : str
        '12.2.0', or '' where the banner has none.
    banner : str
        The first line of its version text (part of the cache key).
    target : str
        The ``sys.platform`` it builds for.
    machine : str
        ``platform.machine()``: 'x86_64', 'aarch64', 'arm64', 'AMD64'.
    """
    path: str
    kind: str
    version: str
    banner: str
    target: str
    machine: str

    @property
    def msvc(self):
        """Whether the flags are MSVC's (``/flag``) rather than the GNU driver's."""
        return self.kind == "msvc"

    def describe(self):
        """'clang 14.0.6 (/usr/bin/clang++)': a line for ``nitorch-jit info``."""
        name = {"apple-clang": "Apple clang", "msvc": "MSVC cl"}.get(self.kind, self.kind)
        return f"{name} {self.version or '(version unknown)'} ({self.path})"


_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


def classify(banner):
    """The kind and version of a compiler from its version text.

    Parameters
    ----------
    banner : str
        What ``--version`` prints (cl: its banner).

    Returns
    -------
    (str, str)
        A kind of ``KINDS`` and the version ('' when none is printed).

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.classify("Debian clang version 14.0.6")
    ('clang', '14.0.6')
    >>> toolchain.classify("Apple clang version 15.0.0 (clang-1500.3.9.4)")
    ('apple-clang', '15.0.0')
    >>> toolchain.classify("g++ (Debian 12.2.0-14) 12.2.0")
    ('gcc', '12.2.0')
    >>> toolchain.classify("Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33130 for x64")
    ('msvc', '19.38.33130')
    """
    text = banner.strip()
    first = text.splitlines()[0] if text else ""
    if "Microsoft" in text and "C/C++" in text:
        line = next(ln for ln in text.splitlines() if "Microsoft" in ln)
        m = re.search(r"Version (\d+(?:\.\d+)+)", line)
        return "msvc", m.group(1) if m else ""
    m = re.search(r"clang version (\d+(?:\.\d+)+)", first)
    if m:
        return ("apple-clang" if first.startswith("Apple ") else "clang"), m.group(1)
    # gcc: 'g++ (Debian 12.2.0-14) 12.2.0', 'c++ (GCC) 11.2.0': the version ends the line
    m = re.search(r"(\d+\.\d+(?:\.\d+)*)\s*$", first)
    return "gcc", m.group(1) if m else ""


def compiler():
    """The C++ compiler of builds here: path, kind, version, platform.

    Returns
    -------
    Compiler

    Raises
    ------
    ToolchainError
        No compiler, or one that does not run (the message says what to install).

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.compiler().kind in toolchain.KINDS    # doctest: +SKIP
    True
    """
    path, banner = find_cxx()
    return _compiler_of(cxx_command(), banner, sys.platform, platform.machine())


@functools.lru_cache(None)
def _compiler_of(path, banner, target, machine):
    kind, version = classify(banner)
    if kind == "gcc" and _is_cl(path):
        kind = "msvc"
    return Compiler(path, kind, version, banner, target, machine)


def library_suffix(target=None):
    """The file suffix of a library we build: ``.pyd`` on Windows and ``.so`` elsewhere, macOS
    included, as torch's cpp_extension names its extensions (LIB_EXT); ctypes and
    ``torch.ops.load_library`` load either.

    Parameters
    ----------
    target : str, optional
        Where the library is loaded: a ``sys.platform`` value (default: this one).

    Returns
    -------
    str
        The suffix with its dot.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> [toolchain.library_suffix(target) for target in ("linux", "darwin", "win32")]
    ['.so', '.so', '.pyd']
    """
    return ".pyd" if _targets_windows(target) else ".so"


@functools.lru_cache(None)
def msvc_env():
    """The environment variables that MSVC's cl needs (PATH, INCLUDE, LIB), from setuptools
    as torch's cpp_extension gets them when Python was not started from a developer prompt
    (``VSCMD_ARG_TGT_ARCH`` unset); ``{}`` elsewhere, in a prompt, or when not found.

    Returns
    -------
    dict of str to str
    """
    if sys.platform != "win32" or "VSCMD_ARG_TGT_ARCH" in os.environ:
        return {}
    try:
        from setuptools._distutils import _msvccompiler
        env = _msvccompiler._get_vc_env("x86_amd64")
    except Exception:  # noqa: BLE001 -- no Build Tools, an old setuptools: cl is not found
        return {}
    return {k.upper(): v for k, v in env.items()}


# GCC-style flags that compiled.py writes, in MSVC's words (cl reads -D and -I as /D and /I;
# -O3 and -std= it does not know). Flags without a meaning there (-fPIC: every DLL is
# position-independent; -fvisibility=hidden: a DLL exports only what NJ_EXPORT marks) go.
_MSVC_FLAGS = {"-O3": "/O2", "-O2": "/O2", "-O1": "/O1", "-O0": "/Od", "-Og": "/Od",
               "-g": "/Z7", "-std=c++17": "/std:c++17", "-std=c++20": "/std:c++20"}
_MSVC_DROP = ("-fPIC", "-fvisibility=hidden")


def translate_flags(flags, cc):
    """`flags` written for the GNU driver (gcc, clang), in the dialect of compiler `cc`.

    Parameters
    ----------
    flags : list of str
    cc : Compiler

    Returns
    -------
    list of str
        A new list (`flags` is left as it was).

    Raises
    ------
    ToolchainError
        A flag MSVC has no equivalent of (say, ``-mavx2``): it would be ignored silently.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> cl = toolchain.Compiler("cl", "msvc", "19.38", "", "win32", "AMD64")
    >>> toolchain.translate_flags(["-O3", "-std=c++17", "-DNJ_KERNEL_LIB"], cl)
    ['/O2', '/std:c++17', '-DNJ_KERNEL_LIB']
    """
    if not cc.msvc:
        return list(flags)
    out = []
    for f in flags:
        if f in _MSVC_DROP:
            continue
        if f in _MSVC_FLAGS:
            out.append(_MSVC_FLAGS[f])
        elif f.startswith(("-D", "-U", "-I", "/")):
            out.append(f)
        else:
            raise ToolchainError(f"the flag {f!r} has no MSVC equivalent here: add it to "
                                 f"nitorch_jit/jit/toolchain.py (_MSVC_FLAGS) or leave it out "
                                 f"of MSVC builds")
    return out


def shared_library_command(cc, sources, output, cflags=(), system_include_dirs=(),
                           include_dirs=(), library_dirs=(), libraries=(), rpaths=(),
                           ldflags=(), object_dir=None):
    """The one compiler call that builds the shared library `output` from `sources`, with
    the flags of `cc`'s kind and platform.

    GNU driver (gcc, clang; Linux, macOS): ``-shared -fPIC -fvisibility=hidden`` (the entry
    points are marked NJ_EXPORT), system headers by ``-isystem``, libraries by ``-L``/``-l``
    and an rpath; on macOS ``-undefined dynamic_lookup``, as cpp_extension and inductor's
    cpp_builder link there. MSVC: cl with the flags torch's own headers need (inductor's
    cpp_builder: ``/EHsc /Zc:__cplusplus /permissive- -DNOMINMAX``; cpp_extension: ``/MD``),
    objects into `object_dir` (``/Fo``), the DLL by ``/Fe``, and ``/link /DLL`` against the
    import libraries (``x.lib``).

    Parameters
    ----------
    cc : Compiler
    sources : list of str
    output : str
        The library's path.
    cflags : list of str
        GNU-style flags (``translate_flags`` turns them into MSVC's).
    system_include_dirs, include_dirs, library_dirs : list of str
    libraries : list of str
        Library names without prefix or suffix ('torch_cpu').
    rpaths : list of str
        Folders the loader searches for the libraries at run time (not Windows: its loader
        takes the DLLs already loaded, and torch adds its lib folder, os.add_dll_directory).
    ldflags : list of str
        Given to the linker as they are (the caller's dialect).
    object_dir : str, optional
        MSVC only: where cl writes its .obj files (default: the output's folder).

    Returns
    -------
    list of str
        The compiler and its arguments, for ``subprocess.run``.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> gcc = toolchain.Compiler("g++", "gcc", "12.2.0", "", "linux", "x86_64")
    >>> toolchain.shared_library_command(gcc, ["a.cpp"], "a.so", ["-O3"])
    ['g++', '-shared', '-fPIC', '-fvisibility=hidden', '-O3', 'a.cpp', '-o', 'a.so']
    """
    if cc.msvc:
        objs = str(object_dir or Path(output).parent)
        cmd = [cc.path, "/nologo", "/LD", "/MD", "/EHsc", "/Zc:__cplusplus", "/permissive-",
               "-DNOMINMAX"] + translate_flags(cflags, cc)
        # cl has /external:I, but cpp_extension gives torch's headers by -I on Windows too
        cmd += [f"-I{d}" for d in list(system_include_dirs) + list(include_dirs)]
        cmd += [str(s) for s in sources]
        # a trailing separator: /Fo names a folder, one object per source
        cmd += [f"/Fo{objs}{os.sep if not objs.endswith(('/', chr(92))) else ''}",
                f"/Fe{output}", "/link", "/DLL"]
        return cmd + [f"/LIBPATH:{d}" for d in library_dirs] \
            + [f"{lib}.lib" for lib in libraries] + list(ldflags)
    cmd = [cc.path, "-shared", "-fPIC", "-fvisibility=hidden"] + list(cflags)
    cmd += [f"-isystem{d}" for d in system_include_dirs]
    cmd += [f"-I{d}" for d in include_dirs] + [str(s) for s in sources]
    cmd += ["-o", str(output)] + list(ldflags)
    cmd += [f"-L{d}" for d in library_dirs] + [f"-l{lib}" for lib in libraries]
    cmd += [f"-Wl,-rpath,{d}" for d in rpaths]
    if cc.target == "darwin":  # ld64 refuses undefined symbols unless told (cpp_extension)
        cmd += ["-undefined", "dynamic_lookup"]
    elif libraries:  # gold, where it runs: a binding links libtorch_cpu (hundreds of MB)
        cmd += fast_linker_flags(cc.path)
    return cmd


def torch_rpaths(cc, library_dirs):
    """The rpaths a library linked against torch's `library_dirs` gets: those folders on macOS
    (torch's dylibs are named ``@rpath/libc10.dylib``, its libomp ``@rpath/libomp.dylib``:
    with the rpath, dyld resolves them to the copies torch loaded), none elsewhere (Linux:
    torch has loaded them by soname before us; Windows: torch added its folder,
    ``os.add_dll_directory``).

    Parameters
    ----------
    cc : Compiler
    library_dirs : list of str

    Returns
    -------
    list of str
        Empty but on macOS.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> mac = toolchain.Compiler("c++", "apple-clang", "15.0.0", "", "darwin", "arm64")
    >>> toolchain.torch_rpaths(mac, ["/t/lib"])
    ['/t/lib']
    """
    return list(library_dirs) if cc.target == "darwin" else []


def fast_paths(cc=None):
    """Where the kernels' hand-written vector paths exist, as csrc/core/platform.h decides:
    AVX2 + FMA paths (chosen at run time by the CPU) on x86-64 with gcc or clang
    (``NJ_AVX2_PATHS``: ``__x86_64__``/``_M_X64`` and ``__GNUC__``); elsewhere (aarch64,
    Apple arm64, MSVC) portable code that the compiler vectorises for its baseline (NEON on
    arm64, SSE2 on x86-64).

    Parameters
    ----------
    cc : Compiler, optional
        Default: ``compiler()``.

    Returns
    -------
    str
        The AVX2 + FMA paths, or portable code and why, in one line.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.fast_paths(toolchain.Compiler("cl", "msvc", "19", "", "win32", "AMD64"))
    'portable (MSVC: no AVX2 paths compiled; the compiler vectorises the portable code)'
    """
    cc = compiler() if cc is None else cc
    x86 = cc.machine.lower() in ("x86_64", "amd64", "x64")
    if x86 and not cc.msvc:
        off = os.environ.get("NI_JIT_DISABLE_AVX2", "0").strip().lower() not in ("", "0",
                                                                                  "false", "no")
        return "AVX2 + FMA where the CPU has them, chosen at run time" + (
            " (off: NI_JIT_DISABLE_AVX2)" if off else "")
    why = "MSVC: no AVX2 paths compiled" if cc.msvc else f"{cc.machine}: no AVX2 paths"
    return f"portable ({why}; the compiler vectorises the portable code)"


# ----------------------------------------------------------------------------- ninja
def find_ninja():
    """Return (path, version) of ninja; a pip-installed ninja beside sys.executable counts.

    torch's own check looks only at PATH, so when ninja is found beside the interpreter of a
    venv that is not activated, that folder is put on PATH for this process.
    """
    path = shutil.which("ninja")
    if path is None:
        beside = Path(sys.executable).parent / ("ninja.exe" if os.name == "nt" else "ninja")
        if beside.exists():
            path = str(beside)
            os.environ["PATH"] = str(beside.parent) + os.pathsep + os.environ.get("PATH", "")
    if path is None:
        raise ToolchainError(
            "ninja is not installed: 'pip install ninja' (it is a dependency of nitorch_jit, "
            "so reinstalling the package also brings it).")
    version = _run_version([path, "--version"])
    if version is None:
        raise ToolchainError(f"ninja at '{path}' does not run ('{path} --version' failed)")
    return path, version


# ----------------------------------------------------------------------------- CUDA toolkit
def _nvcc_behind_wrapper(path):
    """If `path` is a small script that execs a real nvcc, return that nvcc."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return None
    if head.startswith(b"\x7fELF") or b"\0" in head:
        return None  # a binary: the real thing
    for token in re.findall(rb"(/[^\s\"';]*?/bin/nvcc)\b", head):
        real = os.path.realpath(token.decode(errors="replace"))
        if real != os.path.realpath(path) and os.access(real, os.X_OK):
            return real
    return None


def _is_toolkit(home):
    """A toolkit has nvcc, cuda_runtime.h and libcudart; return what is missing."""
    home = Path(home)
    missing = []
    if not (home / "bin" / "nvcc").exists():
        missing.append("bin/nvcc")
    if not (home / "include" / "cuda_runtime.h").exists():
        missing.append("include/cuda_runtime.h")
    if cudart_dir(home) is None:
        missing.append("libcudart.so (lib64/)")
    return missing


def cudart_dir(home):
    """The folder of the toolkit at `home` that holds libcudart, or None."""
    home = Path(home)
    for d in (home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib",
              home / "targets" / "sbsa-linux" / "lib"):
        if d.is_dir() and list(d.glob("libcudart.so*")):
            return d
    return None


@functools.lru_cache(None)
def _cuda_home_cached(cuda_home_env, cuda_path_env, path_env):
    tried = []
    candidates = []
    if cuda_home_env:
        candidates.append(("CUDA_HOME", cuda_home_env))
    if cuda_path_env:
        candidates.append(("CUDA_PATH", cuda_path_env))
    nvcc = shutil.which("nvcc", path=path_env)
    if nvcc:
        real = _nvcc_behind_wrapper(nvcc) or os.path.realpath(nvcc)
        candidates.append((f"nvcc on PATH ({nvcc})", str(Path(real).parent.parent)))
    candidates.append(("default", "/usr/local/cuda"))
    for origin, home in candidates:
        missing = _is_toolkit(home)
        if not missing:
            return os.path.realpath(home), origin
        tried.append(f"{origin}: {home} (missing {', '.join(missing)})")
        if origin in ("CUDA_HOME", "CUDA_PATH"):
            break  # an explicit setting that is wrong must not be silently replaced
    raise ToolchainError(
        "no usable CUDA toolkit (nvcc + headers + libcudart) was found; tried " + "; ".join(tried)
        + ". pip's CUDA builds of torch do not include nvcc: install the CUDA toolkit matching "
        "torch.version.cuda (e.g. 'conda install -c nvidia cuda-toolkit', or NVIDIA's packages) "
        "and set CUDA_HOME, or set NI_USE_CUDA=0 to build CPU code only.")


def find_cuda_home():
    """Return (toolkit root, where it was found)."""
    return _cuda_home_cached(os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""),
                             os.environ.get("PATH", ""))


def nvcc_version(cuda_home):
    """'13.0.88'-like version of the toolkit's nvcc."""
    text = _run_version([str(Path(cuda_home) / "bin" / "nvcc"), "--version"])
    if text is None:
        raise ToolchainError(f"'{cuda_home}/bin/nvcc --version' failed")
    m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
    if m is None:
        raise ToolchainError(f"cannot read the version printed by {cuda_home}/bin/nvcc: {text!r}")
    return m.group(1)


def check_cuda_versions(nvcc_ver, torch_cuda):
    """nvcc and torch must share the CUDA major version (the runtime ABI)."""
    if torch_cuda is None:
        raise ToolchainError("this torch is a CPU-only build: CUDA code cannot be compiled for it")
    if nvcc_ver.split(".")[0] != torch_cuda.split(".")[0]:
        raise ToolchainError(
            f"nvcc is CUDA {nvcc_ver} but torch was built with CUDA {torch_cuda}: the major "
            f"versions must match. Point CUDA_HOME at a CUDA {torch_cuda.split('.')[0]}.x toolkit, "
            f"or install the torch build for CUDA {nvcc_ver.split('.')[0]}.")


def cuda_enabled():
    """NI_USE_CUDA=0 turns every CUDA build off."""
    return os.environ.get("NI_USE_CUDA", "1").strip().lower() not in ("0", "false", "no", "off")


# ----------------------------------------------------------------------------- GPU archs
NAMED_ARCHS = {
    "kepler": ["3.5", "3.7"], "maxwell": ["5.0", "5.2"], "pascal": ["6.0", "6.1"],
    "volta": ["7.0"], "turing": ["7.5"], "ampere": ["8.0", "8.6"], "ada": ["8.9"],
    "lovelace": ["8.9"], "hopper": ["9.0"], "blackwell": ["10.0", "12.0"],
}
_ARCH_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+ptx)?$", re.IGNORECASE)


def _visible_archs():
    import torch
    archs = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            archs.append(f"{major}.{minor}")
    return archs


def _torch_archs():
    import torch
    out = []
    for a in torch.cuda.get_arch_list() if torch.version.cuda else []:
        m = re.match(r"sm_(\d+)(\d)([af]?)$", a)
        if m:
            out.append(f"{m.group(1)}.{m.group(2)}{m.group(3)}")
    return out


def parse_arch_list(text=None):
    """Resolve TORCH_CUDA_ARCH_LIST-style text into a sorted list like ['9.0', '12.0+PTX'].

    Accepts 'mine' (visible GPUs), 'all' (torch's own list), names (Volta ... Blackwell,
    optionally '+PTX'), and numbers with optional 'a'/'f' suffix and '+PTX', separated by
    ';', ',' or spaces. Unset: 'mine' when a GPU is visible, else torch's own list.
    """
    if text is None:
        text = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    if isinstance(text, (list, tuple)):  # an already parsed list (a cache key's)
        text = ";".join(text)
    text = text.strip()
    if not text:
        text = "mine" if _visible_archs() else "all"
    out = []
    for item in re.split(r"[;,\s]+", text):
        if not item:
            continue
        low = item.lower()
        ptx = low.endswith("+ptx")
        base = low[:-4] if ptx else low
        if base == "mine":
            found = _visible_archs()
            if not found:
                raise ToolchainError(
                    "TORCH_CUDA_ARCH_LIST=mine but no GPU is visible; give the architectures "
                    "explicitly, e.g. TORCH_CUDA_ARCH_LIST='8.0;9.0' or 'Hopper' (or 'all').")
            names = found
        elif base == "all":
            names = _torch_archs()
            if not names:
                raise ToolchainError("TORCH_CUDA_ARCH_LIST=all but this torch lists no CUDA archs")
        elif base in NAMED_ARCHS:
            names = list(NAMED_ARCHS[base])
        else:
            m = _ARCH_RE.match(item)
            if m is None:
                raise ToolchainError(
                    f"TORCH_CUDA_ARCH_LIST: cannot read {item!r}; expected numbers such as "
                    f"'8.0', '9.0+PTX', '10.0a', '12.0', or names "
                    f"({', '.join(sorted(NAMED_ARCHS))}), 'mine' or 'all'")
            names = [f"{int(m.group(1))}.{m.group(2)}{m.group(3).lower()}"]
        if ptx:
            names = names[:-1] + [names[-1] + "+PTX"]
        for n in names:
            if n not in out and n + "+PTX" not in out:
                out.append(n)
            elif n.endswith("+PTX") and n[:-4] in out:
                out[out.index(n[:-4])] = n
    return sorted(out, key=lambda a: tuple(int(x) for x in re.findall(r"\d+", a)[:2]))


def arch_flags(archs):
    """nvcc -gencode flags for a parsed arch list."""
    flags = []
    for a in archs:
        ptx = a.endswith("+PTX")
        base = a[:-4] if ptx else a
        major, rest = base.split(".")
        num = major + rest  # '10.0a' -> '100a'
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


@functools.lru_cache(None)
def fast_linker_flags(cxx):
    """``['-fuse-ld=gold']`` when compiler `cxx` can run gold here, else ``[]``. A binding
    links against libtorch_cpu (hundreds of MB): measured here, GNU ld takes 0.45 s of a
    2.8 s binding build, gold 0.18 s. Probed once per process and compiler (about 10 ms: the
    driver starts the linker, which prints its version)."""
    if sys.platform != "linux":
        return []
    try:
        ok = subprocess.run([cxx, "-fuse-ld=gold", "-Wl,--version"], capture_output=True,
                            timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["-fuse-ld=gold"] if ok else []


# ----------------------------------------------------------------------------- CPU parallelism
@dataclass(frozen=True)
class OpenMP:
    """How a library that inlines torch's OpenMP ``at::parallel_for`` (a binding on torch's
    classic headers) is compiled and linked here.

    Attributes
    ----------
    on : bool
        Whether it is compiled with OpenMP (its parallel_for runs threads).
    cflags, ldflags : tuple of str
        The compiler's and the linker's flags (empty when off).
    why : str
        Why, in one line (``nitorch-jit info``).
    warn : bool
        Off for a reason the user may want to fix: one warning when such a library is built.
    """
    on: bool
    cflags: tuple
    ldflags: tuple
    why: str
    warn: bool = False


def torch_openmp_runtime():
    """The OpenMP runtime that torch uses in this process: 'gomp' (GNU libgomp: torch's Linux
    wheels), 'llvm' (LLVM's libomp: torch's macOS wheels, conda), 'intel' (libiomp5), 'msvc'
    (vcomp), None (torch's parallel backend is not OpenMP), or 'unknown'.

    Returns
    -------
    str or None

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.torch_openmp_runtime() in ("gomp", "llvm", "intel", "msvc", "unknown", None)
    True
    """
    import torch
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    names = []
    try:  # Linux: what is mapped (torch brings its runtime up on import)
        with open("/proc/self/maps") as f:
            names = [line.split()[-1].rsplit("/", 1)[-1] for line in f if "omp" in line]
    except OSError:  # not Linux: what torch ships beside its libraries
        lib = Path(torch.__file__).parent / "lib"
        names = [p.name for p in lib.glob("*omp*")] if lib.is_dir() else []
    for prefix, runtime in (("libgomp", "gomp"), ("libiomp5", "intel"), ("libomp", "llvm"),
                            ("vcomp", "msvc")):
        if any(n.startswith(prefix) for n in names):
            return runtime
    return "unknown"


def _torch_root():
    import torch
    return Path(torch.__file__).resolve().parent


def openmp_plan(cc, runtime, torch_root):
    """The OpenMP flags of a binding on torch's classic headers for compiler `cc` when torch
    uses OpenMP `runtime` from `torch_root`, before the probe (``openmp``): the rule, with no
    compiler call.

    One OpenMP runtime per process: a second one keeps its own thread pool (torch's
    ``set_num_threads`` no longer holds), and two copies of LLVM's or Intel's runtime end the
    process ("OMP: Error #15", pytorch #122705). So the binding uses the runtime torch loaded:

    - gcc: ``-fopenmp`` links libgomp, by the soname that torch's Linux wheel loaded first.
    - clang (Linux): its ``-fopenmp`` code calls LLVM's libomp (``__kmpc_*``), which libgomp
      lacks: with torch's libgomp that would be a second runtime, so OpenMP is off there
      (one thread). With torch on LLVM's libomp it is on.
    - Apple clang: ``-Xclang -fopenmp`` (it has no ``-fopenmp`` driver flag) with torch's own
      ``include/omp.h`` and ``lib/libomp.dylib`` (``-lomp``, an rpath to torch/lib: dyld takes
      the copy already loaded, torch PR #123417), as inductor's cpp_builder does; never
      Homebrew's libomp (another install name, so a second copy).
    - MSVC: ``/openmp``, as inductor's cpp_builder on Windows.

    Parameters
    ----------
    cc : Compiler
    runtime : str or None
        ``torch_openmp_runtime()``.
    torch_root : pathlib.Path
        torch's package folder (its include/ and lib/).

    Returns
    -------
    OpenMP

    Examples
    --------
    >>> from pathlib import Path
    >>> from nitorch_jit.jit import toolchain
    >>> gcc = toolchain.Compiler("g++", "gcc", "12.2.0", "", "linux", "x86_64")
    >>> toolchain.openmp_plan(gcc, "gomp", Path("/t")).cflags
    ('-fopenmp',)
    """
    if runtime is None:
        return OpenMP(False, (), (), "not needed: torch's parallel backend is not OpenMP, so "
                                     "at::parallel_for calls into torch")
    if cc.kind == "gcc":
        note = "" if runtime in ("gomp", "unknown") else \
            f" (torch uses {runtime}: gcc's libgomp is a second runtime)"
        return OpenMP(True, ("-fopenmp",), ("-fopenmp",), "gcc -fopenmp: libgomp" + note)
    if cc.kind == "clang":
        if runtime == "llvm":
            return OpenMP(True, ("-fopenmp",), ("-fopenmp",),
                          "clang -fopenmp: LLVM's libomp, the runtime torch loaded")
        return OpenMP(False, (), (), f"off: clang's -fopenmp code needs LLVM's libomp and "
                      f"torch runs on {runtime}: a second OpenMP runtime (its own thread pool, "
                      f"which torch.set_num_threads does not reach) is not loaded, so a binding "
                      f"on torch's classic headers runs on one thread (g++, or torch >= 2.13 "
                      f"and its stable-ABI bindings, run torch's threads)", warn=True)
    if cc.kind == "apple-clang":
        lib = torch_root / "lib"
        if not (lib / "libomp.dylib").exists():
            return OpenMP(False, (), (), f"off: torch ships no libomp.dylib in {lib}, and "
                          f"another libomp would be a second runtime; one thread", warn=True)
        return OpenMP(True, ("-Xclang", "-fopenmp", f"-I{torch_root / 'include'}"),
                      (f"-L{lib}", "-lomp", f"-Wl,-rpath,{lib}"),
                      "Apple clang -Xclang -fopenmp: torch's own libomp.dylib")
    return OpenMP(True, ("/openmp",), (), "MSVC /openmp")


@functools.lru_cache(None)
def _probe_openmp(cc, cflags, ldflags):
    """Whether compiler `cc` builds and links a shared library with these OpenMP flags:
    None when it does, else the compiler's first error line. One compile (about 0.3 s),
    once per compiler and flags: its answer is kept under the cache root (``.probes/``), so
    that a process that loads a cached binding compiles nothing."""
    record = _probe_record(cc, cflags, ldflags)
    try:
        return json.loads(record.read_text())["error"]
    except (OSError, ValueError, KeyError, AttributeError):  # none kept (or no root)
        pass
    error = _run_openmp_probe(cc, cflags, ldflags)
    if record is not None:
        try:  # a whole file or none: written aside, then renamed
            record.parent.mkdir(mode=0o700, exist_ok=True)
            aside = record.with_name(f"{record.name}.{os.getpid()}")
            aside.write_text(json.dumps({"compiler": cc.banner, "flags": cflags + ldflags,
                                         "error": error}))
            os.replace(aside, record)
        except OSError:
            pass  # a read-only root: probed again by the next process
    return error


def _probe_record(cc, cflags, ldflags):
    """The file that keeps the probe's answer for this compiler and these flags, or None."""
    from . import cache  # lazily: the cache knows nothing of compilers
    try:
        root = cache.writable_root()
        st = os.stat(cc.path)
    except Exception:  # noqa: BLE001 -- no usable root, a compiler that went: probe each time
        return None
    what = json.dumps([cc.path, cc.banner, cc.target, st.st_size, st.st_mtime_ns,
                       list(cflags), list(ldflags)])
    return root / ".probes" / f"openmp-{hashlib.sha256(what.encode()).hexdigest()[:16]}.json"


def _run_openmp_probe(cc, cflags, ldflags):
    """Compile and link the OpenMP probe; None, or the compiler's first error line."""
    with tempfile.TemporaryDirectory(prefix="nitorch_jit_omp_") as tmp:
        src = Path(tmp) / "omp_probe.cpp"
        src.write_text('#include <omp.h>\nextern "C" int nj_probe() {\n  int n = 0;\n'
                       '#pragma omp parallel\n  {\n#pragma omp atomic\n    n += '
                       'omp_get_num_threads() > 0;\n  }\n  return n;\n}\n')
        cmd = shared_library_command(cc, [str(src)], str(Path(tmp) / f"p{library_suffix()}"),
                                     list(cflags), ldflags=list(ldflags), object_dir=tmp)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp,
                                 env=dict(os.environ, **msvc_env()))
        except (OSError, subprocess.SubprocessError) as err:
            return str(err)
        if out.returncode == 0:
            return None
        lines = [ln for ln in (out.stderr + out.stdout).splitlines() if ln.strip()]
        return next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")


def openmp(cc=None):
    """The OpenMP of a classic binding here (``openmp_plan``), checked by compiling a probe
    once per process and compiler: a compiler that cannot build it gives OpenMP off (one
    thread, ``warn``), never a failed build.

    A binding on torch's stable ABI (torch >= 2.13) and the kernel libraries need none of
    this: their threads are torch's own parallel_for (a function in libtorch), so no OpenMP
    code of ours is compiled, with any compiler.

    Parameters
    ----------
    cc : Compiler, optional
        The compiler that builds the binding; default ``compiler()``.

    Returns
    -------
    OpenMP
        The plan's, or off (``warn``) when the probe failed.

    Examples
    --------
    >>> from nitorch_jit.jit import toolchain
    >>> toolchain.openmp().on in (True, False)   # doctest: +SKIP
    True
    """
    cc = compiler() if cc is None else cc
    plan = openmp_plan(cc, torch_openmp_runtime(), _torch_root())
    if not plan.on:
        return plan
    failed = _probe_openmp(cc, plan.cflags, plan.ldflags)
    if failed is None:
        return plan
    return OpenMP(False, (), (), f"off: {cc.describe()} cannot build OpenMP code with "
                  f"{' '.join(plan.cflags + plan.ldflags)} ({failed}); one thread", warn=True)


def openmp_flags():
    """The compiler flags of ``openmp()`` (empty when off), kept for scripts that build a
    classic extension themselves.

    Returns
    -------
    list of str
    """
    return list(openmp().cflags)


# ----------------------------------------------------------------------------- sanitizers
SANITIZERS = ("address", "undefined")


def sanitizer_flags(cc=None, check_runtime=True):
    """The flags of a sanitized build (``NI_JIT_SANITIZE``): kernel libraries and bindings
    compiled and linked with AddressSanitizer and UndefinedBehaviorSanitizer (issue 40). They
    are flags like any other, so they enter the cache key: these builds never mix with normal
    ones.

    ``NI_JIT_SANITIZE``: unset, empty or ``0``: none (``[]``). ``1`` (``on``, ``yes``,
    ``true``): ``address,undefined``. Else a list of ``address`` and ``undefined``
    (``address,undefined``, ``undefined``). The flags: ``-fsanitize=<list>
    -fno-sanitize-recover=all`` (the first UBSan report ends the process, as ASan's does),
    ``-fno-omit-frame-pointer -g1`` (reports with whole stacks and line numbers), ``-O1``
    (after the build's own level: sanitizers are documented at -O1, and a kernel library
    compiles in half the time of -O3), and with clang ``-shared-libsan`` (its runtime as the
    shared library that the process preloads).

    A sanitized library loads only into a process that started with the sanitizer's runtime
    (``LD_PRELOAD``): python is not built with it, and ASan must come first. Without it, the
    load would end the process (gcc's runtime aborts) or fail on undefined symbols (clang's),
    so this raises first, naming the command that works. libstdc++ is preloaded after it:
    ASan intercepts C++ throws, and finds the real ``__cxa_throw`` only where libstdc++ is
    loaded when it starts (python links none), else the first exception a binding throws (a
    bad argument) ends the process ("CHECK failed ... real___cxa_throw").

    Parameters
    ----------
    cc : Compiler, optional
        Default: ``compiler()``.
    check_runtime : bool
        Raise when the runtime the flags need is not loaded in this process (Linux).

    Returns
    -------
    list of str
        Empty when ``NI_JIT_SANITIZE`` asks for none.

    Raises
    ------
    ToolchainError
        An unknown sanitizer, a compiler without them here (MSVC), or (check_runtime) the
        runtime not preloaded.

    Examples
    --------
    >>> import os
    >>> from nitorch_jit.jit import toolchain
    >>> gcc = toolchain.Compiler("g++", "gcc", "12.2.0", "", "linux", "x86_64")
    >>> os.environ["NI_JIT_SANITIZE"] = "undefined"
    >>> toolchain.sanitizer_flags(gcc, check_runtime=False)
    ['-fsanitize=undefined', '-fno-sanitize-recover=all', '-fno-omit-frame-pointer', '-g1', '-O1']
    >>> del os.environ["NI_JIT_SANITIZE"]
    >>> toolchain.sanitizer_flags(gcc)
    []
    """
    text = os.environ.get("NI_JIT_SANITIZE", "").strip().lower()
    if text in ("", "0", "off", "no", "false"):
        return []
    names = list(SANITIZERS) if text in ("1", "on", "yes", "true") \
        else sorted(set(n for n in re.split(r"[,\s]+", text) if n))
    unknown = [n for n in names if n not in SANITIZERS]
    if unknown:
        raise ToolchainError(f"NI_JIT_SANITIZE={text!r}: unknown sanitizer(s) "
                             f"{', '.join(unknown)}; expected 1, or a list of "
                             f"{', '.join(SANITIZERS)}")
    cc = compiler() if cc is None else cc
    if cc.kind not in ("gcc", "clang", "apple-clang"):
        raise ToolchainError(f"NI_JIT_SANITIZE: sanitized builds need gcc or clang, not "
                             f"{cc.describe()}")
    flags = [f"-fsanitize={','.join(names)}", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer", "-g1", "-O1"]
    clang = cc.kind != "gcc"
    if clang:
        flags.append("-shared-libsan")
    # gcc links libubsan as a needed library (it loads by itself); ASan, and any clang runtime,
    # must be preloaded
    if not check_runtime or (not clang and "address" not in names) \
            or not sys.platform.startswith("linux"):
        return flags
    arch = platform.machine()
    runtime = (f"libclang_rt.{'asan' if 'address' in names else 'ubsan_standalone'}-{arch}.so"
               if clang else "libasan.so")
    try:
        with open("/proc/self/maps") as f:
            loaded = any(runtime.split(".so")[0] in line for line in f)
    except OSError:
        return flags  # cannot tell: the loader's own message will say
    if not loaded:
        found = _run_version([cc.path, f"-print-file-name={runtime}"]) or runtime
        cxxrt = _run_version([cc.path, "-print-file-name=libstdc++.so.6"]) or "libstdc++.so.6"
        raise ToolchainError(
            f"NI_JIT_SANITIZE={text}: a library built with -fsanitize={','.join(names)} by "
            f"{cc.describe()} loads only into a process started with the sanitizer runtime "
            f"preloaded; none is loaded here. Start Python as: "
            f"LD_PRELOAD=\"{found} {cxxrt}\" ASAN_OPTIONS=detect_leaks=0 python ... "
            f"(libstdc++ second: ASan's interceptor of C++ throws needs it at start; "
            f"detect_leaks=0: Python itself leaks at exit). Or unset NI_JIT_SANITIZE.")
    return flags
