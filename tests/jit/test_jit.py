"""The JIT loader: keys, cache verification, locking, failure modes, CLI.

Most cases build the tiny test library (tests/jit/data/load_tiny.py: on torch's stable ABI where
torch has it, about 2 s; the classic headers otherwise, and where a test needs the build worker)
in a fresh process with its own cache root, so they exercise exactly what a user's first call
does.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nitorch_jit import jit
from nitorch_jit.jit import cache, key as keymod

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "jit" / "data" / "load_tiny.py"


def _env(root, **extra):
    env = dict(os.environ, NI_JIT_CACHE_DIR=str(root), PYTHONPATH=str(REPO))
    env.pop("NI_COMPILED_BACKEND", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_tiny(root, offset=1, **env):
    return subprocess.run([sys.executable, str(TINY), str(offset)], env=_env(root, **env),
                          capture_output=True, text=True, timeout=600)


def result(proc):
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line.split(" ", 1)[1])


def tiny_spec(tmp_path, offset=1):
    return jit.ModuleSpec("tiny", "cpu", [REPO / "tests/jit/data/tiny_op.cpp"], [],
                          cflags=["-O0", f"-DTINY_OFFSET={offset}"])


# ----------------------------------------------------------------------------- key
def test_key_changes_with_every_field(tmp_path, monkeypatch):
    spec = tiny_spec(tmp_path)
    base = keymod.compute_key(spec)
    names = {keymod.entry_name(base)}
    for field in base:
        changed = dict(base, **{field: f"{base[field]}-other"})
        names.add(keymod.entry_name(changed))
    assert len(names) == len(base) + 1


def test_key_follows_sources_flags_and_torch(tmp_path, monkeypatch):
    src = tmp_path / "op.cpp"
    src.write_text('#include "h.h"\nint f() { return 1; }\n')
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "h.h").write_text('#include <deep.h>\n// v1\n')
    (inc / "deep.h").write_text("// v1\n")
    (inc / "cuda_only.cuh").write_text("// v1\n")  # in the include dir, included by nothing
    spec = jit.ModuleSpec("m", "cpu", [src], [inc], cflags=["-O2"])
    k0 = keymod.compute_key(spec)
    (inc / "cuda_only.cuh").write_text("// v2\n")
    assert keymod.compute_key(spec) == k0  # a header this library does not include
    src.write_text('#include "h.h"\nint f() { return 2; }\n')
    k1 = keymod.compute_key(spec)
    (inc / "deep.h").write_text("// v2\n")  # included through h.h
    k2 = keymod.compute_key(spec)
    spec.cflags = ["-O3"]
    k3 = keymod.compute_key(spec)
    monkeypatch.setattr(torch, "__version__", "9.9.9+cpu")
    k4 = keymod.compute_key(spec)
    names = [keymod.entry_name(k) for k in (k0, k1, k2, k3, k4)]
    assert len(set(names)) == 5
    assert "torch9.9.9+cpu" in names[-1]


def test_stable_abi_key_follows_torch_its_target_and_sources(tmp_path, monkeypatch):
    # a binding on the stable ABI is keyed as a classic one (torch, CUDA, Python: an upgrade
    # rebuilds it) and on its target too; its entry name says which API it is on
    src = tmp_path / "op.cpp"
    src.write_text("int f() { return 1; }\n")
    spec = jit.ModuleSpec("m", "cpu", [src], [], cflags=["-Og"], direct=True, stable_abi="2.13")
    k0 = keymod.compute_key(spec)
    assert k0["kind"] == "stable-abi" and k0["stable_abi"] == "2.13"
    assert {"torch", "torch_git", "torch_cuda", "python"} <= set(k0)
    assert keymod.entry_name(k0).startswith(f"m-cpu-stable2.13-torch{torch.__version__}-cp")
    classic = jit.ModuleSpec("m", "cpu", [src], [], cflags=["-Og"])
    c0 = keymod.compute_key(classic)
    assert keymod.entry_name(c0).startswith("m-cpu-torch")
    monkeypatch.setattr(torch, "__version__", "9.9.9+cpu")  # an upgrade
    k1 = keymod.compute_key(spec)
    assert k1 != k0 and keymod.entry_name(k1).startswith("m-cpu-stable2.13-torch9.9.9+cpu-")
    assert keymod.compute_key(classic) != c0
    monkeypatch.undo()
    monkeypatch.setattr(torch.version, "git_version", "0" * 40)  # a rebuild of the same release
    assert keymod.compute_key(spec) != k0
    monkeypatch.undo()
    assert keymod.compute_key(spec) == k0
    spec.stable_abi = "2.14"
    assert keymod.entry_name(keymod.compute_key(spec)) != keymod.entry_name(k0)
    spec.stable_abi, spec.cflags = "2.13", ["-O2"]
    assert keymod.compute_key(spec)["sources"] != k0["sources"]


def test_key_follows_compiler(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "c++"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'fakecc 1.0'\n")
    fake.chmod(0o755)
    spec = tiny_spec(tmp_path)
    k0 = keymod.compute_key(spec)
    monkeypatch.setenv("CXX", str(fake))
    k1 = keymod.compute_key(spec)
    assert k0["cxx"] != k1["cxx"] and "fakecc 1.0" in k1["cxx"]


# ----------------------------------------------------------------------------- cache life
@pytest.mark.slow  # builds in a cold cache of its own
def test_cold_cache_builds_once_then_loads_silently(tmp_path):
    root = tmp_path / "cache"
    first = run_tiny(root)
    assert result(first) == [1.0, 1.0, 1.0]
    (line,) = [x for x in first.stderr.splitlines() if "compiling" in x]  # one line: what,
    assert line.startswith("nitorch_jit: compiling module 'tiny' for CPU, about ")  # how long,
    assert "once: no cached build; into " in line and str(root) in line  # why and where
    assert "built module 'tiny'" in first.stderr
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    (entry,) = _entries(root)
    m = entry.manifest
    assert m["sha256"] == cache.sha256_file(entry.library) and m["build_seconds"] > 0
    assert m["key"]["torch"] == torch.__version__
    second = run_tiny(root)
    assert result(second) == [1.0, 1.0, 1.0]
    assert second.stderr.strip() == ""  # a cache hit is silent
    # a changed flag is a new entry beside the old one
    third = run_tiny(root, offset=5)
    assert result(third) == [5.0, 5.0, 5.0]
    assert len(_entries(root)) == 2


def _entries(root):
    old = os.environ.get("NI_JIT_CACHE_DIR")
    os.environ["NI_JIT_CACHE_DIR"] = str(root)
    try:
        return cache.entries()
    finally:
        os.environ["NI_JIT_CACHE_DIR"] = old


@pytest.mark.slow  # builds in a cold cache of its own
def test_truncated_library_is_rebuilt(tmp_path):
    root = tmp_path / "cache"
    result(run_tiny(root))
    (entry,) = _entries(root)
    data = entry.library.read_bytes()
    entry.library.write_bytes(data[: len(data) // 2])
    again = run_tiny(root)
    assert result(again) == [1.0, 1.0, 1.0]
    assert "failed verification" in again.stderr and "sha256" in again.stderr
    (entry,) = _entries(root)
    assert entry.verify() is None


@pytest.mark.slow  # builds in a cold cache of its own
def test_four_processes_on_a_cold_cache_build_once(tmp_path):
    root = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, str(TINY), "3"], env=_env(root),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    results = [json.loads([x for x in o[0].splitlines() if x.startswith("RESULT")][0][7:])
               for o in outs]
    assert results == [[3.0, 3.0, 3.0]] * 4
    assert sum("compiling module" in o[1] for o in outs) == 1
    assert len(_entries(root)) == 1


def _workers(root):
    """Pids of the build workers compiling into cache root `root` (Linux /proc)."""
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(c.endswith(b"_worker.py") for c in cmd) and any(str(root).encode() in c for c in cmd):
            pids.append(int(d.name))
    return pids


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow  # builds in a cold cache of its own
def test_builder_killed_mid_compile_blocks_nobody(tmp_path):
    root = tmp_path / "cache"
    # the classic build: its compile runs in a build worker (the path of CUDA bindings and of
    # torch < 2.13), whose whole process group must stop with the builder
    proc = subprocess.Popen([sys.executable, str(TINY), "7"],
                            env=_env(root, TINY_ABI="classic"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # the progress line: the build has started, lock held
    assert "compiling" in line
    time.sleep(1.0)
    workers = _workers(root)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not _entries(root)  # nothing half-built was published
    if sys.platform.startswith("linux"):  # the orphaned compile stops too (its whole group)
        assert len(workers) == 1, workers
        deadline = time.monotonic() + 5
        while _group_alive(workers[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(workers[0]), "the compile went on after its builder died"
    after = run_tiny(root, offset=7, NI_JIT_LOCK_TIMEOUT=300, TINY_ABI="classic")
    assert result(after) == [7.0, 7.0, 7.0]


@pytest.mark.slow  # builds in a cold cache of its own
def test_failed_build_keeps_log_and_publishes_nothing(tmp_path):
    src = tmp_path / "bad.cpp"
    src.write_text("#include <ATen/ATen.h>\nint broken( { return 0; }\n")
    os.environ["NI_JIT_CACHE_DIR"], old = str(tmp_path / "cache"), os.environ["NI_JIT_CACHE_DIR"]
    try:
        with pytest.raises(jit.BuildError) as err:
            jit.load(jit.ModuleSpec("bad", "cpu", [src], []))
    finally:
        os.environ["NI_JIT_CACHE_DIR"] = old
    msg = str(err.value)
    assert "bad.cpp" in msg and "error" in msg
    log = Path(msg.split("Full log: ")[1].split("\n")[0])
    assert log.exists() and "broken" in log.read_text()
    assert not _entries(tmp_path / "cache")


# ----------------------------------------------------------------------------- roots
def test_unwritable_root_names_path_and_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(jit.CacheError) as err:
        cache.writable_root()
    assert str(blocker / "cache") in str(err.value) and "NI_JIT_CACHE_DIR" in str(err.value)


def test_root_writable_by_others_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(shared))
    with pytest.raises(jit.CacheError, match="other users can write"):
        cache.writable_root()


@pytest.mark.slow  # builds in a cold cache of its own
def test_prebuilt_entry_in_second_root_loads_without_writing(tmp_path):
    prebuilt = tmp_path / "prebuilt"
    result(run_tiny(prebuilt, offset=2))
    mine = tmp_path / "mine"
    both = f"{mine}{os.pathsep}{prebuilt}"
    proc = subprocess.run([sys.executable, str(TINY), "2"], capture_output=True, text=True,
                          env=dict(_env(prebuilt), NI_JIT_CACHE_DIR=both))
    assert result(proc) == [2.0, 2.0, 2.0]
    assert proc.stderr.strip() == ""
    assert not mine.exists()  # a verified hit elsewhere writes nothing


# ----------------------------------------------------------------------------- toolchain
def test_arch_list_parsing():
    from nitorch_jit.jit.toolchain import ToolchainError, arch_flags, parse_arch_list
    assert parse_arch_list("8.0;9.0+PTX") == ["8.0", "9.0+PTX"]
    assert parse_arch_list("Hopper") == ["9.0"]
    assert parse_arch_list("Ampere+PTX") == ["8.0", "8.6+PTX"]
    assert parse_arch_list("12.0 10.0a") == ["10.0a", "12.0"]
    assert arch_flags(["10.0a", "12.0+PTX"]) == [
        "-gencode=arch=compute_100a,code=sm_100a",
        "-gencode=arch=compute_120,code=sm_120", "-gencode=arch=compute_120,code=compute_120"]
    with pytest.raises(ToolchainError, match="cannot read"):
        parse_arch_list("sm_banana")
    if not torch.cuda.is_available():
        with pytest.raises(ToolchainError, match="no GPU is visible"):
            parse_arch_list("mine")


def test_nvcc_wrapper_is_resolved(tmp_path, monkeypatch):
    from nitorch_jit.jit import toolchain
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "lib64").mkdir()
    (home / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.1'\n")
    (home / "bin" / "nvcc").chmod(0o755)
    (home / "include" / "cuda_runtime.h").write_text("")
    (home / "lib64" / "libcudart.so.13").write_text("")
    wrapdir = tmp_path / "wrappers"
    wrapdir.mkdir()
    (wrapdir / "nvcc").write_text(f"#!/bin/sh\nexec {home}/bin/nvcc \"$@\"\n")
    (wrapdir / "nvcc").chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrapdir}{os.pathsep}{os.environ['PATH']}")
    found, origin = toolchain.find_cuda_home()
    assert found == str(home.resolve()) and "nvcc on PATH" in origin
    assert toolchain.nvcc_version(found) == "13.0.1"
    with pytest.raises(toolchain.ToolchainError, match="major versions must match"):
        toolchain.check_cuda_versions("12.4.1", "13.0")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(toolchain.ToolchainError, match="CUDA_HOME"):
        toolchain.find_cuda_home()


def _fake_compiler(path, runtime):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "fake-gcc {path.name}";;
  -print-file-name=*) echo "{runtime}";;
  *) exit 1;;
esac
""")
    path.chmod(0o755)


