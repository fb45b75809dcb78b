"""Load the tiny test library through the JIT loader and print add(zeros(3)).

usage: load_tiny.py [offset]   (the offset is a compile flag, so it changes the key)

TINY_ABI=classic builds tiny_op.cpp on the classic headers, through cpp_extension in a build
worker (the path of CUDA bindings and of torch < 2.13); otherwise, where this torch has the
stable ABI, tiny_op_stable.cpp is built by one compiler call, in a quarter of the time.
TINY_LOCK=noop replaces filelock's lock by one that excludes nothing (NFS mounted nolock, or
filelock 3.20.4-3.29.4): publishing must stay correct without it.
"""
import os
import sys
from pathlib import Path

import torch

from nitorch_jit import jit
from nitorch_jit.backends import compiled

if os.environ.get("TINY_LOCK") == "noop":
    import filelock

    class NoopLock:
        def __init__(self, path, *args, **kwargs):
            self.path = path

        def acquire(self, timeout=None):
            return self

        def release(self):
            pass

    filelock.FileLock = NoopLock

offset = int(sys.argv[1]) if len(sys.argv) > 1 else 1
here = Path(__file__).parent
flags = ["-O0", f"-DTINY_OFFSET={offset}"]
if os.environ.get("TINY_ABI") != "classic" and compiled.binding_abi() == "stable":
    target = ".".join(map(str, compiled.STABLE_ABI_FROM))
    spec = jit.ModuleSpec("tiny", "cpu", [here / "tiny_op_stable.cpp"], [],
                          cflags=flags + ["-std=c++20"], direct=True, stable_abi=target)
else:
    spec = jit.ModuleSpec("tiny", "cpu", [here / "tiny_op.cpp"], [], cflags=flags)
jit.load(spec)
print("RESULT", torch.ops.nitorch_jit_tiny.add(torch.zeros(3)).tolist(), flush=True)
