"""The cache where users really run (issue 25): containers without a home, noexec mounts,
shared read-only roots, NFS renames and locks, many ranks on a cold cache.

Faults are injected: a rename that fails with ESTALE/EBUSY or loses a race, locks that raise or
exclude nothing, statvfs reporting noexec, no HOME and no passwd entry. Most cases run the real
cache logic in this process with a stand-in compiler (it writes a file) and loader (it records
the path), so they take milliseconds; a few build tests/jit/data/tiny_op.cpp for real in fresh
processes. Cases that need another user create one when run as root and skip otherwise.
"""
import errno
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from nitorch_jit import cli, jit
from nitorch_jit.jit import build, cache

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "jit" / "data"
TINY = DATA / "load_tiny.py"
RUN_AS = DATA / "run_as.py"
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root: to chown, mount or create a user and run as it")


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def fake(monkeypatch, tmp_path):
    """jit.load with a stand-in compiler (writes the library's bytes) and loader (records the
    paths it is given, or raises `load_errors` in turn); the cache logic runs for real."""
    state = SimpleNamespace(compiled=0, loaded=[], load_errors=[])

    def compile_(spec, tmp, log_path, seat=None):
        state.compiled += 1
        log_path.write_text("stand-in compiler\n")
        (tmp / f"{spec.library_name}.so").write_bytes(b"library " + spec.cflags[-1].encode())
        return 0

    def load_(path, torch_free=False):
        if state.load_errors:
            raise state.load_errors.pop(0)
        assert Path(path).is_file(), path
        state.loaded.append(Path(path))

    monkeypatch.setattr(build, "_run_compiler", compile_)
    monkeypatch.setattr(build, "_load_library", load_)
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(cache, "_SAID", set())
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    return state


def fake_spec():
    """A spec with a key of its own (a fresh define), so every test starts cold."""
    return jit.ModuleSpec("fake", "cpu", [DATA / "tiny_op.cpp"], [],
                          cflags=[f"-DFAKE_{uuid.uuid4().hex}"])


def entry_of(spec):
    key = jit.compute_key(spec)
    return key, jit.entry_name(key)


