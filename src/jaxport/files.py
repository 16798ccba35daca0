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
  `directory` (`.jaxport-partial-XXXX`); once every file is written there, `directory`'s manifest is
  replaced by one marked incomplete, each file is renamed into place and the new manifest renamed
  last. Killed in between, the directory is refused by name as incomplete, never read half old and
  half new.

Either way nothing in `directory` changes before every file is written, so a full disk (or any
failed write) is one `WriteError` naming the file, and the previous contents stay as they were
(room for the old and the new files together is needed). A writer holds an `flock` on its staging
directory; the staging directories of killed writers (no lock) are removed by the next write to
the same place.

`check_directory(directory, names, kind=...)`: reads the manifest (at most 1 MiB) and checks each
named file against it: missing, truncated, longer than written, or a different sha256 is one error
naming the file. A directory without a manifest (written by jaxport 0.2.0 or earlier) is read
unchecked, with an `UnverifiedFilesWarning`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .errors import JaxportError, SerializationError, one_line

try:
    import fcntl
except ImportError:  # Windows: no locks, so leftovers of killed writers stay
    fcntl = None

MANIFEST = "manifest.json"
_FINAL = ".manifest.json.final"  # the manifest in staging until it replaces the incomplete one
_FORMAT = 1
_MANIFEST_LIMIT = 1 << 20
_CHUNK = 1 << 20
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


class UnverifiedFilesWarning(UserWarning):
    """A directory without a manifest (written by an older jaxport) was read unchecked."""


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
            _commit_file_by_file(target, staging, files, ours)
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
        if not target.exists():
            os.rename(staging, target)
        else:
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


def _commit_file_by_file(target: Path, staging: Path, files: Iterable[str], ours: set[str]) -> None:
    """Mark `target` incomplete, rename each staged file into it, then the manifest last."""
    try:
        os.replace(staging / MANIFEST, target / MANIFEST)  # the incomplete manifest
        _fsync_dir(target)
    except BaseException as e:
        _remove(staging)
        _raise_write_error(e, target, f"{target} keeps its previous contents")
    try:
        for name in files:
            os.replace(staging / name, target / name)
        for name in sorted(ours - set(files) - {MANIFEST}):
            if (target / name).is_file() or (target / name).is_symlink():
                os.unlink(target / name)
        _fsync_dir(target)
        os.replace(staging / _FINAL, target / MANIFEST)
    except BaseException as e:
        _raise_write_error(e, target, f"{target} is left incomplete (its {MANIFEST} says so): write it again")
    finally:
        _remove(staging)
    _durable(target, target)


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


def _manifest_bytes(kind: str, entries: Mapping[str, tuple[int, str]] | None) -> bytes:
    manifest: dict = {"format": _FORMAT, "kind": kind, "complete": entries is not None}
    if entries is not None:
        manifest["files"] = {name: {"size": size, "sha256": digest} for name, (size, digest) in entries.items()}
    return (json.dumps(manifest, indent=1) + "\n").encode()


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


