"""Cache roots and entries: where compiled libraries live, how they are verified and cleared.

Layout of a root::

    <root>/<entry>/manifest.json      every key field, the library's sha256, build seconds, date
    <root>/<entry>/<library>.so       the compiled library
    <root>/<entry>/build.log          the compiler's output
    <root>/.locks/<entry>.lock        OS-level build locks (released by the kernel on death)
    <root>/.tmp-<host>-<pid>-<entry>-...  private build folders (renamed into place when done)
    <root>/.failed/<entry>-<date>-.../    failed builds, kept for their log

Publishing is correct without any lock (the lock only saves duplicate work): an entry appears
by one atomic rename of a complete private folder, and a reader trusts an entry only after its
library matches the sha256 of its manifest. Where users run (containers with no home, noexec
mounts, read-only shared roots, NFS): a root that cannot be used is said once, by name, with
the fix.
"""
import datetime
import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "NI_JIT_CACHE_DIR"
_FIX = (f"set {ENV_VAR} to a folder you own and can write, on a filesystem that allows running "
        f"programs (several roots may be listed, separated by '{os.pathsep}'; read-only ones are "
        f"searched for prebuilt libraries)")


class CacheError(RuntimeError):
    """The cache root cannot be used."""


class CacheWarning(UserWarning):
    """A cache root is not used as listed; said once per root and process."""


_SAID = set()


def _warn_once(topic, message):
    if topic not in _SAID:
        _SAID.add(topic)
        warnings.warn(f"nitorch_jit: {message}", CacheWarning, stacklevel=4)


def _me():
    return os.getuid() if hasattr(os, "getuid") else None


def _user(uid):
    """'name (uid N)', or 'uid N' for a uid with no passwd entry."""
    try:
        import pwd
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def fallback_root():
    """The root used when there is no usable home: a per-user folder under the system
    temporary directory, keyed on the uid (which needs no passwd entry), as inductor's
    ``/tmp/torchinductor_<user>``.

    Returns
    -------
    pathlib.Path
        The folder's path (this creates nothing).

    Examples
    --------
    >>> from nitorch_jit.jit import cache
    >>> cache.fallback_root().name.startswith("nitorch_jit_")
    True
    """
    tag = _me() if _me() is not None else (os.environ.get("USERNAME") or "user")
    return Path(tempfile.gettempdir()).absolute() / f"nitorch_jit_{tag}"


def _home_root():
    """(the per-user cache folder, None), or (None, why there is none)."""
    try:
        import platformdirs
        path = Path(platformdirs.user_cache_dir("nitorch_jit"))
    except (RuntimeError, KeyError, OSError) as e:  # no HOME and no passwd entry, say
        return None, f"no home folder ({e})"
    if not path.is_absolute():
        return None, f"the home folder is not an absolute path ({path})"
    return path, None


def _existing(path):
    """`path` or its nearest ancestor that exists."""
    while not os.path.exists(path) and path.parent != path:  # False, not raising, on EACCES
        path = path.parent
    return path


def mount_point(path):
    """The mount point of the filesystem holding `path` (or its nearest existing ancestor).

    Parameters
    ----------
    path : pathlib.Path

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> from pathlib import Path
    >>> from nitorch_jit.jit import cache
    >>> cache.mount_point(Path("/")) == Path("/")
    True
    """
    path = _existing(Path(path).absolute())
    dev = path.stat().st_dev
    while path.parent != path and path.parent.stat().st_dev == dev:
        path = path.parent
    return path


def noexec_mount(path):
    """The mount point when `path` (or its nearest existing ancestor) lies on a filesystem
    mounted noexec, where a built library could never be loaded ("failed to map segment from
    shared object"); None otherwise, or where the system cannot tell.

    Parameters
    ----------
    path : pathlib.Path

    Returns
    -------
    pathlib.Path or None

    Examples
    --------
    >>> from pathlib import Path
    >>> from nitorch_jit.jit import cache
    >>> cache.noexec_mount(Path(__file__)) is None   # doctest: +SKIP
    True
    """
    flag = getattr(os, "ST_NOEXEC", 0)
    if not flag or not hasattr(os, "statvfs"):
        return None
    try:
        if os.statvfs(_existing(Path(path).absolute())).f_flag & flag:
            return mount_point(path)
    except OSError:
        pass
    return None


