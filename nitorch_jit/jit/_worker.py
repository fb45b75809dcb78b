"""Compile one library in a child process: `python _worker.py <request.json>`.

A separate process keeps the caller clean: the half-built library is never loaded into the
user's process, the environment (CUDA_HOME, arch list) is set before torch is imported, and the
compiler's output goes to a pipe the parent writes to the log. This file imports only torch.
"""
import json
import os
import signal
import sys
import threading
import time


def _watch_parent(parent):
    """Stop the whole compile when the parent dies (say, SIGKILLed): its result would never be
    published, so compiling on would only waste the machine. The worker leads its own process
    group (build.py), which holds ninja and the compilers."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:  # re-parented: the builder is gone
            os.killpg(os.getpgrp(), signal.SIGKILL)



def main(path):
    with open(path) as f:
        req = json.load(f)
    os.environ.update(req["env"])
    from torch.utils import cpp_extension
    cpp_extension.load(
        name=req["name"],
        sources=req["sources"],
        extra_cflags=req["cflags"],
        extra_cuda_cflags=req["cuda_cflags"] or None,
        extra_ldflags=req["ldflags"],
        extra_include_paths=req["include_dirs"],
        build_directory=req["build_dir"],
        with_cuda=req["with_cuda"],
        is_python_module=False,  # plain shared library registering ops; also checks it loads
        verbose=True,
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and hasattr(os, "killpg") and os.getpgrp() == os.getpid():
        threading.Thread(target=_watch_parent, args=(int(sys.argv[2]),), daemon=True).start()
    main(sys.argv[1])
