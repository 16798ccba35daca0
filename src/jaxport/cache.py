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
"""

from __future__ import annotations

import os
import warnings

import jax

#: What `JAXPORT_CACHE_DIR` says to turn the cache off.
_OFF = ("", "0", "off", "false", "no", "none")


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
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        warnings.warn(f"jaxport: JAX's compilation cache stays off: cannot make {directory} ({e.strerror}); "
                      "set JAXPORT_CACHE_DIR to a writable directory, or to 'off'", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    return directory
