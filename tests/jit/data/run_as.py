"""Run a Python file as another user: `run_as.py UID GID FILE [ARGS...]` (started as root).

The interpreter of the test venv may live where only root can read (a pyenv under /root), so
everything the loader needs is imported first and the privileges are dropped after.
"""
import ctypes  # noqa: F401  (imported before the privileges go: see above)
import hashlib  # noqa: F401
import json  # noqa: F401
import os
import pwd  # noqa: F401
import runpy
import socket  # noqa: F401
import subprocess  # noqa: F401
import sys
import tempfile  # noqa: F401
import uuid  # noqa: F401
import warnings  # noqa: F401

import filelock  # noqa: F401
import platformdirs  # noqa: F401
import platformdirs.unix  # noqa: F401
import torch  # noqa: F401

import nitorch_jit.cli  # noqa: F401
from nitorch_jit.jit import build, cache, key, toolchain  # noqa: F401

uid, gid, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
sys.argv = [path] + sys.argv[4:]
runpy.run_path(path, run_name="__main__")
