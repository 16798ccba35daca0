"""Small configs for the catalogue sweep: a model type's default config shrunk by field-name rules.

`shrink_config(model_type)` takes `AutoConfig.for_model(model_type)` as a dict and rewrites
every numeric field by what its NAME says it is (a layer count, a width, a head count, a
vocabulary size, a token id...), level by level through nested sub-configs (text_config,
vision_config, encoder/decoder...), then builds the config class from the result, so the class's
own `__post_init__` re-derives (and validates) whatever it computes from those fields.

No model gets a hand-written config; the few per-model exceptions are data in `OVERRIDES`,
each with its reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The target sizes. Widths are divided by the largest power of two that leaves the model width
# (hidden_size, d_model, ...) at least HIDDEN: an exact division keeps relations between widths
# that a model assumes (6 * coordinate_size == hidden_size in LayoutLMv3, in == out of the
# previous stage in a CNN), which fixed targets would break.
HIDDEN = 64
MAX_HIDDEN = 256  # beyond this (no power of two fits), an inexact division to HIDDEN
HEADS = 4  # attention heads (fewer where the shrunk width is not a multiple)
KV_HEADS = 2  # key/value heads where the model uses grouped-query attention
HEAD_DIM = 16  # head sizes not tied to hidden_size // heads: divided by a power of two to this
LAYERS = 2  # at least: a model with per-layer kinds keeps one layer of each kind
VOCAB = 128
EXPERTS = 4
TOP_K = 2
IMAGE = 64  # image_size (patch sizes are kept: some models' strides are fixed in code)
MAX_POSITIONS = 512  # learned position tables; inputs are much shorter
AUDIO_POSITIONS = 64  # max_source_positions of audio encoders: the input length follows from it
SLIDING_WINDOW = 4  # shorter than the inputs, so the windowed masks are exercised
CONV_POS = 16  # convolutional position embeddings (wav2vec2 family)
CNN_SCALE = 4  # channel widths of convolutional networks (no hidden_size) are divided by this
GROUPS = 4  # group norms' and grouped convolutions' group counts

# Per-model exceptions to the rules: {model_type: (config fields, reason)}. Dotted keys reach into
# sub-configs ("text_config.x"). Applied to the default config (so a default that does not even
# validate can be fixed) and again after shrinking, unless a relation between fields set it.
DEFAULT = "<the default config's value>"
OVERRIDES: dict[str, tuple[dict[str, Any], str]] = {
    "bamba": (
        {"num_hidden_layers": 2, "attn_layer_indices": [1]},
        "its default config has no attention layer (attn_layer_indices unset), and transformers' own "
        "forward then fails (get_seq_length on a cache of linear-attention layers only); Bamba's "
        "checkpoints interleave attention layers, so one of each kind",
    ),
    "blt": (
        {"use_cache": False},
        "transformers' own forward fails with a cache: it builds DynamicCache(config=BltConfig), "
        "which reads num_hidden_layers, a field BltConfig lacks (transformers 5.23)",
    ),
    "cvt": (
        {"depth": [1, 2, 3]},
        "its drop-path schedule reads stage i's list at index i, so stage i needs more than i blocks",
    ),
    "efficientnet": (
        {"width_coefficient": 1.0, "depth_coefficient": 1.0, "hidden_dim": 1280, "in_channels": DEFAULT,
         "out_channels": DEFAULT},
        "its code hard-codes the stem (32) and head (1280) widths, scaled by the coefficients, so "
        "the channel lists stay; B0's coefficients (the default is B7) keep it small",
    ),
    "granitemoehybrid": (
        {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]},
        "its default config has only linear-attention (Mamba) layers, and transformers' own forward "
        "then fails (get_seq_length on a cache of linear-attention layers only); Granite 4.0's "
        "hybrid checkpoints interleave attention layers, so one of each kind",
    ),
    "shieldgemma2": (
        {"yes_token_index": 1, "no_token_index": 2},
        "the yes/no token ids default to 10784/3771 in its code, past the shrunk vocabulary",
    ),
    "xlstm": (
        {"hidden_size": 128, "embedding_dim": 128},
        "its config rounds the query and value widths (hidden size times a factor, 0.5 for queries) "
        "up to multiples of 64 for the cache, while its layers use them unrounded: at a width of 64 "
        "the cache holds 16 query columns per head where the layer has 8; at 128 both have 16",
    ),
    "xmod": (
        {"default_language": "en_XX"},
        "it refuses to run without a language (its default config lists en_XX but selects none)",
    ),
    "zamba": (
        {"num_hidden_layers": 6, "layers_block_type": None},
        "its hybrid layers share one transformer block, tied by a pattern that needs two hybrid "
        "layers; six layers with the shrunk period (2) give two",
    ),
}

# Fields that hold one value per layer are recognised by their length; these hold layer INDICES.
_INDEX_LIST = re.compile(r"(layers|layer_ids|indexes|idxs|indices)$")
_LAYER_COUNT = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_decoder_layers", "num_encoder_layers", "speech_encoder_layers", "t2u_encoder_layers",
    "t2u_decoder_layers", "encoder_num_hidden_layers", "decoder_num_hidden_layers",
    "conf_num_hidden_layers", "num_sparse_encoder_layers", "num_sparse_decoder_layers", "depth",
    "text_encoder_layers", "text_decoder_layers", "num_blocks",
}
_STAGE_LISTS = ("depths", "hidden_sizes", "embed_dims", "block_repeats", "num_block_repeats",
                "stage_num_blocks", "neck_hidden_sizes", "sr_ratios", "patch_sizes")
_HIDDEN = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "emb_dim", "model_dim", "d_embed")
_MAIN_HEADS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads",
               "attention_heads", "num_attention_head")
_HEAD_DIMS = ("head_dim", "d_kv", "d_head", "dim_head", "attention_head_size", "attention_head_dim",
              "kv_channels")
_TOKEN_ID = re.compile(r"(token_ids?|token_index|token_idx)$|^(pad|bos|eos|sep|cls|unk|mask|eod)_(id|index)$")
_POSITIONS = re.compile(r"^(max_.*(position|pos_emb|seq_len|ctx).*|n_positions|n_ctx|context_length|max_length)$")
_WINDOW = re.compile(r"^(sliding_window|sliding_window_size|attention_window|local_attention|swa_window|"
                     r"attention_window_size|local_attention_window_len|attention_chunk_size)$")
_EXPERTS = re.compile(r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|"
                      r"num_experts_per_layer)$")
_TOP_K = re.compile(r"(experts_per_tok|experts_per_token|moe_topk|moe_top_k|^moe_k|^top_k|router_topk|"
                    r"num_selected_experts)$")
_SHARED_EXPERTS = re.compile(r"shared_experts$")
_PERIOD = re.compile(r"(_period|sliding_window_pattern|_every_n_layers|_layer_interval|rope_layer_interval|"
                     r"sparse_step|moe_layer_step|attention_frequency|_layer_freq)$")
_FIRST_K = re.compile(r"^(first_k_dense_replace|moe_layer_start_index|max_window_layers|num_dense_layers|"
                      r"num_kv_shared_layers|num_nextn_predict_layers|num_adapter_layers|num_global_layers|"
                      r"attn_layer_offset|expert_layer_offset)$|_layer_offset$")
# Widths other than the model width: divided by the level's factor too (`_width`).
_WIDTH = re.compile(r"(_size$|hidden_size|intermediate|ffn|^d_ff$|^d_inner$|_dim$|channels$|_rank$|"
                    r"units$|embedding_size$|projection_size$|_hidden_dim$|^dff$|^dim_ff$|^mlp_dim$|"
                    r"conv_dim$|_size_mlp$|num_filters$|state_size$|d_state$|^d_latents$|_embed_dim$|"
                    r"feed_forward_size$|_width$)")
# Never shrunk, though their names look like widths: input feature sizes and the like.
_KEEP = re.compile(r"(vocab|image|patch|kernel|window|chunk|stride|batch|position|bucket|^num_channels$|"
                   r"^in_channels$|input_channels|mel|feat|sampling|crop|pool_size|pool_scales|pooling|"
                   r"input_dim|input_size|block_size|group_size|ngram|train_size|output_shape|"
                   r"frame|sample|_rate$|codebook|audio_channels|num_labels|label|dropout|_eps|epsilon|"
                   r"^channels$|output_dim|stage_names|theta|factor|scale|ratio|multiplier|_id$|_ids$|"
                   r"_index$|token|seed|cycles|hop_length|n_fft|downsample|upsample|max_|num_mel|"
                   r"multiple_of)")


class _Ctx:
    """What the rules of one level need: the level's original values."""

    new_hidden = None

    def __init__(self, d: dict):
        self.d = d
        self.hidden = next((d[k] for k in _HIDDEN if isinstance(d.get(k), int) and d[k] > 0), None)
        self.heads = next((d[k] for k in _MAIN_HEADS if isinstance(d.get(k), int) and d[k] > 0), None)
        if self.hidden and self.hidden > HIDDEN:
            self.scale = 1
            while self.hidden % (2 * self.scale) == 0 and self.hidden // (2 * self.scale) >= HIDDEN:
                self.scale *= 2
            # heads of a multiple of 8 (partial rotary embeddings rotate a quarter of them)
            while (self.hidden // self.scale) % (HEADS * 8) and self.scale > 1:
                self.scale //= 2
            if (self.hidden // self.scale) % (HEADS * 8) or self.hidden // self.scale > MAX_HIDDEN:
                self.scale = self.hidden / HIDDEN  # no power of two fits: an inexact division
        elif any(isinstance(v, (list, tuple)) and v and isinstance(v[0], (list, tuple)) for v in d.values()):
            self.scale = None  # widths inside nested block lists (block_configs): left alone
        elif not self.hidden and any(k in d for k in _STAGE_LISTS):
            self.scale = CNN_SCALE  # a convolutional network: every width divided by one factor
        else:
            self.scale = None
        # a hierarchical vision model's attention window must fit its last stage's feature map
        depths, patch = d.get("depths"), d.get("patch_size")
        self.last_stage = None
        if isinstance(depths, (list, tuple)) and _is_int(patch) and patch > 0:
            self.last_stage = max(1, IMAGE // patch // 2 ** (len(depths) - 1))
        self.layers: dict[int, list[int]] = {}  # original layer count -> the layer indices kept
        self.new_hidden = _width(self.hidden, self) if self.hidden else None
        self.new_heads = _heads(self.heads, self) if self.heads else None
        head_dim = next((d[k] for k in _HEAD_DIMS if _is_int(d.get(k))), None)
        # a head size that is hidden_size // heads stays so
        self.tied_head_dim = bool(self.hidden and self.heads and head_dim and head_dim * self.heads == self.hidden)
        # every head size of the level (head_dim, qk_rope_head_dim, v_head_dim, rotary_dim, ...)
        # divided by one factor, so sums (MLA's nope + rope) and fractions (rotary_dim) survive
        sizes = [v for k, v in d.items() if isinstance(k, str) and _is_head_size(k) and _is_int(v) and v > 0]
        if self.tied_head_dim and (self.new_hidden // self.new_heads) > 0:
            self.head_scale = head_dim / (self.new_hidden // self.new_heads)
        else:
            self.head_scale = 1
            while sizes and all(v % (2 * self.head_scale) == 0 for v in sizes) and (
                    max(sizes) // (2 * self.head_scale) >= HEAD_DIM):
                self.head_scale *= 2


def _is_head_size(key: str) -> bool:
    return key in _HEAD_DIMS or key == "rotary_dim" or key.endswith(("head_dim", "_d_head", "headdim"))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _width(v: int, ctx: _Ctx) -> int:
    """A width other than the model width: divided by the level's factor (exactly where it
    divides, so relations such as in_channels[i + 1] == out_channels[i] survive)."""
    if v <= 8:
        return v
    if not ctx.scale:
        return min(v, HIDDEN)
    if float(ctx.scale).is_integer() and (int(ctx.scale) & (int(ctx.scale) - 1)) == 0:
        # a power of two: exactly, and to a multiple of 4 where a smaller power gives one
        # (grouped matmuls of MoE experts want 16-byte strides)
        factor = int(ctx.scale)
        while factor > 1 and (v % factor or (v // factor) % 4):
            factor //= 2
        if v % factor == 0 and (factor > 1 or v <= HIDDEN):
            return v // factor
    exact = v / ctx.scale
    return max(8, round(exact / 8) * 8) if exact >= 8 else max(1, round(exact))


def _heads(v: int, ctx: _Ctx) -> int:
    if v <= 2:
        return v
    width = getattr(ctx, "new_hidden", None)
    return next(h for h in (HEADS, 2, 1) if not width or width % h == 0)


def _width_list(values: list, ctx: _Ctx) -> list:
    """Per-stage widths (hidden_sizes, conv_dim, ...), each as `_width`."""
    return [_width(v, ctx) for v in values]


def _heads_list(values: list) -> list:
    """Per-stage head counts: divided by the first stage's, so (3, 6, 12, 24) becomes (1, 2, 4, 8)."""
    if not values or values[0] <= 1 or any(v % values[0] for v in values):
        return values
    return [v // values[0] for v in values]


def _is_index_list(key: str, value, count: int) -> bool:
    """Layer indices (mlp_only_layers=[0, 3]) rather than one value per layer (no_rope_layers=[1, 0, ...])."""
    return bool(_INDEX_LIST.search(key)) and all(_is_int(v) and 0 <= v < count for v in value) and len(
        set(value)) == len(value)


def _is_layer_dict(value, count: int) -> bool:
    return isinstance(value, dict) and bool(value) and "model_type" not in value and all(
        isinstance(k, str) and k.isdigit() and int(k) < count for k in value)


def _layer_selection(d: dict, count: int) -> list[int]:
    """Which layers to keep of `count`: the first of each kind that a per-layer list or index list
    names, so every kind of layer (sliding/full attention, dense/sparse MLP, ...) stays."""
    keep: set[int] = set()
    for key, value in d.items():
        if not isinstance(key, str) or not isinstance(value, (list, tuple, dict)) or not value:
            continue
        if isinstance(value, dict) and not _is_layer_dict(value, count):
            continue
        if _is_layer_dict(value, count):  # {layer index: per-layer settings}
            value = sorted(int(k) for k in value)
        if _is_index_list(key, value, count) or isinstance(d[key], dict):
            keep.add(value[0])  # one listed layer and one not listed
            keep.add(next((i for i in range(count) if i not in value), value[0]))
        elif len(value) < count and "type" in key and all(isinstance(v, str) for v in value):
            # a pattern of layer kinds repeated over the layers: a prefix that has every kind
            firsts = {v: value.index(v) for v in value}
            keep |= set(range(max(firsts.values()) + 1))
        elif len(value) == count:
            seen = set()
            for i, item in enumerate(value):
                tag = json.dumps(item, sort_keys=True, default=str)
                if tag not in seen:
                    seen.add(tag)
                    keep.add(i)
    i = 0
    while len(keep) < min(LAYERS, count):
        keep.add(i)
        i += 1
    return sorted(keep)


def _shrink_level(d: dict, token_map: dict[int, int]) -> dict:
    ctx = _Ctx(d)
    out = dict(d)
    for key, value in d.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = _shrink_level(value, token_map)
    # layer counts first: per-layer lists follow the kept layers
    stages = {len(v) for k, v in d.items() if k in _STAGE_LISTS and isinstance(v, (list, tuple))}
    for key in _LAYER_COUNT:
        count = d.get(key)
        if not _is_int(count) or count in stages:  # a hierarchical model's number of stages
            continue
        if count > LAYERS and count not in ctx.layers:
            ctx.layers[count] = _layer_selection(d, count)
    for key, value in d.items():
        if isinstance(value, dict) and "model_type" in value:
            continue
        new = _rule(key, value, ctx, token_map)
        if new is not _UNCHANGED:
            out[key] = new
    for key in ("out_features", "out_indices"):  # backbone stages: the default (last) after shrinking
        out.pop(key, None)
    _consistency(d, out)
    return out


_UNCHANGED = object()
FIXED = "__fixed_by_relations__"


def _rule(key: str, value, ctx: _Ctx, token_map: dict[int, int]):
    if not isinstance(key, str) or key in ("id2label", "label2id"):
        return _UNCHANGED
    if isinstance(value, (list, tuple)):
        return _list_rule(key, list(value), ctx, token_map)
    if isinstance(value, dict):
        for count, keep in ctx.layers.items():
            if _is_layer_dict(value, count):  # renumbered to the kept layers, zero padding kept
                return {str(keep.index(int(k))).zfill(len(k)): _per_layer(v, ctx, token_map)
                        for k, v in value.items() if int(k) in keep}
        return _UNCHANGED
    # a None the model reads as a number, filled by the usual convention (broken default configs)
    if value is None and key == "head_dim" and ctx.new_hidden and ctx.new_heads:
        return ctx.new_hidden // ctx.new_heads
    if value is None and key == "num_key_value_heads" and ctx.new_heads:
        return ctx.new_heads
    if value is None and key == "vocab_size" and ctx.hidden:
        return VOCAB
    if value is None and _TOP_K.search(key) and any(
            _EXPERTS.search(k) and _is_int(v) and v > 0 for k, v in ctx.d.items() if isinstance(k, str)):
        return TOP_K  # a MoE default that leaves top-k unset (DeepSeek-V2)
    if not _is_int(value):
        return _UNCHANGED
    if _TOKEN_ID.search(key):
        return token_map.get(value, value)
    if key in _LAYER_COUNT:
        return len(ctx.layers[value]) if value in ctx.layers else value
    if "vocab" in key:
        return min(value, VOCAB)
    if key in _HIDDEN:
        return _width(value, ctx)
    if key in ("num_key_value_heads", "num_kv_heads", "n_head_kv", "kv_n_heads", "num_query_groups",
               "encoder_num_key_value_heads", "decoder_num_key_value_heads", "multi_query_group_num",
               "cross_num_key_value_heads", "swa_num_key_value_heads"):
        partner = ctx.d.get(key.replace("key_value_heads", "attention_heads").replace("kv_heads", "heads")
                            .replace("_kv", "").replace("query_groups", "attention_heads"), ctx.heads)
        if _is_int(partner) and value >= partner:
            return _heads(partner, ctx)  # multi-head attention stays multi-head
        return 1 if value == 1 else KV_HEADS
    if key in _MAIN_HEADS or key.endswith("attention_heads"):
        return _heads(value, ctx)
    if key.endswith("heads"):  # other head counts keep their ratio to the main ones
        if ctx.heads:
            return max(1, min(value, value * ctx.new_heads // ctx.heads))
        return _heads(value, ctx)
    if _is_head_size(key):
        exact = value / ctx.head_scale
        return int(exact) if exact.is_integer() else max(2, 2 * round(exact / 2))
    if _EXPERTS.search(key):
        return min(value, EXPERTS)
    if _TOP_K.search(key):
        return min(value, TOP_K)
    if _SHARED_EXPERTS.search(key):
        return min(value, 1)
    if key in ("n_group", "num_expert_group", "n_groups", "mamba_n_groups", "mamba_ngroups"):
        return min(value, 2)
    if key == "topk_group":
        return min(value, 1)
    if _PERIOD.search(key):
        return min(value, 2)
    if _FIRST_K.search(key):
        return min(value, 1)
    if key == "image_size":
        return IMAGE
    if key == "window_size" and ctx.last_stage:
        return min(value, ctx.last_stage)
    if key in ("num_groups", "upsample_groups", "groups"):
        return min(value, GROUPS)
    if key == "max_source_positions":
        return min(value, AUDIO_POSITIONS)
    if key in ("max_length",):
        return min(value, AUDIO_POSITIONS)
    if _POSITIONS.search(key):
        return min(value, MAX_POSITIONS)
    if _WINDOW.search(key):
        return min(value, SLIDING_WINDOW) if value > 0 else value
    if key == "num_conv_pos_embeddings":
        return min(value, CONV_POS)
    if key in ("num_codevectors_per_group",):
        return min(value, 8)
    if _KEEP.search(key):
        return _UNCHANGED
    if _WIDTH.search(key):
        return _width(value, ctx)
    if ctx.hidden and value == ctx.hidden and value > HIDDEN and not key.startswith(("max_", "num_", "n_")):
        return ctx.new_hidden  # a field that is the model width under another name (upsample_groups, ...)
    return _UNCHANGED


def _per_layer(entry, ctx: _Ctx, token_map: dict[int, int]):
    """One layer's overrides of the level's fields, shrunk by the same rules and relations."""
    if not isinstance(entry, dict):
        return entry
    layers = ctx.layers
    ctx = _Ctx({**ctx.d, **entry})  # the layer's own heads etc. pair with its other fields
    ctx.layers = layers
    out = {}
    for key, value in entry.items():
        new = _rule(key, value, ctx, token_map)
        out[key] = value if new is _UNCHANGED else new
    orig = {**ctx.d, **entry}
    full = {**{k: v for k, v in ctx.d.items()}, **out}
    for key, value in ctx.d.items():  # the level's shrunk values, for the relations below
        if key not in entry and not isinstance(value, dict):
            new = _rule(key, value, ctx, token_map)
            full[key] = value if new is _UNCHANGED else new
    level_head_dim = full.get("head_dim")
    _consistency(orig, full)
    nope, rope = "qk_nope_head_dim", "qk_rope_head_dim"
    if nope in entry and "head_dim" not in entry and all(_is_int(orig.get(k)) for k in (nope, rope, "head_dim")):
        if orig["head_dim"] == orig[nope] + orig[rope]:  # the level's head_dim is this layer's sum
            full[nope] = level_head_dim - full[rope]
    return {key: full[key] for key in entry}


def _list_rule(key: str, value: list, ctx: _Ctx, token_map: dict[int, int]):
    if _TOKEN_ID.search(key) and all(_is_int(v) for v in value):
        return [token_map.get(v, v) for v in value]
    for count, keep in ctx.layers.items():
        if _is_index_list(key, value, count):
            return [keep.index(v) for v in value if v in keep]
        if len(value) == count:
            value = [value[i] for i in keep]
            if _WINDOW.search(key):
                value = [min(v, SLIDING_WINDOW) if _is_int(v) and v > 0 else v for v in value]
            return value
    if not value or not all(_is_int(v) for v in value):
        if key == "image_size" and all(isinstance(v, int) for v in value):
            return [IMAGE] * len(value)
        return _UNCHANGED
    if key == "image_size":
        return [IMAGE] * len(value)
    if key in ("depths", "block_repeats", "num_block_repeats", "stage_num_blocks", "depth",
               "num_layers", "layers", "stage_numb_of_layers", "num_blocks", "block_sizes"):
        return [min(v, 1) for v in value]
    if key in _MAIN_HEADS or key.endswith("heads"):
        return _heads_list(value)
    if _WINDOW.search(key):
        return [min(v, SLIDING_WINDOW) if v > 0 else v for v in value]
    if _KEEP.search(key):
        return _UNCHANGED
    if key in _HIDDEN or key in ("hidden_sizes", "embed_dims", "neck_hidden_sizes", "in_channels",
                                 "stem_channels") or _WIDTH.search(key):
        return _width_list(value, ctx)
    return _UNCHANGED


def _consistency(orig: dict, new: dict) -> None:
    """Relations between fields the rules shrink separately, kept when the default config has them.
    The fields it sets are listed under FIXED, so `_forget_derived` leaves them alone."""
    before = dict(new)
    _relations(orig, new)
    new[FIXED] = sorted(k for k in new if isinstance(k, str) and k != FIXED and new[k] != before.get(k))


def _relations(orig: dict, new: dict) -> None:
    # an input size that is the level's width (adapter_input_size == hidden_size) stays so
    hidden = next((k for k in _HIDDEN if _is_int(orig.get(k))), None)
    if hidden:
        for key, value in orig.items():
            if isinstance(key, str) and key.endswith(("input_size", "input_dim")) and value == orig[hidden]:
                new[key] = new[hidden]
    # a count of layers that is all of them (num_kv_shared_layers == num_hidden_layers) stays so
    for count_key in _LAYER_COUNT:
        if _is_int(orig.get(count_key)) and _is_int(new.get(count_key)):
            for key, value in orig.items():
                if isinstance(key, str) and key != count_key and key.endswith("_layers") and (
                        value == orig[count_key] and _is_int(value) and key not in _LAYER_COUNT):
                    new[key] = new[count_key]
    # Mamba-2 style: hidden * expand == heads * head_dim
    for heads, head_dim, expand in (("num_heads", "head_dim", "expand"),
                                    ("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                                    ("mamba_num_heads", "mamba_head_dim", "mamba_expand"),
                                    ("n_mamba_heads", "mamba_headdim", "mamba_expand")):
        hidden = next((k for k in _HIDDEN if _is_int(orig.get(k))), None)
        if hidden and all(_is_int(orig.get(k)) for k in (heads, head_dim, expand)):
            if orig[hidden] * orig[expand] == orig[heads] * orig[head_dim]:
                new[heads] = new[hidden] * new[expand] // new[head_dim]
    # MLA: head sizes equal to qk_nope_head_dim + qk_rope_head_dim (qk_head_dim, swa_head_dim) or
    # to qk_rope_head_dim (head_dim) stay so
    if all(_is_int(orig.get(k)) for k in ("qk_nope_head_dim", "qk_rope_head_dim")):
        total = orig["qk_nope_head_dim"] + orig["qk_rope_head_dim"]
        for key, value in orig.items():
            if isinstance(key, str) and key.endswith("head_dim") and "rope" not in key and "nope" not in key:
                if value == total:
                    new[key] = new["qk_nope_head_dim"] + new["qk_rope_head_dim"]
                elif value == orig["qk_rope_head_dim"]:
                    new[key] = new["qk_rope_head_dim"]


def _token_ids(d: dict, found: set[int]) -> set[int]:
    for key, value in d.items():
        if isinstance(value, dict):
            _token_ids(value, found)
        elif isinstance(key, str) and _TOKEN_ID.search(key):
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if _is_int(v):
                    found.add(v)
    return found


def token_map(d: dict) -> dict[int, int]:
    """Special token ids past the shrunk vocabulary, mapped to distinct ids at its top end (the same
    id everywhere in the config tree, so text_config and the top level still agree)."""
    big = sorted(v for v in _token_ids(d, set()) if v >= VOCAB)
    return {v: VOCAB - 1 - i for i, v in enumerate(big)}


def _drop_fixed(d: dict) -> dict:
    d.pop(FIXED, None)
    for value in d.values():
        if isinstance(value, dict):
            _drop_fixed(value)
    return d


def shrink_dict(d: dict) -> dict:
    new = _shrink_level(d, token_map(d))
    _sibling_widths(d, new)
    return new


def _sibling_widths(orig: dict, new: dict) -> None:
    """A width in one sub-config that is another sub-config's hidden_size (a vision adapter's
    `adapter_out_dim` == text_config.hidden_size, `audio_hidden_size` == audio_config.hidden_size)
    follows that hidden_size: the nearest such sub-config among the level's ancestors' children,
    the one named by the field's prefix (audio_*) or else text_config when several match."""

    def walk(o: dict, n: dict, ancestors: list) -> None:
        own = next((o[k] for k in _HIDDEN if _is_int(o.get(k))), None)
        for key, value in o.items():
            if isinstance(value, dict) and isinstance(n.get(key), dict):
                walk(value, n[key], ancestors + [(o, n, key)])
                continue
            if not (isinstance(key, str) and _is_int(value) and value > HIDDEN and value != own
                    and (_WIDTH.search(key) or key.endswith(("_size", "_dim")))):
                continue
            if key in _HIDDEN or _is_head_size(key) or "vocab" in key or key.startswith(("max_", "num_")):
                continue
            for ao, an, on_path in reversed(ancestors):
                matches = {k: an[k]["hidden_size"] for k, v in ao.items()
                           if isinstance(v, dict) and k != on_path and v.get("hidden_size") == value
                           and isinstance(an.get(k), dict) and _is_int(an[k].get("hidden_size"))}
                if not matches:
                    continue
                prefix = key.split("_")[0] + "_config"
                choice = prefix if prefix in matches else "text_config" if "text_config" in matches else (
                    next(iter(matches)) if len(set(matches.values())) == 1 else None)
                if choice:
                    n[key] = matches[choice]
                    n[FIXED] = list(n.get(FIXED, [])) + [key]
                break

    walk(orig, new, [])


def _forget_derived(config, d: dict) -> None:
    """Set back to their defaults (None, "auto") the numbers the config class computes from others
    (head_dim from hidden_size // heads, num_layers_per_stack, mamba_d_head, ...): its
    __post_init__ computes them again from the shrunk fields. Lists are kept: the layer selection
    already shrank them consistently."""
    import dataclasses

    from transformers import PretrainedConfig

    fixed = set(d.pop(FIXED, ()))
    if dataclasses.is_dataclass(config):
        for f in dataclasses.fields(config):
            if (f.default is None or f.default == "auto") and _is_int(getattr(config, f.name, None)) and (
                    f.name in d and f.name not in fixed and not _TOKEN_ID.search(f.name)):
                d[f.name] = f.default
    for key, value in vars(config).items():
        if isinstance(value, PretrainedConfig) and isinstance(d.get(key), dict):
            _forget_derived(value, d[key])


def shrink_config(model_type: str, task: str | None = None):
    """The default config of `model_type` with every size shrunk by the rules above."""
    from transformers import AutoConfig

    overrides = OVERRIDES.get(model_type, ({}, ""))[0]
    top: dict[str, Any] = {}
    for key, value in overrides.items():
        if value != DEFAULT:
            *path, last = key.split(".")
            level = top
            for part in path:
                level = level.setdefault(part, {})
            level[last] = value
    default = AutoConfig.for_model(model_type, **top)
    original = default.to_dict()
    d = shrink_dict(original)
    for key, value in overrides.items():  # again over the shrunk values, unless a relation set it
        *path, last = key.split(".")
        level = d
        for part in path:
            level = level[part]
        if last in level.get(FIXED, ()):
            continue
        if value == DEFAULT:
            value = original
            for part in key.split("."):
                value = value[part]
        level[last] = value
    _forget_derived(default, d)
    _drop_fixed(d)
    if d.get("is_encoder_decoder") and "decoder_start_token_id" not in d and _is_int(d.get("pad_token_id")):
        d["decoder_start_token_id"] = d["pad_token_id"]  # T5's convention; its default config has none
    if task == "causal-lm" and not d.get("is_encoder_decoder"):
        d["is_decoder"] = True  # what an encoder architecture's LM head asks for (BERT, Reformer)
    if task == "sequence-classification":
        # a decoder-only classifier finds each row's last token by the pad token; batch 2 needs one
        for level in [d] + [v for v in d.values() if isinstance(v, dict) and "vocab_size" in v]:
            if level.get("pad_token_id") is None:
                level["pad_token_id"] = 0
    return type(default)(**d)
