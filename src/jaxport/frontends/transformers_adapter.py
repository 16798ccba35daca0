"""transformers beyond its documented API: every private function, attribute and renamed field
jaxport relies on, in one place. A transformers release that moves one breaks here, and in
`tests/frontends/test_transformers_adapter.py`, which CI runs against each transformers release it
installs (`make test-compat`: the floor, the pinned release and the newest).

jaxport supports transformers from `versions.FLOORS["transformers"]` on: the first release with
both its Dynamo exporter (`transformers.exporters`, 5.13) and the static cache layer of hybrid
linear-attention models (`LinearAttentionAndStaticFullAttentionLayer`, 5.14). `require()` checks
the installed release when jaxport first needs transformers.

What lives here:
- the cache's name: a model's output field and forward argument, `past_key_values` (Mamba-style
  models: `cache_params`) until 5.23 and `cache` from 5.24 on;
- `GenerationConfig._get_default_generation_params()`, the values `generate` fills in for unset
  settings;
- `sdpa_attention.use_gqa_in_sdpa`, switched inside a context (`grouped_query_attention`);
- JetMoE's experts (`JetMoeParallelExperts.forward`), switched inside a context to one grouped
  product over group sizes as values (`experts_as_grouped_products`), and `grouped_mm_fallback`,
  the custom op transformers registers for its own grouped products;
- `masking_utils.maybe_pad_block_sequence_ids`, switched inside a context to pad a step's block
  ids (Gemma 3 and 4's image blocks) to its 2-D attention mask's length
  (`block_ids_over_the_whole_mask`);
- the static cache a step of `CausalLMStep` runs on: transformers' static layers, given the
  tensors of jaxport's cache through their private fields (`seen`, `cumulative_length`,
  `is_initialized`, the indexer's and recurrent layers' twins, `has_previous_state`), and
  subclassed where transformers' code branches on a length torch.export cannot bound; its
  sliding-window layers keep their window only (`window_slots`, a `WindowLayer` whose
  `get_mask_sizes` gives an offset); states a cache keeps beside its layers (MiniMax's
  `linear_cache`, `states_beside_layers`), in a cache of the model's own class;
- `PreTrainedModel._init_weights`, run on CPU copies of the buffers a model built on the meta
  device computes in `__init__` (`computed_buffers`: rotary `inv_freq`, position ids), as
  transformers runs it for the buffers a checkpoint does not hold.

transformers is imported inside the functions: it is an optional dependency (`jaxport[hf]`).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import inspect
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

from .. import versions
from ..errors import InputError

#: The names a model's cache goes by, as its output field and forward argument: `cache` from
#: transformers 5.24 on, `past_key_values` before (and `cache_params` for Mamba-style models).
CACHE_NAMES = ("cache", "past_key_values", "cache_params")


def require() -> ModuleType:
    """transformers, checked against jaxport's floor (an ImportError naming both releases)."""
    return versions.require("transformers")


def cache_argument(model: torch.nn.Module) -> str:
    """The forward argument `model` takes its cache as (a forward that takes both of the older
    names keeps its recurrent state in `cache_params`)."""
    forward = inspect.signature(model.forward).parameters
    return next((name for name in ("cache", "cache_params", "past_key_values") if name in forward), "past_key_values")


def returned_cache(output: Any) -> Any:
    """The cache a model's forward returned (None if it returned none)."""
    return next((cache for name in CACHE_NAMES if (cache := getattr(output, name, None)) is not None), None)


def cache_field(fields: list[str]) -> str | None:
    """Which of a model output's `fields` is the key/value cache `from_torch` feeds back, if any."""
    return next((name for name in ("cache", "past_key_values") if name in fields), None)


def default_generation_params() -> dict:
    """What transformers' `generate` fills in for generation settings left at None."""
    from transformers import GenerationConfig

    return GenerationConfig._get_default_generation_params()