def _can_write(path):
    """`path` is a folder we may write into, or can be created (its nearest ancestor is)."""
    base = _existing(path)
    return os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)


def roots():
    """Configured roots in search order: NI_JIT_CACHE_DIR (os.pathsep-separated), else the
    per-user cache folder; with no usable home, a per-user folder under the system temporary
    directory (said once). Raises only CacheError.

    Returns
    -------
    list of pathlib.Path
    """
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        out = []
        for item in value.split(os.pathsep):
            if not item.strip():
                continue
            try:
                out.append(Path(item.strip()).expanduser().absolute())
            except (RuntimeError, KeyError, OSError) as e:  # '~' with no home
                raise CacheError(f"{ENV_VAR}: cannot use {item!r} ({e}); give an absolute "
                                 f"path") from None
        return out
    home, why = _home_root()
    if home is not None and _can_write(home) and noexec_mount(home) is None:
        return [home]
    if home is not None:
        mount = noexec_mount(home)
        why = (f"the home cache folder {home} is on {mount}, mounted noexec" if mount else
               f"the home cache folder {home} cannot be written by this user")
    fallback = fallback_root()
    _warn_once(("fallback", str(fallback)),
               f"{why}; compiled libraries are cached in {fallback} instead (its own folder, "
               f"mode 0700). Set {ENV_VAR} to choose where.")
    return ([home] if home is not None else []) + [fallback]


def refusal(root, writing):
    """Why `root` must not be used, or None: a folder that other users can write to would let
    them plant a library we load; one that belongs to someone else (including root's view of a
    user's folder) is not ours to write into; the temporary-directory fallback must be ours.

    Parameters
    ----------
    root : pathlib.Path
        An existing folder.
    writing : bool
        Whether we mean to build into it (else only to load from it).

    Returns
    -------
    str or None
    """
    st = os.lstat(root)
    mode = stat.filemode(st.st_mode)
    fallback = root == fallback_root()
    if fallback and (stat.S_ISLNK(st.st_mode) or _me() not in (None, st.st_uid)):
        return (f"it should be this user's own folder but it is "
                f"{'a symbolic link' if stat.S_ISLNK(st.st_mode) else 'owned by ' + _user(st.st_uid)}"
                f" ({mode})")
    st = os.stat(root)
    if st.st_mode & stat.S_IWOTH:
        return (f"other users can write to it (mode {mode}), so a library loaded from it could "
                f"run their code; run 'chmod go-w {root}'")
    if st.st_mode & stat.S_IWGRP:
        return (f"the members of its group can write to it (mode {mode}), so a library loaded "
                f"from it could run their code; run 'chmod go-w {root}'")
    me = _me()
    if writing and me is not None and st.st_uid not in (me, 0):
        return (f"it belongs to {_user(st.st_uid)}, not to this user ({_user(me)}), so it is "
                f"not ours to build into")
    return None


def check_not_shared_writable(root):
    """Raise CacheError if `root` (an existing folder) is refused for building into."""
    why = refusal(root, writing=True)
    if why:
        raise CacheError(f"refusing the cache root {root}: {why}. Or {_FIX}.")


@dataclass
class RootState:
    """What this user can do with one root (see ``root_state``)."""
    path: Path
    exists: bool
    readable: bool
    writable: bool
    noexec: object    # the mount point, or None
    refused: object   # why it is not even loaded from, or None
    not_built_into: object = None  # why a root we could write is left alone, or None

    def describe(self):
        """One line: readable, writable, noexec, refused and why."""
        if not self.exists:
            what = "not created yet, " + ("can be created" if self.writable else
                                          "cannot be created by this user")
        else:
            what = ", ".join([("readable" if self.readable else "NOT READABLE by this user"),
                              ("writable" if self.writable else "read-only for this user")])
        if self.noexec:
            what += f", NOEXEC (on {self.noexec}: its libraries cannot be loaded)"
        if self.refused:
            what += f", REFUSED: {self.refused}"
        elif self.not_built_into:
            what += f", loaded from but NOT BUILT INTO: {self.not_built_into}"
        return what


