# SPDX-License-Identifier: Apache-2.0
"""The optional C accelerator of the .pftrace reader (everything else is in pyproject.toml).

``optional=True``: without a C compiler the distribution still installs and the
pure-Python reader runs; ``brickscope.native`` says which one is in use, and
``BRICKSCOPE_PURE_PYTHON=1`` forces the fallback (docs/native.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "brickscope.exporter.perfetto._fastread",
            sources=["src/brickscope/exporter/perfetto/_fastread.c"],
            optional=True,
        )
    ]
)
