# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: every test starts from a clean brickscope."""

from __future__ import annotations

import os

import pytest

# The suite's exact span lists are the scopes' own: brickscope's overhead spans and GC pauses
# (on by default, nondeterministic where a collection falls) are tested where they are asked for.
os.environ.setdefault("BRICKSCOPE_HOST_INTERVALS", "false")

from brickscope.testing import reset_globals


@pytest.fixture(autouse=True)
def _reset_brickscope():
    reset_globals()
    yield
    reset_globals()
