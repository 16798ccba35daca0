"""`jaxport.files`: directories and files written whole or not at all, and checked when read back.

The kill tests (a writer SIGKILLed part way) and each output's own tests (checkpoints, exports,
emit, `jaxport convert`) are in test_atomic_writes.py; these test the helper itself.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import warnings
from pathlib import Path

import pytest

from jaxport import files
from jaxport.errors import InputError, SerializationError
from jaxport.files import (
    MANIFEST,
    UnverifiedFilesWarning,
    WriteError,
    check_directory,
    write_directory,
    write_file,
)


@contextlib.contextmanager
def small_disk(path, size: str = "1m"):
    """A tmpfs of `size` mounted at `path` (root only: the test is skipped where mounting fails)."""
    path.mkdir()
    mount = shutil.which("mount")
    done = subprocess.run([mount or "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True) if mount else None
    if done is None or done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() if done else 'no mount'}); "
                    "the tests with a patched ENOSPC cover the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def leftovers(*directories) -> list[str]:
    """Staging and set-aside names jaxport left in `directories`."""
    return sorted(n for d in directories if d.is_dir() for n in os.listdir(d) if "jaxport-" in n)


def one_line(error) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def test_a_directory_is_written_with_its_manifest_and_replaced_whole(tmp_path):
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"first", "b.bin": lambda p: open(p, "wb").write(b"x" * 3000)}, kind="test")
    manifest = json.loads((d / MANIFEST).read_text())
    assert manifest == {"format": 1, "kind": "test", "complete": True, "files": {
        "a.bin": {"size": 5, "sha256": hashlib.sha256(b"first").hexdigest()},
        "b.bin": {"size": 3000, "sha256": hashlib.sha256(b"x" * 3000).hexdigest()}}}
    assert check_directory(d, kind="test") == manifest
    first = os.stat(d).st_ino
    os.chmod(d, 0o750)
    write_directory(d, {"a.bin": b"second", "b.bin": b"y"}, kind="test")
    assert (d / "a.bin").read_bytes() == b"second" and (d / "b.bin").read_bytes() == b"y"
    assert os.stat(d).st_ino != first, "the directory is replaced as a whole (swapped)"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o750, "the replaced directory's mode is kept"
    assert sorted(os.listdir(tmp_path)) == ["out"] and leftovers(d) == []
    check_directory(d, ["a.bin", "b.bin"], kind="test")


def test_files_get_the_modes_a_plain_open_gives(tmp_path):
    write_directory(tmp_path / "out", {"a.bin": b"1"}, kind="test")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "out" / "a.bin").st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o777 & ~umask


@pytest.mark.skipif(not os.uname().sysname == "Linux", reason="renameat2(RENAME_EXCHANGE) is Linux's")
def test_the_swap_is_one_exchange_on_linux(tmp_path, monkeypatch):
    calls = []
    exchange = files._exchange
    monkeypatch.setattr(files, "_exchange", lambda a, b: calls.append(exchange(a, b)) or calls[-1])
    write_directory(tmp_path / "out", {"a.bin": b"1"}, kind="test")
    write_directory(tmp_path / "out", {"a.bin": b"2"}, kind="test")
    assert calls == [True] and (tmp_path / "out" / "a.bin").read_bytes() == b"2"


def test_without_an_exchange_the_previous_directory_is_set_aside_then_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    write_directory(tmp_path / "out", {"a.bin": b"1", "b.bin": b"1"}, kind="test", owned=["c.bin"])
    write_directory(tmp_path / "out", {"a.bin": b"2"}, kind="test", owned=["b.bin"])
    assert sorted(os.listdir(tmp_path / "out")) == ["a.bin", MANIFEST]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_files_of_other_programs_stay_and_the_write_goes_file_by_file(tmp_path):
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"1", "opt.bin": b"1"}, kind="test")
    (d / "notes.txt").write_text("mine")
    (d / "logs").mkdir()
    (d / "logs" / "run.txt").write_text("log")
    inode = os.stat(d).st_ino
    write_directory(d, {"a.bin": b"2"}, kind="test", owned=["opt.bin"])
    assert os.stat(d).st_ino == inode, "a directory holding others' files is not swapped"
    assert sorted(os.listdir(d)) == ["a.bin", "logs", MANIFEST, "notes.txt"]
    assert (d / "notes.txt").read_text() == "mine" and (d / "logs" / "run.txt").read_text() == "log"
    check_directory(d, ["a.bin"], kind="test")


def test_the_working_directory_and_an_unwritable_parent_go_file_by_file(tmp_path, monkeypatch):
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"1"}, kind="test")
    monkeypatch.chdir(d)
    inode = os.stat(d).st_ino
    write_directory(".", {"a.bin": b"2"}, kind="test")
    assert os.stat(d).st_ino == inode and (d / "a.bin").read_bytes() == b"2"
    monkeypatch.chdir(tmp_path)

    made = files._locked_new

    def no_siblings(parent, prefix, **kwargs):
        if parent == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(parent))
        return made(parent, prefix, **kwargs)

    monkeypatch.setattr(files, "_locked_new", no_siblings)
    write_directory(d, {"a.bin": b"3"}, kind="test")
    assert os.stat(d).st_ino == inode and (d / "a.bin").read_bytes() == b"3"
    assert leftovers(tmp_path, d) == []
    with pytest.raises(WriteError, match=r"could not write .*new: Permission denied; the test was not written"):
        write_directory(tmp_path / "new", {"a.bin": b"1"}, kind="test")


def test_a_symbolic_link_stays_and_its_directory_is_written(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write_directory(tmp_path / "link", {"a.bin": b"1"}, kind="test")
    write_directory(tmp_path / "link", {"a.bin": b"2"}, kind="test")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "a.bin").read_bytes() == b"2"


def test_what_is_not_a_directory_is_refused_and_kept(tmp_path):
    (tmp_path / "file").write_bytes(b"data")
    for target in (tmp_path / "file", "/dev/full"):
        with pytest.raises(WriteError, match="exists and is not a directory; the test was not written") as caught:
            write_directory(target, {"a.bin": b"1"}, kind="test")
        assert caught.value.errno == errno.ENOTDIR and str(target) in one_line(caught.value)
    assert (tmp_path / "file").read_bytes() == b"data" and stat.S_ISCHR(os.stat("/dev/full").st_mode)
    with pytest.raises(ValueError, match="plain file names"):
        write_directory(tmp_path / "d", {"../escape": b"1"}, kind="test")


def test_write_file_replaces_one_file_and_refuses_a_device(tmp_path):
    path = tmp_path / "results.json"
    write_file(path, b"old")
    write_file(path, lambda p: open(p, "wb").write(b"new"))
    assert path.read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["results.json"]
    os.chmod(path, 0o600)
    (tmp_path / "link.json").symlink_to(path)
    write_file(tmp_path / "link.json", b"newer")
    assert (tmp_path / "link.json").is_symlink() and path.read_bytes() == b"newer"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, "the replaced file's mode is kept"
    with pytest.raises(WriteError, match="/dev/full exists and is not a regular file; it was not replaced"):
        write_file("/dev/full", b"x")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def _failing(exception):
    def write(path):
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise exception
    return write


@pytest.mark.parametrize("failure", ["oserror", "safetensors"])
def test_a_failed_write_is_one_line_and_keeps_the_previous_contents(tmp_path, failure):
    """Without a small filesystem: the write raises ENOSPC as the OS (or safetensors' writer) does."""
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"old", "b.bin": b"old"}, kind="test")
    exception = (OSError(errno.ENOSPC, "No space left on device") if failure == "oserror" else
                 Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    with pytest.raises(WriteError) as caught:
        write_directory(d, {"a.bin": b"new", "b.bin": _failing(exception)}, kind="test")
    assert one_line(caught.value) == (f"could not write {d / 'b.bin'}: No space left on device; "
                                      f"{d} keeps its previous contents")
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert (d / "a.bin").read_bytes() == b"old" and check_directory(d, kind="test")
    assert leftovers(tmp_path, d) == []


def test_other_failures_pass_through_and_leave_nothing(tmp_path):
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"old"}, kind="test")
    for exception in (ValueError("not contiguous"), KeyboardInterrupt()):
        with pytest.raises(type(exception)):
            write_directory(d, {"a.bin": _failing(exception)}, kind="test")
        assert (d / "a.bin").read_bytes() == b"old" and leftovers(tmp_path, d) == []


