"""The prebuild (issue 31): many entries built as one pool, each as jit.load builds it; the
cache commands that know kernel libraries (cache list grouped by module, clear --stale of
kernel entries no key reaches, info's kernels line).

Most cases run the real pool and cache logic with a stand-in compiler (it writes a file) and
loader; one builds two real kernel libraries (about a second each).
"""
import json
import os
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from nitorch_jit import cli, jit
from nitorch_jit.backends import compiled
from nitorch_jit.jit import batch, build, cache, toolchain

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "jit" / "data"


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A stand-in compiler (writes the library's bytes; `fail` names the specs it fails;
    `barrier`, when set, makes every compile wait for another one) and loader; the pool and
    the cache logic run for real, into tmp_path/cache."""
    state = SimpleNamespace(compiled=[], fail=set(), barrier=None, jobs=[])
    lock = threading.Lock()

    def compile_(spec, tmp, log_path, seat=None):
        if state.barrier is not None:
            state.barrier.wait()  # broken (an error) if no other compile runs meanwhile
        with lock:
            state.compiled.append(spec.name)
            state.jobs.append(seat.jobs if seat is not None else None)
        log_path.write_text(f"error: {spec.name} does not compile\n" if spec.name in state.fail
                            else "stand-in compiler\n")
        if spec.name in state.fail:
            return 1
        (tmp / f"{spec.library_name}.so").write_bytes(b"library " + spec.cflags[-1].encode())
        return 0

    monkeypatch.setattr(build, "_run_compiler", compile_)
    monkeypatch.setattr(build, "_load_library", lambda path, torch_free=False: None)
    monkeypatch.setattr(build, "_LOADED", {})
    monkeypatch.setattr(cache, "_SAID", set())
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    return state


def fake_spec(name, torch_free=True, sources=1):
    """A spec with a key of its own (a fresh define), so every test starts cold."""
    return jit.ModuleSpec(name, "cpu", [DATA / "tiny_op.cpp"] * sources, [],
                          cflags=[f"-DFAKE_{uuid.uuid4().hex}"], torch_free=torch_free,
                          direct=torch_free)


def published(root):
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


# ----------------------------------------------------------------------------- the pool
def test_a_pool_builds_each_entry_once_and_publishes_each(fake, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(batch, "_NON_TTY_EVERY", 0.0)  # a progress line at every change
    specs = [fake_spec(f"k.op{i}.float32") for i in range(6)]
    outcomes = jit.load_all(specs + specs[:2], jobs=2)  # an entry asked twice is built once
    assert sorted(fake.compiled) == sorted(s.name for s in specs)
    assert [o.error for o in outcomes] == [None] * 8 and all(o.built for o in outcomes[:6])
    assert [o.path for o in outcomes[6:]] == [o.path for o in outcomes[:2]]
    root = tmp_path / "cache"
    assert len(published(root)) == 6 and not any(p.name.startswith(".tmp-")
                                                 for p in root.iterdir())
    for o in outcomes[:6]:
        assert o.path.parent.parent == root and cache.read_entry(o.path.parent).verify() is None
    err = capfd.readouterr().err.splitlines()
    # a start line, the progress line, a done line: not two lines per entry
    assert err[0].startswith("nitorch_jit: compiling 6 torch-free libraries into ")
    assert "2 compilers at a time" in err[0]
    assert err[-1].startswith("nitorch_jit: built 6 of 6 libraries in ")
    progress = err[1:-1]  # "3/6 built, 0 s": how many, and how long it has run
    assert progress and all(line.startswith("nitorch_jit: ") and "/6 built, " in line
                            and line.endswith(" s") for line in progress)
    assert not any("compiling k.op" in line or "built k.op" in line for line in err)
    # all cached now: nothing compiles, one line says so
    again = jit.load_all(specs, jobs=2)
    assert [o.path for o in again] == [o.path for o in outcomes[:6]]
    assert not any(o.built for o in again) and len(fake.compiled) == 6
    assert capfd.readouterr().err.startswith("nitorch_jit: nothing to build: 6 libraries cached")


def test_the_pool_runs_its_builds_side_by_side(fake):
    # each compile waits at a barrier for another: builds serialised by one lock would break it
    fake.barrier = threading.Barrier(2, timeout=60)
    outcomes = jit.load_all([fake_spec("k.a.float32"), fake_spec("k.b.float32")], jobs=2)
    assert [o.error for o in outcomes] == [None, None]
    assert fake.jobs == [1, 1]


def test_threads_loading_one_entry_build_it_once_and_different_entries_at_once(fake):
    fake.barrier = threading.Barrier(2, timeout=60)
    a, b = fake_spec("k.a.float32"), fake_spec("k.b.float32")
    got = {}

    def load(spec, tag):
        got[tag] = jit.load(spec)

    threads = [threading.Thread(target=load, args=(spec, tag))
               for spec, tag in [(a, "a1"), (b, "b"), (a, "a2")]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got["a1"] == got["a2"] != got["b"]
    assert sorted(fake.compiled) == ["k.a.float32", "k.b.float32"]


def test_a_failed_entry_fails_alone_and_is_named(fake, tmp_path, capfd):
    specs = [fake_spec("k.good.float32"), fake_spec("k.bad.float32"), fake_spec("k.ok.float64")]
    fake.fail = {"k.bad.float32"}
    outcomes = jit.load_all(specs, jobs=2)
    assert [o.error is None for o in outcomes] == [True, False, True]
    assert isinstance(outcomes[1].error, jit.BuildError)
    assert "k.bad.float32 does not compile" in str(outcomes[1].error)
    assert len(published(tmp_path / "cache")) == 2
    done = capfd.readouterr().err.splitlines()[-1]
    assert "built 2 of 3 libraries in " in done and "; 1 FAILED" in done


def test_a_library_of_several_translation_units_gets_as_many_compilers(fake, capfd):
    big = fake_spec("big", torch_free=False, sources=3)
    small = [fake_spec(f"k.op{i}.float32") for i in range(3)]
    outcomes = jit.load_all(small + [big], jobs=2)
    assert [o.error for o in outcomes] == [None] * 4
    assert fake.compiled[0] == "big" and fake.jobs[0] == 2  # longest first, two compilers
    assert fake.jobs[1:] == [1, 1, 1]
    assert "compiling module 'big' for CPU and 3 torch-free libraries" in capfd.readouterr().err


def test_stopping_the_pool_kills_its_compiles_and_publishes_nothing(tmp_path, monkeypatch):
    cc = tmp_path / "bin" / "slowcc"  # a compiler that never ends: it says its pid, then sleeps
    cc.parent.mkdir()
    cc.write_text('#!/bin/sh\ncase "$1" in --version) echo "slowcc 1.0";;\n'
                  '  -print-file-name=*) echo "$1";;\n'  # no libstdc++ to compare
                  '  *) echo $$ > "$SLOWCC_PID.tmp"; mv "$SLOWCC_PID.tmp" "$SLOWCC_PID";'
                  ' exec sleep 300;;\nesac\n')
    cc.chmod(0o755)
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("CXX", str(cc))
    monkeypatch.setenv("SLOWCC_PID", str(pid_file))
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    stop, got = threading.Event(), {}

    def build_it():
        try:
            jit.load(fake_spec("k.slow.float32"), seat=build.Seat(1, print, stop))
        except jit.BuildError as err:
            got["error"] = err

    t = threading.Thread(target=build_it)
    t.start()
    for _ in range(600):  # until the compiler runs (a deadlock breaker, not a timing)
        if pid_file.exists():
            break
        t.join(timeout=0.1)
    pid = int(pid_file.read_text())
    stop.set()
    t.join(timeout=60)
    assert not t.is_alive() and "stopped" in str(got["error"])
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert published(tmp_path / "cache") == []


def test_jobs_must_be_a_positive_count(monkeypatch):
    with pytest.raises(ValueError, match="jobs"):
        jit.load_all([], jobs=0)
    monkeypatch.setenv("MAX_JOBS", "many")
    with pytest.raises(ValueError, match="MAX_JOBS='many'"):
        batch.max_jobs()
    monkeypatch.setenv("MAX_JOBS", "3")
    assert batch.max_jobs() == 3


def test_two_real_kernel_libraries_build_in_one_pool(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_SAID", set())
    names = [n for n in compiled.kernel_names("pushpull", "cpu") if ".grid_hess_dot." in n][:2]
    assert len(names) == 2, compiled.kernel_names("pushpull", "cpu")
    specs = [compiled.kernel_spec(n) for n in names]
    for spec in specs:  # a key of their own: never loaded by an earlier test of this process
        spec.cflags.append(f"-DNJ_TEST_ONLY_{uuid.uuid4().hex}")
    outcomes = jit.load_all(specs, jobs=2)
    assert [o.error for o in outcomes] == [None, None] and all(o.built for o in outcomes)
    for spec, o in zip(specs, outcomes):
        entry = cache.read_entry(o.path.parent)
        assert entry.verify(jit.compute_key(spec)) is None
        assert o.path.parent.name == jit.entry_name(jit.compute_key(spec))
        assert jit.handle(o.path) is not None  # loaded with ctypes, as a call would
    err = capfd.readouterr().err
    assert "compiling 2 torch-free libraries" in err and "built 2 of 2 libraries" in err


# ----------------------------------------------------------------------------- the CLI
def _fake_entry(root, name, key, seconds=1.5, age_epoch=1000.0):
    """A complete entry (manifest + a library matching its sha256), as a build leaves it."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "lib.so").write_bytes(b"library " + name.encode())
    (folder / "manifest.json").write_text(json.dumps({
        "key": key, "library": "lib.so", "sha256": cache.sha256_file(folder / "lib.so"),
        "build_seconds": seconds, "built_at_epoch": age_epoch}))
    return folder