@contextlib.contextmanager
def grouped_query_attention() -> Iterator[None]:
    """transformers' SDPA attention hands grouped-query heads to `scaled_dot_product_attention`
    as they are (`enable_gqa=True`) instead of repeating each key/value head in memory first
    (`repeat_kv`), which it does under a mask because PyTorch's fused CPU/CUDA kernels need it.
    jaxport's lowering groups the query heads itself, so the exported graph should not repeat:
    repeating cost a copy of every layer's keys and values per step.

    transformers decides in `sdpa_attention.use_gqa_in_sdpa`, switched on process-wide by an
    environment variable. Here the switch is this context's own (`_Switch`)."""
    with _GQA_SWITCH.held():
        yield


@contextlib.contextmanager
def experts_as_grouped_products() -> Iterator[None]:
    """JetMoE's experts (`JetMoeParallelExperts`, attention's and MLP's) split their rows by
    group sizes its router reads out of a tensor (`expert_size.tolist()`), pieces whose shapes
    depend on values, which a jitted program cannot have. Inside this context each is one
    grouped product over the same rows instead, transformers' `grouped_mm_fallback` with the
    sizes' cumulative ends, as transformers' newer MoE models run their experts: the same sums,
    and shapes that do not depend on values (jaxport lowers it as it lowers Mixtral's)."""
    with _EXPERTS_SWITCH.held():
        yield


@contextlib.contextmanager
def block_ids_over_the_whole_mask() -> Iterator[None]:
    """Gemma 3 and 4's masks let a block of image tokens see itself (`block_sequence_ids`, -1
    outside any block), padded by transformers to the key/value positions the mask reads,
    `kv_length + kv_offset`. A sliding layer's offset is read from its cache, a value, so that
    pad's size depends on values. The step's attention mask covers every position of its cache,
    so inside this context the ids are padded to that mask's length instead: a size known from
    shapes, and the same ids at every position the mask reads."""
    with _BLOCK_IDS_SWITCH.held():
        yield


class _Switch:
    """`owner.name` (from `locate()`, None where this transformers lacks it) replaced by
    `make(original, switched)` while at least one context holds it; the replacement must call
    `original` unless `switched()`, which is true inside a holding context only (a `ContextVar`,
    so other threads and other contexts are not affected). The last context to close puts
    transformers' own back."""

    def __init__(self, name: str, locate, make) -> None:
        self._locate, self._make = locate, make
        self._on: contextvars.ContextVar[bool] = contextvars.ContextVar(f"jaxport_{name}", default=False)
        self._lock = threading.Lock()
        self._holders = 0
        self._original: Any = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._acquire()
        token = self._on.set(True)
        try:
            yield
        finally:
            self._on.reset(token)
            self._release()

    def _acquire(self) -> None:
        with self._lock:
            if self._holders == 0 and (target := self._locate()) is not None:
                owner, name = target
                self._original = getattr(owner, name)
                setattr(owner, name, self._make(self._original, self._on.get))
            self._holders += 1

    def _release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._original is not None:
                owner, name = self._locate()
                setattr(owner, name, self._original)
                self._original = None


def _sdpa_module() -> tuple[Any, str]:
    from transformers.integrations import sdpa_attention  # transformers: optional (`jaxport[hf]`)

    return sdpa_attention, "use_gqa_in_sdpa"


def _gqa_in_sdpa(original, switched):
    @torch._dynamo.assume_constant_result
    def use_gqa_in_sdpa(attention_mask, key, value) -> bool:
        return switched() or original(attention_mask, key, value)

    return use_gqa_in_sdpa


def _jetmoe_experts() -> tuple[Any, str] | None:
    try:
        from transformers.integrations import moe  # noqa: F401  (registers transformers::grouped_mm_fallback)
        from transformers.models.jetmoe import modeling_jetmoe
    except ImportError:
        return None
    return modeling_jetmoe.JetMoeParallelExperts, "forward"