def test_a_full_disk_is_one_line_and_keeps_the_previous_contents(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        free = os.statvfs(disk).f_bavail
        d = disk / "out"
        write_directory(d, {"a.bin": b"old" * 1000, "b.bin": b"old"}, kind="test")
        with pytest.raises(WriteError) as caught:
            write_directory(d, {"a.bin": b"new", "b.bin": os.urandom(2 << 20)}, kind="test")
        assert one_line(caught.value) == (f"could not write {d / 'b.bin'}: No space left on device; "
                                          f"{d} keeps its previous contents")
        assert caught.value.errno == errno.ENOSPC
        assert (d / "a.bin").read_bytes() == b"old" * 1000 and check_directory(d, kind="test")
        assert leftovers(disk, d) == []
        path = disk / "single.bin"
        write_file(path, b"old")
        with pytest.raises(WriteError, match=f"could not write {path}: No space left on device; {path} keeps"):
            write_file(path, os.urandom(2 << 20))
        assert path.read_bytes() == b"old" and sorted(os.listdir(disk)) == ["out", "single.bin"]
        os.unlink(path)
        shutil.rmtree(d)
        assert os.statvfs(disk).f_bavail == free, "every staged block was given back"


def test_killed_writers_staging_is_removed_and_a_live_ones_kept(tmp_path):
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"1"}, kind="test")
    dead = tmp_path / f".out.{files._PARTIAL}dead"
    dead.mkdir()
    (dead / "a.bin").write_bytes(b"half")
    live, lock = files._locked_new(tmp_path, ".out.")
    try:
        write_directory(d, {"a.bin": b"2"}, kind="test")
        assert not dead.exists() and live.is_dir()
    finally:
        files._unlock(lock)
    write_directory(d, {"a.bin": b"3"}, kind="test")
    assert sorted(os.listdir(tmp_path)) == ["out"]


