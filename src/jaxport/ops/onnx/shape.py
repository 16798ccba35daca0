"""ONNX shape ops: Reshape, Transpose, Concat, Slice, Pad, Shape, Constant, ...

Shape arithmetic in ONNX graphs (Shape -> Gather -> Concat -> Reshape) must stay concrete
under `jax.jit`. The interpreter sees to that: a node none of whose operands is traced runs
under `jax.ensure_compile_time_eval()`, so plain jnp on concrete operands gives concrete
arrays, which later ops read with `static_ints`/`static_array`. Only Shape and Size build
NumPy arrays, since their input is traced and only its shape is static.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype, normalize_axis, static_array, static_ints

#: ONNX TensorProto element types by number, for attributes that name a type as an int.
_ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz",
    19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
}


def _equal_split(x, axis: int, parts: int):
    # A dim that does not divide evenly leaves the last part smaller (Split-18's rule).
    dim = jnp.shape(x)[normalize_axis(axis, jnp.ndim(x))]
    chunk = -(-dim // parts)
    return _split(x, [chunk] * (parts - 1) + [dim - chunk * (parts - 1)], axis)


def _pad(data, widths, mode: str, value):
    """Pad (negative widths crop) `data` by `widths`, one (before, after) pair per dim."""
    data = jnp.asarray(data)
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if mode == "constant":
        fill = 0 if value is None else jnp.asarray(value).reshape(()).astype(data.dtype)
        out = jnp.pad(data, grow, mode="constant", constant_values=fill)
    elif mode in ("reflect", "edge", "wrap"):
        out = jnp.pad(data, grow, mode=mode)
    else:
        raise ValueError(f"Pad mode '{mode}' is not one of constant, reflect, edge, wrap")
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, out.shape))
    return out[crop]


def _pad_onnx(data, pads, mode, value, axes):
    ndim = jnp.ndim(data)
    axes = list(range(ndim)) if axes is None else [normalize_axis(a, ndim) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    widths = [(0, 0)] * ndim
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[len(axes) + i])
    return _pad(data, widths, mode, value)


def _reshape(data, shape, allowzero: int):
    in_shape = jnp.shape(data)
    # 0 copies the input's dim unless allowzero asks for a literal 0.
    target = [in_shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    return jnp.reshape(data, tuple(target))


def _slice(data, starts, ends, axes, steps):
    shape = jnp.shape(data)
    axes = range(len(starts)) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    index = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(axis, len(shape))
        dim = shape[axis]
        if step == 0:
            raise ValueError("Slice step cannot be 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            index[axis] = slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
        elif dim == 0:
            index[axis] = slice(0, 0)
        else:
            # Clamped to [-1, dim-1]: -1 means "through index 0", which Python spells None.
            end = min(max(end, -1), dim - 1)
            index[axis] = slice(min(max(start, 0), dim - 1), None if end < 0 else end, step)
    return jnp.asarray(data)[tuple(index)]


def _split(x, sizes, axis: int):
    cuts = [sum(sizes[:i + 1]) for i in range(len(sizes) - 1)]
    return tuple(jnp.split(x, cuts, axis=normalize_axis(axis, jnp.ndim(x))))


def _squeeze(data, axes):
    shape = jnp.shape(data)
    if axes is None:
        axes = tuple(i for i, n in enumerate(shape) if n == 1)
    return jnp.squeeze(data, axis=tuple(normalize_axis(a, len(shape)) for a in axes))


def _unsqueeze(data, axes):
    rank = jnp.ndim(data) + len(axes)
    return jnp.expand_dims(data, tuple(sorted(normalize_axis(a, rank) for a in axes)))


@onnx("CenterCropPad", since=18, static=(1,))
def center_crop_pad(input_data, shape, *, axes=None):
    """CenterCropPad(T input_data, Tind shape) -> T; axes; crops round down, pads to the end."""
    in_shape = jnp.shape(input_data)
    axes = range(len(in_shape)) if axes is None else [normalize_axis(a, len(in_shape)) for a in axes]
    widths = [(0, 0)] * len(in_shape)
    for axis, size in zip(axes, static_ints(shape, "CenterCropPad shape")):
        diff = size - in_shape[axis]
        if diff >= 0:
            widths[axis] = (diff // 2, diff - diff // 2)
        else:
            widths[axis] = (-(-diff // 2), -(-diff - -diff // 2))
    return _pad(input_data, widths, "constant", None)


@onnx("Concat", since=1)
def concat(*inputs, axis=1):
    """Concat(T... inputs) -> T concat_result; axis (Concat-1: default 1)."""
    return jnp.concatenate(inputs, axis=normalize_axis(axis, jnp.ndim(inputs[0])))


@onnx("Constant", since=1)
def constant(*, value=None, sparse_value=None, value_float=None, value_floats=None,
             value_int=None, value_ints=None, value_string=None, value_strings=None):
    """Constant() -> T output; one of value, sparse_value, value_float(s), value_int(s)."""
    if value is not None:
        return value
    if sparse_value is not None:
        return sparse_value
    if value_float is not None or value_floats is not None:
        return jnp.asarray(value_floats if value_float is None else value_float, jnp.float32)
    if value_int is not None or value_ints is not None:
        return jnp.asarray(value_ints if value_int is None else value_int, index_dtype())
    if value_string is not None or value_strings is not None:
        raise TypeError("Constant holds strings, which JAX arrays cannot hold")
    raise ValueError("Constant has no value attribute")


@onnx("ConstantOfShape", since=9, static=(0,))
def constant_of_shape(input, *, value=None):
    """ConstantOfShape(int64 input) -> T2 output; value: a one-element tensor (default float 0)."""
    shape = static_ints(input, "ConstantOfShape shape")
    fill = jnp.zeros((), jnp.float32) if value is None else jnp.asarray(value).reshape(())
    return jnp.full(shape, fill, fill.dtype)


@onnx("DepthToSpace", since=1)
def depth_to_space(input, *, blocksize, mode="DCR"):
    """DepthToSpace(T input) -> T output; blocksize, mode DCR (depth-column-row) or CRD."""
    b, c, h, w = jnp.shape(input)
    n = blocksize
    if mode == "DCR":
        tmp = jnp.transpose(jnp.reshape(input, (b, n, n, c // n**2, h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        tmp = jnp.transpose(jnp.reshape(input, (b, c // n**2, n, n, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise ValueError(f"DepthToSpace mode '{mode}' is not DCR or CRD")
    return jnp.reshape(tmp, (b, c // n**2, h * n, w * n))


@onnx("Expand", since=8, static=(1,))
def expand(input, shape):
    """Expand(T input, int64 shape) -> T; broadcasts both ways (a 1 in shape keeps the dim)."""
    target = jnp.broadcast_shapes(jnp.shape(input), static_ints(shape, "Expand shape"))
    return jnp.broadcast_to(input, target)


@onnx("EyeLike", since=9)
def eye_like(input, *, dtype=None, k=0):
    """EyeLike(T1 input) -> T2 output; dtype (default: input's), k: the diagonal's offset."""
    rows, cols = jnp.shape(input)
    if dtype is None:
        dtype = input.dtype
    elif isinstance(dtype, int):
        dtype = _ONNX_DTYPES[dtype]
    return jnp.eye(rows, cols, k, dtype=jax.dtypes.canonicalize_dtype(jnp.dtype(dtype)))


@onnx("Flatten", since=1)
def flatten(input, *, axis=1):
    """Flatten(T input) -> T output, 2-D: dims before `axis` times dims from it on."""
    shape = jnp.shape(input)
    axis = normalize_axis(axis, len(shape))
    return jnp.reshape(input, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@onnx("Identity", since=1)
def identity(input):
    """Identity(V input) -> V output; tensors, sequences and optionals alike."""
    return input


@onnx("Pad", since=1)
def pad_1(data, *, paddings, mode="constant", value=0.0):
    """Pad-1(T data) -> T; paddings (begins then ends), mode, value."""
    return _pad_onnx(data, paddings, mode, value, None)


@onnx("Pad", since=2)
def pad_2(data, *, pads, mode="constant", value=0.0):
    """Pad-2(T data) -> T; pads (begins then ends), mode, value."""
    return _pad_onnx(data, pads, mode, value, None)


@onnx("Pad", since=11, static=(1,))
def pad_11(data, pads, constant_value=None, *, mode="constant"):
    """Pad-11(T data, int64 pads, T constant_value?) -> T; mode constant/reflect/edge."""
    return _pad_onnx(data, static_ints(pads, "Pad pads"), mode, constant_value, None)


@onnx("Pad", since=18, static=(1, 3))
def pad(data, pads, constant_value=None, axes=None, *, mode="constant"):
    """Pad(T data, int64 pads, T constant_value?, Tind axes?) -> T; mode constant/reflect/edge/wrap."""
    return _pad_onnx(data, static_ints(pads, "Pad pads"), mode, constant_value,
                     static_ints(axes, "Pad axes"))


@onnx("Range", since=11, static=(0, 1, 2))
def range_(start, limit, delta, *, stash_type=1):
    """Range(T start, T limit, T delta) -> T output; stash_type: float16/bfloat16 work in float32."""
    first, end, step = (static_array(v, "Range operand").reshape(()) for v in (start, limit, delta))
    if first.dtype.kind in "iu":
        count = max(-((int(first) - int(end)) // int(step)), 0)
        work = jnp.int64
    else:
        count = max(math.ceil((float(end) - float(first)) / float(step)), 0)
        work = jnp.float32 if first.dtype.itemsize < 4 and stash_type == 1 else jnp.float64
    work = jax.dtypes.canonicalize_dtype(work)
    out = jnp.asarray(first, work) + jnp.arange(count, dtype=work) * jnp.asarray(step, work)
    return out.astype(jax.dtypes.canonicalize_dtype(first.dtype))


@onnx("Reshape", since=1)
def reshape_1(data, *, shape, consumed_inputs=None):
    """Reshape-1(T data) -> T reshaped; shape attribute (0 copies, -1 infers)."""
    return _reshape(data, shape, 0)


@onnx("Reshape", since=5, static=(1,))
def reshape(data, shape, *, allowzero=0):
    """Reshape(T data, int64 shape) -> T reshaped; allowzero: 0 in shape is a literal 0."""
    return _reshape(data, static_ints(shape, "Reshape shape"), allowzero)


@onnx("Shape", since=1)
def shape(data, *, start=0, end=None):
    """Shape(T data) -> int64 shape; start, end select a range of dims."""
    return np.array(np.shape(data)[start:end], index_dtype())


@onnx("Size", since=1)
def size(data):
    """Size(T data) -> int64 size (0-d)."""
    return np.array(math.prod(np.shape(data)), index_dtype())


@onnx("Slice", since=1)
def slice_1(data, *, starts, ends, axes=None):
    """Slice-1(T data) -> T; starts, ends, axes attributes."""
    return _slice(data, starts, ends, axes, None)


@onnx("Slice", since=10, static=(1, 2, 3, 4))
def slice_(data, starts, ends, axes=None, steps=None):
    """Slice(T data, Tind starts, Tind ends, Tind axes?, Tind steps?) -> T; clamps like ONNX."""
    return _slice(data, static_ints(starts, "Slice starts"), static_ints(ends, "Slice ends"),
                  static_ints(axes, "Slice axes"), static_ints(steps, "Slice steps"))


@onnx("SpaceToDepth", since=1)
def space_to_depth(input, *, blocksize, mode="DCR"):
    """SpaceToDepth(T input) -> T output; blocksize, mode DCR (depth-column-row) or CRD."""
    b, c, h, w = jnp.shape(input)
    n = blocksize
    tmp = jnp.reshape(input, (b, c, h // n, n, w // n, n))
    if mode == "DCR":
        tmp = jnp.transpose(tmp, (0, 3, 5, 1, 2, 4))
    elif mode == "CRD":
        tmp = jnp.transpose(tmp, (0, 1, 3, 5, 2, 4))
    else:
        raise ValueError(f"SpaceToDepth mode '{mode}' is not DCR or CRD")
    return jnp.reshape(tmp, (b, c * n * n, h // n, w // n))


@onnx("Split", since=1, static=(1,))
def split_1(input, split=None, *, axis=0, output_count=1):
    """Split-1(T input, T split?) -> T...; split attribute or input, else equal parts."""
    sizes = static_ints(split, "Split split") if split is not None else None
    return split_2(input, axis=axis, split=sizes, output_count=output_count)


@onnx("Split", since=2)
def split_2(input, *, axis=0, split=None, output_count=1):
    """Split-2(T input) -> T...; split attribute, else equal parts, one per output."""
    if split:
        return _split(input, split, axis)
    return _equal_split(input, axis, output_count)


@onnx("Split", since=13, static=(1,))
def split_13(input, split=None, *, axis=0, output_count=1):
    """Split-13(T input, int64 split?) -> T...; equal parts, one per output, without split."""
    if split is not None:
        return _split(input, static_ints(split, "Split split"), axis)
    return _equal_split(input, axis, output_count)


@onnx("Split", since=18, static=(1,))
def split(input, split=None, *, axis=0, num_outputs=None, output_count=1):
    """Split(T input, int64 split?) -> T...; num_outputs parts (the last may be smaller)."""
    if split is not None:
        return _split(input, static_ints(split, "Split split"), axis)
    return _equal_split(input, axis, output_count if num_outputs is None else num_outputs)


@onnx("Squeeze", since=1)
def squeeze_1(data, *, axes=None):
    """Squeeze-1(T data) -> T squeezed; axes attribute (default: every dim of size 1)."""
    return _squeeze(data, axes)


@onnx("Squeeze", since=13, static=(1,))
def squeeze(data, axes=None):
    """Squeeze(T data, int64 axes?) -> T squeezed; default: every dim of size 1."""
    return _squeeze(data, static_ints(axes, "Squeeze axes"))


@onnx("Tile", since=1, static=(1, 2))
def tile_1(input, tiles, axis):
    """Tile-1(T input, T tiles, T axis) -> T; repeats along one axis."""
    reps = [1] * jnp.ndim(input)
    reps[normalize_axis(static_ints(axis, "Tile axis")[0], len(reps))] = static_ints(tiles, "Tile tiles")[0]
    return jnp.tile(input, reps)


@onnx("Tile", since=6, static=(1,))
def tile(input, repeats):
    """Tile(T input, int64 repeats) -> T output; one repeat count per dim."""
    return jnp.tile(input, static_ints(repeats, "Tile repeats"))


@onnx("Transpose", since=1)
def transpose(data, *, perm=None):
    """Transpose(T data) -> T transposed; perm (default: reversed dims)."""
    return jnp.transpose(data, perm)


@onnx("Trilu", since=14, static=(1,))
def trilu(input, k=None, *, upper=1):
    """Trilu(T input, int64 k?) -> T output; keeps the upper (or lower) triangle of the last 2 dims."""
    offset = 0 if k is None else static_ints(k, "Trilu k")[0]
    return jnp.triu(input, offset) if upper else jnp.tril(input, offset)


@onnx("Unsqueeze", since=1)
def unsqueeze_1(data, *, axes):
    """Unsqueeze-1(T data) -> T expanded; axes attribute, in the output's dims."""
    return _unsqueeze(data, axes)


@onnx("Unsqueeze", since=13, static=(1,))
def unsqueeze(data, axes):
    """Unsqueeze(T data, int64 axes) -> T expanded; axes in the output's dims."""
    return _unsqueeze(data, static_ints(axes, "Unsqueeze axes"))
