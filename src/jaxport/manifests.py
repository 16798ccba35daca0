"""The manifest of a directory jaxport writes, and the directory's files read checked against it.

`jaxport.files.write_directory` writes every file of a directory first, the manifest last:

    manifest.json   {"format": 1, "kind": "checkpoint", "complete": true,
                     "files": {name: {"size": bytes, "sha256": hex digest}, ...}}

While a write is under way the manifest says `"complete": false`; while a write beside other
programs' files commits, it also names the previous version kept whole inside the directory
(`"previous"`).

`check_directory` and `open_directory` read a directory so written, each file checked against the
manifest (the module docstring of `jaxport.files` says how); `jaxport.files` re-exports them, with
the manifest's name and the readers' warnings: import them from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import SerializationError, one_line

#: The name of the manifest in every directory `write_directory` writes.
MANIFEST = "manifest.json"
_FORMAT = 1
_MANIFEST_LIMIT = 1 << 20
_CHUNK = 1 << 20
#: The only name a manifest's "previous" may give: a set-aside directory inside the one read.
_PREVIOUS_NAME = re.compile(r"\.jaxport-previous-[0-9a-f]{16}")


class UnverifiedFilesWarning(UserWarning):
    """A directory without a manifest (written by an older jaxport) was read unchecked."""


def _manifest_bytes(kind: str, entries: Mapping[str, tuple[int, str]] | None, previous: str | None = None) -> bytes:
    manifest: dict = {"format": _FORMAT, "kind": kind, "complete": entries is not None}
    if previous is not None:
        manifest["previous"] = previous
    if entries is not None:
        manifest["files"] = {name: {"size": size, "sha256": digest} for name, (size, digest) in entries.items()}
    return (json.dumps(manifest, indent=1) + "\n").encode()


def check_directory(directory: str | os.PathLike, names: Iterable[str] | None = None, *,
                    kind: str | None = None, error: type[Exception] = SerializationError) -> dict | None:
    """Check `names` (default: every file the manifest lists) in `directory` against its manifest.

    Returns the manifest, or None for a directory without one (written by jaxport 0.2.0 or
    earlier; an `UnverifiedFilesWarning` says so when any of `names` is there). A manifest marked
    incomplete (an interrupted write), of another `kind`, or unreadable, and a file that is
    missing, truncated, longer than written or of another sha256, is one `error` naming the
    directory or the file. (`open_directory` reads the files, and reads the previous version
    where a write was interrupted.)"""
    d = Path(directory)
    names = None if names is None else list(names)
    manifest = _manifest(d, names, kind, error)
    if manifest is None:
        return None
    if not manifest["complete"]:
        raise error(_incomplete(d, manifest))
    for name in manifest["files"] if names is None else names:
        _checked(d / name, _entry(d, manifest, name, kind, error), _what(kind), error, keep=False)
    return manifest


class CheckedDirectory:
    """The files of a directory jaxport wrote, each read whole in one read and checked against its
    manifest as it is read: the bytes `read` returns are the bytes whose size and sha256 were
    compared. `directory` is where they are read from: the directory named, or the previous
    version kept whole inside it while a write into it was interrupted."""

    def __init__(self, directory: Path, manifest: dict | None, kind: str | None, error: type[Exception]):
        self.directory, self.manifest, self.kind, self.error = directory, manifest, kind, error

    def read(self, name: str) -> bytes:
        """`name`'s bytes; missing, truncated, longer than written or of another sha256 is one
        error naming the file (a directory without a manifest is read unchecked)."""
        path = self.directory / name
        if self.manifest is None:
            if not path.is_file():
                raise self.error(f"{path} is missing")
            return _checked(path, None, _what(self.kind), self.error, keep=True)
        entry = _entry(self.directory, self.manifest, name, self.kind, self.error)
        return _checked(path, entry, _what(self.kind), self.error, keep=True)


class InterruptedWriteWarning(UserWarning):
    """The last write into a directory was interrupted; the previous version, kept whole, was read."""


def open_directory(directory: str | os.PathLike, names: Iterable[str], *, kind: str,
                   error: type[Exception] = SerializationError) -> CheckedDirectory:
    """The files `names` of `directory` as `kind` wrote them, to be read and checked one by one
    (`CheckedDirectory.read`). Where a write into `directory` beside other programs' files was
    interrupted, the previous version it kept whole is read instead, with an
    `InterruptedWriteWarning`; other errors are `check_directory`'s."""
    d = Path(directory)
    names = list(names)
    manifest = _manifest(d, names, kind, error)
    if manifest is None or manifest["complete"]:
        return CheckedDirectory(d, manifest, kind, error)
    previous = manifest.get("previous")
    if previous is not None and (d / previous).is_dir() and not (d / previous).is_symlink():
        kept = _read_manifest(d / previous / MANIFEST, _what(kind), error)
        if kept["complete"] and kept["kind"] == kind:
            warnings.warn(f"{d}: the last write into it was interrupted; its previous {kind}, kept whole in "
                          f"{d / previous}, is read instead (the next write removes it)",
                          InterruptedWriteWarning, stacklevel=2)
            return CheckedDirectory(d / previous, kept, kind, error)
    raise error(_incomplete(d, manifest))