def _experts_by_grouped_product(original, switched):
    def forward(self, inputs, expert_size):
        if not switched():
            return original(self, inputs, expert_size)
        ends = torch.tensor(expert_size, device=inputs.device).cumsum(0).to(torch.int32)
        # weight [experts, out, in], each expert's rows times its transpose, as F.linear
        return torch.ops.transformers.grouped_mm_fallback(inputs, self.weight.transpose(1, 2), ends)

    return forward


def _masking_utils() -> tuple[Any, str] | None:
    from transformers import masking_utils

    return (masking_utils, "maybe_pad_block_sequence_ids") if hasattr(masking_utils, "maybe_pad_block_sequence_ids") \
        else None


def _block_ids_to_mask_length(original, switched):
    def maybe_pad_block_sequence_ids(block_sequence_ids, attention_mask, kv_length, kv_offset):
        if not switched() or attention_mask is None or attention_mask.dim() != 2:
            return original(block_sequence_ids, attention_mask, kv_length, kv_offset)
        padding = attention_mask.shape[-1] - block_sequence_ids.shape[-1]
        return torch.nn.functional.pad(block_sequence_ids, (0, padding), value=-1)

    return maybe_pad_block_sequence_ids


_GQA_SWITCH = _Switch("gqa", _sdpa_module, _gqa_in_sdpa)
_EXPERTS_SWITCH = _Switch("grouped_experts", _jetmoe_experts, _experts_by_grouped_product)
_BLOCK_IDS_SWITCH = _Switch("block_ids", _masking_utils, _block_ids_to_mask_length)


#: A recurrent layer's states: transformers' attribute (a dict by state index) -> the prefix of
#: each state's name in the layer's dict (`conv_0`, `recurrent_0`, ...).
RECURRENT_PREFIXES = {"conv_states": "conv_", "recurrent_states": "recurrent_"}


def recurrent_slot(name: str) -> tuple[str, int] | None:
    """(transformers' attribute, state index) that a recurrent state's name stands for; None for
    keys, values and indexer keys."""
    for attribute, prefix in RECURRENT_PREFIXES.items():
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return attribute, int(name[len(prefix):])
    return None


def static_cache(text_config: Any, max_length: int, states: list[dict], seen: Any, length: torch.Tensor, *,
                 decoding: bool, name: str) -> Any:
    """transformers' `StaticCache` of `max_length` slots holding `states` (each layer's dict of
    tensors, as `CausalLMStep` names them): attention layers whose token count is `seen` (a
    size torch.export can bound) and whose position counters are `length`, recurrent layers
    with their conv and scan states, marked as after a prefill when `decoding`."""
    from transformers.cache_utils import (
        LinearAttentionAndStaticFullAttentionLayer,
        LinearAttentionLayer,
        StaticCache,
        StaticIndexedLayer,
        StaticLayer,
    )

    cache = StaticCache(config=text_config, max_cache_len=max_length)
    if len(cache.layers) != len(states):
        raise InputError(f"{name}: its static cache has {len(cache.layers)} layers, but it cached {len(states)}")
    for i, state in enumerate(states):
        if not state:
            continue  # a layer that caches nothing keeps transformers' own placeholder
        recurrent = {key: tensor for key, tensor in state.items() if recurrent_slot(key)}
        if "keys" not in state:
            layer = cache.layers[i] = _recurrent_layer_class(LinearAttentionLayer)(
                number_of_states=_state_count(recurrent))
        else:
            if recurrent:
                base = LinearAttentionAndStaticFullAttentionLayer
                layer = _recurrent_layer_class(_step_layer_class(base))(
                    max_length, number_of_states=_state_count(recurrent))
            elif (slots := _window_slots(cache.layers[i], max_length)) is not None:
                if state["keys"].shape[2] != slots:
                    raise InputError(f"{name}: layer {i} attends to a window of {slots + 1} tokens, which keeps "
                                     f"{slots} slots, but its cache holds {state['keys'].shape[2]}")
                layer = _window_layer_class()(slots)
            else:
                base = StaticIndexedLayer if "indexer_keys" in state else StaticLayer
                layer = _step_layer_class(base)(max_length)
            cache.layers[i] = layer
            _fill_attention(layer, state, seen, length)
        if recurrent:
            _fill_recurrent(layer, recurrent, previous=decoding)
    return cache


