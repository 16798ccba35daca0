"""Killed writes lose nothing (issue 42, point 3): checkpoints, `jaxport.export` artifacts, `emit`'s
and `jaxport convert`'s output directories are replaced whole or not at all, and checked when read.

The kill tests run the writer in a child process (this module run as `python -m
tests.test_atomic_writes`), over a good directory of the same kind. The child pauses at a chosen
point, patched into it (half of a safetensors file written, every file staged, the swap done), says
so on its stdout, and the parent SIGKILLs it there: the kill lands at the same point every run.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_files import leftovers, one_line, small_disk

N = 3 * 2**20  # float32 values per big array: 12 MiB each, so a kill mid-file has a file to cut
ROOT = Path(__file__).resolve().parents[1]


# -- what the parent and the child write --------------------------------------------------------


def make_state(value: float):
    """A TrainState of 24 MiB (a weight and an optimizer moment), every value `value`."""
    from jaxport.train import TrainState

    return TrainState(params={"w": jnp.full(N, value, jnp.float32)}, buffers={"b": jnp.full(4, value, jnp.float32)},
                      opt_state=({"mu": jnp.full(N, value, jnp.float32)},), rng=jax.random.key(int(value)),
                      step=jnp.asarray(int(value), jnp.int32))


def make_export(value: float):
    """An ExportedModel of 12 MiB of weights computing x * w[:4] * value (the value is in the program
    too, so an artifact from one write with weights from another gives neither answer)."""
    from jaxport.backends.serialization import ExportedModel

    def run(params, x):
        return [x * params["w"][:4] * value]

    exported = jax.export.export(jax.jit(run))({"w": jax.ShapeDtypeStruct((N,), jnp.float32)},
                                               jax.ShapeDtypeStruct((2, 4), jnp.float32))
    return ExportedModel(exported, {"w": np.full(N, value, np.float32)}, input_names=["x"], input_shapes=[[2, 4]],
                         input_dtypes=["float32"], output_names=["0"])


def make_linear(value: float):
    """A converted Linear(1536, 2048) (12 MiB of weights), every weight and bias `value`."""
    import torch

    import jaxport

    module = torch.nn.Linear(1536, 2048)
    with torch.no_grad():
        module.weight.fill_(value)
        module.bias.fill_(value)
    return jaxport.from_torch(module, (torch.ones(2, 1536),))


def write(kind: str, directory, value: float) -> None:
    import jaxport

    if kind == "checkpoint":
        jaxport.train.save_checkpoint(directory, make_state(value))
    elif kind == "export":
        make_export(value).save(directory)
    else:
        jaxport.emit(make_linear(value), directory, force=True)


def _child(kind: str, directory: str, point: str, value: float, nth: int) -> None:
    """Write `kind` into `directory`, pausing at `point` for the parent's SIGKILL."""
    from jaxport import files

    def pause(*args, **kwargs):
        print("PAUSED", flush=True)
        time.sleep(600)

    if point == "mid-file":  # the nth safetensors file half written, flushed to disk
        import safetensors.numpy

        calls = []

        def half_then_pause(tensors, filename, metadata=None):
            calls.append(filename)
            data = safetensors.numpy.save(tensors, metadata)
            with open(filename, "wb") as f:
                f.write(data[: len(data) // 2] if len(calls) == nth else data)
                f.flush()
                os.fsync(f.fileno())
            if len(calls) == nth:
                pause()

        safetensors.numpy.save_file = half_then_pause
    elif point == "before-swap":  # every file and the manifest staged
        files._commit_swap = pause
    elif point == "before-commit":  # the same, file by file
        files._commit_file_by_file = pause
    elif point == "after-swap":  # the new directory in place, the previous one not yet removed
        files._durable = pause
    elif point == "set-aside":  # file by file: the previous version linked aside, nothing renamed in
        set_aside = files._set_aside

        def set_aside_then_pause(*args):
            set_aside(*args)
            pause()

        files._set_aside = set_aside_then_pause
    elif point in ("mid-commit", "before-manifest"):  # file by file: the first file renamed in, or all
        replace = os.replace
        last = "weights.safetensors" if point == "mid-commit" else files._FINAL

        def replace_then_pause(src, dst, **kwargs):
            if os.path.basename(src) == last == files._FINAL:
                pause()
            replace(src, dst, **kwargs)
            if os.path.basename(dst) == last:
                pause()

        os.replace = replace_then_pause
    write(kind, directory, value)
    print("FINISHED", flush=True)


def kill_while_writing(tmp_path, kind: str, directory, point: str, value: float, nth: int = 1) -> None:
    """Run the writer in a child process and SIGKILL it where it pauses."""
    log = tmp_path / f"child-{uuid.uuid4().hex[:8]}.log"
    with open(log, "w") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "tests.test_atomic_writes", kind, str(directory), point,
                                  str(value), str(nth)], stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 300)
        line = child.stdout.readline() if ready else ""
        if line.strip() != "PAUSED":
            child.kill()
            child.wait()
            pytest.fail(f"the writer did not pause ({line.strip()!r}): {log.read_text()[-3000:]}")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def staged(directory: Path) -> list[Path]:
    """The staging directories a killed writer left beside or inside `directory`."""
    return sorted([*directory.parent.glob(f".{directory.name}.jaxport-partial-*"),
                   *directory.glob(".jaxport-partial-*")])


