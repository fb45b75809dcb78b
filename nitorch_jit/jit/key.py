"""The cache key: every input a compiled library depends on, and the entry name made from it."""
import hashlib
import json
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import toolchain


@dataclass
class ModuleSpec:
    """What to compile: a library made of `sources`, for `device` ('cpu' or 'cuda')."""
    name: str                      # e.g. 'pushpull'
    device: str                    # 'cpu' | 'cuda'
    sources: list                  # compiled files
    include_dirs: list = field(default_factory=list)  # every file below them is hashed too
    cflags: list = field(default_factory=list)
    cuda_cflags: list = field(default_factory=list)
    ldflags: list = field(default_factory=list)
    archs: list = field(default_factory=list)         # CUDA only, parsed arch list
    # True: the sources include no torch header (a kernel library): compiled by the compiler
    # alone, keyed on what it depends on (compiler, flags, sources, platform) and not on torch
    # or Python, and loaded with ctypes; the caller binds its entries
    torch_free: bool = False
    # True: built by one compiler call from the flags given here (a torch-free library, or a
    # binding on torch's stable ABI); False: through torch.utils.cpp_extension in a worker
    direct: bool = False
    # "2.13": a binding on torch's stable C ABI, compiled for that target version
    # (TORCH_TARGET_VERSION, so it uses nothing newer) by one compiler call, in seconds.
    # Keyed, as a classic binding is, on the exact torch, CUDA and Python: an upgrade rebuilds
    # it (the promise: never a stale or silently skipped binding), and only it.
    # "": the classic C++ API
    stable_abi: str = ""
    label: str = ""                # what the progress line calls it (default: the module)

    @property
    def library_name(self):
        return f"nitorch_jit_{self.name}_{self.device}".replace(".", "_")

    @property
    def what(self):
        return self.label or f"module '{self.name}' for {self.device.upper()}"


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)


_FOUND = {}  # (sources, include_dirs) -> ((path, mtime_ns, size), ...) of included_files


def _version(path):
    st = path.stat()
    return path, st.st_mtime_ns, st.st_size


def included_files(sources, include_dirs):
    """The sources and every file they include, transitively, that lies in the including
    file's folder or below one of `include_dirs` (system and torch headers are not ours and
    are covered by the torch / compiler fields of the key). Sorted by path.

    Remembered per process while none of the files found changes (``nitorch-jit info`` keys
    every kernel library: 256 keys over the same few dozen files, 2.7 s of path lookups)."""
    memo = (tuple(map(str, sources)), tuple(map(str, include_dirs)))
    found = _FOUND.get(memo)
    if found is not None:
        try:
            if all(_version(v[0]) == v for v in found):
                return [v[0] for v in found]
        except OSError:
            pass
    dirs = [Path(d) for d in include_dirs]
    seen, todo = set(), [Path(s) for s in sources]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _INCLUDE.findall(path.read_bytes()):
            name = name.decode()
            for base in [path.parent] + dirs:
                candidate = base / name
                if candidate.is_file():
                    todo.append(candidate.resolve())
                    break
    result = sorted(seen)
    _FOUND[memo] = tuple(_version(p) for p in result)
    return result


def hash_sources(spec):
    """sha256 over the compiled files, the headers of ours that they include (transitively)
    and the flags: editing a CUDA header does not change the key of a CPU library."""
    h = hashlib.sha256()
    root = Path(spec.sources[0]).resolve().parent.parent if spec.sources else Path(".")
    for p in included_files([Path(s).resolve() for s in spec.sources], spec.include_dirs):
        try:  # relative names: the key does not depend on where the package lies
            name = p.relative_to(root).as_posix()
        except ValueError:
            name = p.name
        h.update(name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(json.dumps([spec.cflags, spec.cuda_cflags, spec.ldflags]).encode())
    return h.hexdigest()


def environment_platform():
    return f"{sys.platform}-{platform.machine()}"


def environment():
    """Key fields shared by every module built in this environment (no compiler calls)."""
    import torch
    from .._version import __version__
    return {
        "package": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python": f"{sys.implementation.name}-{platform.python_version()}{getattr(sys, 'abiflags', '')}",
        "platform": environment_platform(),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def compute_key(spec):
    """The full key of `spec` in this environment; raises ToolchainError if a tool is missing."""
    if spec.torch_free:
        key = {"kind": "torch-free", "platform": environment_platform()}
    elif spec.stable_abi:  # the torch fields too: an upgrade rebuilds it (ModuleSpec)
        key = dict(environment(), kind="stable-abi", stable_abi=spec.stable_abi)
    else:
        key = dict(environment())
    cxx_path, cxx_version = toolchain.find_cxx()
    key.update(module=spec.name, device=spec.device, cxx=f"{cxx_path} | {cxx_version}",
               sources=hash_sources(spec))
    if spec.device == "cuda":
        home, _ = toolchain.find_cuda_home()
        key.update(nvcc=toolchain.nvcc_version(home), archs=list(spec.archs))
    return key


def key_hash(key):
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def entry_name(key):
    """Readable prefix + short hash, e.g. pushpull-cpu-torch2.13.0+cpu-cp311-3f2a9c1d0e4b, for
    a binding on the stable ABI pushpull-cpu-stable2.13-torch2.13.0+cpu-cp311-3f2a9c1d0e4b, for
    a torch-free library pushpull.grid_pull.float32-cpu-3f2a9c1d0e4b (a name that ends with its device
    already, pushpull.grid_pull.float32.cuda, does not say it twice)."""
    if key.get("kind") == "torch-free":
        device = "" if key["module"].endswith("." + key["device"]) else f"-{key['device']}"
        return f"{key['module']}{device}-{key_hash(key)[:12]}"
    pytag = "cp" + "".join(key["python"].split("-")[1].split(".")[:2])
    cuda = f"-cu{key['nvcc'].split('.')[0]}{key['nvcc'].split('.')[1]}" if key["device"] == "cuda" else ""
    abi = f"stable{key['stable_abi']}-" if key.get("kind") == "stable-abi" else ""
    return (f"{key['module']}-{key['device']}-{abi}torch{key['torch']}-{pytag}{cuda}-"
            f"{key_hash(key)[:12]}")
