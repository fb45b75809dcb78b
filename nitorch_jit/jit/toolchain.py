"""Find the tools a build needs and say clearly what is missing.

Everything here is generic: compilers, ninja, the CUDA toolkit, GPU architectures.
Each finder raises :class:`ToolchainError` with a message that says what to do.
"""
import functools
import os
import re
import shutil
import subprocess
import sys
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
def _which_cxx(cxx, path_env):
    path = shutil.which(cxx, path=path_env)
    if path is None:
        raise ToolchainError(
            f"no C++ compiler: '{cxx}' is not on PATH. Install one (Debian/Ubuntu: "
            f"'apt install g++'; conda: 'conda install gxx_linux-64'), or point CXX at it. "
            f"Without it nitorch_jit can only use its pure-PyTorch backend "
            f"(NI_COMPILED_BACKEND=TORCH).")
    text = _run_version([path, "--version"])
    if text is None:
        raise ToolchainError(f"the C++ compiler '{path}' does not run ('{path} --version' failed)")
    return path, text.splitlines()[0]


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
    """The command that builds use as CXX: CXX, else c++ on PATH, else (when c++ builds
    against a newer libstdc++ than the loaded one) a matching g++ found instead."""
    explicit = os.environ.get("CXX")
    return _cxx_cached(explicit or "c++", os.environ.get("PATH", ""), bool(explicit))[0]


def find_cxx():
    """Return (resolved path, first line of --version) of the host C++ compiler."""
    path, version = _cxx_cached(os.environ.get("CXX") or "c++", os.environ.get("PATH", ""),
                                bool(os.environ.get("CXX")))
    return os.path.realpath(path), version


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
@functools.lru_cache(None)
def openmp_flags():
    """at::parallel_for is an inline OpenMP template when torch uses OpenMP: the kernels
    must be compiled with -fopenmp or they run on one thread."""
    import torch
    if "OpenMP" in torch.__config__.parallel_info() and sys.platform.startswith("linux"):
        return ["-fopenmp"]
    return []