def root_state(root):
    """Whether `root` exists, can be read and written by this user, lies on a noexec mount,
    or is refused (and why).

    Parameters
    ----------
    root : pathlib.Path

    Returns
    -------
    RootState
    """
    root = Path(root)
    exists = os.path.isdir(root)
    readable = exists and os.access(root, os.R_OK | os.X_OK)
    writable = _can_write(root) if not exists else os.access(root, os.W_OK | os.X_OK)
    refused = not_ours = None
    if exists:
        try:
            refused = refusal(root, writing=False)
            not_ours = refusal(root, writing=True) if writable and not refused else None
        except OSError as e:
            refused = f"cannot be examined ({e.strerror})"
    return RootState(root, exists, readable, writable, noexec_mount(root), refused, not_ours)


def _unreadable_message(state):
    st = state.path.stat()
    return (f"cannot read the cache root {state.path} (mode {stat.filemode(st.st_mode)}, owner "
            f"{_user(st.st_uid)}), so its prebuilt libraries are not used and this user "
            f"compiles its own. Whoever built it makes it readable: 'nitorch-jit build --shared' "
            f"with {ENV_VAR}={state.path}, or 'chmod -R a+rX,go-w {state.path}' (the folders "
            f"above it need a+x too). Or drop it from {ENV_VAR}.")


def readable_roots(loading=True):
    """The roots whose entries may be read: existing, readable, not refused and (when
    `loading`) not on a noexec mount. Each listed root that fails is said once, with the fix.

    Parameters
    ----------
    loading : bool
        Whether the libraries will be loaded (a noexec root is then skipped too).

    Returns
    -------
    list of pathlib.Path
    """
    out = []
    for root in roots():
        state = root_state(root)
        if not state.exists:
            continue
        if not state.readable:
            _warn_once(("unreadable", str(root)), _unreadable_message(state))
        elif state.refused:
            _warn_once(("refused", str(root)), f"not loading from the cache root {root}: "
                       f"{state.refused}")
        elif loading and state.noexec:
            _warn_once(("noexec", str(root)),
                       f"the cache root {root} is on {state.noexec}, mounted noexec: its "
                       f"libraries cannot be loaded, so it is skipped. {_FIX[0].upper()}"
                       f"{_FIX[1:]}.")
        else:
            out.append(root)
    return out


def _why_not_writable(root):
    """None if we may build into `root`, else why not."""
    mount = noexec_mount(root)
    if mount is not None:
        return f"it is on {mount}, mounted noexec, where a built library cannot be loaded"
    if os.path.lexists(root):
        if not os.path.isdir(root):
            return "it is not a folder"
        if not os.access(root, os.W_OK | os.X_OK):
            return "this user cannot write to it"
        return refusal(root, writing=True)
    if not _can_write(root):
        return f"it cannot be created ({_existing(root)} is not a folder this user can write)"
    return None


