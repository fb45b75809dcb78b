"""Load the tiny test library through the JIT loader and print add(zeros(3)).

usage: load_tiny.py [offset]   (the offset is a compile flag, so it changes the key)

TINY_LOCK=noop replaces filelock's lock by one that excludes nothing (NFS mounted nolock, or
filelock 3.20.4-3.29.4): publishing must stay correct without it.
"""
import os
import sys
from pathlib import Path

import torch

from nitorch_jit import jit

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
src = Path(__file__).with_name("tiny_op.cpp")
spec = jit.ModuleSpec("tiny", "cpu", [src], [], cflags=["-O0", f"-DTINY_OFFSET={offset}"])
jit.load(spec)
print("RESULT", torch.ops.nitorch_jit_tiny.add(torch.zeros(3)).tolist(), flush=True)
