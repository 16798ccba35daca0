"""JAX's persistent compilation cache, on unless the user chose otherwise.

XLA compiles a converted model the first time it runs: on a GPU, 12 to 32 s for an ImageNet
model or BERT-base, in every new process. JAX can keep what it compiled on disk and load it in the
next process instead; importing jaxport turns that on:

- `jax_compilation_cache_dir` already set (`JAX_COMPILATION_CACHE_DIR`, or `jax.config.update`
  before importing jaxport): left as it is;
- `JAXPORT_CACHE_DIR=<directory>`: that directory; `JAXPORT_CACHE_DIR=off` (or empty): no cache;
- otherwise `$XDG_CACHE_HOME/jaxport/xla`, by default `~/.cache/jaxport/xla`.

JAX writes only programs that took longer than `jax_persistent_cache_min_compile_time_secs` (its
default: 1 s) to compile, and keys each by the program, the compiler's options and versions and
the devices, so a cached program is never run where it was not compiled for. A directory that
cannot be made leaves the cache off, with a warning.

In a directory jaxport chose, the cache keeps at most `MAX_BYTES` (JAX evicts the least recently
used programs beyond it), unless `jax_compilation_cache_max_size` says otherwise. A directory
jaxport makes is private to the user (mode 0700): a cached program may be read back by anyone
who can read the file.

Programs that hold a model's weights as constants are not written to the cache (`uncached`):
`frozen()`'s (unless `frozen(persistent_cache=True)`), and any converted model's whose program
folds more than `FOLDED_BYTES` of constants. Weights left on disk, readable beside the user's
other caches, would be a copy of the model nobody asked for; and loading one saves little of its
first call, which is mostly tracing with the weights as constants (measured on the CPU: BERT-base
frozen, 10.0 s in a fresh cache and 10.0 s again; ResNet-50 through `jm(...)`, 1.69 s and 0.38 s).
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings

import jax
from jax._src import config as _jax_config

#: What `JAXPORT_CACHE_DIR` says to turn the cache off.
_OFF = ("", "0", "off", "false", "no", "none")
#: The most a cache directory jaxport chose may hold, in bytes.
MAX_BYTES = 2 * 2**30
#: A program folding more bytes of constants than this holds weights: not cached (`uncached`).
FOLDED_BYTES = 2**20


def uncached() -> contextlib.AbstractContextManager:
    """A context within which (this thread's) compilations are not written to the persistent
    cache: JAX writes only programs that took at least `jax_persistent_cache_min_compile_time_secs`
    to compile, here set to infinity. Reading the cache is unchanged."""
    return _jax_config.persistent_cache_min_compile_time_secs(math.inf)


def default_directory() -> str:
    """`$XDG_CACHE_HOME/jaxport/xla` (`~/.cache/jaxport/xla` without XDG_CACHE_HOME)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxport", "xla")


def configure() -> str | None:
    """Turn JAX's persistent compilation cache on as the module docstring says; returns the
    directory it uses (the user's own included), or None where it stays off."""
    chosen = jax.config.jax_compilation_cache_dir
    if chosen:
        return chosen
    setting = os.environ.get("JAXPORT_CACHE_DIR")
    if setting is not None and setting.strip().lower() in _OFF:
        return None
    directory = os.path.expanduser(setting) if setting is not None else default_directory()
    try:
        if setting is None:  # ~/.cache/jaxport too: private, as what it holds is
            os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as e:
        warnings.warn(f"jaxport: JAX's compilation cache stays off: cannot make {directory} ({e.strerror}); "
                      "set JAXPORT_CACHE_DIR to a writable directory, or to 'off'", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    if jax.config.jax_compilation_cache_max_size in (None, -1):  # JAX's default: unbounded
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return directory
