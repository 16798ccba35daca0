"""Every `torch._foreach_*` overload on the jax device gives what PyTorch's CPU kernels give:
each runs as its per-tensor op over the lists (`tensor/foreach.py`)."""

from __future__ import annotations

import pytest
import torch

import jaxport

SHAPES = [(3,), (2, 2), (), (0,)]
SQUARE = [(2, 2), (3, 3)]  # `_foreach_mm`'s lists pair square matrices


def _schemas():
    seen = []
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::_foreach_") and not schema.overload_name.endswith("out"):
            seen.append(schema)
    return sorted(seen, key=lambda s: (s.name, s.overload_name))


SCHEMAS = _schemas()


def _arguments(schema, generator: torch.Generator):
    shapes = SQUARE if schema.name == "aten::_foreach_mm" else SHAPES

    def tensors():
        # Positive values keep log, sqrt and pow real; -0.0, inf and NaN for their propagation.
        values = [torch.rand(shape, generator=generator) + 0.25 for shape in shapes]
        if values[0].numel() == 3 and schema.name != "aten::_foreach_mm":
            values[0] = torch.tensor([-0.0, float("inf"), float("nan")])
        return values

    args, kwargs = [], {}
    for argument in schema.arguments:
        kind = str(argument.type)
        if kind == "List[Tensor]":
            value = tensors()
        elif kind == "List[number]" or argument.name == "scalars" and kind == "Tensor":
            numbers = [0.5, 2.0, 1.5, -0.75][: len(shapes)]
            value = torch.tensor(numbers) if kind == "Tensor" else numbers
        elif kind == "Tensor":
            value = torch.tensor(1.5)
        elif kind == "number":
            value = 1.0 if argument.name == "self" else 0.75
            if argument.name == "ord":
                value = 2
        elif argument.has_default_value():
            continue
        else:
            raise AssertionError(f"{schema}: no sample for {argument.name}: {kind}")
        (kwargs.__setitem__(argument.name, value) if argument.kwarg_only else args.append(value))
    return args, kwargs


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    return value


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.name[6:]}.{s.overload_name or 'default'}")
def test_every_foreach_overload_matches_the_cpu(schema):
    op = getattr(getattr(torch.ops.aten, schema.name[6:]), schema.overload_name or "default")
    generator = torch.Generator().manual_seed(len(schema.name) * 31 + len(schema.overload_name))
    args, kwargs = _arguments(schema, generator)
    try:
        expected = _written(op, args, kwargs) if not schema.returns else op(*args, **kwargs)
    except RuntimeError:  # PyTorch refuses it (the maximum of an empty tensor): so must jaxport
        with jaxport.eager(), pytest.raises(RuntimeError):
            op(*_to(args, "jax"), **_to(kwargs, "jax"))
        return
    with jaxport.eager():
        jax_args = _to(args, "jax")
        got = op(*jax_args, **_to(kwargs, "jax"))
    if not schema.returns:  # in place: compare what was written into `self`
        got = jax_args[0]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = g.cpu()
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, equal_nan=True)


def _written(op, args, kwargs):
    """What an in-place op writes into (a copy of) `self`."""
    targets = [t.clone() for t in args[0]]
    op(targets, *args[1:], **kwargs)
    return targets
