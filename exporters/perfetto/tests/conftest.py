# SPDX-License-Identifier: Apache-2.0
"""Makes ``pftrace_testlib`` (span builders, the independent trace decoder) importable, and
gives the tests that compare the reader's C accelerator with its Python code the C module.

pytest runs with ``--import-mode=importlib``, which does not put test folders on
``sys.path``; this folder is added so test modules can share that library.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FASTREAD = "brickscope.exporter.perfetto._fastread"


@pytest.fixture(scope="session")
def fast():
    """The reader's C module, imported directly (also in the pure-Python pass: the
    comparisons need it), configured as the reader configures it."""
    from brickscope import native
    from brickscope.exporter.perfetto import _reader

    if importlib.util.find_spec(FASTREAD) is None:
        if native.REQUIRE_NATIVE:
            pytest.fail(f"{FASTREAD} is not built")
        pytest.skip(f"{FASTREAD} is not built here (no C compiler?): nothing to compare")
    module = importlib.import_module(FASTREAD)
    _reader.configure_accelerator(module)
    return module


@pytest.fixture(name="same_ids")
def _same_ids(monkeypatch):
    """Every writer draws the same sequence id and track uuids, as an unlucky draw would."""
    import types

    from brickscope.exporter.perfetto import _writer

    class SameRandom:
        def randrange(self, a, b=None):
            return a + 7 if b is not None else 7

        def getrandbits(self, n):
            return 12345

    monkeypatch.setattr(_writer, "random", types.SimpleNamespace(SystemRandom=SameRandom))
