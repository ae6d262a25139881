# SPDX-License-Identifier: Apache-2.0
"""Unit-test fixtures: a host clock the tests drive by hand."""

from __future__ import annotations

import pytest

from brickscope.trace import _recorder


class DrivenClock:
    """Stands in for perf_counter_ns where the recorder reads it: each read returns ``now``."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    driven = DrivenClock()
    monkeypatch.setattr(_recorder, "perf_counter_ns", driven)
    return driven