def _edit(name, how):
    def edit(d):
        path = d / name
        if how == "remove":
            path.unlink()
        elif how == "truncate":
            path.write_bytes(path.read_bytes()[:-1])
        elif how == "append":
            path.write_bytes(path.read_bytes() + b"\0")
        elif how == "flip":
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x10
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(how)
    return edit


def _manifest(**changes):
    def edit(d):
        manifest = json.loads((d / MANIFEST).read_text())
        manifest.update(changes)
        (d / MANIFEST).write_text(json.dumps(manifest))
    return edit


BROKEN = {
    "missing": (_edit("b.bin", "remove"), r"b.bin is missing \(manifest.json lists it\): the test is incomplete"),
    "truncated": (_edit("b.bin", "truncate"), r"b.bin is truncated: 2,999 of its 3,000 bytes are there"),
    "appended": (_edit("b.bin", "append"), r"b.bin has 3,001 bytes, but 3,000 were written: it was changed"),
    "bit-flipped": (_edit("b.bin", "flip"), r"b.bin is corrupt: its content is not what was written"),
    "incomplete": (_manifest(complete=False), r"out is incomplete: writing it was interrupted"),
    "another-kind": (_manifest(kind="checkpoint"), r"out holds a jaxport checkpoint, not a test"),
    "newer": (_manifest(format=2), r"manifest.json has format 2, from a newer jaxport"),
    "no-format": (_manifest(format="1"), r"manifest.json has no valid 'format'"),
    "escaping-name": (_manifest(files={"../b.bin": {"size": 1, "sha256": "0" * 64}}), "no valid 'files'"),
    "bad-size": (_manifest(files={"b.bin": {"size": -1, "sha256": "0" * 64}}), "no valid 'files'"),
    "unlisted": (_manifest(files={"a.bin": {"size": 1, "sha256": hashlib.sha256(b"a").hexdigest()}}),
                 r"b.bin is not listed in .*manifest.json: the test is corrupt"),
    "garbage": (_edit(MANIFEST, b"\xff{"), r"manifest.json is not valid JSON"),
    "a-list": (_edit(MANIFEST, b"[]"), r"manifest.json holds a list, not a manifest"),
    "huge": (_edit(MANIFEST, b" " * (files._MANIFEST_LIMIT + 1)), r"more than a manifest can be"),
    "a-directory": (lambda d: (_edit("b.bin", "remove")(d), (d / "b.bin").mkdir()), "b.bin is not a regular file"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_directory_is_refused_by_name(tmp_path, case):
    edit, message = BROKEN[case]
    d = tmp_path / "out"
    write_directory(d, {"a.bin": b"a", "b.bin": os.urandom(3000)}, kind="test")
    edit(d)
    with pytest.raises(InputError, match=message) as caught:
        check_directory(d, ["a.bin", "b.bin"], kind="test", error=InputError)
    assert str(d) in one_line(caught.value)


def test_without_a_manifest_files_are_read_unchecked_with_a_warning(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    (d / "a.bin").write_bytes(b"1")
    with pytest.warns(UnverifiedFilesWarning, match=r"old has no manifest.json .*read unchecked"):
        assert check_directory(d, ["a.bin"]) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_directory(tmp_path / "nothing", ["a.bin"]) is None
        assert check_directory(d, ["b.bin"]) is None  # not this kind of directory at all: the caller says so
    (d / MANIFEST).write_text(json.dumps({"format": 1, "kind": "test", "complete": False}))
    with pytest.raises(SerializationError, match="old is incomplete: writing it was interrupted"):
        check_directory(d)


# -- durability and what killed writers leave ------------------------------------------------------


def test_a_directory_fsync_that_fails_is_an_error(tmp_path, monkeypatch):
    """Any failure, EINVAL too (a filesystem that cannot sync a directory cannot promise the
    renames into it last either)."""
    fsync = os.fsync

    def failing(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(files.os, "fsync", failing)
    with pytest.raises(WriteError):
        write_directory(tmp_path / "out", {"a.bin": b"1"}, kind="test")
    with pytest.raises(WriteError):
        write_file(tmp_path / "one.bin", b"1")


def test_new_parent_directories_are_fsynced_into_theirs(tmp_path, monkeypatch):
    synced = []
    fsync_dir = files._fsync_dir
    monkeypatch.setattr(files, "_fsync_dir", lambda path: (synced.append(Path(path)), fsync_dir(path))[1])
    write_directory(tmp_path / "a" / "b" / "out", {"a.bin": b"1"}, kind="test")
    assert {tmp_path, tmp_path / "a", tmp_path / "a" / "b"} <= set(synced)


def test_previous_contents_left_aside_by_a_killed_writer_are_restored_or_removed(tmp_path, monkeypatch):
    """The rename fallback's instant without the directory: killed there, the previous contents
    sit under `.NAME.jaxport-previous-XXXX`; the next write puts them back before it starts (so a
    write that then fails keeps them), or removes them where the new contents are in place."""
    write_directory(tmp_path / "out", {"a.bin": b"1"}, kind="test")
    os.rename(tmp_path / "out", tmp_path / ".out.jaxport-previous-0123456789abcdef")
    def failing(path, content):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "_write", failing)
    with pytest.raises(WriteError):
        write_directory(tmp_path / "out", {"a.bin": b"2"}, kind="test")
    monkeypatch.undo()
    assert (tmp_path / "out" / "a.bin").read_bytes() == b"1" and sorted(os.listdir(tmp_path)) == ["out"]
    check_directory(tmp_path / "out", ["a.bin"], kind="test")
    shutil.copytree(tmp_path / "out", tmp_path / ".out.jaxport-previous-fedcba9876543210")
    write_directory(tmp_path / "out", {"a.bin": b"3"}, kind="test")
    assert (tmp_path / "out" / "a.bin").read_bytes() == b"3" and sorted(os.listdir(tmp_path)) == ["out"]


def test_staged_files_are_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.symlink(victim, tmp_path / "staged")
    with pytest.raises(OSError):
        files._write(tmp_path / "staged", b"planted")
    assert victim.read_bytes() == b"keep"


def _version(value: int) -> dict[str, bytes]:
    return {"a.bin": bytes([value]) * 200_000, "b.bin": bytes([value]) * 3}


@pytest.mark.parametrize("beside", [None, "notes.txt"], ids=["swapped", "file-by-file"])
def test_two_writers_at_once_leave_one_whole_version(tmp_path, beside):
    """Writers of one directory at once, swapping it whole or (beside another program's file)
    file by file: whichever lands last is there whole, never a mix of two."""
    import threading

    d = tmp_path / "out"
    write_directory(d, _version(0), kind="test")
    if beside:
        (d / beside).write_text("mine")
    errors = []

    def writer(first: int) -> None:
        try:
            for value in range(first, first + 20, 4):
                write_directory(d, _version(value), kind="test")
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(first,)) for first in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    check_directory(d, kind="test")
    value = (d / "b.bin").read_bytes()[0]
    assert {name: (d / name).read_bytes() for name in ("a.bin", "b.bin")} == _version(value)
    assert leftovers(tmp_path, d) == [] and (not beside or (d / beside).read_text() == "mine")


def test_a_reader_parses_the_bytes_it_checked_in_one_read(tmp_path, monkeypatch):
    """Each file is opened once: the bytes checked against the manifest are the bytes returned."""
    write_directory(tmp_path / "out", _version(7), kind="test")
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *args, **kwargs: (opened.append(os.path.basename(path)),
                                                                    real_open(path, *args, **kwargs))[1])
    found = files.open_directory(tmp_path / "out", ["a.bin", "b.bin"], kind="test")
    assert found.read("a.bin") == _version(7)["a.bin"] and found.read("b.bin") == b"\x07" * 3
    assert opened == ["a.bin", "b.bin"]


def test_a_previous_version_named_outside_the_directory_is_refused(tmp_path):
    d = tmp_path / "out"
    write_directory(d, _version(1), kind="test")
    manifest = json.loads((d / MANIFEST).read_text())
    for previous in ("../elsewhere", ".jaxport-previous-x", "/etc"):
        (d / MANIFEST).write_text(json.dumps({**manifest, "complete": False, "previous": previous}))
        with pytest.raises(SerializationError, match="has an invalid 'previous'"):
            files.open_directory(d, ["a.bin"], kind="test")
    (d / MANIFEST).write_text(json.dumps({**manifest, "complete": False, "previous": ".jaxport-previous-" + "0" * 16}))
    with pytest.raises(SerializationError, match="is incomplete: writing it was interrupted"):
        files.open_directory(d, ["a.bin"], kind="test")  # named, but not there
