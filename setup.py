# SPDX-License-Identifier: Apache-2.0
"""The optional C accelerators of the scope hot path and of the analysis table's rows
(everything else is in pyproject.toml).

``optional=True``: a machine without a C compiler (or Python headers) still installs
brickscope, and the pure-Python implementation runs; ``brickscope.native`` says which
one is in use, and ``BRICKSCOPE_PURE_PYTHON=1`` forces the fallback (docs/native.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "brickscope._hotpath",
            sources=["src/brickscope/_hotpath.c"],
            optional=True,
        ),
        Extension(
            "brickscope._tablerows",
            sources=["src/brickscope/_tablerows.c"],
            optional=True,
        ),
    ]
)