# -- what was read back -------------------------------------------------------------------------


def assert_checkpoint(directory, value: float) -> None:
    import jaxport

    state = jaxport.train.load_checkpoint(directory, make_state(0))
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.full(N, value, np.float32))
    np.testing.assert_array_equal(np.asarray(state.opt_state[0]["mu"]), np.full(N, value, np.float32))
    np.testing.assert_array_equal(np.asarray(state.buffers["b"]), np.full(4, value, np.float32))
    assert int(state.step) == int(value)


def assert_export(directory, value: float) -> None:
    import jaxport

    loaded = jaxport.load_exported(directory)
    np.testing.assert_array_equal(loaded.params["w"], np.full(N, value, np.float32))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(np.asarray(loaded(x)[0]), x * value * value)


def assert_emitted(directory: Path, value: float) -> None:
    from jaxport.files import check_directory

    check_directory(directory, kind="emitted model")
    spec = importlib.util.spec_from_file_location(f"emitted_{uuid.uuid4().hex}", directory / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params = module.load_params()
    np.testing.assert_array_equal(np.asarray(params["weight"]), np.full((2048, 1536), value, np.float32))
    out = module.forward(params, jnp.ones((2, 1536), jnp.float32))
    np.testing.assert_allclose(np.asarray(out), np.full((2, 2048), 1536 * value + value, np.float32), rtol=1e-6)


ASSERT = {"checkpoint": assert_checkpoint, "export": assert_export, "emitted model": assert_emitted}


def refused_as_incomplete(kind: str, directory: Path, previous: Path | None = None) -> None:
    """Reading `directory` as `kind` is one error naming it as an interrupted write (and where its
    previous version is kept, for `check_directory`, which reads no previous version)."""
    import jaxport
    from jaxport.files import check_directory

    with pytest.raises(jaxport.JaxportError) as caught:
        if kind == "checkpoint":
            jaxport.train.load_checkpoint(directory, make_state(0))
        elif kind == "export":
            jaxport.load_exported(directory)
        else:
            check_directory(directory, kind=kind)
    assert one_line(caught.value) == (f"{directory} is incomplete: writing it was interrupted (manifest.json "
                                      "marks it unfinished); write it again"
                                      + (f" (its previous version is in {previous})" if previous else ""))


def set_aside(directory: Path) -> list[Path]:
    """The previous versions a file-by-file writer set aside inside `directory`."""
    return sorted(directory.glob(".jaxport-previous-*"))


# -- killed writers -----------------------------------------------------------------------------


@pytest.mark.parametrize("point, nth, survivor", [
    ("mid-file", 2, 1.0),      # weights staged whole, the optimizer state half written
    ("before-swap", 1, 1.0),   # every file and the manifest staged, nothing in place
    ("after-swap", 1, 2.0),    # the new checkpoint in place, the previous one not yet removed
])
def test_a_killed_checkpoint_write_leaves_one_whole_checkpoint(tmp_path, point, nth, survivor):
    d = tmp_path / "ckpt"
    write("checkpoint", d, 1.0)
    kill_while_writing(tmp_path, "checkpoint", d, point, 2.0, nth)
    assert_checkpoint(d, survivor)
    (partial,) = staged(d)
    if point == "after-swap":
        assert_checkpoint(partial, 1.0)  # the previous checkpoint, whole, about to be removed
    else:
        refused_as_incomplete("checkpoint", partial)
    write("checkpoint", d, 3.0)  # the next save removes what the killed writer left
    assert_checkpoint(d, 3.0)
    assert leftovers(tmp_path, d) == []


KILLED_FILE_BY_FILE = [  # (point, nth, the version read back: 1.0 the previous, 2.0 the new one)
    ("mid-file", 2, 1.0),         # the optimizer state half staged
    ("before-commit", 1, 1.0),    # every file staged, nothing in the directory changed
    ("set-aside", 1, 1.0),        # the previous version linked aside, its manifest still complete
    ("mid-commit", 1, 1.0),       # marked incomplete, the new weights renamed in
    ("before-manifest", 1, 1.0),  # every new file in place, not yet the manifest
    ("after-swap", 1, 2.0),       # the new manifest in place, the previous version not yet removed
]


@pytest.mark.parametrize("point, nth, survivor", KILLED_FILE_BY_FILE)
def test_a_killed_write_among_other_files_keeps_a_whole_checkpoint(tmp_path, point, nth, survivor):
    """A checkpoint directory holding someone else's file is not swapped (that would move the
    file) but written file by file, the previous version hard-linked aside first: killed at any
    point, the directory loads whole, the new version or the previous one (with a warning naming
    where it was kept); the next save removes what the killed writer left and keeps the file."""
    import jaxport
    from jaxport.files import InterruptedWriteWarning, check_directory

    d = tmp_path / "ckpt"
    write("checkpoint", d, 1.0)
    (d / "notes.txt").write_text("mine")
    kill_while_writing(tmp_path, "checkpoint", d, point, 2.0, nth)
    incomplete = json.loads((d / "manifest.json").read_text())["complete"] is False
    if incomplete:
        (previous,) = set_aside(d)
        with pytest.warns(InterruptedWriteWarning, match=f"kept whole in {previous}"):
            assert_checkpoint(d, survivor)
        with pytest.raises(jaxport.JaxportError, match=f"its previous version is in {previous}"):
            check_directory(d, kind="checkpoint")  # which reads only the directory named
    else:
        assert_checkpoint(d, survivor)
    write("checkpoint", d, 3.0)
    assert_checkpoint(d, 3.0)
    assert leftovers(tmp_path, d) == [] and (d / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", ["export", "emitted model"])
def test_a_killed_export_or_emit_among_other_files_keeps_the_previous_one(tmp_path, kind):
    """The same for an export (loaded from the version kept aside) and an emitted model (whose
    code needs no jaxport: `check_directory` names where the previous version is kept, and the
    model.py there runs with its own weights)."""
    from jaxport.files import InterruptedWriteWarning

    d = tmp_path / "out"
    write(kind, d, 1.0)
    (d / "notes.txt").write_text("mine")
    kill_while_writing(tmp_path, kind, d, "before-manifest", 2.0)
    (previous,) = set_aside(d)
    if kind == "export":
        with pytest.warns(InterruptedWriteWarning):
            assert_export(d, 1.0)
    else:
        refused_as_incomplete(kind, d, previous)
        assert_emitted(previous, 1.0)
    write(kind, d, 3.0)
    ASSERT[kind](d, 3.0)
    assert leftovers(tmp_path, d) == [] and (d / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", ["export", "emitted model"])
def test_a_killed_export_or_emit_leaves_the_previous_output(tmp_path, kind):
    d = tmp_path / "out"
    write(kind, d, 1.0)
    kill_while_writing(tmp_path, kind, d, "mid-file", 2.0)
    ASSERT[kind](d, 1.0)
    (partial,) = staged(d)
    refused_as_incomplete(kind, partial)


# -- full disks ---------------------------------------------------------------------------------


def small_state(value: float, n: int):
    from jaxport.train import TrainState

    return TrainState(params={"w": jnp.full(n, value, jnp.float32)}, buffers={}, opt_state=(),
                      rng=jax.random.key(0), step=jnp.asarray(int(value), jnp.int32))


def test_a_full_disk_keeps_the_previous_checkpoint_and_export(tmp_path):
    import jaxport
    from jaxport.files import WriteError

    with small_disk(tmp_path / "disk", "1m") as disk:
        d = disk / "ckpt"
        jaxport.train.save_checkpoint(d, small_state(1.0, 1000))
        with pytest.raises(WriteError) as caught:
            jaxport.train.save_checkpoint(d, small_state(2.0, 300_000))  # 1.2 MB
        assert one_line(caught.value) == (f"could not write {d / 'weights.safetensors'}: No space left on device; "
                                          f"{d} keeps its previous contents")
        assert caught.value.errno == errno.ENOSPC
        restored = jaxport.train.load_checkpoint(d, small_state(0.0, 1000))
        assert int(restored.step) == 1 and float(restored.params["w"][0]) == 1.0
        assert leftovers(disk, d) == []

        e = disk / "export"
        exported = jaxport.export(jaxport.from_onnx(matmul_model(8)), (np.ones((2, 8), np.float32),))
        exported.save(e)
        big = jaxport.export(jaxport.from_onnx(matmul_model(600)), (np.ones((2, 600), np.float32),))
        with pytest.raises(WriteError, match=f"^could not write {e / 'weights.safetensors'}: No space left on "
                                             f"device; {e} keeps its previous contents$"):
            big.save(e)
        np.testing.assert_array_equal(jaxport.load_exported(e)(np.ones((2, 8), np.float32)),
                                      exported(np.ones((2, 8), np.float32)))
        assert leftovers(disk, e) == []


def test_a_failed_checkpoint_write_keeps_the_previous_one_without_a_small_disk(tmp_path, monkeypatch):
    """Where no tmpfs can be mounted: the weights' writer fails as safetensors does on a full disk."""
    import safetensors.numpy

    import jaxport
    from jaxport.files import WriteError

    d = tmp_path / "ckpt"
    jaxport.train.save_checkpoint(d, small_state(1.0, 10))
    real = safetensors.numpy.save_file

    def full(tensors, filename, metadata=None):
        real(tensors, filename, metadata)
        if "optimizer" in os.path.basename(filename):
            raise Exception("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.numpy, "save_file", full)
    with pytest.raises(WriteError) as caught:
        jaxport.train.save_checkpoint(d, small_state(2.0, 10))
    assert one_line(caught.value) == (f"could not write {d / 'optimizer.safetensors'}: No space left on device; "
                                      f"{d} keeps its previous contents")
    assert int(jaxport.train.load_checkpoint(d, small_state(0.0, 10)).step) == 1
    assert leftovers(tmp_path, d) == []


def matmul_model(n: int):
    """An ONNX MatMul with an n x n weight (n=600: 1.4 MB)."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(n, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])], initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_convert_onto_a_full_disk_is_one_line_and_keeps_the_previous_output(tmp_path, capfd):
    onnx = pytest.importorskip("onnx")
    from jaxport import cli
    from jaxport.files import check_directory

    small, big = tmp_path / "small.onnx", tmp_path / "big.onnx"
    onnx.save(matmul_model(8), small)
    onnx.save(matmul_model(600), big)
    with small_disk(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        assert cli.main(["convert", str(small), "-o", str(out)]) == 0
        assert "manifest.json" in capfd.readouterr().out
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        assert cli.main(["convert", str(big), "-o", str(out), "--force"]) == 2
        err = capfd.readouterr().err
        assert err == (f"jaxport convert: could not write {out / 'weights.safetensors'}: No space left on device; "
                       f"{out} keeps its previous contents\n")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        check_directory(out, kind="emitted model")
        assert leftovers(disk, out) == []


def test_dev_full_is_never_written_or_replaced(tmp_path, capfd):
    import jaxport
    from jaxport import cli
    from jaxport.files import WriteError

    with pytest.raises(WriteError, match="^/dev/full exists and is not a directory; the checkpoint was not written$"):
        jaxport.train.save_checkpoint("/dev/full", small_state(1.0, 10))
    exported = jaxport.export(jaxport.from_onnx(matmul_model(4)), (np.ones((2, 4), np.float32),))
    with pytest.raises(WriteError, match="^/dev/full exists and is not a directory; the export was not written$"):
        exported.save("/dev/full")
    onnx = pytest.importorskip("onnx")
    onnx.save(matmul_model(4), tmp_path / "m.onnx")
    capfd.readouterr()
    assert cli.main(["convert", str(tmp_path / "m.onnx"), "-o", "/dev/full", "--force"]) == 2
    assert capfd.readouterr().err == ("jaxport convert: /dev/full exists and is not a directory; the emitted model "
                                      "was not written\n")
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")


# -- truncated and altered files ----------------------------------------------------------------


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path, at: int | None = None) -> None:
    """One bit flipped, in the middle of the file or at byte `at`."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE = {"truncated": (_cut, "is truncated"), "bit-flipped": (_flip, "is corrupt: its content is not what "
                                                                      "was written")}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """A small checkpoint, export and emitted model, written once."""
    import jaxport

    root = tmp_path_factory.mktemp("outputs")
    jaxport.train.save_checkpoint(root / "checkpoint", small_state(1.0, 100))
    model = jaxport.from_onnx(matmul_model(8))
    jaxport.export(model, (np.ones((2, 8), np.float32),)).save(root / "export")
    jaxport.emit(model, root / "emitted model")
    return root


FILES = {"checkpoint": ["weights.safetensors", "optimizer.safetensors", "state.json"],
         "export": ["model.jaxexport", "weights.safetensors", "signature.json"],
         "emitted model": ["model.py", "weights.safetensors"]}


def read(kind: str, directory: Path):
    import jaxport
    from jaxport.files import check_directory

    if kind == "checkpoint":
        return jaxport.train.load_checkpoint(directory, small_state(0.0, 100))
    if kind == "export":
        return jaxport.load_exported(directory)
    return check_directory(directory, kind=kind)


def copy(source: Path, target: Path, manifest: bool = True) -> Path:
    target.mkdir()
    for path in source.iterdir():
        if manifest or path.name != "manifest.json":
            (target / path.name).write_bytes(path.read_bytes())
    return target


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("kind, name", [(k, n) for k, names in FILES.items() for n in names])
def test_a_truncated_or_altered_file_is_refused_by_name(outputs, tmp_path, kind, name, damage):
    import jaxport

    d = copy(outputs / kind, tmp_path / "d")
    edit, message = DAMAGE[damage]
    edit(d / name)
    with pytest.raises(jaxport.JaxportError) as caught:
        read(kind, d)
    assert one_line(caught.value).startswith(f"{d / name} {message}")


def test_a_flipped_weight_bit_is_a_wrong_answer_without_the_manifest(outputs, tmp_path):
    """What the manifest is for: a flipped exponent bit of the last weight (1.0 becomes 0.5) still
    parses, so only the sha256 catches it."""
    import jaxport
    from jaxport.files import UnverifiedFilesWarning

    x = np.ones((2, 8), np.float32)
    want = np.asarray(jaxport.load_exported(outputs / "export")(x))
    unchecked = copy(outputs / "export", tmp_path / "old", manifest=False)
    _flip(unchecked / "weights.safetensors", -1)
    with pytest.warns(UnverifiedFilesWarning):
        assert not np.array_equal(np.asarray(jaxport.load_exported(unchecked)(x)), want)
    checked = copy(outputs / "export", tmp_path / "new")
    _flip(checked / "weights.safetensors", -1)
    with pytest.raises(jaxport.SerializationError, match="weights.safetensors is corrupt"):
        jaxport.load_exported(checked)


# -- older outputs ------------------------------------------------------------------------------


def test_a_checkpoint_from_before_the_manifest_loads_with_a_warning(tmp_path):
    """Written as jaxport 0.2.0 wrote checkpoints: the three files, no manifest."""
    from safetensors.numpy import save_file

    import jaxport
    from jaxport.files import UnverifiedFilesWarning

    d = tmp_path / "old"
    d.mkdir()
    save_file({"w": np.full(100, 5.0, np.float32)}, str(d / "weights.safetensors"))
    save_file({}, str(d / "optimizer.safetensors"))
    meta = {"format": 1, "step": 5, "rng": [0, 0], "rng_impl": "threefry2x32", "params": ["w"], "buffers": [],
            "optimizer": []}
    with open(d / "state.json", "w") as f:
        json.dump(meta, f, indent=1)
    with pytest.warns(UnverifiedFilesWarning, match=r"old has no manifest.json \(written by jaxport 0.2.0"):
        state = jaxport.train.load_checkpoint(d, small_state(0.0, 100))
    assert int(state.step) == 5
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.full(100, 5.0, np.float32))


def test_an_export_from_before_the_manifest_loads_with_a_warning(outputs, tmp_path):
    import jaxport
    from jaxport.files import UnverifiedFilesWarning

    old = copy(outputs / "export", tmp_path / "old", manifest=False)  # 0.2.0's files, byte for byte
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    with pytest.warns(UnverifiedFilesWarning, match="read unchecked"):
        loaded = jaxport.load_exported(old)
    np.testing.assert_array_equal(np.asarray(loaded(x)), x)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
