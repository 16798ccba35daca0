"""Values coming into a converted model: its inputs and weights as JAX arrays, checked.

Every value a user hands a model (a `JaxModel`'s inputs, an exported model's, a causal LM's
token ids) and every weight a frontend hands over passes `as_jax`, so the policy is the same
everywhere: torch tensors cross through DLPack, NumPy arrays are copied, JAX arrays stay where
they are (sharded ones too), and a value JAX's 64-bit narrowing would change by more than
rounding is refused with the error the caller names.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import dlpack, dtypes
from ..errors import InputError, ModelFileError
from ..ir import Input


def as_jax(x, what: str, error: type[Exception] = InputError, release: bool = False):
    """Torch tensors and NumPy arrays become JAX arrays; JAX arrays and Python scalars stay as they
    are. Values JAX's 64-bit narrowing (x64 off) would change by more than rounding raise `error`
    naming `what` ("input 'x'", "weight 'w'"). `release`: a weight, read once (`dlpack.to_jax`)."""
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        dtypes.check_array(x, what, error)
        return jnp.asarray(x) if isinstance(x, np.ndarray) else x
    if type(x).__module__.startswith("torch"):
        if getattr(x, "is_meta", False):
            raise error(f"{what} is on the meta device: it has shape {tuple(x.shape)} but no values")
        return dlpack.to_jax(x, what=what, error=error, release=release)
    return x


def as_weight(x, name: str):
    """A weight as the model holds it: a JAX array, or, for a tensor on the meta device (a model
    converted before its weights were loaded), a `jax.ShapeDtypeStruct` that says what
    `JaxModel.load_weights` must give it."""
    if getattr(x, "is_meta", False):
        return jax.ShapeDtypeStruct(tuple(x.shape), dtypes.narrow_dtype(dtypes.numpy_dtype(x.dtype)))
    return as_jax(x, f"weight '{name}'", ModelFileError, release=True)


def is_abstract(x) -> bool:
    """Whether `x` is a weight without values (see `as_weight`)."""
    return isinstance(x, jax.ShapeDtypeStruct)


def check_input(x, spec: Input, hint: str = "", ranges: dict | None = None) -> None:
    """`x` against the program input it binds: shape (a None dim fits any size up to the most
    the source allows it, `Program.dim_ranges`: a program traced over symbolic sizes may have
    unrolled a loop for that many) and the dtype JAX stores the recorded one in; an
    `InputError` naming the input otherwise. Lower bounds are not held to: torch.export
    records 2 for a size it kept symbolic (a 1 would have been fixed), and its programs run
    for 1 as well."""
    if spec.spec is None or not hasattr(x, "shape"):
        return
    want = spec.spec
    shape = tuple(x.shape)
    if not want.admits(shape):
        fixed = want.shape is not None and None not in want.shape
        raise InputError(
            f"input '{spec.name}' has shape {shape}, but the model expects {want.describe()}"
            + (f" ({hint})" if fixed and hint else "")
        )
    for dim, symbol in spec.dims.items():
        most = (ranges or {}).get(symbol, (0, None))[1]
        if most is not None and shape[dim] > most:
            raise InputError(f"input '{spec.name}' has size {shape[dim]} in dim {dim}, but the model was exported "
                             f"for at most {most} there")
    expected = np.dtype(jax.dtypes.canonicalize_dtype(want.dtype))
    if np.dtype(x.dtype) != expected:
        raise InputError(
            f"input '{spec.name}' has dtype {np.dtype(x.dtype).name}, but the model expects "
            f"{np.dtype(want.dtype).name}"
        )
