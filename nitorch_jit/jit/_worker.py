"""Compile one library in a child process: `python _worker.py <request.json>`.

A separate process keeps the caller clean: the half-built library is never loaded into the
user's process, the environment (CUDA_HOME, arch list) is set before torch is imported, and the
compiler's output goes to a pipe the parent writes to the log. This file imports only torch.
"""
import json
import os
import sys


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
    main(sys.argv[1])
