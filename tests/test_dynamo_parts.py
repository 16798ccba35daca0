"""The pieces of the torch.compile backend's per-call path, each on its own: the input cache
(`jaxport.dynamo.inputs`), the output plan (`outputs`) and the int64 range check (`ranges`)."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxport import dlpack
from jaxport.dynamo.inputs import (
    _UNVERSIONED,
    BOOL,
    NARROWED,
    PLAIN,
    WORDS,
    InputCache,
    crossing,
    unpacked,
)
from jaxport.dynamo.outputs import (
    INPUT,
    NONE,
    SCALAR,
    TENSOR,
    OutputPlan,
    output_kinds,
    passed_inputs,
)
from jaxport.dynamo.ranges import RangeCheck
from jaxport.errors import InputError

CPU = torch.device("cpu")


@pytest.fixture
def imports(monkeypatch) -> list:
    """Every import the cache makes, by sharing (`dlpack.share`) or copying (`dlpack.to_jax`)."""
    made = []
    share, to_jax = dlpack.share, dlpack.to_jax
    monkeypatch.setattr(dlpack, "share", lambda t: (made.append(("share", t)), share(t))[1])
    monkeypatch.setattr(dlpack, "to_jax", lambda t, *a, **k: (made.append(("copy", t)), to_jax(t, *a, **k))[1])
    return made


def _cache(*tensors: torch.Tensor, positions=None) -> InputCache:
    positions = tuple(range(len(tensors))) if positions is None else positions
    return InputCache(positions, tuple(f"x{i}" for i in range(len(tensors))), tuple(t.dtype for t in tensors), CPU)


def _unaligned(values: torch.Tensor) -> torch.Tensor:
    """`values` 4 bytes past an aligned address: XLA cannot take it as it lies, so it is copied."""
    flat = torch.empty(values.numel() + 1, dtype=values.dtype)
    flat[1:] = values.reshape(-1)
    tensor = flat[1:].view(values.shape)
    assert tensor.data_ptr() % dlpack.XLA_CPU_ALIGNMENT
    return tensor


# -- how each dtype crosses ---------------------------------------------------------------------


def test_each_dtype_crosses_its_way():
    assert crossing(torch.float32) == PLAIN and crossing(torch.int32) == PLAIN
    assert crossing(torch.bool) == BOOL
    if not jax.config.jax_enable_x64:
        assert crossing(torch.int64) == WORDS and crossing(torch.float64) == NARROWED


def test_bytes_and_words_are_turned_back_inside_the_jitted_function():
    ids = torch.tensor([[1, -2], [2**31 - 1, -(2**31)]])
    mask = torch.tensor([True, False, True])
    arrays = [jnp.asarray(mask.view(torch.uint8).numpy()), jnp.asarray(ids.unsqueeze(-1).view(torch.int32).numpy())]
    values, fits = jax.jit(lambda a: unpacked((BOOL, WORDS), a))(arrays)
    assert values[0].dtype == jnp.bool_ and np.array_equal(values[0], mask.numpy())
    assert np.array_equal(values[1], ids.numpy().astype(np.int32)) and np.asarray(fits).tolist() == [True]
    too_wide = torch.tensor([1, 2**40])
    _, fits = unpacked((PLAIN, WORDS), [jnp.zeros(1), jnp.asarray(too_wide.unsqueeze(-1).view(torch.int32).numpy())])
    assert np.asarray(fits).tolist() == [False]
    assert unpacked((PLAIN,), [jnp.zeros(2)])[1] is None


# -- the input cache ----------------------------------------------------------------------------


def test_a_tensor_passed_again_is_a_hit(imports):
    x, w = torch.randn(3), torch.randn(4, 4)
    cache = _cache(x, w)
    first = cache.arrays([x, w])
    assert [how for how, _ in imports] == ["share", "share"]
    again = cache.arrays([x, w])
    assert all(a is b for a, b in zip(first, again)) and len(imports) == 2
    assert cache[0].array is first[0] and cache[0].shared and cache[0].version == x._version


def test_only_the_arguments_at_its_positions_are_imported(imports):
    x = torch.randn(3)
    cache = _cache(x, positions=(1,))
    (array,) = cache.arrays([7, x])
    assert len(cache) == 1 and np.array_equal(np.asarray(array), x.numpy())


def test_a_shared_import_is_kept_through_in_place_writes(imports):
    x = torch.randn(5)
    cache = _cache(x)
    (array,) = cache.arrays([x])
    x.mul_(2.0)  # the version moves; the array shares the memory, so it shows the write
    assert cache.arrays([x])[0] is array and len(imports) == 1
    assert cache[0].version == x._version
    np.testing.assert_array_equal(np.asarray(array), x.numpy())


def test_a_copied_import_is_a_miss_after_an_in_place_write(imports):
    x = _unaligned(torch.randn(6))
    cache = _cache(x)
    (array,) = cache.arrays([x])
    assert [how for how, _ in imports] == ["share", "copy"] and not cache[0].shared
    assert cache.arrays([x])[0] is array and len(imports) == 2  # unchanged: kept
    x.add_(1.0)
    (fresh,) = cache.arrays([x])
    assert fresh is not array and len(imports) == 4
    np.testing.assert_array_equal(np.asarray(fresh), x.numpy())


def test_a_write_through_data_shows_through_a_shared_import(imports):
    x = torch.randn(4)
    cache = _cache(x)
    (array,) = cache.arrays([x])
    x.data.add_(1.0)  # bypasses the version counter
    assert cache.arrays([x])[0] is array
    np.testing.assert_array_equal(np.asarray(array), x.numpy())


def test_a_rebound_data_is_a_miss():
    w = torch.nn.Parameter(torch.randn(3, 3))
    cache = _cache(w)
    (array,) = cache.arrays([w])
    w.data = torch.randn(3, 3)  # new memory: another data pointer
    (fresh,) = cache.arrays([w])
    assert fresh is not array
    np.testing.assert_array_equal(np.asarray(fresh), w.detach().numpy())


def test_a_rebound_data_in_another_layout_at_the_same_address_is_a_miss_once_written():
    """`.data` set to its own transpose keeps the address and the version counter: Dynamo's guards
    see the new strides and compile another graph (test_dynamo); once the version moves, the
    cache compares the whole layout."""
    w = torch.nn.Parameter(torch.arange(9.0).view(3, 3))
    cache = _cache(w)
    (array,) = cache.arrays([w])
    w.data = w.data.t()
    with torch.no_grad():
        w.mul_(2.0)
    (fresh,) = cache.arrays([w])
    assert fresh is not array
    np.testing.assert_array_equal(np.asarray(fresh), w.detach().numpy())


def test_another_tensor_object_is_a_miss(imports):
    x = torch.randn(3)
    cache = _cache(x)
    cache.arrays([x])
    y = x.view(3)  # the same memory and version counter, another tensor object
    cache.arrays([y])
    assert len(imports) == 2 and cache[0].tensor() is y


def test_a_shared_inference_tensor_is_kept_without_a_version(imports):
    with torch.inference_mode():
        x = torch.randn(4)
    cache = _cache(x)
    (array,) = cache.arrays([x])
    assert cache[0].shared and cache[0].version is _UNVERSIONED  # it has no version counter to record
    with torch.inference_mode():
        x.mul_(3.0)
    assert cache.arrays([x])[0] is array and len(imports) == 1
    np.testing.assert_array_equal(np.asarray(array), x.numpy())


def test_a_copied_inference_tensor_is_imported_each_call(imports):
    with torch.inference_mode():
        x = _unaligned(torch.randn(4))
    cache = _cache(x)
    first = cache.arrays([x])[0]
    with torch.inference_mode():
        x.mul_(-1.0)
    second = cache.arrays([x])[0]
    assert second is not first and [how for how, _ in imports].count("copy") == 2
    np.testing.assert_array_equal(np.asarray(second), x.numpy())


def test_bool_int64_and_empty_tensors_cross_as_kept_arrays(imports):
    mask, ids, empty = torch.tensor([True, False]), torch.tensor([3, -4]), torch.zeros(0, 2)
    cache = _cache(mask, ids, empty)
    arrays = cache.arrays([mask, ids, empty])
    assert arrays[0].dtype == jnp.uint8 and arrays[1].shape == (2, 2) and arrays[2].shape == (0, 2)
    assert all(a is b for a, b in zip(arrays, cache.arrays([mask, ids, empty])))


def test_a_tensor_of_another_dtype_is_refused_by_name():
    cache = _cache(torch.zeros(2))
    with pytest.raises(InputError, match="graph input 'x0' is torch.float16; the graph was compiled for torch.float32"):
        cache.arrays([torch.zeros(2, dtype=torch.float16)])


def test_a_kept_import_goes_with_its_tensor():
    x, y = torch.randn(3), torch.randn(3)
    cache = _cache(x, y)
    cache.arrays([x, y])
    del y
    gc.collect()
    assert cache[0] is not None and cache[1] is None
    assert list(cache) == [cache[0], None]


def test_the_cache_itself_can_go_before_its_tensors():
    x = torch.randn(3)
    cache = _cache(x)
    cache.arrays([x])
    del cache
    gc.collect()
    del x  # the tensor's callback finds no cache, and does nothing
    gc.collect()


def test_no_fence_on_the_cpu():
    assert not _cache(torch.zeros(1)).fenced


# -- the output plan ----------------------------------------------------------------------------


def _graph(fn, *args) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_output_kinds_and_passed_inputs_come_from_the_graph():
    graph = _graph(lambda x, ids: (x * 2, ids.sum(), x, None), torch.zeros(3), torch.zeros(3, dtype=torch.int64))
    assert output_kinds(graph) == [(torch.float32, CPU), (torch.int64, CPU), (torch.float32, CPU), None]
    assert passed_inputs(graph) == {2: 0}


def test_the_plan_gives_each_output_its_mode():
    kinds = [(torch.float32, torch.device("meta")), (torch.float32, CPU), int, None]
    plan = OutputPlan(kinds, {1: 0}, CPU)
    assert plan.modes == ((TENSOR, (torch.float32, CPU)), (INPUT, 0), (SCALAR, int), (NONE, None))
    assert plan.has_scalars
    assert not OutputPlan([(torch.float32, CPU)], {}, CPU).has_scalars


def test_traced_outputs_are_buffers_of_their_own():
    """An input's array, or one returned twice, is copied inside the jitted function."""
    plan = OutputPlan([(torch.float32, CPU)] * 3 + [(torch.bool, CPU)], {}, CPU)

    def run(x):
        doubled = x * 2
        return plan.traced([x, doubled, doubled, x > 0], [x], ())

    x = jnp.arange(3.0)
    results = jax.jit(run)(x)
    assert len({r.unsafe_buffer_pointer() for r in (x, *results[:3])}) == 4
    assert results[3].dtype == jnp.uint8 and plan.known[()] == {}


