"""The releases jaxport supports: pyproject.toml declares the floors `jaxport.versions` checks, and a
release below its floor is refused in one line naming both versions and the fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import tomllib

from jaxport import versions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.compat


def _declared_floors() -> dict[str, str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    floors = {}
    for requirement in requirements:
        name, floor = re.fullmatch(r"([\w-]+)>=([\d.]+)(,<[\d.]+)?", requirement).group(1, 2)
        assert floors.setdefault(name, floor) == floor, f"{name}: two floors in pyproject.toml"
    return floors


def test_pyproject_declares_the_floors_jaxport_checks():
    assert _declared_floors() == versions.FLOORS


def test_this_environment_meets_every_floor():
    for name in versions.FLOORS:
        try:
            module = __import__(versions.MODULES.get(name, name))
        except ImportError:
            continue  # an optional dependency this environment lacks
        versions.check(name, module.__version__)


@pytest.mark.parametrize("version, release", [("2.13.0+cpu", (2, 13, 0)), ("5.24.0.dev0", (5, 24, 0)),
                                              ("0.10.2", (0, 10, 2)), ("1.19", (1, 19)), ("rc", ())])
def test_releases_compare_by_their_numbers(version, release):
    assert versions.release(version) == release


def test_a_release_below_its_floor_names_both_and_the_fix():
    with pytest.raises(ImportError, match=re.escape(
            "jaxport[onnx] needs onnxruntime>=1.19; this environment has onnxruntime 1.18.0 "
            "(pip install -U 'onnxruntime>=1.19')")):
        versions.check("onnxruntime", "1.18.0")
    with pytest.raises(ImportError, match=re.escape("jaxport needs torch>=2.9; this environment has torch 2.8.0+cu128")):
        versions.check("torch", "2.8.0+cu128")
    versions.check("torch", "2.9.0+cu128")
    versions.check("jax", "0.10.2")


def test_a_missing_optional_dependency_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optax", None)  # import optax now raises ImportError
    with pytest.raises(ImportError, match=re.escape("this needs optax, which is not installed (pip install 'jaxport[train]')")):
        versions.require("optax")


def test_import_jaxport_refuses_an_old_torch_in_one_line():
    code = "import torch; torch.__version__ = '2.8.0'; import jaxport"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1
    assert "ImportError: jaxport needs torch>=2.9; this environment has torch 2.8.0" in done.stderr.splitlines()[-1]


def _pinned(path: str) -> dict[str, str]:
    with open(path) as f:
        return dict(line.split("==") for line in (raw.split("#")[0].strip() for raw in f) if "==" in line)


def test_a_compatibility_set_runs_the_releases_it_names():
    """Under `make test-compat` (which names the set it runs), each release its requirements file
    pins is the one imported (not `.venv`'s beneath it), and torch is a CUDA build, as GPU users
    have it."""
    compat_set = os.environ.get("JAXPORT_COMPAT_SET")
    if compat_set is None:
        pytest.skip("not under make test-compat")
    import torch

    for name, pinned in _pinned(os.path.join(ROOT, "requirements", f"compat-{compat_set}.txt")).items():
        module = __import__(name)
        assert versions.release(module.__version__) == versions.release(pinned), (name, module.__version__)
    assert torch.version.cuda is not None, f"torch {torch.__version__} is not a CUDA build"
