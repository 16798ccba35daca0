"""Files written whole or not at all, and checked against what was written when read back.

Every directory jaxport writes (checkpoints, `jaxport.export` artifacts, `emit`'s and `jaxport
convert`'s output) goes through `write_directory`; a single file through `write_file`.

`write_file(path, content)`: the content goes to a new file beside `path` (the same directory, so
the same filesystem), is fsynced, renamed over `path` (`os.replace`), and the directory fsynced: a
reader sees the old file or the new one, never part of one.

`write_directory(directory, files, kind=...)`: every file is first written into a staging
directory, marked incomplete from its start, then the manifest goes last:

    manifest.json   {"format": 1, "kind": "checkpoint", "complete": true,
                     "files": {name: {"size": bytes, "sha256": hex digest}, ...}}

and only then does anything change in `directory`, in one of two ways:

- Swap (the usual case: `directory` is new, or holds only files this kind of output writes). The
  staging directory is a sibling, `.NAME.jaxport-partial-XXXX`, exchanged with `directory` in one
  atomic step (Linux `renameat2(RENAME_EXCHANGE)`, macOS `renamex_np(RENAME_SWAP)`); the old
  contents are then removed. Where the system cannot exchange two directories, `directory` is
  renamed aside (`.NAME.jaxport-previous-XXXX`) and the staging directory renamed into place: for
  that instant `directory` is missing, and a crash then leaves the previous contents whole under
  the -previous name. A reader sees the previous set of files or the new one, never a mix.
- File by file, where a swap would move what is not jaxport's (`directory` holds files of other
  programs, which are left where they are), where `directory` is a mount point or this process's
  working directory, or where its parent is not writable. The staging directory is inside
  `directory` (`.jaxport-partial-XXXX`). Once every file is written there, the writer takes an
  exclusive `flock` on `directory` (writers of one directory commit in turn, so two at once leave
  one whole version), hard-links the current version's files into `.jaxport-previous-XXXX` inside
  it (copies where links are refused), replaces the manifest by one marked incomplete that names
  that directory, renames each file into place, the new manifest last, and removes the previous
  version. Killed in between, `open_directory` reads the previous version whole from where the
  incomplete manifest points, with an `InterruptedWriteWarning`; the next write removes it.

Either way nothing in `directory` changes before every file is written, so a full disk (or any
failed write) is one `WriteError` naming the file, and the previous contents stay as they were
(room for the old and the new files together is needed). A writer holds an `flock` on its staging
directory; the staging directories of killed writers (no lock) are removed by the next write to
the same place.

`check_directory(directory, names, kind=...)`: reads the manifest (at most 1 MiB) and checks each
named file against it: missing, truncated, longer than written, or a different sha256 is one error
naming the file. `open_directory(directory, names, kind=...)` is the loaders' way: each file is
read once, its size and sha256 checked on the bytes read, and those bytes are what the loader
parses (no second read a swap could slip between). A directory without a manifest (written by
jaxport 0.2.0 or earlier) is read unchecked, with an `UnverifiedFilesWarning`.

A reader racing a file-by-file writer can find a file renamed in after it read the manifest: that
is refused as corrupt (never read as the wrong version), and reading again succeeds.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .errors import JaxportError, SerializationError, one_line
from .manifests import (
    _CHUNK,
    _MANIFEST_LIMIT,  # noqa: F401 - files._MANIFEST_LIMIT, as before the split
    _PREVIOUS_NAME,
    MANIFEST,
    CheckedDirectory,
    InterruptedWriteWarning,
    UnverifiedFilesWarning,
    _manifest_bytes,
    _read_manifest,
    check_directory,
    open_directory,
)

try:
    import fcntl
except ImportError:  # Windows: no locks, so leftovers of killed writers stay
    fcntl = None

# The reading half (`check_directory`, `open_directory`) is `manifests`', re-exported here.
__all__ = ["MANIFEST", "Content", "WriteError", "UnverifiedFilesWarning", "CheckedDirectory",
           "InterruptedWriteWarning", "write_file", "write_directory", "check_directory", "open_directory"]

_FINAL = ".manifest.json.final"  # the manifest in staging until it replaces the incomplete one
_PARTIAL = "jaxport-partial-"
_NEW = "jaxport-new-"
_PREVIOUS = "jaxport-previous-"

#: What a file is written from: its bytes, or a function that writes a new file at the path given.
Content = bytes | Callable[[str], None]


class WriteError(JaxportError, OSError):
    """A file could not be written (a full disk, no permission, a path that is not a directory);
    what was there before is kept. `errno` and `filename` are set as an `OSError`'s."""

    def __init__(self, message: str, code: int | None = None, filename: str | None = None):
        super().__init__(message)
        self.message = message
        self.errno = code
        self.filename = filename

    def __str__(self) -> str:
        return self.message