def _window_slots(layer: Any, max_length: int) -> int | None:
    """The slots a step keeps for transformers' static sliding-window (or chunked) layer
    `layer`, whose `max_cache_len` is its window up to `max_length`, where the window is shorter
    (see `window_slots`); None for any other layer."""
    if type(layer).__name__ != "StaticSlidingWindowLayer":
        return None
    slots = _slots(layer.max_cache_len, max_length)
    return None if slots == max_length else slots


def window_slots(layer: Any, max_length: int) -> int:
    """How many slots a step's cache gives a layer of transformers' dynamic cache: a
    sliding-window (or chunked) layer of a window W shorter than `max_length` W - 1, the
    earlier tokens a query attends to besides itself, as transformers' dynamic layer keeps
    (and as the generate it is compared with attends to, even where a model's own mask ignores
    the window: Moshi's); any other layer `max_length`."""
    if type(layer).__name__ != "DynamicSlidingWindowLayer":
        return max_length
    return _slots(int(layer.sliding_window), max_length)


def _slots(window: int, max_length: int) -> int:
    """A window's slots: W - 1 for a window shorter than `max_length`, else every slot."""
    return window - 1 if window < max_length else max_length


def _state_count(recurrent: dict) -> int:
    return 1 + max(recurrent_slot(name)[1] for name in recurrent)


def _fill_attention(layer: Any, state: dict, seen: Any, length: torch.Tensor) -> None:
    """Set a static attention layer's keys and values (and indexer keys) to copies of `state`'s."""
    layer.seen = seen
    k, v = state["keys"].clone(), state["values"].clone()
    layer.keys, layer.values = k, v
    layer.dtype, layer.device = k.dtype, k.device
    layer.batch_size, layer.num_heads = k.shape[:2]
    layer.k_head_dim, layer.v_head_dim = k.shape[-1], v.shape[-1]
    layer.cumulative_length = length.clone()  # every layer adds T to its own counter
    layer.is_initialized = True
    if "indexer_keys" in state:
        layer.indexer_keys = state["indexer_keys"].clone()
        layer.indexer_dtype, layer.indexer_device = layer.indexer_keys.dtype, layer.indexer_keys.device
        layer.indexer_cumulative_length = length.clone()
        layer.is_indexer_initialized = True


def _fill_recurrent(layer: Any, recurrent: dict, *, previous: bool) -> None:
    """Set a recurrent layer's conv and recurrent states to copies of `recurrent`'s, with
    `has_previous_state` as transformers has it after a prefill (`previous`) or before one."""
    for name, tensor in recurrent.items():
        attribute, index = recurrent_slot(name)
        layer.dtype, layer.device = tensor.dtype, tensor.device
        getattr(layer, attribute)[index] = tensor.clone()
        getattr(layer, f"is_{attribute}_initialized")[index] = True
        if attribute == "conv_states":
            layer.conv_kernel_size[index] = tensor.shape[-1]
        layer.has_previous_state[index] = previous


#: Fields of a cache that keep states beside its layers: MiniMax's `linear_cache`, each
#: linear-attention layer's [B, heads, d, d] state by layer index ([] for other layers).
STATES_BESIDE_LAYERS = ("linear_cache",)
_BESIDE_NAME = f"{RECURRENT_PREFIXES['recurrent_states']}0"  # a recurrent state's: prefill and decode split


