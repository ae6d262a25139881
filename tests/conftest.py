# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: every test starts from a clean brickscope."""

from __future__ import annotations

import pytest

from brickscope.testing import reset_globals


@pytest.fixture(autouse=True)
def _reset_brickscope():
    reset_globals()
    yield
    reset_globals()