# --- writing ---------------------------------------------------------------------------------


def write_file(path: str | os.PathLike, content: Content) -> Path:
    """Replace `path` with `content` atomically (see the module docstring). Refuses a `path` that
    exists and is not a regular file (a device such as /dev/full, a directory)."""
    path = Path(os.path.realpath(os.path.abspath(path)))  # a symbolic link stays, its file is replaced
    if path.exists() and not path.is_file():
        raise WriteError(f"{path} exists and is not a regular file; it was not replaced",
                         errno.EEXIST, str(path))
    keeps = f"{path} keeps its previous contents" if path.exists() else f"{path} was not written"
    _remove_dead(path.parent, f".{_stem(path)}.{_PARTIAL}")
    temp, lock = None, None
    try:
        temp, lock = _locked_new(path.parent, f".{_stem(path)}.", file=True)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, stat.S_IMODE(path.stat().st_mode))  # the replaced file's mode
        _write(temp, content)
        os.replace(temp, path)
    except BaseException as e:
        if temp is not None:
            _remove(temp)
        _raise_write_error(e, path, keeps)
    finally:
        _unlock(lock)
    _durable(path.parent, path)
    return path


def write_directory(directory: str | os.PathLike, files: Mapping[str, Content], *, kind: str,
                    owned: Iterable[str] = ()) -> Path:
    """Write `files` ({name: content}) into `directory` together with their manifest, all or nothing
    (see the module docstring). `kind` names the output in the manifest and in messages
    ("checkpoint"); `owned` are other names this kind of output writes (an optional file absent
    this time), which are removed rather than kept. Other files in `directory` are kept. Returns
    the directory written (a symbolic link's target)."""
    for name in files:
        if name != os.path.basename(name) or name.startswith(".") or name == MANIFEST:
            raise ValueError(f"write_directory takes plain file names, not {name!r}")
    target = Path(os.path.realpath(os.path.abspath(directory)))
    if target.exists() and not target.is_dir():
        raise WriteError(f"{target} exists and is not a directory; the {kind} was not written",
                         errno.ENOTDIR, str(target))
    ours = set(files) | set(owned) | {MANIFEST}
    existed = target.exists()
    keeps = f"{target} keeps its previous contents" if existed else f"the {kind} was not written"
    staging, lock = None, None
    try:
        _make_directories(target.parent)
        _settle_previous(target)
        existed = target.exists()
        keeps = f"{target} keeps its previous contents" if existed else f"the {kind} was not written"
        _remove_dead(target.parent, f".{_stem(target)}.{_PARTIAL}")
        if existed:
            _remove_dead(target, f".{_PARTIAL}")
        if _can_swap(target, ours):
            try:
                staging, lock = _locked_new(target.parent, f".{_stem(target)}.")
            except OSError:  # e.g. a parent this process cannot write: file by file, inside
                if not existed:
                    raise
        if staging is None:
            _make_directories(target)
            staging, lock = _locked_new(target, ".")
    except BaseException as e:
        _unlock(lock)
        _raise_write_error(e, target, keeps)
    try:
        current = target / MANIFEST
        try:
            _write(staging / MANIFEST, _manifest_bytes(kind, None))  # incomplete until the end
            entries = {}
            for name, content in files.items():
                current = target / name
                entries[name] = _write(staging / name, content)
            current = target / MANIFEST
            _write(staging / _FINAL, _manifest_bytes(kind, entries))
            _fsync_dir(staging)
        except BaseException as e:
            _remove(staging)
            _raise_write_error(e, current, keeps)
        if staging.parent == target:
            _commit_file_by_file(target, staging, files, ours, kind)
        else:
            _commit_swap(target, staging)
    finally:
        _unlock(lock)
    return target


def _commit_swap(target: Path, staging: Path) -> None:
    """`staging` takes `target`'s place in one step; the previous contents are removed."""
    previous = None
    try:
        os.replace(staging / _FINAL, staging / MANIFEST)
        _fsync_dir(staging)
        placed = False
        if not target.exists():
            try:
                os.rename(staging, target)
                placed = True
            except OSError as e:  # another writer's directory landed first: exchanged with it
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        if not placed:
            with contextlib.suppress(OSError):
                os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
            if _exchange(staging, target):
                previous = staging
            else:  # rename aside, then into place: an instant without `target`, nothing lost
                previous = target.parent / f".{_stem(target)}.{_PREVIOUS}{secrets.token_hex(8)}"
                os.rename(target, previous)
                try:
                    os.rename(staging, target)
                except BaseException as e:
                    try:
                        os.rename(previous, target)
                    except OSError:
                        _remove(staging)
                        _raise_write_error(e, target, f"the previous contents are in {previous}")
                    previous = None
                    raise
    except BaseException as e:
        _remove(staging)
        _raise_write_error(e, target, f"{target} keeps its previous contents")
    _durable(target.parent, target)
    if previous is not None:
        _remove(previous)