def states_beside_layers(cache: Any) -> list[dict[str, torch.Tensor]] | None:
    """The states a cache keeps beside its layers, as each layer's dict ({} for a layer with
    none); None for a cache that keeps none there."""
    kept = getattr(cache, STATES_BESIDE_LAYERS[0], None)
    if not isinstance(kept, list):
        return None
    return [{_BESIDE_NAME: state} if isinstance(state, torch.Tensor) else {} for state in kept]


def with_states_beside_layers(cache_class: type, cache: Any, states: list[dict], *, previous: bool) -> Any:
    """A cache of the model's own class (MiniMax's code insists on `MiniMaxCache`) on `cache`'s
    static layers, keeping each layer's state beside them as that class does: the states given
    after earlier tokens (`previous`), none before a prompt, where the model starts its own
    (its `get_linear_cache` then reads None for every layer)."""
    own = cache_class.__new__(cache_class)
    own.__dict__.update(vars(cache))
    own.linear_cache = [state.get(_BESIDE_NAME, []) if previous else None for state in states]
    return own


def layer_state(layer: Any, name: str) -> torch.Tensor:
    """A layer's state `name` as `CausalLMStep` names it."""
    slot = recurrent_slot(name)
    return getattr(layer, name) if slot is None else getattr(layer, slot[0])[slot[1]]


@functools.cache
def _step_layer_class(base: type) -> type:
    """transformers' static layer `base` whose `get_seq_length` is the step's token count as a size
    (an unbacked SymInt) rather than a tensor: the length is only known at run time, but code
    that sizes or slices with it needs a number torch.export can bound."""

    class StepLayer(base):
        seen: Any = 0

        def update(self, key_states, value_states, *args, **kwargs):
            out = super().update(key_states, value_states, *args, **kwargs)
            self.seen = self.seen + key_states.shape[-2]
            return out

        def get_seq_length(self):
            return self.seen

    StepLayer.__name__ = StepLayer.__qualname__ = f"Step{base.__name__}"
    return StepLayer


@functools.cache
def _window_layer_class() -> type:
    from transformers.cache_utils import StaticLayer

    class WindowLayer(StaticLayer):
        """A sliding-window layer that keeps the last `max_cache_len` tokens (its window's but
        one, `window_slots`), in order, the newest last: slot j holds token `seen - slots + j`
        (empty while that is negative). transformers' `StaticSlidingWindowLayer` keeps such a
        buffer but branches on a Python count of tokens; here every step runs the same code. A
        step attends to the slots followed by its own T tokens, which are the tokens
        `seen - slots .. seen + T - 1` in order; while fewer than `slots` came before, the empty
        slots are rotated to the end, so that token i sits at key i and the empty ones come
        after every query, where the causal mask hides them (`get_mask_sizes` then gives
        offset 0)."""

        is_sliding = True
        seen: Any = 0

        def update(self, key_states, value_states, *args, **kwargs):
            slots, count = self.max_cache_len, key_states.shape[-2]
            keys = torch.cat([self.keys, key_states.to(self.keys.dtype)], dim=-2)
            values = torch.cat([self.values, value_states.to(self.values.dtype)], dim=-2)
            self.keys, self.values = keys[:, :, -slots:], values[:, :, -slots:]
            empty = (slots - self.cumulative_length).clamp(min=0)
            order = (torch.arange(slots + count, device=keys.device) + empty) % (slots + count)
            self.cumulative_length = self.cumulative_length + count
            self.seen = self.seen + count
            return keys.index_select(2, order), values.index_select(2, order)

        def get_seq_length(self):
            return self.seen

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.max_cache_len + query_length, torch.sym_max(0, self.seen - self.max_cache_len)

    return WindowLayer