@pytest.fixture
def kernel_entries(tmp_path, monkeypatch):
    """A cache root holding two current pushpull kernel entries (keys of today) and one whose
    sources changed since (no current key reaches it)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(root))
    monkeypatch.setattr(cache, "_SAID", set())
    names = compiled.kernel_names("pushpull", "cpu")[:2]
    current = []
    for n in names:
        key = jit.compute_key(compiled.kernel_spec(n))
        current.append(_fake_entry(root, jit.entry_name(key), key))
    old = dict(jit.compute_key(compiled.kernel_spec(names[0])), sources="0" * 64)
    stale = _fake_entry(root, jit.entry_name(old), old)
    return SimpleNamespace(root=root, current=current, stale=stale)


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_cache_list_groups_kernel_libraries_under_their_module(kernel_entries, capsys):
    assert cli.main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"3 entries in {kernel_entries.root}")
    (head,) = [line for line in lines if line.startswith("pushpull: ")]
    assert head.startswith("pushpull: 3 entries")
    (row,) = [line for line in lines if "kernel libraries" in line and "cpu" in line]
    assert row.split()[:3] == ["3", "kernel", "libraries"] and "no: 1 of 3 (sources)" in row
    assert kernel_entries.stale.name not in out  # counted, not listed
    assert cli.main(["cache", "list", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    for folder in kernel_entries.current + [kernel_entries.stale]:
        assert folder.name in verbose
    (stale_row,) = [line for line in verbose.splitlines() if kernel_entries.stale.name in line]
    assert stale_row.rstrip().endswith("no (sources)")


def test_clear_stale_drops_kernel_entries_no_key_reaches(kernel_entries, capsys):
    assert cli.main(["cache", "clear", "--stale"]) == 0
    out = capsys.readouterr().out
    assert "1 entry removed (stale only), 1 of them kernel libraries" in out
    assert not kernel_entries.stale.exists()
    assert all(folder.exists() for folder in kernel_entries.current)


def test_unreachable_is_judged_per_device():
    entry = cache.Entry(Path("k.op.float32-cuda-0123456789ab"),
                        {"key": {"kind": "torch-free", "device": "cuda"}, "library": "x.so"})
    assert cache.unreachable([entry], set(), {"cpu"}) == []  # cuda keys unknown: kept
    assert cache.unreachable([entry], set(), {"cpu", "cuda"}) == [entry]
    assert cache.unreachable([entry], {entry.path.name}, {"cuda"}) == []


@pytest.mark.slow  # the quick tier leaves out: fresh processes or a compile, 2+ s
def test_info_says_what_a_call_compiles(kernel_entries, capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    total = len(compiled.kernel_names("pushpull", "cpu"))
    lines = out.splitlines()
    (at,) = [i for i, x in enumerate(lines) if x.strip().startswith("cpu   pushpull")]
    assert "compiles on first use (no cached build)" in lines[at]  # the binding
    # two kernels cached; the next one is estimated from this machine's kernel builds (1.5 s)
    assert lines[at + 1].strip() == (f"kernels: 2 of {total} specialisations cached; a call "
                                     f"compiles the one it needs, about 2 s (like its others "
                                     f"here)")


def test_clear_stale_keeps_cuda_kernels_of_every_arch_list(tmp_path, monkeypatch, capsys):
    """CUDA kernel libraries are built for the GPUs of whoever called, so a cache (a shared one
    above all) holds several arch lists: each stays current; an edit of the sources does not."""
    try:
        toolchain.find_cuda_home()
    except toolchain.ToolchainError as e:
        pytest.skip(f"no CUDA toolkit here: {e}")
    root = tmp_path / "cache"
    monkeypatch.setenv("NI_JIT_CACHE_DIR", str(root))
    monkeypatch.setattr(cache, "_SAID", set())
    name = "pushpull.grid_pull.float32.cuda"
    current = []
    for archs in ("8.0", "9.0;12.0"):
        key = jit.compute_key(compiled.kernel_spec(name, archs=archs))
        current.append(_fake_entry(root, jit.entry_name(key), key))
    old = dict(jit.compute_key(compiled.kernel_spec(name, archs="8.0")), sources="0" * 64)
    stale = _fake_entry(root, jit.entry_name(old), old)
    assert cli.main(["cache", "clear", "--stale"]) == 0
    out = capsys.readouterr().out
    assert "1 entry removed (stale only), 1 of them kernel libraries" in out
    assert not stale.exists()
    assert all(folder.exists() for folder in current)


def test_the_prebuild_bundles_cover_every_kernel():
    """`nitorch-jit build` builds bundles (every path of one op and dtype per library), which
    together serve every specialisation a binding may ask for."""
    from nitorch_jit.backends.schemas import MODULES
    for module in MODULES:
        bundles = compiled.bundle_names(module, "cpu")
        assert len(set(bundles)) == len(bundles) == 2 * len(compiled.kernel_table(module, "cpu")[0])
        for name in compiled.kernel_names(module, "cpu"):
            assert compiled.bundle_of(name) in bundles, name
        for name in bundles:
            flags = compiled.kernel_spec(name).cflags
            orders = [f for f in flags if f.startswith("-DNJ_KERNEL_ORDER")]
            assert orders == ([] if name.endswith(".all") else ["-DNJ_KERNEL_ORDER=-1"]), name
    assert compiled.bundle_of("pushpull.grid_hess_dot.float32.any") == \
        "pushpull.grid_hess_dot.float32.any"  # no fast path: the generic library is the bundle
    assert compiled.bundle_of("pushpull.grid_pull.float64.o3d2") == "pushpull.grid_pull.float64.all"
    with pytest.raises(compiled.BackendError, match="bundle_names"):
        compiled.kernel_spec("pushpull.grid_hess_dot.float32.all")


def test_a_kernel_library_holds_the_ops_kernels_def_names_with_it(tmp_path, monkeypatch):
    """NJ_KERNEL_WITH: reg_precond's and reg_relax_'s libraries hold reg_matvec (their calls
    run it too), compiled with its define; a pairing that one compile cannot hold (another
    translation unit, a fast path) is refused, naming the line."""
    assert compiled.kernel_companions("regsolve", "cpu") == {
        "reg_precond": ("reg_matvec",), "reg_relax_": ("reg_matvec",)}
    spec = compiled.kernel_spec("regsolve.reg_relax_.float64.any")
    assert {"-DNJ_KERNEL_reg_relax_", "-DNJ_KERNEL_reg_matvec"} <= set(spec.cflags)
    assert spec.label == "reg_relax_ and reg_matvec for float64 (CPU)"
    assert "-DNJ_KERNEL_reg_precond" not in compiled.kernel_spec(
        "regsolve.reg_matvec.float32.any").cflags
    assert compiled.kernel_companions("pushpull", "cpu") == {}
    # a first call that runs both asks for one library, and builds nothing for the matvec
    assert compiled._holds("regsolve.reg_precond.float32.any", "regsolve.reg_matvec.float32.any")
    assert not compiled._holds("regsolve.reg_precond.float64.any",
                               "regsolve.reg_matvec.float32.any")
    assert not compiled._holds("regsolve.reg_matvec.float32.any",
                               "regsolve.reg_precond.float32.any")
    for line in ("NJ_KERNEL_WITH(a, c)", "NJ_KERNEL_WITH(a, b)", "NJ_KERNEL_WITH(a, a)"):
        folder = tmp_path / line[15:19].replace(", ", "_") / "cpu"
        folder.mkdir(parents=True)
        (folder / "kernels.def").write_text(
            "NJ_KERNEL_OP(a, one, 0b0)\nNJ_KERNEL_OP(b, one, 0b1)\nNJ_KERNEL_OP(c, two, 0b0)\n"
            + line + "\n")
        monkeypatch.setattr(compiled, "CSRC", tmp_path)
        with pytest.raises(compiled.BackendError, match=r"NJ_KERNEL_WITH\(a, [abc]\)"):
            compiled.kernel_companions(folder.parent.name, "cpu")


def test_the_suite_cache_was_prebuilt_whole():
    """The suite's own cache comes from `nitorch-jit build --no-cuda` (tests/conftest.py): every
    module's binding and every kernel bundle, built by the project's parallel prebuild. A
    failure there would otherwise only show as tests that compile on demand."""
    from tests.conftest import PREBUILD_RECORD
    record = Path(os.environ["NI_JIT_CACHE_DIR"]) / PREBUILD_RECORD
    if not record.is_file():
        pytest.skip("the suite's prebuild did not run (NI_JIT_TEST_PREBUILT=0 or --collect-only)")
    got = json.loads(record.read_text())
    assert got["returncode"] == 0, got["output"][-3000:]
    from nitorch_jit.backends.schemas import MODULES
    for module in MODULES:
        assert f"{module} (cpu): " in got["output"], got["output"][-3000:]
    assert "FAILED" not in got["output"], got["output"][-3000:]
