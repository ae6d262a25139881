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
            # One extension from several files (the layout: docs/native.md).
            sources=[
                f"src/brickscope/_hotpath_c/{name}.c"
                for name in ("module", "record", "recorder", "scope", "withmethod", "forward", "spans", "fold", "cuda")
            ],
            depends=["src/brickscope/_hotpath_c/hotpath.h", "src/brickscope/_hotpath_c/compat.h"],
            optional=True,
        ),
        Extension(
            "brickscope._tablerows",
            sources=["src/brickscope/_tablerows.c"],
            optional=True,
        ),
    ]
)
