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
from ..errors import InputError
from ..ir import Input


def as_jax(x, what: str, error: type[Exception] = InputError):
    """Torch tensors and NumPy arrays become JAX arrays; JAX arrays and Python scalars stay as they
    are. Values JAX's 64-bit narrowing (x64 off) would change by more than rounding raise `error`
    naming `what` ("input 'x'", "weight 'w'")."""
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        dtypes.check_array(x, what, error)
        return jnp.asarray(x) if isinstance(x, np.ndarray) else x
    if type(x).__module__.startswith("torch"):
        return dlpack.to_jax(x, what=what, error=error)
    return x


def check_input(x, spec: Input, hint: str = "") -> None:
    """`x` against the program input it binds: shape (a None dim fits any size) and the dtype
    JAX stores the recorded one in; an `InputError` naming the input otherwise."""
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
    expected = np.dtype(jax.dtypes.canonicalize_dtype(want.dtype))
    if np.dtype(x.dtype) != expected:
        raise InputError(
            f"input '{spec.name}' has dtype {np.dtype(x.dtype).name}, but the model expects "
            f"{np.dtype(want.dtype).name}"
        )