def test_compiler_of_a_newer_cxx_runtime_is_avoided(tmp_path, monkeypatch):
    from nitorch_jit.jit import toolchain
    libs = tmp_path / "lib"
    libs.mkdir()
    for minor in (20, 99):
        (libs / f"libstdc++.so.6.0.{minor}").write_bytes(b"")
    (libs / "libstdc++.so.6").symlink_to(libs / "libstdc++.so.6.0.99")  # as a real install
    bin_ = tmp_path / "bin"
    _fake_compiler(bin_ / "c++", libs / "libstdc++.so.6")  # newer than the loaded runtime
    _fake_compiler(bin_ / "g++", libs / "libstdc++.so.6.0.20")  # older: fine
    monkeypatch.setattr(toolchain, "loaded_cxx_runtime",
                        lambda: ("/usr/lib/libstdc++.so.6.0.30", 30))
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.delenv("CXX", raising=False)
    assert "newer than the C++ runtime" in toolchain.runtime_mismatch(str(bin_ / "c++"))
    assert toolchain.runtime_mismatch(str(bin_ / "g++")) is None
    # no CXX: the matching g++ is used, and the key names it
    assert toolchain.cxx_command() == str(bin_ / "g++")
    assert toolchain.find_cxx() == (str(bin_ / "g++"), "fake-gcc g++")
    # an explicit CXX is kept (the progress line and `info` warn instead)
    monkeypatch.setenv("CXX", "c++")
    assert toolchain.cxx_command() == str(bin_ / "c++")