def _digest(path: Path, *, sync: bool = False, limit: int | None = None) -> tuple[int, str]:
    """(size, sha256) of the file at `path`, read in chunks (at most `limit` bytes); fsynced if `sync`."""
    mode = os.O_RDWR if sync and os.name == "nt" else os.O_RDONLY
    fd = os.open(path, mode | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if sync:
            os.fsync(fd)
        h, size = hashlib.sha256(), 0
        while limit is None or size < limit:
            chunk = os.read(fd, _CHUNK if limit is None else min(_CHUNK, limit - size))
            if not chunk:
                break
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


# --- reading ---------------------------------------------------------------------------------


def check_directory(directory: str | os.PathLike, names: Iterable[str] | None = None, *,
                    kind: str | None = None, error: type[Exception] = SerializationError) -> dict | None:
    """Check `names` (default: every file the manifest lists) in `directory` against its manifest.

    Returns the manifest, or None for a directory without one (written by jaxport 0.2.0 or
    earlier; an `UnverifiedFilesWarning` says so when any of `names` is there). A manifest marked
    incomplete (an interrupted write), of another `kind`, or unreadable, and a file that is
    missing, truncated, longer than written or of another sha256, is one `error` naming the
    directory or the file."""
    d = Path(directory)
    path = d / MANIFEST
    what = f"the {kind}" if kind else "the directory"
    names = None if names is None else list(names)
    if not path.is_file() and not path.is_symlink():
        if d.is_dir() and (names is None or any((d / n).exists() for n in names)):
            warnings.warn(f"{d} has no {MANIFEST} (written by jaxport 0.2.0 or earlier): its files are "
                          "read unchecked for truncation or corruption; write it again to add one",
                          UnverifiedFilesWarning, stacklevel=3)
        return None
    manifest = _read_manifest(path, what, error)
    if not manifest["complete"]:
        raise error(f"{d} is incomplete: writing it was interrupted ({MANIFEST} marks it unfinished); "
                    "write it again")
    if kind is not None and manifest["kind"] != kind:
        raise error(f"{d} holds a jaxport {manifest['kind']}, not a {kind} ({path})")
    listed = manifest["files"]
    for name in listed if names is None else names:
        if name not in listed:
            raise error(f"{d / name} is not listed in {path}: {what} is corrupt")
        _check_file(d / name, listed[name], what, error)
    return manifest


def _read_manifest(path: Path, what: str, error: type[Exception]) -> dict:
    try:
        size = path.stat().st_size
        if size > _MANIFEST_LIMIT:
            raise error(f"{path} is {size:,} bytes, more than a manifest can be: {what} is corrupt")
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise error(f"{path} cannot be read: {one_line(e.strerror or e, 200)}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise error(f"{path} is not valid JSON ({one_line(e, 200)}): {what} is corrupt") from None
    if not isinstance(manifest, dict):
        raise error(f"{path} holds a {type(manifest).__name__}, not a manifest: {what} is corrupt")
    if type(manifest.get("format")) is not int or manifest["format"] < 1:
        raise error(f"{path} has no valid 'format': {what} is corrupt")
    if manifest["format"] > _FORMAT:
        raise error(f"{path} has format {manifest['format']}, from a newer jaxport; this one reads "
                    f"format {_FORMAT}")
    if not isinstance(manifest.get("kind"), str) or not isinstance(manifest.get("complete"), bool):
        raise error(f"{path} has no valid 'kind' and 'complete': {what} is corrupt")
    files = manifest.get("files", {})
    valid = isinstance(files, dict) and all(
        isinstance(name, str) and name == os.path.basename(name) and name not in ("", ".", "..")
        and isinstance(entry, dict) and type(entry.get("size")) is int and entry["size"] >= 0
        and isinstance(entry.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        for name, entry in files.items())
    if not valid or (manifest["complete"] and "files" not in manifest):
        raise error(f"{path} has no valid 'files' (each a name with its size and sha256): {what} is corrupt")
    manifest["files"] = files
    return manifest


def _check_file(path: Path, entry: Mapping, what: str, error: type[Exception]) -> None:
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path} is not a regular file: {what} is corrupt")
        if info.st_size < entry["size"]:
            raise error(f"{path} is truncated: {info.st_size:,} of its {entry['size']:,} bytes are there")
        if info.st_size > entry["size"]:
            raise error(f"{path} has {info.st_size:,} bytes, but {entry['size']:,} were written: it was "
                        "changed since")
        size, digest = _digest(path, limit=entry["size"])
    except FileNotFoundError:
        raise error(f"{path} is missing ({MANIFEST} lists it): {what} is incomplete") from None
    except OSError as e:
        raise error(f"{path} cannot be read: {one_line(e.strerror or e, 200)}") from None
    if size != entry["size"] or digest != entry["sha256"]:
        raise error(f"{path} is corrupt: its content is not what was written (its sha256 differs from "
                    f"the one in {MANIFEST})")