def _commit_file_by_file(target: Path, staging: Path, files: Iterable[str], ours: set[str], kind: str) -> None:
    """Set the previous version aside (hard links), mark `target` incomplete with a pointer to it,
    rename each staged file in, then the manifest last; the previous version is then removed.
    Writers of one directory take turns: each holds an exclusive `flock` on it while it commits."""
    lock = _lock_directory(target)
    try:
        try:
            previous = _set_aside(target, ours)
            _write(staging / MANIFEST, _manifest_bytes(kind, None, previous and previous.name))
            os.replace(staging / MANIFEST, target / MANIFEST)  # incomplete, naming the previous version
            _fsync_dir(target)
        except BaseException as e:
            _remove(staging)
            _raise_write_error(e, target, f"{target} keeps its previous contents")
        kept = f"; the previous {kind} is whole in {previous}" if previous is not None else ""
        try:
            for name in files:
                os.replace(staging / name, target / name)
            for name in sorted(ours - set(files) - {MANIFEST}):
                if (target / name).is_file() or (target / name).is_symlink():
                    os.unlink(target / name)
            _fsync_dir(target)
            os.replace(staging / _FINAL, target / MANIFEST)
        except BaseException as e:
            _raise_write_error(e, target, f"{target} is left incomplete (its {MANIFEST} says so){kept}: "
                               "write it again")
        finally:
            _remove(staging)
        _durable(target, target)
        if previous is not None:
            _remove(previous)
    finally:
        _unlock(lock)


def _lock_directory(directory: Path) -> int | None:
    """An exclusive `flock` on `directory` itself, waited for (None where there are no locks)."""
    if fcntl is None:
        return None
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
            os.close(fd)
            raise
    return fd


def _set_aside(target: Path, ours: set[str]) -> Path | None:
    """The whole version in `target` that must stay loadable while a new one is renamed in: its
    files hard-linked (copied where links are refused) into `.jaxport-previous-XXXX` inside it.
    Where a killed writer left `target` incomplete, the version it had set aside is that one.
    None where `target` holds no whole version. Other set-aside directories are removed."""
    state, pointer = _current_state(target)
    asides = [target / n for n in os.listdir(target) if _PREVIOUS_NAME.fullmatch(n)]
    keep = next((a for a in asides if a.name == pointer), None) if state == "incomplete" else None
    for aside in asides:
        if aside != keep:
            _remove(aside)
    if state in ("incomplete", "unreadable") or (state == "absent" and not any(
            (target / n).is_file() for n in ours)):
        return keep
    aside = target / f".{_PREVIOUS}{secrets.token_hex(8)}"
    os.mkdir(aside, 0o777)
    for name in sorted(ours):
        if (target / name).is_file() and not (target / name).is_symlink():
            try:
                os.link(target / name, aside / name)
            except OSError:  # a filesystem without hard links: a copy, fsynced
                shutil.copyfile(target / name, aside / name)
                _digest(aside / name, sync=True)
    _fsync_dir(aside)
    _fsync_dir(target)
    return aside


def _current_state(target: Path) -> tuple[str, str | None]:
    """Whether `target`'s manifest is "complete", "incomplete", "absent" or "unreadable", and the
    set-aside directory an incomplete one names."""
    if not (target / MANIFEST).exists():
        return "absent", None
    try:
        manifest = _read_manifest(target / MANIFEST, "the directory", SerializationError)
    except SerializationError:
        return "unreadable", None
    return ("complete", None) if manifest["complete"] else ("incomplete", manifest.get("previous"))


def _durable(directory: Path, written: Path) -> None:
    """fsync `directory` after a rename into it; a failure says the new contents may not last."""
    try:
        _fsync_dir(directory)
    except OSError as e:
        _raise_write_error(e, written, f"{written} is in place but may not survive a power loss")


def _can_swap(target: Path, ours: set[str]) -> bool:
    """Whether replacing the whole directory moves nothing but this output's own files."""
    if not target.exists():
        return True
    if os.path.ismount(target):
        return False
    with contextlib.suppress(OSError):
        cwd = os.path.realpath(os.getcwd())
        if cwd == str(target) or cwd.startswith(str(target) + os.sep):
            return False
    with os.scandir(target) as entries:
        return all(e.name in ours and e.is_file(follow_symlinks=False) for e in entries)