def writable_root(create=True):
    """The first root we may build into, created with mode 0700: writable by this user, not
    on a noexec mount, not refused. Raises CacheError naming every root and why not.

    Parameters
    ----------
    create : bool
        Create the root if it does not exist yet (False: only say which it would be).

    Returns
    -------
    pathlib.Path
    """
    rs = roots()
    reasons = []
    for root in rs:
        try:
            why = _why_not_writable(root)
        except OSError as e:  # a folder above it that we cannot search, say
            why = f"it cannot be examined ({e.strerror or e})"
        if why is None and not create:
            return root
        if why is None:
            try:
                root.mkdir(mode=0o700, parents=True, exist_ok=True)
                why = refusal(root, writing=True)  # a race, or the fallback not being ours
            except OSError as e:
                why = f"it cannot be created ({e.strerror or e})"
        if why is None:
            return root
        reasons.append(f"{root}: {why}")
    raise CacheError("no usable cache root to build into: " + "; ".join(reasons)
                     + f". To fix this, {_FIX}.")


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
    """Entries called `name` in the roots we may load from, in root order."""
    found = []
    for root in readable_roots():
        e = read_entry(root / name)
        if e is not None:
            found.append(e)
        elif os.path.isdir(root / name) and not os.access(root / name, os.R_OK | os.X_OK):
            _warn_once(("unreadable", str(root / name)),
                       f"cannot read the cached build {root / name}, so this user compiles its "
                       f"own. Whoever built it makes it readable: 'nitorch-jit build --shared' "
                       f"with {ENV_VAR}={root}, or 'chmod -R a+rX,go-w {root}'.")
    return found


def entries():
    """Every entry in every readable root (unreadable or refused roots are said once)."""
    out = []
    for root in readable_roots(loading=False):
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


def _host():
    """This host's name as one token of a file name (pids repeat across hosts)."""
    name = "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())
    return name[:40] or "host"


def private_folder(root, name):
    """A new private build folder for entry `name` in `root`: hidden, mode 0700, named by
    host, pid and a random part, so builders on different hosts never share one.

    Parameters
    ----------
    root : pathlib.Path
    name : str

    Returns
    -------
    pathlib.Path
    """
    return Path(tempfile.mkdtemp(prefix=f".tmp-{_host()}-{os.getpid()}-{name}-", dir=root))


def _share_tree(folder):
    """Readable (and, for folders and programs, searchable) by everyone, writable by the
    owner only; returns what could not be changed."""
    problems = []
    for path in [folder] + sorted(folder.rglob("*")):
        try:
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            runnable = stat.S_ISDIR(st.st_mode) or st.st_mode & stat.S_IXUSR
            os.chmod(path, 0o755 if runnable else 0o644)
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
    return problems


def share(root):
    """Make `root` and its entries readable by everyone and writable by their owner only
    (private build folders, locks and failed builds stay private); entries published later
    into a root readable by everyone are made readable too (``publish``).

    Parameters
    ----------
    root : pathlib.Path

    Returns
    -------
    list of str
        What could not be changed (another user's entry, say), and folders above `root` that
        other users cannot pass through.
    """
    root = Path(root)
    problems = []
    try:
        os.chmod(root, 0o755)
    except OSError as e:
        problems.append(f"{root}: {e.strerror or e}")
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith("."):
            problems += _share_tree(child)
    for parent in root.parents:
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                problems.append(f"{parent}: other users cannot pass through it "
                                f"({stat.filemode(parent.stat().st_mode)}); 'chmod a+x {parent}'")
        except OSError:
            pass
    return problems


_PUBLISH_RETRIES = (0.2, 1.0, 3.0)  # seconds: NFS may hide a fresh rename for a while


