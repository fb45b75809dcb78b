"""Load the tiny test library through the JIT loader and print add(zeros(3)).

usage: load_tiny.py [offset]   (the offset is a compile flag, so it changes the key)
"""
import sys
from pathlib import Path

import torch

from nitorch_jit import jit

offset = int(sys.argv[1]) if len(sys.argv) > 1 else 1
src = Path(__file__).with_name("tiny_op.cpp")
spec = jit.ModuleSpec("tiny", "cpu", [src], [], cflags=["-O0", f"-DTINY_OFFSET={offset}"])
jit.load(spec)
print("RESULT", torch.ops.nitorch_jit_tiny.add(torch.zeros(3)).tolist(), flush=True)
