"""Builds onnxflow's compiled kernels (``src/onnxflow/native/*.pyx``) with Cython.

Everything else about the package is in ``pyproject.toml``. The flags keep the build portable
(no ``-march=native``: wider SIMD is chosen at run time per function, with GCC's
``target_clones``) and the arithmetic as written (``-ffp-contract=off``: no fused multiply-adds
that would change results between machines).
"""

import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = Path("src/onnxflow/native")
FLAGS = ["-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-fno-math-errno"]
#: POSIX threads (_threads.h) where there are any; Windows builds walk on the caller's thread.
THREADS = [] if sys.platform == "win32" else ["-pthread"]

extensions = [
    Extension(
        f"onnxflow.native.{pyx.stem}",
        [str(pyx)],
        include_dirs=[str(NATIVE), numpy.get_include()],
        depends=[str(h) for h in sorted(NATIVE.glob("*.h"))],  # rebuilt when a header changes
        extra_compile_args=FLAGS + THREADS,
        extra_link_args=THREADS,
        define_macros=[
            ("CYTHON_CLINE_IN_TRACEBACK", "0"),
            ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
        ],
    )
    for pyx in sorted(NATIVE.glob("*.pyx"))
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