def test_sizes_the_trace_knows_come_back_without_a_device_read():
    plan = OutputPlan([int, (torch.int64, CPU), (torch.bool, CPU), (torch.float32, CPU)], {3: 0}, CPU)
    results = plan.traced([5, jnp.array([1, 2], jnp.int32), jnp.array([1, 0], jnp.uint8), None], [], (2,))
    assert results[0] is None and plan.known[(2,)] == {0: 5}
    args = [torch.ones(2)]
    back = plan.to_torch(results, args, (2,))
    assert back[0] == 5 and type(back[0]) is int
    assert back[1].dtype == torch.int64 and back[1].tolist() == [1, 2]
    assert back[2].dtype == torch.bool and back[2].tolist() == [True, False]
    assert back[3] is args[0]


def test_a_size_the_trace_did_not_know_is_read_from_its_array():
    plan = OutputPlan([int], {}, CPU)
    results = jax.jit(lambda n: plan.traced([n.sum()], [], ()))(jnp.arange(4))
    assert plan.to_torch(results, [], ()) == [6]


# -- the range check ----------------------------------------------------------------------------


class _Verdict:
    """A verdict that becomes ready when told, as a jitted function's result does."""

    def __init__(self, fits: list[bool], ready: bool = True):
        self.fits, self.ready = np.array(fits), ready

    def is_ready(self) -> bool:
        return self.ready

    def __array__(self, dtype=None, copy=None):
        return self.fits


def test_values_that_fit_pass():
    check = RangeCheck(("ids", "positions"))
    check.settle(jnp.array([True, True]))
    assert check.pending == []


def test_a_value_that_does_not_fit_is_refused_naming_its_input():
    check = RangeCheck(("ids", "positions"))
    with pytest.raises(InputError, match=r"graph input\(s\) 'positions' hold int64 values outside int32's range"):
        check.settle(jnp.array([True, False]))


def test_a_verdict_not_ready_is_read_at_the_next_call():
    check = RangeCheck(("ids",))
    verdict = _Verdict([False], ready=False)
    check.settle(verdict)
    assert check.pending == [verdict]
    check.check_pending()  # still not ready: kept, nothing waited for
    assert check.pending == [verdict]
    verdict.ready = True
    with pytest.raises(InputError, match="'ids' hold int64 values outside int32's range"):
        check.check_pending()
    assert check.pending == []


def test_ready_verdicts_that_fit_are_dropped():
    check = RangeCheck(("ids",))
    later = _Verdict([True], ready=False)
    check.pending.extend([_Verdict([True]), later])
    check.check_pending()
    assert check.pending == [later]
