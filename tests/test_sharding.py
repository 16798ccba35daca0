"""Sharding by name rules: which spec each parameter gets, the errors, and sharded training.

The rule tests run here on abstract meshes (no devices needed). Sharded training needs 8
devices, and this pytest process may already have started JAX with one, so it runs in a
subprocess (tests/distributed/sharded_gpt2.py): a tiny GPT-2 trained 5 Adam steps on one
device, then data parallel, FSDP, tensor parallel and FSDP + TP over 8 CPU devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
import torch
from jax.sharding import AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxport
from jaxport import sharding
from jaxport.sharding import (
    Rules,
    ShardingError,
    data_parallel,
    fsdp,
    partition_spec,
    tensor_parallel,
)

ROOT = Path(__file__).resolve().parents[1]
MESH = AbstractMesh((2, 4), ("data", "model"))
DATA8 = AbstractMesh((8,), ("data",))


@pytest.mark.parametrize("name, shape, want", [
    # GPT-2: Conv1D weights are (in, out)
    ("transformer.h.0.attn.c_attn.weight", (32, 96), P(None, "model")),
    ("transformer.h.0.attn.c_attn.bias", (96,), P("model")),
    ("transformer.h.0.attn.c_proj.weight", (32, 32), P("model", None)),
    ("transformer.h.0.attn.c_proj.bias", (32,), P()),
    ("transformer.h.0.mlp.c_fc.weight", (32, 128), P(None, "model")),
    ("transformer.h.0.mlp.c_fc.bias", (128,), P("model")),
    ("transformer.h.0.mlp.c_proj.weight", (128, 32), P("model", None)),
    ("transformer.wte.weight", (128, 32), P()),
    ("transformer.h.0.ln_1.weight", (32,), P()),
    # Llama: nn.Linear weights are (out, in)
    ("model.layers.0.self_attn.q_proj.weight", (64, 32), P("model", None)),
    ("model.layers.0.self_attn.k_proj.weight", (16, 32), P("model", None)),
    ("model.layers.0.self_attn.o_proj.weight", (32, 64), P(None, "model")),
    ("model.layers.0.mlp.gate_proj.weight", (128, 32), P("model", None)),
    ("model.layers.0.mlp.up_proj.weight", (128, 32), P("model", None)),
    ("model.layers.0.mlp.down_proj.weight", (32, 128), P(None, "model")),
    ("model.embed_tokens.weight", (128, 32), P()),
    ("model.norm.weight", (32,), P()),
    # BERT
    ("bert.encoder.layer.0.attention.self.query.weight", (32, 32), P("model", None)),
    ("bert.encoder.layer.0.attention.self.value.bias", (32,), P("model")),
    ("bert.encoder.layer.0.attention.output.dense.weight", (32, 32), P(None, "model")),
    ("bert.encoder.layer.0.attention.output.dense.bias", (32,), P()),
    ("bert.encoder.layer.0.intermediate.dense.weight", (128, 32), P("model", None)),
    ("bert.encoder.layer.0.output.dense.weight", (32, 128), P(None, "model")),
    ("bert.encoder.layer.0.output.LayerNorm.weight", (32,), P()),
    ("bert.pooler.dense.weight", (32, 32), P()),
])
def test_tensor_parallel_names(name, shape, want):
    assert partition_spec(name, shape, tensor_parallel(), MESH) == want


def test_tensor_parallel_vocab_embeddings():
    rules = tensor_parallel(embeddings="vocab")
    assert partition_spec("transformer.wte.weight", (128, 32), rules, MESH) == P("model", None)
    assert partition_spec("lm_head.weight", (128, 32), rules, MESH) == P("model", None)
    assert partition_spec("transformer.wpe.weight", (32, 32), rules, MESH) == P()
    with pytest.raises(ShardingError, match="embeddings"):
        tensor_parallel(embeddings="columns")


def test_fsdp_shards_the_largest_divisible_dimension():
    rules = fsdp(min_size=64)
    assert partition_spec("w", (32, 96), rules, DATA8) == P(None, "data")
    assert partition_spec("w", (96, 32), rules, DATA8) == P("data", None)
    assert partition_spec("w", (30, 40), rules, DATA8) == P(None, "data")  # 30 is not divisible by 8
    assert partition_spec("w", (30, 30), rules, DATA8) == P()  # nothing divisible: stays whole
    assert partition_spec("b", (32,), rules, DATA8) == P()  # under min_size
    assert partition_spec("w", (128, 256), fsdp(), DATA8) == P()  # the default threshold is 2**16
    assert partition_spec("w", (256, 256), fsdp(), DATA8) == P("data", None)
    assert partition_spec("a.w", (64, 64), fsdp(min_size=64, pattern=r"^b\."), DATA8) == P()


def test_fsdp_and_tensor_parallel_combine_in_either_order():
    for rules in (fsdp(min_size=64) + tensor_parallel(), tensor_parallel() + fsdp(min_size=64)):
        assert isinstance(rules, Rules)
        assert partition_spec("h.0.attn.c_attn.weight", (32, 96), rules, MESH) == P("data", "model")
        assert partition_spec("h.0.mlp.c_proj.weight", (128, 32), rules, MESH) == P("model", "data")
        assert partition_spec("h.0.attn.c_attn.bias", (96,), rules, MESH) == P("model")
        assert partition_spec("wte.weight", (128, 32), rules, MESH) == P("data", None)
    assert data_parallel() + tensor_parallel() == tensor_parallel()


def test_first_matching_rule_wins_and_user_rules_go_first():
    rules = [(r"c_attn\.weight$", P()), ("c_fc.weight", None)] + tensor_parallel()
    assert isinstance(rules, Rules)
    assert partition_spec("h.0.attn.c_attn.weight", (32, 96), rules, MESH) == P()
    assert partition_spec("h.0.mlp.c_fc.weight", (32, 128), rules, MESH) == P()
    assert partition_spec("h.0.mlp.c_proj.weight", (128, 32), rules, MESH) == P("model", None)
    custom = tensor_parallel() + [(r"^head\.", P(None, "model"))]
    assert partition_spec("head.weight", (10, 32), custom, MESH) == P(None, "model")
    assert partition_spec("other.weight", (10, 32), custom, MESH) == P()


def test_rule_errors_name_the_parameter():
    odd = AbstractMesh((3,), ("model",))
    with pytest.raises(ShardingError, match=r"'transformer\.h\.0\.attn\.c_attn\.weight' \(shape \(32, 96\)\).*"
                                            r"dimension 0 \(32\) is not divisible by mesh axis 'model' \(size 3\)"):
        partition_spec("transformer.h.0.attn.c_attn.weight", (32, 96), [("c_attn", P("model", None))], odd)
    with pytest.raises(ShardingError, match=r"'ln\.weight' has shape \(32,\).*2 entries"):
        partition_spec("ln.weight", (32,), [("ln", P(None, "model"))], MESH)
    params = {"h.0.attn.c_attn.weight": jax.ShapeDtypeStruct((32, 96), np.float32)}
    with pytest.raises(ShardingError, match="names mesh axis 'model', but the mesh has axes \\('data',\\)"):
        sharding.shardings(params, DATA8, tensor_parallel())
    with pytest.raises(ShardingError, match="names mesh axis 'fsdp'"):
        sharding.shardings(params, DATA8, fsdp(axis="fsdp"))
    with pytest.raises(ShardingError, match="regex, PartitionSpec"):
        Rules([("c_attn", P()), "c_fc"])
    with pytest.raises(ShardingError, match="must be a PartitionSpec"):
        Rules([("c_attn", ("model", None))])
    with pytest.raises(ShardingError, match="not a valid regex"):
        Rules([("c_attn(", P())])
    with pytest.raises(ShardingError, match="takes a JaxModel"):
        sharding.shardings([1, 2], DATA8)


def _mlp_step():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    model = jaxport.from_torch(module, (torch.ones(8, 16),), train=True)
    loss = lambda out, batch: ((out - batch[1]) ** 2).mean()  # noqa: E731
    return model, jaxport.train.train_step(model, loss, optax.adam(1e-3))


def test_train_state_optimizer_entries_follow_their_parameter():
    _, step = _mlp_step()
    placement = sharding.shardings(jax.eval_shape(step.init, 0), DATA8, fsdp(min_size=256))
    assert isinstance(placement, jaxport.train.TrainState)
    assert placement.params["0.weight"].spec == P("data", None)  # (64, 16)
    assert placement.params["2.weight"].spec == P(None, "data")  # (8, 64)
    assert placement.params["0.bias"].spec == P()
    adam = placement.opt_state[0]
    for name, where in placement.params.items():
        assert adam.mu[name] == where and adam.nu[name] == where
    assert adam.count.spec == P() and placement.rng.spec == P() and placement.step.spec == P()
    assert sharding.describe(placement) == {"0.weight": "P('data', None)", "2.weight": "P(None, 'data')"}


def test_placing_on_one_device_copies_and_keeps_structure():
    """The placing code paths, on the one device this process may have."""
    model, step = _mlp_step()
    mesh = sharding.device_mesh(jax.devices()[:1], data=1)
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,)
    before = model.params
    placed = sharding.shard(dict(before), mesh, fsdp(min_size=1))
    assert set(placed) == set(before) and all(isinstance(a.sharding, NamedSharding) for a in placed.values())
    assert all(placed[k] is not before[k] for k in before)  # copies: donating them leaves the model whole
    assert sharding.shard(model, mesh) is model and model.params is not before
    state = sharding.shard(step.init(0), mesh, fsdp(min_size=1))
    batch = sharding.shard_batch((np.ones((8, 16), np.float32), np.zeros((8, 8), np.float32)), mesh)
    state, metrics = step(state, batch)
    assert np.isfinite(float(metrics["loss"])) and int(state.step) == 1
    with pytest.raises(ShardingError, match="batch axis 'model'"):
        sharding.shard_batch(np.ones((8, 16)), mesh, axis="model")


def test_device_mesh_sizes():
    one = jax.devices()[:1]
    assert dict(sharding.device_mesh(one, data=-1, model=1).shape) == {"data": 1, "model": 1}
    with pytest.raises(ShardingError, match="only one mesh axis"):
        sharding.device_mesh(one, data=-1, model=-1)
    with pytest.raises(ShardingError, match="need 2 devices; there are 1"):
        sharding.device_mesh(one, data=2)


# -- sharded training over 8 CPU devices, in a subprocess ----------------------------------------

MODES = ["dp", "fsdp", "tp", "fsdp_tp", "fsdp_tp_model"]
C_ATTN, C_PROJ, WTE, LN = ("transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.c_proj.weight",
                           "transformer.wte.weight", "transformer.h.0.ln_1.weight")
# mode -> {param: (spec, one device's piece)}; the weights are c_attn (32, 96), mlp.c_proj
# (128, 32), wte (128, 32), ln_1 (32,).
FSDP_TP = {C_ATTN: ("P('data', 'model')", [16, 24]), C_PROJ: ("P('model', 'data')", [32, 16]),
           WTE: ("P('data', None)", [64, 32]), LN: (None, [32])}
EXPECTED = {
    "dp": {C_ATTN: (None, [32, 96]), C_PROJ: (None, [128, 32]), WTE: (None, [128, 32]), LN: (None, [32])},
    "fsdp": {C_ATTN: ("P(None, 'data')", [32, 12]), C_PROJ: ("P('data', None)", [16, 32]),
             WTE: ("P('data', None)", [16, 32]), LN: (None, [32])},
    "tp": {C_ATTN: ("P(None, 'model')", [32, 24]), C_PROJ: ("P('model', None)", [32, 32]),
           WTE: (None, [128, 32]), LN: (None, [32])},
    "fsdp_tp": FSDP_TP,
    "fsdp_tp_model": FSDP_TP,
}


def _sharded_runs() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "tests.distributed.sharded_gpt2", "single", *MODES], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        pytest.fail(f"sharded training failed:\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_mode(mode: str, run: dict, single: dict) -> None:
    assert run["devices"] == 8
    np.testing.assert_allclose(run["losses"], single["losses"], rtol=1e-5, err_msg=mode)
    for name, want in single["weights"].items():
        np.testing.assert_allclose(run["weights"][name], want, rtol=1e-4, atol=1e-5, err_msg=f"{mode}: {name}")
    for name, (spec, piece) in EXPECTED[mode].items():
        assert run["sharded_after"].get(name) == spec, (mode, name)
        assert run["replicated"][name] == (spec is None), (mode, name)
        assert run["local_shapes"][name] == piece, (mode, name)
    assert run["sharded_after"] == run["sharded_before"], f"{mode}: the steps must keep the state's placement"
    assert run["mirrored"] and run["count_replicated"] and run["rng_replicated"] and run["step_replicated"], mode
    assert run["all_named"], mode
    assert run["compiles"] == 1, f"{mode}: a state placed right the first time compiles the step once"


def test_sharded_training_matches_one_device():
    """One test, one subprocess (parametrized, xdist would start one per worker)."""
    runs = _sharded_runs()
    single = runs["single"]
    assert single["devices"] == 1 and single["losses"][-1] != single["losses"][0]
    for mode in MODES:
        _check_mode(mode, runs[mode], single)
