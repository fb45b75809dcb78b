"""The cache key: every input a compiled library depends on, and the entry name made from it."""
import hashlib
import json
import platform
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

    @property
    def library_name(self):
        return f"nitorch_jit_{self.name}_{self.device}"


def hash_sources(spec):
    """sha256 over the compiled files, every header below the include dirs, and the flags."""
    h = hashlib.sha256()
    files = [Path(s) for s in spec.sources]
    for d in spec.include_dirs:
        files += sorted(p for p in Path(d).rglob("*") if p.is_file())
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(json.dumps([spec.cflags, spec.cuda_cflags, spec.ldflags]).encode())
    return h.hexdigest()


def environment():
    """Key fields shared by every module built in this environment (no compiler calls)."""
    import torch
    from .. import __version__
    return {
        "package": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python": f"{sys.implementation.name}-{platform.python_version()}{getattr(sys, 'abiflags', '')}",
        "platform": f"{sys.platform}-{platform.machine()}",
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def compute_key(spec):
    """The full key of `spec` in this environment; raises ToolchainError if a tool is missing."""
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
    """Readable prefix + short hash, e.g. pushpull-cpu-torch2.13.0+cpu-cp311-3f2a9c1d0e4b."""
    pytag = "cp" + "".join(key["python"].split("-")[1].split(".")[:2])
    cuda = f"-cu{key['nvcc'].split('.')[0]}{key['nvcc'].split('.')[1]}" if key["device"] == "cuda" else ""
    return f"{key['module']}-{key['device']}-torch{key['torch']}-{pytag}{cuda}-{key_hash(key)[:12]}"