def _write(path: Path, content: Content) -> tuple[int, str]:
    """Write `content` at `path` (new, or a locked empty placeholder) and fsync it; (size, sha256)."""
    if callable(content):
        content(str(path))
        return _digest(path, sync=True)
    data = memoryview(content).cast("B")
    # Never through a link: a staging name another user planted as a symbolic link is refused.
    flags = (os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(path, flags, 0o666)
    try:
        os.ftruncate(fd, 0)
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:written + _CHUNK])
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(data), hashlib.sha256(data).hexdigest()


def _digest(path: Path, *, sync: bool = False) -> tuple[int, str]:
    """(size, sha256) of the file at `path`, read in chunks; fsynced first if `sync`."""
    mode = os.O_RDWR if sync and os.name == "nt" else os.O_RDONLY
    fd = os.open(path, mode | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if sync:
            os.fsync(fd)
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
            size += len(chunk)
        return size, h.hexdigest()
    finally:
        os.close(fd)


def _locked_new(parent: Path, prefix: str, *, file: bool = False) -> tuple[Path, int | None]:
    """A new staging directory (or empty file) `PREFIX jaxport-partial-XXXX` in `parent`, with an
    flock held on it: made under another name and renamed once locked, so no one removes it as a
    killed writer's in between."""
    token = secrets.token_hex(8)
    fresh, staged = parent / f"{prefix}{_NEW}{token}", parent / f"{prefix}{_PARTIAL}{token}"
    if file:
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))
    else:
        os.mkdir(fresh, 0o777)
    lock = None
    try:
        if fcntl is not None:
            lock = os.open(fresh, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a filesystem without locks: no one can tell it is live, or dead
                pass
        os.rename(fresh, staged)
    except BaseException:
        _unlock(lock)
        _remove(fresh)
        raise
    return staged, lock


def _unlock(lock: int | None) -> None:
    if lock is not None:
        os.close(lock)


def _remove_dead(parent: Path, prefix: str) -> None:
    """Remove the staging files and directories named `prefix...` in `parent` that no writer
    holds locked: those of killed writers."""
    if fcntl is None:
        return
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(parent / name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live writer's
            continue
        try:
            _remove(parent / name)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _stem(path: Path) -> str:
    """The target's name as it starts its staging names (short enough for NAME_MAX with the rest)."""
    return path.name[:100]


def _fsync_dir(path: Path) -> None:
    """fsync a directory, so the renames into it last; a failure is an `OSError` (on Windows,
    which opens no directories, its renames are durable on their own)."""
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_directories(directory: Path) -> None:
    """`directory` and its missing ancestors, each made one is fsynced into its parent, so a new
    tree lasts as the files written into it do."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
            os.mkdir(path, 0o777)
        _fsync_dir(path.parent)


def _settle_previous(target: Path) -> None:
    """What a writer killed in the rename fallback of `_commit_swap` left: the previous contents
    renamed aside (`.NAME.jaxport-previous-XXXX`). Where `target` is missing they are put back;
    where `target` is in place (the new contents landed) they are removed."""
    prefix = f".{_stem(target)}.{_PREVIOUS}"
    try:
        names = sorted(n for n in os.listdir(target.parent) if n.startswith(prefix))
    except OSError:
        return
    for name in names:
        aside = target.parent / name
        if target.exists() or target.is_symlink():
            _remove(aside)
        else:
            os.rename(aside, target)
            _fsync_dir(target.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directory entries `a` and `b` atomically; False where the system cannot."""
    if sys.platform.startswith("linux"):
        name, flags = "renameat2", 2  # RENAME_EXCHANGE
    elif sys.platform == "darwin":
        name, flags = "renamex_np", 2  # RENAME_SWAP
    else:
        return False
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return False
    if name == "renameat2":
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        result = function(-100, os.fsencode(a), -100, os.fsencode(b), flags)  # AT_FDCWD
    else:
        function.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        result = function(os.fsencode(a), os.fsencode(b), flags)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _raise_write_error(e: BaseException, shown: Path, consequence: str):
    """Re-raise `e`: an I/O failure as one `WriteError` line naming the file and what was kept."""
    if isinstance(e, WriteError) or not isinstance(e, Exception):
        raise e
    code = e.errno if isinstance(e, OSError) else None
    if code is None:  # safetensors' writer reports the OS error in its message
        found = re.search(r"os error (\d+)", str(e))
        if found is None:
            raise e
        code = int(found.group(1))
    reason = (e.strerror if isinstance(e, OSError) and e.strerror else None) or os.strerror(code)
    message = f"could not write {shown}: {one_line(reason, 200)}" + (f"; {consequence}" if consequence else "")
    raise WriteError(message, code, str(shown)) from None
