"""Builds jaxport's compiled CPU kernels (`src/jaxport/ops/_native`); all else is in pyproject.toml.

The kernels are XLA FFI handlers in one shared library, compiled against the XLA FFI headers
that jaxlib ships and loaded with `ctypes`, so no Python headers are needed. The build is
optional: without a C++17 compiler (or jaxlib at build time) jaxport installs without them
and runs the portable `lax` formulation of every op.
"""

from pathlib import Path

from setuptools import Extension, setup


def _native_kernels() -> list[Extension]:
    try:
        import jaxlib
    except ImportError:
        print("jaxport: jaxlib is not importable at build time; installing without compiled kernels")
        return []
    folder = Path("src/jaxport/ops/_native")
    return [Extension(
        "jaxport.ops._native._kernels",
        sources=sorted(str(p.as_posix()) for p in folder.glob("*.cc")),
        depends=sorted(str(p.as_posix()) for p in folder.glob("*.h")),
        include_dirs=[str(Path(jaxlib.__file__).parent / "include")],
        language="c++",
        extra_compile_args=["-std=c++17", "-O3", "-Wno-psabi"],
        optional=True,  # a failed build leaves the kernels out, not jaxport
    )]


setup(ext_modules=_native_kernels())