def _what(kind: str | None) -> str:
    return f"the {kind}" if kind else "the directory"


def _manifest(d: Path, names: list[str] | None, kind: str | None, error: type[Exception]) -> dict | None:
    """`d`'s manifest, of `kind`; None (with the warning) for a directory from before manifests."""
    path = d / MANIFEST
    if not path.is_file() and not path.is_symlink():
        if d.is_dir() and (names is None or any((d / n).exists() for n in names)):
            warnings.warn(f"{d} has no {MANIFEST} (written by jaxport 0.2.0 or earlier): its files are "
                          "read unchecked for truncation or corruption; write it again to add one",
                          UnverifiedFilesWarning, stacklevel=3)
        return None
    manifest = _read_manifest(path, _what(kind), error)
    if kind is not None and manifest["kind"] != kind:
        raise error(f"{d} holds a jaxport {manifest['kind']}, not a {kind} ({path})")
    return manifest


def _incomplete(d: Path, manifest: dict) -> str:
    previous = manifest.get("previous")
    kept = f" (its previous version is in {d / previous})" if previous and (d / previous).is_dir() else ""
    return f"{d} is incomplete: writing it was interrupted ({MANIFEST} marks it unfinished); write it again{kept}"


def _entry(d: Path, manifest: dict, name: str, kind: str | None, error: type[Exception]) -> Mapping:
    if name not in manifest["files"]:
        raise error(f"{d / name} is not listed in {d / MANIFEST}: {_what(kind)} is corrupt")
    return manifest["files"][name]


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
    previous = manifest.get("previous")
    if previous is not None and not (isinstance(previous, str) and _PREVIOUS_NAME.fullmatch(previous)):
        raise error(f"{path} has an invalid 'previous' (the name of a set-aside directory inside it): "
                    f"{what} is corrupt")
    if not valid or (manifest["complete"] and "files" not in manifest):
        raise error(f"{path} has no valid 'files' (each a name with its size and sha256): {what} is corrupt")
    manifest["files"] = files
    return manifest


def _checked(path: Path, entry: Mapping | None, what: str, error: type[Exception], *, keep: bool) -> bytes:
    """Read `path` once, checking its size and sha256 against `entry` as it is read; its bytes
    if `keep` (b"" otherwise). `entry` None: read unchecked."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path} is missing ({MANIFEST} lists it): {what} is incomplete") from None
    except OSError as e:
        raise error(f"{path} cannot be read: {one_line(e.strerror or e, 200)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path} is not a regular file: {what} is corrupt")
        expected = info.st_size if entry is None else entry["size"]
        if info.st_size < expected:
            raise error(f"{path} is truncated: {info.st_size:,} of its {expected:,} bytes are there")
        if info.st_size > expected:
            raise error(f"{path} has {info.st_size:,} bytes, but {expected:,} were written: it was changed since")
        h, chunks, size = hashlib.sha256(), [], 0
        while True:  # to the end, so a file that grew since fstat is seen
            chunk = os.read(fd, max(_CHUNK, expected - size + 1) if keep else _CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
            if keep:
                chunks.append(chunk)
    except OSError as e:
        raise error(f"{path} cannot be read: {one_line(e.strerror or e, 200)}") from None
    finally:
        os.close(fd)
    if entry is not None and (size != entry["size"] or h.hexdigest() != entry["sha256"]):
        raise error(f"{path} is corrupt: its content is not what was written (its sha256 differs from "
                    f"the one in {MANIFEST})")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