@functools.cache
def _recurrent_layer_class(base: type) -> type:
    """transformers' recurrent layer `base` whose prefill stores the last `kernel` inputs of a
    convolution without branching on the prompt's length: transformers pads a prompt shorter than
    the kernel with an `if` on its length, which would fix the length of an exported prefill.
    Zeros before the prompt then a slice are the same states for every length."""

    class RecurrentStepLayer(base):
        def update_conv_state(self, conv_states, state_idx=0, **kwargs):
            if self.has_previous_state[state_idx]:
                return super().update_conv_state(conv_states, state_idx, **kwargs)
            kernel = self.conv_kernel_size[state_idx]
            padded = torch.nn.functional.pad(conv_states, (kernel, 0))
            self.conv_states[state_idx] = padded[..., -kernel:].to(self.conv_states[state_idx].dtype)
            self.has_previous_state[state_idx] = True
            return conv_states

    RecurrentStepLayer.__name__ = RecurrentStepLayer.__qualname__ = f"RecurrentStep{base.__name__}"
    return RecurrentStepLayer


# -- buffers a model computes, for a model built on the meta device -----------------------------


#: Two fills a computed buffer starts from: an element `_init_weights` wrote holds the same value
#: after both, one it did not write holds each fill in turn.
_FILLS = (3.0, 5.0)


def computed_buffers(module: torch.nn.Module, names: Iterator[str] | list[str]) -> dict[str, torch.Tensor]:
    """CPU values of the buffers among `names` (full names in `module`) that a Hugging Face model
    inside `module`, built on the meta device, computes in `__init__` instead of loading: a
    rotary embedding's `inv_freq`, position ids. Each is made as transformers makes the buffers a
    checkpoint lacks: its module's `PreTrainedModel._init_weights` run on a copy of that module
    whose buffers are CPU tensors. A buffer counts only where `_init_weights` writes every element
    of it (checked from two different fills); the others are left out, for the caller to name."""
    from transformers import PreTrainedModel

    wanted = set(names)
    owners: dict[str, tuple[torch.nn.Module, PreTrainedModel]] = {}
    pretrained: list[tuple[str, PreTrainedModel]] = []
    for prefix, sub in module.named_modules():
        if isinstance(sub, PreTrainedModel):
            pretrained.append((prefix, sub))
        model = next((m for p, m in reversed(pretrained) if prefix == p or prefix.startswith(p + ".") or not p), None)
        if model is not None:
            owners[prefix] = (sub, model)
    values: dict[str, torch.Tensor] = {}
    for prefix, (owner, model) in owners.items():
        mine = {name: buffer for name, buffer in owner.named_buffers(recurse=False)
                if (f"{prefix}.{name}" if prefix else name) in wanted and buffer is not None and buffer.is_meta}
        if not mine:
            continue
        runs = [_initialized_copy(owner, model, mine, fill) for fill in _FILLS]
        if runs[0] is None or runs[1] is None:
            continue
        for name in mine:
            first, second = runs[0][name], runs[1][name]
            if torch.equal(first, second) or (first.is_floating_point() and torch.equal(first.isnan(), second.isnan())
                                              and torch.equal(first.nan_to_num(), second.nan_to_num())):
                values[f"{prefix}.{name}" if prefix else name] = first
    return values


def _initialized_copy(owner: torch.nn.Module, model: Any, buffers: dict[str, torch.Tensor],
                      fill: float) -> dict[str, torch.Tensor] | None:
    """`buffers` of `owner` as `model._init_weights` leaves them when it runs on a shallow copy of
    `owner` whose buffers are CPU tensors filled with `fill` (its parameters, on meta, untouched);
    None where `_init_weights` fails on it."""
    clone = copy.copy(owner)
    clone._buffers = dict(owner._buffers)
    for name, buffer in buffers.items():
        clone._buffers[name] = torch.full(buffer.shape, fill if buffer.dtype != torch.bool else fill == _FILLS[0],
                                          dtype=buffer.dtype)
    try:
        with torch.no_grad():
            model._init_weights(clone)
    except Exception:  # noqa: BLE001 - transformers' code on a module it was not written for: not computed
        return None
    return {name: clone._buffers[name] for name in buffers}

