# SPDX-License-Identifier: Apache-2.0
"""The examples run end to end as a user would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Per decode step of the quickstart's 4-layer decoder: 64 bricks, 50 kernels, 4 layers, 1 step.
SPANS_PER_STEP = 64 + 50 + 4 + 1


class TestQuickstart:
    def test_quickstart_runs_and_reports(self, tmp_path):
        """quickstart.py decodes, prints both report sections and emits every scope as a span."""
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "quickstart.py"), "--out", str(tmp_path), "--steps", "3", "--clock", "host"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "Self time by brick (clock: host" in out
        assert "Self time by category" in out
        for brick in ("rms_norm", "qkv_projection", "rope", "attention_score", "ffn_down", "lm_head", "sampling"):
            assert brick in out
        assert f"spans emitted: {3 * SPANS_PER_STEP}, forced syncs: 0, GPU timing errors: 0" in out
        # Warm-up (2 steps by default) left out: rms_norm runs 9 times a step (2 per layer, 1 final).
        assert "steps 0-1 are warm-up" in out
        brick_table = out.split("Self time by brick", 1)[1].split("\n\n", 1)[0]
        (row,) = [line.split() for line in brick_table.splitlines() if line.startswith("rms_norm ")]
        assert (row[1], row[2]) == ("norm", "9")

    def test_no_report_leaves_the_report_to_the_command(self, tmp_path):
        """make demo runs quickstart.py --no-report, then brickscope report on the trace: the
        report is printed once, by the command."""
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "quickstart.py"), "--out", str(tmp_path), "--steps", "1", "--clock", "host",
             "--no-report"],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "Self time by" not in result.stdout and "brickscope report" not in result.stdout
        assert f"spans emitted: {SPANS_PER_STEP}," in result.stdout
