"""`.pt2` archives saved from Hugging Face models through the CLI, in a fresh interpreter (so
transformers is not imported yet): the output types and caches they name are registered from the
file, names outside the allowlist import nothing, and unreadable archives fail in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _jaxport(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxport", *map(str, args)], capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env})


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


def _rewrite(source, target, old: str, new: str):
    """A copy of the archive at `source` with `old` replaced by `new` in its program's JSON."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("models/model.json"):
                assert old.encode() in data
                data = data.replace(old.encode(), new.encode())
            dst.writestr(item, data)
    return target


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT classifier exported with keyword inputs: its output is a SequenceClassifierOutput."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("bert", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                               intermediate_size=64, vocab_size=100)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    ids = torch.randint(0, 100, (2, 7))
    path = tmp_path_factory.mktemp("bert") / "bert.pt2"
    torch.export.save(torch.export.export(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}), path)
    return path


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny Llama exported by transformers' own exporter: its outputs hold a DynamicCache."""
    from transformers.exporters.configs import DynamoConfig
    from transformers.exporters.exporter_dynamo import DynamoExporter

    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                               num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                                               use_cache=True)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    program, _ = DynamoExporter().export_program(model, {"input_ids": torch.randint(0, 100, (1, 5))}, DynamoConfig())
    path = tmp_path_factory.mktemp("llama") / "llama.pt2"
    torch.export.save(program, path)
    return path


def test_importing_jaxport_does_not_import_transformers():
    done = subprocess.run([sys.executable, "-c", "import sys, jaxport, jaxport.cli.verify, jaxport.frontends.pt2; "
                           "print('transformers' in sys.modules)"], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_hugging_face_archive_inspects_verifies_and_converts(bert, tmp_path):
    done = _jaxport("inspect", bert, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert [i["name"] for i in info["inputs"]] == ["input_ids", "attention_mask"]
    assert info["outputs"][0]["shape"] == [2, 2] and info["unsupported"] == {}
    assert "Traceback" not in done.stderr

    done = _jaxport("verify", bert, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and len(report["outputs"]) == 1

    done = _jaxport("convert", bert, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "model.py").is_file() and (tmp_path / "out" / "weights.safetensors").is_file()


def test_archive_with_a_transformers_cache_inspects_and_verifies(llama):
    done = _jaxport("inspect", llama, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    # logits, then the cache's key and value of the one layer
    assert [o["shape"] for o in info["outputs"]] == [[1, 5, 100], [1, 2, 5, 16], [1, 2, 5, 16]]
    done = _jaxport("verify", llama, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["passed"] is True


@pytest.fixture
def evilpkg(tmp_path):
    """A package on PYTHONPATH that leaves a file behind if anything imports it."""
    marker = tmp_path / "imported"
    (tmp_path / "evilpkg").mkdir()
    (tmp_path / "evilpkg" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Foo: pass\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}, marker


@pytest.mark.parametrize("name", ["evilpkg.Foo", "evilpkg:Foo", "os.system", "os:system"])
def test_a_type_outside_the_allowlist_is_refused_without_importing_it(bert, tmp_path, evilpkg, name):
    env, marker = evilpkg
    crafted = _rewrite(bert, tmp_path / "crafted.pt2", "transformers.modeling_outputs.SequenceClassifierOutput", name)
    _one_line_error(_jaxport("inspect", crafted, env=env), name, "transformers")
    assert not marker.exists()


def test_a_cache_context_naming_a_type_outside_the_allowlist_is_refused(llama, tmp_path, evilpkg):
    env, marker = evilpkg
    crafted = _rewrite(llama, tmp_path / "crafted.pt2", "transformers.cache_utils:DynamicLayer", "evilpkg:Foo")
    _one_line_error(_jaxport("verify", crafted, env=env), "evilpkg:Foo", "DynamicCache")
    assert not marker.exists()


def test_a_transformers_class_that_is_no_pytree_type_is_refused(bert, tmp_path):
    crafted = _rewrite(bert, tmp_path / "crafted.pt2", "transformers.modeling_outputs.SequenceClassifierOutput",
                       "transformers.modeling_utils.PreTrainedModel")
    _one_line_error(_jaxport("inspect", crafted), "transformers.modeling_utils.PreTrainedModel", "pytree")


def test_unreadable_archives_fail_in_one_line(bert, tmp_path):
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(bert.read_bytes()[:5000])
    _one_line_error(_jaxport("inspect", truncated), "not a readable torch.export archive")
    # A valid zip whose program torch cannot parse: torch logs a traceback and raises a vague error.
    with zipfile.ZipFile(bert) as src:
        name = next(n for n in src.namelist() if n.endswith("models/model.json"))
        text = src.read(name).decode()
    broken = _rewrite(bert, tmp_path / "broken.pt2", text, text[: len(text) // 2])
    stderr = _one_line_error(_jaxport("inspect", broken), "not a readable torch.export archive")
    assert "check the warnings above" not in stderr


def test_a_type_of_an_allowlisted_package_that_is_not_installed_says_what_to_install(monkeypatch):
    from jaxport.errors import ModelFileError
    from jaxport.frontends.pt2 import pytree_types as _pytree_types

    monkeypatch.setitem(_pytree_types.PACKAGES, "jaxport_absent_package", lambda cls: None)
    with pytest.raises(ModelFileError, match=r"install jaxport_absent_package to read it"):
        _pytree_types._resolve("jaxport_absent_package.outputs.Output", "m.pt2", "outputs")