def private_folders(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp-"))


def flaky_replace(monkeypatch, fault, times=1, before=None, rename_first=False):
    """os.replace of a private build folder fails `times` times with errno `fault` (None:
    the real error); `before(final)` runs first (another process publishing, say);
    `rename_first`: the rename happens and its reply is lost (NFS)."""
    real = os.replace
    calls = []

    def replace(src, dst, *args, **kwargs):
        if Path(src).name.startswith(".tmp-") and len(calls) < times:
            calls.append(Path(src))
            if before is not None:
                before(Path(dst))
            if rename_first:
                real(src, dst)
            if fault is not None:
                raise OSError(fault, os.strerror(fault), str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return calls


# ----------------------------------------------------------------------------- NFS renames
@pytest.mark.parametrize("fault", [errno.ESTALE, errno.EBUSY])
def test_rename_failing_once_publishes_on_the_second_try(fake, monkeypatch, tmp_path, fault):
    spec = fake_spec()
    key, name = entry_of(spec)
    calls = flaky_replace(monkeypatch, fault)
    path = jit.load(spec)
    root = tmp_path / "cache"
    assert len(calls) == 1 and path == root / name / f"{spec.library_name}.so"
    assert cache.read_entry(root / name).verify(key) is None
    assert fake.loaded == [path] and fake.compiled == 1
    assert private_folders(root) == []


def test_rename_done_but_its_reply_lost_loads_the_published_entry(fake, monkeypatch, tmp_path):
    spec = fake_spec()
    key, name = entry_of(spec)
    flaky_replace(monkeypatch, errno.ESTALE, rename_first=True)
    path = jit.load(spec)
    root = tmp_path / "cache"
    assert path.parent == root / name and fake.loaded == [path]
    assert cache.read_entry(root / name).verify(key) is None
    assert private_folders(root) == []


def test_rename_always_stale_loads_its_own_verified_build(fake, monkeypatch, tmp_path, capfd):
    spec = fake_spec()
    key, name = entry_of(spec)
    flaky_replace(monkeypatch, errno.ESTALE, times=99)
    path = jit.load(spec)
    root = tmp_path / "cache"
    assert not (root / name).exists()  # nothing published, nothing partial
    assert path.parent.name.startswith(".tmp-") and fake.loaded == [path]
    assert cache.read_entry(path.parent).verify(key) is None
    assert "could not be published" in capfd.readouterr().err


def _publish_copy_of(tmp_path, spec, corrupt=False):
    """`before` hook: another process publishes a complete (or corrupt) entry first."""
    def before(final):
        src = [p for p in final.parent.iterdir() if p.name.startswith(".tmp-")][0]
        shutil.copytree(src, final)
        if corrupt:
            lib = final / f"{spec.library_name}.so"
            lib.write_bytes(lib.read_bytes()[:3])
    return before


def test_lost_rename_loads_the_winners_verified_build(fake, monkeypatch, tmp_path):
    spec = fake_spec()
    key, name = entry_of(spec)
    calls = flaky_replace(monkeypatch, None, before=_publish_copy_of(tmp_path, spec))
    path = jit.load(spec)  # the real rename fails: the target is a non-empty folder
    root = tmp_path / "cache"
    assert len(calls) == 1 and path == root / name / f"{spec.library_name}.so"
    assert fake.loaded == [path] and private_folders(root) == []  # ours is removed


def test_lost_rename_with_the_winner_not_visible_loads_its_own(fake, monkeypatch, tmp_path):
    spec = fake_spec()
    key, name = entry_of(spec)
    flaky_replace(monkeypatch, errno.ENOTEMPTY)  # NFS: the winner's folder not seen yet
    path = jit.load(spec)
    assert path.parent.name.startswith(".tmp-") and fake.loaded == [path]
    assert cache.read_entry(path.parent).verify(key) is None


def test_a_corrupt_entry_in_the_way_is_never_loaded(fake, monkeypatch, tmp_path):
    spec = fake_spec()
    key, name = entry_of(spec)
    flaky_replace(monkeypatch, None, before=_publish_copy_of(tmp_path, spec, corrupt=True))
    path = jit.load(spec)
    root = tmp_path / "cache"
    assert path == root / name / f"{spec.library_name}.so"  # ours replaced the corrupt one
    assert cache.read_entry(root / name).verify(key) is None and fake.loaded == [path]
    assert [p for p in root.iterdir() if p.name.startswith((".tmp-", ".trash-"))] == []


# ----------------------------------------------------------------------------- locks
def _lock_class(error):
    class RefusedLock:
        def __init__(self, path, *args, **kwargs):
            pass

        def acquire(self, timeout=None):
            raise error

        def release(self):
            raise AssertionError("released a lock never acquired")
    return RefusedLock


@pytest.mark.parametrize("error", [
    OSError(errno.ENOLCK, "No locks available"),      # NFS without a lock daemon
    OSError(errno.ENOSYS, "Function not implemented"),
    NotImplementedError("FileSystem does not appear to support flock"),  # Lustre, filelock
], ids=["ENOLCK", "ENOSYS", "NotImplementedError"])
def test_a_lock_that_raises_means_building_without_it(fake, monkeypatch, tmp_path, capfd, error):
    import filelock
    monkeypatch.setattr(filelock, "FileLock", _lock_class(error))
    spec = fake_spec()
    key, name = entry_of(spec)
    path = jit.load(spec)
    assert path == tmp_path / "cache" / name / f"{spec.library_name}.so"
    assert fake.compiled == 1 and fake.loaded == [path]
    err = capfd.readouterr().err
    assert "cannot lock" in err and "Going on without it" in err


@pytest.mark.slow
def test_many_ranks_with_a_lock_that_does_nothing_all_succeed(tmp_path):
    root = tmp_path / "cache"
    env = dict(os.environ, NI_JIT_CACHE_DIR=str(root), PYTHONPATH=str(REPO), TINY_LOCK="noop")
    procs = [subprocess.Popen([sys.executable, str(TINY), "4"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1] for o in outs]
    results = [json.loads(o[0].split("RESULT ")[1]) for o in outs]
    assert results == [[4.0, 4.0, 4.0]] * 4
    # nothing excluded them: several built, one entry stands, no private folder is left
    assert sum("compiling module" in o[1] for o in outs) >= 2, [o[1] for o in outs]
    names = [p.name for p in root.iterdir() if not p.name.startswith(".")]
    assert len(names) == 1 and private_folders(root) == []
    os.environ["NI_JIT_CACHE_DIR"], old = str(root), os.environ.get("NI_JIT_CACHE_DIR", "")
    try:
        (entry,) = cache.entries()
    finally:
        os.environ["NI_JIT_CACHE_DIR"] = old
    assert entry.verify() is None


# ----------------------------------------------------------------------------- noexec
def report_noexec(monkeypatch, folder):
    """os.statvfs says that `folder` and everything below it is mounted noexec."""
    real = os.statvfs

    def statvfs(path):
        got = real(path)
        if Path(path).resolve().is_relative_to(folder.resolve()):
            return SimpleNamespace(f_flag=got.f_flag | os.ST_NOEXEC)
        return got

    monkeypatch.setattr(os, "statvfs", statvfs)


def test_a_noexec_root_is_never_built_into(fake, monkeypatch, tmp_path):
    noexec, other = tmp_path / "noexec", tmp_path / "exec"
    noexec.mkdir()
    report_noexec(monkeypatch, noexec)
    monkeypatch.setenv("NI_JIT_CACHE_DIR", f"{noexec / 'cache'}{os.pathsep}{other / 'cache'}")
    spec = fake_spec()
    key, name = entry_of(spec)
    path = jit.load(spec)
    assert path == other / "cache" / name / f"{spec.library_name}.so"
    assert list(noexec.iterdir()) == []
    # alone, it is refused before anything is compiled, naming the mount and the variable
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(noexec / "cache"))
    with pytest.raises(jit.CacheError) as err:
        jit.load(fake_spec())
    msg = str(err.value)
    assert "noexec" in msg and "NI_JIT_CACHE_DIR" in msg and str(cache.mount_point(noexec)) in msg
    assert fake.compiled == 1 and list(noexec.iterdir()) == []


def test_prebuilt_libraries_on_a_noexec_root_are_skipped_with_one_warning(fake, monkeypatch,
                                                                          tmp_path):
    spec = fake_spec()
    key, name = entry_of(spec)
    prebuilt = tmp_path / "cache"
    jit.load(spec)
    report_noexec(monkeypatch, prebuilt)
    monkeypatch.setattr(build, "_LOADED", {})
    mine = tmp_path / "mine"
    monkeypatch.setenv("NI_JIT_CACHE_DIR", f"{prebuilt}{os.pathsep}{mine}")
    with pytest.warns(cache.CacheWarning, match="mounted noexec"):
        path = jit.load(spec)
    assert path == mine / name / f"{spec.library_name}.so" and fake.compiled == 2


@pytest.mark.slow
@ROOT_ONLY
def test_a_real_noexec_mount(tmp_path):
    mnt = tmp_path / "noexec"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,size=64m", "tmpfs",
                              str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        assert cache.noexec_mount(mnt / "cache") == mnt
        env = dict(os.environ, NI_JIT_CACHE_DIR=str(mnt / "cache"), PYTHONPATH=str(REPO))
        alone = subprocess.run([sys.executable, str(TINY), "6"], env=env, capture_output=True,
                               text=True, timeout=600)
        assert alone.returncode != 0 and "compiling" not in alone.stderr
        assert f"on {mnt}, mounted noexec" in alone.stderr and "NI_JIT_CACHE_DIR" in alone.stderr
        assert list(mnt.iterdir()) == []
        other = tmp_path / "exec"
        env["NI_JIT_CACHE_DIR"] = f"{mnt / 'cache'}{os.pathsep}{other}"
        ok = subprocess.run([sys.executable, str(TINY), "6"], env=env, capture_output=True,
                            text=True, timeout=600)
        assert ok.returncode == 0, ok.stderr
        assert "RESULT [6.0, 6.0, 6.0]" in ok.stdout and list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


# ----------------------------------------------------------------------------- loading
def test_an_intact_library_that_does_not_load_is_reported_not_rebuilt(fake, monkeypatch):
    spec = fake_spec()
    jit.load(spec)
    for _ in range(2):  # two processes: neither rebuilds
        monkeypatch.setattr(build, "_LOADED", {})
        fake.load_errors = [OSError("libx.so: failed to map segment from shared object")]
        with pytest.raises(jit.BuildError) as err:
            jit.load(spec)
        msg = str(err.value)
        assert "intact" in msg and "failed to map segment" in msg and "noexec" in msg
        assert "not rebuilt" in msg and fake.compiled == 1
    monkeypatch.setattr(build, "_LOADED", {})
    fake.load_errors = [OSError("libx.so: undefined symbol: _Z3foov")]
    with pytest.raises(jit.BuildError, match="undefined symbol.*cache clear"):
        jit.load(spec)
    assert fake.compiled == 1


def test_a_stale_file_handle_on_load_is_tried_once_more(fake, monkeypatch):
    spec = fake_spec()
    first = jit.load(spec)
    monkeypatch.setattr(build, "_LOADED", {})
    fake.load_errors = [OSError(f"{first}: cannot read file data: Stale file handle")]
    assert jit.load(spec) == first and fake.compiled == 1


# ----------------------------------------------------------------------------- homes
def no_home(monkeypatch, tmp_path):
    """HOME unset and this uid without a passwd entry; a private temporary directory."""
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("NI_JIT_CACHE_DIR", raising=False)

    def getpwuid(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_no_home_and_no_passwd_entry_uses_a_private_temporary_root(fake, monkeypatch, tmp_path):
    import platformdirs
    tmp = no_home(monkeypatch, tmp_path)
    with pytest.raises(RuntimeError):  # what crashed the first grid_pull before
        platformdirs.user_cache_dir("nitorch_jit")
    with pytest.warns(cache.CacheWarning, match="no home folder") as said:
        roots = cache.roots()
    expected = tmp / f"nitorch_jit_{os.getuid()}"
    assert roots == [expected] and str(expected) in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        spec = fake_spec()
        key, name = entry_of(spec)
        assert "compiles on first use" in jit.explain(key)
        path = jit.load(spec)
    assert path == expected / name / f"{spec.library_name}.so"
    st = expected.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_the_temporary_root_must_be_ours(fake, monkeypatch, tmp_path):
    tmp = no_home(monkeypatch, tmp_path)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir(mode=0o700)
    (tmp / f"nitorch_jit_{os.getuid()}").symlink_to(elsewhere)
    with pytest.warns(cache.CacheWarning, match="no home folder"), \
            pytest.warns(cache.CacheWarning, match="not loading from .* symbolic link"):
        with pytest.raises(jit.CacheError, match="symbolic link") as err:
            jit.load(fake_spec())
    assert "NI_JIT_CACHE_DIR" in str(err.value) and fake.compiled == 0


def test_a_tilde_in_the_variable_without_a_home_is_our_error(fake, monkeypatch, tmp_path):
    no_home(monkeypatch, tmp_path)
    monkeypatch.setenv("NI_JIT_CACHE_DIR", "~/nj")
    with pytest.raises(jit.CacheError, match="NI_JIT_CACHE_DIR: cannot use '~/nj'"):
        cache.roots()


@pytest.mark.slow  # builds in a cold cache of its own
def test_no_usable_root_falls_back_to_torch_or_names_the_variable_with_C(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code = ("import torch, nitorch_jit; x = torch.arange(16.).reshape(1, 1, 4, 4); "
            "y = nitorch_jit.resize(x, factor=2); print('SHAPE', tuple(y.shape))")
    env = dict(os.environ, NI_JIT_CACHE_DIR=str(blocker / "cache"), PYTHONPATH=str(REPO))
    env.pop("NI_COMPILED_BACKEND", None)
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
    assert unset.returncode == 0, unset.stderr
    assert "SHAPE (1, 1, 8, 8)" in unset.stdout
    assert unset.stderr.count("pure-PyTorch backend is used") == 1
    assert "NI_JIT_CACHE_DIR" in unset.stderr and str(blocker) in unset.stderr
    asked = subprocess.run([sys.executable, "-c", code], env=dict(env, NI_COMPILED_BACKEND="C"),
                           capture_output=True, text=True, timeout=300)
    assert asked.returncode != 0 and "NI_JIT_CACHE_DIR" in asked.stderr
    assert "RuntimeError: could not determine" not in asked.stderr


# ----------------------------------------------------------------------------- refusals
def test_a_group_writable_root_is_refused_for_that_reason(monkeypatch, tmp_path):
    root = tmp_path / "team"
    root.mkdir()
    root.chmod(0o770)
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(root))
    with pytest.raises(jit.CacheError, match="members of its group can write") as err:
        cache.writable_root()
    assert "drwxrwx---" in str(err.value) and "chmod go-w" in str(err.value)


@ROOT_ONLY
def test_a_root_owned_by_another_user_is_refused_with_the_owner(monkeypatch, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, 4242)
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(theirs))
    with pytest.raises(jit.CacheError) as err:
        cache.writable_root()
    msg = str(err.value)
    assert "belongs to" in msg and "uid 4242" in msg and "can write to it" not in msg
    # with a root of our own after it, builds go there and theirs is still searched
    mine = tmp_path / "mine"
    monkeypatch.setenv("NI_JIT_CACHE_DIR", f"{theirs}{os.pathsep}{mine}")
    assert cache.writable_root() == mine and cache.readable_roots()[0] == theirs


# ----------------------------------------------------------------------------- other users
@pytest.fixture
def world_dir():
    """A folder under the system temporary directory that other users can pass through
    (pytest's tmp_path lies below a folder only its owner can enter)."""
    path = Path(tempfile.mkdtemp(prefix="njtest-users-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def other_user(world_dir):
    """A fresh user (useradd) with a home of its own, removed afterwards."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root to create a user (useradd) and run as it")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    name = f"njt{uuid.uuid4().hex[:8]}"
    home = world_dir / "home"
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", name], check=True,
                   capture_output=True)
    try:
        user = pwd.getpwnam(name)
        home.mkdir()
        os.chown(home, user.pw_uid, user.pw_gid)
        yield user
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def run_as(uid, gid, script, *args, env):
    return subprocess.run([sys.executable, str(RUN_AS), str(uid), str(gid), str(script), *args],
                          env=env, capture_output=True, text=True, timeout=600)


EXPLAIN = """
import sys, warnings
from pathlib import Path
from nitorch_jit import jit
warnings.simplefilter("always")  # "once" must be the loader's doing
spec = jit.ModuleSpec("tiny", "cpu", [Path(sys.argv[1])], [], cflags=["-O0", "-DTINY_OFFSET=2"])
key = jit.compute_key(spec)
for _ in range(3):
    print("EXPLAIN", jit.explain(key))
"""


@pytest.mark.slow  # builds in a cold cache of its own
def test_the_cluster_recipe_shares_with_other_users(other_user, world_dir, monkeypatch,
                                                     capsys):
    # the other user reads the test's files from a copy it can reach: the checkout may lie
    # below a folder only its owner can enter (a clone under root's home or `mktemp -d`)
    data = world_dir / "data"
    shutil.copytree(DATA, data)
    data.chmod(0o755)
    for path in data.iterdir():
        path.chmod(0o644)
    tiny, tiny_src = data / TINY.name, data / "tiny_op.cpp"
    shared = world_dir / "shared" / "nitorch_jit"
    # the classic build: EXPLAIN and the stand-in below name tiny_op.cpp's key
    env = dict(os.environ, NI_JIT_CACHE_DIR=str(shared), PYTHONPATH=str(REPO),
               TINY_ABI="classic")
    built = subprocess.run([sys.executable, str(tiny), "2"], env=env, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    subprocess.run(["chmod", "-R", "go-w", str(shared)], check=True)  # the old recipe
    script = world_dir / "explain.py"
    script.write_text(EXPLAIN)
    private = Path(other_user.pw_dir) / "cache"
    user_env = dict(env, HOME=other_user.pw_dir,
                    NI_JIT_CACHE_DIR=f"{shared}{os.pathsep}{private}")
    before = run_as(other_user.pw_uid, other_user.pw_gid, script, tiny_src, env=user_env)
    assert before.returncode == 0, before.stderr
    assert before.stdout.count("compiles on first use") == 3  # the old recipe does not share
    assert before.stderr.count(f"cannot read the cache root {shared}") == 1  # said once
    assert "chmod -R a+rX" in before.stderr and "build --shared" in before.stderr
    shared.chmod(0o755)  # a readable root whose entries are not: said too, once
    half = run_as(other_user.pw_uid, other_user.pw_gid, script, tiny_src, env=user_env)
    assert half.stdout.count("compiles on first use") == 3
    assert half.stderr.count("cannot read the cached build") == 1, half.stderr

    # the new recipe: one command, which also prints the line users set
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(shared))
    monkeypatch.setattr(cache, "_SAID", set())
    spec = jit.ModuleSpec("tiny", "cpu", [tiny_src], [], cflags=["-O0", "-DTINY_OFFSET=2"])
    monkeypatch.setattr(cli.backends, "module_spec", lambda m, d, archs: spec)
    # the real modules take minutes: tiny stands in, prebuilt
    assert cli.main(["build", "--shared", "--no-cuda", "splinc"]) == 0
    out = capsys.readouterr().out
    assert f"splinc (cpu): {shared}" in out
    assert "readable by everyone and writable by you only" in out
    assert f'export NI_JIT_CACHE_DIR="{shared}{os.pathsep}' in out
    # the stand-in, and splinc's kernel libraries unless an earlier test of this process
    # loaded them already (from another root: then they are not built here)
    entries = [p for p in shared.iterdir() if not p.name.startswith(".")]
    assert [p for p in entries if p.name.startswith("tiny-")], entries
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    for entry in entries:
        assert stat.S_IMODE(entry.stat().st_mode) == 0o755
        assert stat.S_IMODE((entry / "manifest.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((shared / ".locks").stat().st_mode) == 0o700  # private parts stay so

    after = run_as(other_user.pw_uid, other_user.pw_gid, tiny, "2", env=user_env)
    assert after.returncode == 0, after.stderr
    assert "RESULT [2.0, 2.0, 2.0]" in after.stdout and after.stderr.strip() == ""
    assert not private.exists()  # a verified shared hit writes nothing


WHERE = """
import json, os, stat
from nitorch_jit.jit import cache
roots = cache.roots()
root = cache.writable_root()
st = root.stat()
print("WHERE", json.dumps([str(r) for r in roots] + [str(root), st.st_uid,
                          stat.S_IMODE(st.st_mode), len(cache.roots())]))
# below a folder this user cannot search: still only our own error, or the fallback
os.environ["NI_JIT_CACHE_DIR"] = os.environ["UNREACHABLE"] + "/cache"
try:
    cache.writable_root()
except cache.CacheError as e:
    print("CACHEERROR", e)
del os.environ["NI_JIT_CACHE_DIR"]
os.environ["HOME"] = os.environ["UNREACHABLE"] + "/home"
print("HOMELESS", json.dumps([str(r) for r in cache.roots()]))
"""


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
@ROOT_ONLY
def test_a_uid_without_passwd_entry_or_home_really_runs(world_dir):
    uid = next(u for u in range(4242, 60000) if not _has_passwd_entry(u))
    tmp = world_dir / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    script = world_dir / "where.py"
    script.write_text(WHERE)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME", "NI_JIT_CACHE_DIR")}
    unreachable = world_dir / "root_only"
    unreachable.mkdir(mode=0o700)
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(REPO), UNREACHABLE=str(unreachable))
    got = run_as(uid, uid, script, env=env)
    assert got.returncode == 0, got.stderr
    lines = dict(line.split(" ", 1) for line in got.stdout.splitlines())
    roots, where, owner, mode, again = json.loads(lines["WHERE"])[-5:]
    assert roots == where == str(tmp / f"nitorch_jit_{uid}")
    assert owner == uid and mode == 0o700 and again == 1
    assert got.stderr.count("no home folder") == 1
    assert str(unreachable / "cache") in lines["CACHEERROR"]
    assert "NI_JIT_CACHE_DIR" in lines["CACHEERROR"]
    assert json.loads(lines["HOMELESS"]) == [str(unreachable / "home" / ".cache" / "nitorch_jit"),
                                             roots]


def _has_passwd_entry(uid):
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


# ----------------------------------------------------------------------------- the estimate
def test_the_estimate_is_the_newest_build_of_the_module(monkeypatch, tmp_path):
    root = tmp_path / "cache"
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(root))
    key = {"module": "m", "device": "cpu"}
    for name, seconds, when in [("m-a-new", 11, 2000.0), ("m-z-old", 99, 1000.0)]:
        (root / name).mkdir(parents=True)
        (root / name / "manifest.json").write_text(json.dumps(
            {"key": key, "library": "x.so", "build_seconds": seconds, "built_at_epoch": when}))
    assert build.expected_seconds(dict(key)) == (11, "its last build")
    assert build.expected_seconds({"module": "other", "device": "cpu"}) == \
        (build.DEFAULT_SECONDS["cpu"], "typical")
    # a torch-free library with no history of its own: like this machine's others (median)
    free = {"kind": "torch-free", "device": "cpu"}
    for name, seconds in [("k.a", 1.0), ("k.b", 2.0), ("k.c", 30.0)]:
        (root / name).mkdir()
        (root / name / "manifest.json").write_text(json.dumps(
            {"key": dict(free, module=name), "library": "x.so", "build_seconds": seconds}))
    assert build.expected_seconds(dict(free, module="k.new")) == (2.0, "like its others here")


# ----------------------------------------------------------------------------- info
@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_info_shows_each_root_and_where_builds_go(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    noexec, shared = tmp_path / "noexec", tmp_path / "shared"
    noexec.mkdir()
    shared.mkdir()
    shared.chmod(0o777)
    report_noexec(monkeypatch, noexec)
    monkeypatch.setattr(cache, "_SAID", set())
    roots = [blocker / "cache", noexec / "cache", shared, tmp_path / "mine"]
    monkeypatch.setenv("NI_JIT_CACHE_DIR", os.pathsep.join(map(str, roots)))
    lines = [cache.root_state(r).describe() for r in roots]
    assert lines[0] == "not created yet, cannot be created by this user"
    assert "NOEXEC" in lines[1] and str(cache.mount_point(noexec)) in lines[1]
    assert "REFUSED: other users can write to it" in lines[2]
    assert lines[3] == "not created yet, can be created"
    assert cache.writable_root(create=False) == roots[3] and not roots[3].exists()
    with pytest.warns(cache.CacheWarning, match="not loading from .* other users can write"):
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for root, line in zip(roots, lines):
        assert f"  root      {root}: {line}\n" in out
    assert f"  builds    into {roots[3]}\n" in out and not roots[3].exists()


def test_a_home_that_cannot_be_written_adds_the_temporary_root(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(blocker / "home"))  # as a read-only or missing home
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("NI_JIT_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(cache, "_SAID", set())
    home = blocker / "home" / ".cache" / "nitorch_jit"
    with pytest.warns(cache.CacheWarning, match=f"{home} cannot be written"):
        roots = cache.roots()
    fallback = tmp_path / f"nitorch_jit_{os.getuid()}"
    assert roots == [home, fallback]  # prebuilt libraries in the home are still searched
    assert cache.writable_root() == fallback


def test_clear_removes_only_private_folders_whose_builder_is_gone(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = cache.private_folder(tmp_path, "x").name.split("-")[1]  # this host, as named
    folders = {
        "ours, running": f".tmp-{host}-{os.getpid()}-x-a",
        "ours, builder gone": f".tmp-{host}-{dead.pid}-x-b",
        "another host's": f".tmp-otherhost-{dead.pid}-x-c",  # its pid says nothing here
        "another host's, a day old": f".tmp-otherhost-{dead.pid}-x-d",
    }
    for name in folders.values():
        (tmp_path / name).mkdir()
    day_old = time.time() - 25 * 3600
    os.utime(tmp_path / folders["another host's, a day old"], (day_old, day_old))
    removed = {p.name for p in cache.clear_leftovers(tmp_path)}
    assert folders["ours, builder gone"] in removed
    assert folders["another host's, a day old"] in removed
    assert folders["ours, running"] not in removed and folders["another host's"] not in removed
