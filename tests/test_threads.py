"""Eight threads at once: a converted model, its frozen form, the eager frontend and the
torch.compile backend each give every thread the result one thread alone gets, and nothing hangs.
(`CausalLM.generate` and `stream` from many threads are tested with generation.)"""

from __future__ import annotations

import concurrent.futures
import threading

import jax
import numpy as np
import pytest
import torch

import jaxport
from jaxport import dynamo
from tests.support import zoo

THREADS = 8
#: Seconds a whole round of threads may take before the test calls it a deadlock.
DEADLINE = 300


def _inputs(seed: int):
    """The zoo's BERT inputs with other token ids: each thread its own batch."""
    _, _, kwargs = zoo.bert()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, kwargs["input_ids"].shape, generator=g)
    return {"input_ids": ids, "attention_mask": kwargs["attention_mask"]}


def _in_threads(work, count: int = THREADS) -> list:
    """`work(i)` for i in range(count), all started together (a barrier), results in order."""
    barrier = threading.Barrier(count)

    def run(i):
        barrier.wait(timeout=DEADLINE)
        return work(i)

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(run, i) for i in range(count)]
        done, pending = concurrent.futures.wait(futures, timeout=DEADLINE)
        assert not pending, f"{len(pending)} of {count} threads did not finish in {DEADLINE} s: a deadlock"
        return [f.result() for f in futures]


def _as_numpy(output) -> np.ndarray:
    value = output["last_hidden_state"] if isinstance(output, dict) else output.last_hidden_state
    return np.asarray(value.detach() if isinstance(value, torch.Tensor) else value)


@pytest.fixture(scope="module")
def bert():
    module, _, _ = zoo.bert()
    return module, jaxport.from_torch(module, (), _inputs(0))


def test_a_converted_model_called_from_eight_threads(bert):
    module, model = bert
    serial = [_as_numpy(model(**_inputs(i))) for i in range(THREADS)]
    for i, ours in enumerate(_in_threads(lambda i: _as_numpy(model(**_inputs(i))))):
        np.testing.assert_array_equal(ours, serial[i])
    with torch.no_grad():
        np.testing.assert_allclose(serial[3], _as_numpy(module(**_inputs(3))), rtol=1e-4, atol=1e-5)


def test_apply_under_jit_and_frozen_from_eight_threads(bert):
    _, model = bert
    frozen = model.frozen()
    apply = jax.jit(model.apply)
    serial = [_as_numpy(model(**_inputs(i))) for i in range(THREADS)]

    def work(i):
        arrays = {k: v.numpy() for k, v in _inputs(i).items()}
        return _as_numpy(frozen(**_inputs(i))), _as_numpy(apply(model.params, **arrays))

    for i, (frozen_out, applied) in enumerate(_in_threads(work)):
        np.testing.assert_allclose(frozen_out, serial[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(applied, serial[i])


def test_the_compile_backend_from_eight_threads():
    torch._dynamo.reset()
    module, _, _ = zoo.bert()
    compiled = torch.compile(module, backend="jaxport")
    with torch.no_grad():
        expected = [_as_numpy(module(**_inputs(i))) for i in range(THREADS)]

    def work(i):
        with torch.no_grad():
            return _as_numpy(compiled(**_inputs(i)))

    for i, ours in enumerate(_in_threads(work)):  # the first calls compile, from every thread at once
        np.testing.assert_allclose(ours, expected[i], rtol=1e-4, atol=1e-5)
    for i, ours in enumerate(_in_threads(work)):  # and then run what was compiled
        np.testing.assert_allclose(ours, expected[i], rtol=1e-4, atol=1e-5)
    assert dynamo.counters["graphs"] >= 1
    torch._dynamo.reset()


def test_the_compile_backend_trains_from_eight_threads():
    """Eight threads, eight copies of one model, each compiled and trained a step: the same
    gradients as eager's for each copy."""
    torch._dynamo.reset()
    base, _, _ = zoo.cnn()
    base.train()

    def step(model, x):
        model.zero_grad()
        model(x).square().mean().backward()
        return [p.grad.detach().clone() for p in model.parameters()]

    images = [torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(i)) for i in range(THREADS)]
    expected = []
    for x in images:
        copy = _clone(base)
        expected.append(step(copy, x))

    def work(i):
        model = _clone(base)
        return step(torch.compile(model, backend="jaxport"), images[i])

    for grads, want in zip(_in_threads(work), expected):
        for g, w in zip(grads, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def _clone(module):
    import copy

    return copy.deepcopy(module)


def test_the_eager_frontend_from_eight_threads():
    """Each thread runs a model on the jax device (the compiled-call cache shared by all)."""
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    inputs = [torch.randn(5, 16, generator=torch.Generator().manual_seed(i)) for i in range(THREADS)]
    with torch.no_grad():
        expected = [layer(x) for x in inputs]
    with jaxport.eager():
        on_jax = _clone(layer).to("jax")

    def work(i):
        with jaxport.eager(), torch.no_grad():
            results = []
            for _ in range(5):  # the second sighting of each call compiles it, from any thread
                results.append(on_jax(inputs[i].to("jax")).cpu())
            return results

    for results, want in zip(_in_threads(work), expected):
        for result in results:
            torch.testing.assert_close(result, want, rtol=1e-5, atol=1e-5)
