"""The package as users import it: a short top level, named submodules, the 0.1 names moved with a
warning, typing information shipped, and no side effects on import."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import warnings

import pytest

import jaxport

#: The common path: what `import jaxport` promises.
TOP_LEVEL = {
    "CausalLM", "EmitError", "ExportError", "ExportedModel", "InputError", "JaxModel", "JaxTensor", "JaxportError",
    "LoweringError", "MaxBatchError", "ModelFileError", "Precision", "SerializationError", "UnsupportedDtypeError", "UnsupportedOpsError",
    "disable_eager", "eager", "emit", "enable_eager", "export", "from_causal_lm", "from_exported_program",
    "from_onnx", "from_torch", "load_exported", "lowerings", "register_lowering", "verify",
}


def test_the_top_level_is_the_common_path():
    assert set(jaxport.__all__) == TOP_LEVEL
    for name in TOP_LEVEL - {"JaxTensor"}:
        assert getattr(jaxport, name).__doc__, f"jaxport.{name} has no docstring"


@pytest.mark.parametrize(("name", "module"), [
    ("to_jax", "interop"), ("jax_fn", "interop"), ("callback", "interop"),
    ("train_step", "train"), ("TrainState", "train"), ("load_into_torch", "train"),
    ("shard", "sharding"), ("fsdp", "sharding"), ("ShardingError", "sharding"),
])
def test_names_moved_in_0_2_still_work_with_a_warning(name, module):
    with pytest.warns(DeprecationWarning, match=rf"jaxport\.{name} moved to jaxport\.{module}\.{name}"):
        old = getattr(jaxport, name)
    assert old is getattr(importlib.import_module(f"jaxport.{module}"), name)


def test_submodules_are_reached_from_the_package():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation on the new paths
        assert jaxport.train.train_step is jaxport.train.step.train_step
        assert callable(jaxport.sharding.shard) and callable(jaxport.interop.jax_fn)
        assert callable(jaxport.distributed.initialize) and callable(jaxport.compare.compare)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        jaxport.no_such_name  # noqa: B018


def test_the_package_ships_its_type_information():
    assert importlib.resources.files("jaxport").joinpath("py.typed").is_file()


def test_importing_jaxport_leaves_torchs_devices_and_environment_alone():
    """`jaxport.tensor` (the eager frontend) names torch's PrivateUse1 device "jax" when it is
    imported; `import jaxport` must not, nor set environment variables."""
    code = ("import os, torch; before = dict(os.environ); import jaxport; "
            "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'; "
            "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items()); "
            "jaxport.JaxTensor; assert torch._C._get_privateuse1_backend_name() == 'jax'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
