# SPDX-License-Identifier: Apache-2.0
"""A user's type checker sees the API as documented: ``mypy --strict`` passes on
tests/typing/api_usage.py, whose ``assert_type`` calls fail when a public name's type drifts
(a lazily loaded name typed as ``Any``, a factory's return type, a scope type not exported)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_documented_usage_type_checks_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), "tests/typing/api_usage.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found in 1 source file" in result.stdout