def publish(tmp, final, key):
    """Move the finished private build folder `tmp` into place as `final`; return the folder
    whose library to load: `final` (ours or a verified one published meanwhile) or `tmp`
    (our own verified build, when the rename was lost or the filesystem refused it). Never
    publishes or returns a partial entry; raises CacheError only when neither can be found.

    Correct with no lock: the entry appears by one atomic rename of a complete folder. A
    rename can lose a race (the target exists: ENOTEMPTY), or fail on NFS with ESTALE or
    EBUSY after it may even have happened; each case ends in a verified library.

    Parameters
    ----------
    tmp : pathlib.Path
        Holds manifest.json and the library.
    final : pathlib.Path
    key : dict

    Returns
    -------
    pathlib.Path
    """
    def verified(folder):
        e = read_entry(folder)
        return e is not None and e.verify(key) is None

    def done(folder):
        if folder == final and tmp.exists():  # ours is not needed: the winner's is verified
            shutil.rmtree(tmp, ignore_errors=True)
        return folder

    if verified(final):  # someone else published meanwhile
        return done(final)
    if os.stat(final.parent).st_mode & 0o005 == 0o005:  # a root shared with everyone
        _share_tree(tmp)
    for attempt in (0, 1):
        try:
            os.replace(tmp, final)
            return final
        except OSError as e:
            error = e
        if attempt or error.errno not in (errno.ENOTEMPTY, errno.EEXIST) \
                or not final.exists() or verified(final):
            break
        # a corrupt entry is in the way (checked just now, not earlier: a winner's complete
        # entry is never moved): move it aside, then rename again
        trash = final.parent / f".trash-{final.name}-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        except OSError:
            pass  # gone already: the rename again tells
    retried = False
    for pause in _PUBLISH_RETRIES:
        if verified(final):  # the winner's, or ours after a rename that did happen
            return done(final)
        if verified(tmp):
            if error.errno not in (errno.ESTALE, errno.EBUSY) or retried:
                return tmp  # lost the race and the winner is not visible yet: ours
            retried = True
            try:  # a stale handle or a busy target may be gone on a second try
                os.replace(tmp, final)
                return final
            except OSError as e:
                error = e
                continue
        time.sleep(pause)
    raise CacheError(f"could not publish {final} from {tmp} ({error}), and neither can be read "
                     f"back as a complete build; the filesystem may be slow to show a rename "
                     f"(NFS). Try again.")


def keep_failed(tmp, name):
    """Keep a failed build folder (for its log) under .failed/; return the log path (in
    place, if it cannot be moved)."""
    failed = tmp.parent / ".failed"
    dest = failed / (f"{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}-{_host()}-{os.getpid()}"
                     f"-{uuid.uuid4().hex[:6]}")
    try:
        failed.mkdir(mode=0o700, exist_ok=True)
        os.replace(tmp, dest)
    except OSError:
        return tmp / "build.log"
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


_OLD = 24 * 3600  # seconds: a private folder of another host (or an older layout) is left over


def clear_leftovers(root):
    """Remove failed builds and the private folders of builders that no longer run: this
    host's whose process is gone, and any older than a day (another host's pid says nothing
    here)."""
    removed = []
    for child in list(root.iterdir()) if root.exists() else []:
        if child.name in (".failed",) or child.name.startswith(".trash-"):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
        elif child.name.startswith(".tmp-"):
            host, pid, _ = (child.name[len(".tmp-"):].split("-", 2) + ["", ""])[:3]
            mine = host == _host() and pid.isdigit()
            try:
                old = time.time() - child.stat().st_mtime > _OLD
            except OSError:
                continue
            if (mine and not _pid_alive(int(pid))) or old:
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
    return removed


def unreachable(entries, reachable, devices):
    """The torch-free entries that no current key can reach: those whose device is one of
    `devices` and whose folder name is not in `reachable`. A torch-free key holds no torch
    field, so a torch upgrade never makes one stale; an edit of its sources, its flags or the
    compiler does, and its old entry is then never loaded again.

    Parameters
    ----------
    entries : list of Entry
    reachable : set of str
        The entry names of every torch-free library the caller can build today
        (``entry_name(compute_key(spec))``).
    devices : set of str
        The devices whose names `reachable` covers ('cpu', 'cuda'): an entry of another
        device is never called unreachable (its keys could not be computed here).

    Returns
    -------
    list of Entry

    Examples
    --------
    >>> from pathlib import Path
    >>> from nitorch_jit.jit import cache
    >>> old = cache.Entry(Path("k.op.float32-cpu-0123456789ab"),
    ...                   {"key": {"kind": "torch-free", "device": "cpu"}, "library": "k.so"})
    >>> [e.path.name for e in cache.unreachable([old], {"k.op.float32-cpu-ba9876543210"}, {"cpu"})]
    ['k.op.float32-cpu-0123456789ab']
    >>> cache.unreachable([old], set(), {"cuda"})
    []
    """
    return [e for e in entries if e.manifest["key"].get("kind") == "torch-free"
            and e.manifest["key"].get("device") in devices and e.path.name not in reachable]
