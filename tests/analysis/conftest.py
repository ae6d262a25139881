# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the analysis tests; the synthetic trace lives in synthetic.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _load(name: str, path: Path):
    """Import a helper next to the tests as a top-level module (tests are not a package)."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


synthetic = _load("analysis_synthetic", Path(__file__).with_name("synthetic.py"))
graph_cases = _load("analysis_graph_cases", Path(__file__).with_name("graph_cases.py"))


@pytest.fixture(name="trace")
def _trace():
    return synthetic.two_rank_trace()


@pytest.fixture(name="backend", params=["numpy", "python"])
def _backend(request: pytest.FixtureRequest) -> str:
    """Every engine test runs on both backends: same figures, by construction and by test."""
    return request.param


@pytest.fixture(name="engine_cases")
def _engine_cases():
    """The seeded traces and the Parquet writer of the engine comparison tests."""
    return _load("analysis_engine_cases", Path(__file__).with_name("engine_cases.py"))
