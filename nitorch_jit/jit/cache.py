"""Cache roots and entries: where compiled libraries live, how they are verified and cleared.

Layout of a root::

    <root>/<entry>/manifest.json      every key field, the library's sha256, build seconds, date
    <root>/<entry>/<library>.so       the compiled library
    <root>/<entry>/build.log          the compiler's output
    <root>/.locks/<entry>.lock        OS-level build locks (released by the kernel on death)
    <root>/.tmp-<entry>-<pid>-...     private build folders (renamed into place when done)
    <root>/.failed/<entry>-<date>/    failed builds, kept for their log
"""
import datetime
import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "NI_JIT_CACHE_DIR"


class CacheError(RuntimeError):
    """The cache root cannot be used."""


def roots():
    """Configured roots in search order: NI_JIT_CACHE_DIR (os.pathsep-separated) or the
    per-user cache folder."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return [Path(p).expanduser().absolute() for p in value.split(os.pathsep) if p.strip()]
    import platformdirs
    return [Path(platformdirs.user_cache_dir("nitorch_jit")).absolute()]


def check_not_shared_writable(root):
    """Loading a library from a folder other users can write to would run their code."""
    st = root.stat()
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or (hasattr(os, "getuid")
                                                      and st.st_uid not in (os.getuid(), 0)
                                                      and os.access(root, os.W_OK)):
        raise CacheError(
            f"refusing the cache root {root}: other users can write to it (mode "
            f"{stat.filemode(st.st_mode)}), so a library loaded from it could run their code. "
            f"Run 'chmod go-w {root}', or set {ENV_VAR} to a folder only you can write.")


def _usable(root):
    """True if `root` is (or can be made) a private writable cache root."""
    if root.exists():
        check_not_shared_writable(root)
        return os.access(root, os.W_OK | os.X_OK)
    parent = root
    while not parent.exists():
        parent = parent.parent
    return os.access(parent, os.W_OK | os.X_OK)


def writable_root():
    """The first root we may write to, created with mode 0700."""
    rs = roots()
    for root in rs:
        try:
            if not _usable(root):
                continue
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        check_not_shared_writable(root)
        return root
    raise CacheError(
        f"no writable cache root: {', '.join(str(r) for r in rs)} cannot be written by this user. "
        f"Set {ENV_VAR} to a folder you can write (several roots may be listed, separated by "
        f"'{os.pathsep}'; read-only ones are searched for prebuilt libraries).")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Entry:
    path: Path
    manifest: dict

    @property
    def library(self):
        return self.path / self.manifest["library"]

    def size(self):
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def age_seconds(self):
        return time.time() - self.manifest.get("built_at_epoch", self.path.stat().st_mtime)

    def verify(self, key=None):
        """The library exists, has the hash the manifest records, and (if given) the key."""
        if key is not None and self.manifest.get("key") != key:
            return "its key differs"
        try:
            digest = sha256_file(self.library)
        except OSError:
            return "its library is missing"
        if digest != self.manifest.get("sha256"):
            return "its library does not match the recorded sha256 (truncated or altered)"
        return None


def read_entry(path):
    try:
        with open(path / "manifest.json") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or "key" not in manifest or "library" not in manifest:
        return None
    return Entry(Path(path), manifest)


def find(name):
    """Entries called `name`, in root order."""
    found = []
    for root in roots():
        e = read_entry(root / name)
        if e is not None:
            found.append(e)
    return found


def entries():
    """Every entry in every root (skipping unreadable roots)."""
    out = []
    for root in roots():
        try:
            children = sorted(root.iterdir())
        except OSError:
            continue
        for child in children:
            if child.is_dir() and not child.name.startswith("."):
                e = read_entry(child)
                if e is not None:
                    out.append(e)
    return out


def write_manifest(folder, key, library, build_seconds):
    manifest = {
        "key": key,
        "library": library.name,
        "sha256": sha256_file(library),
        "build_seconds": round(build_seconds, 2),
        "built_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "built_at_epoch": time.time(),
    }
    with open(folder / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    return manifest


def publish(tmp, final):
    """Move a finished private build folder into place atomically (same filesystem)."""
    if final.exists():  # a corrupt entry being replaced: move it aside first
        trash = final.parent / f".trash-{final.name}-{os.getpid()}-{time.time_ns()}"
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(tmp, final)


def keep_failed(tmp, name):
    """Keep a failed build folder (for its log) under .failed/; return the log path."""
    failed = tmp.parent / ".failed"
    failed.mkdir(mode=0o700, exist_ok=True)
    dest = failed / f"{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    os.replace(tmp, dest)
    return dest / "build.log"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_entry(entry):
    shutil.rmtree(entry.path)


def clear_leftovers(root):
    """Remove failed builds and the private folders of builders that no longer run."""
    removed = []
    for child in list(root.iterdir()) if root.exists() else []:
        if child.name in (".failed",) or child.name.startswith(".trash-"):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
        elif child.name.startswith(".tmp-"):
            try:
                pid = int(child.name.split("-")[-2])
            except (ValueError, IndexError):
                pid = -1
            if pid <= 0 or not _pid_alive(pid):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
    return removed
