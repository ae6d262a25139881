# SPDX-License-Identifier: Apache-2.0
"""The C hot path and the pure-Python reference give the same CUDA-timed spans: one scripted
program on the simulated driver (GPU-timed bricks and kernels, a stream inherited from the
enclosing brick, the legacy stream, a failing event record, an error, a token, an untraced
step), run under each implementation in its own interpreter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from brickscope import native

pytestmark = pytest.mark.gpu
PROGRAM = Path(__file__).with_name("native_gpu_program.py")


def run(env: dict[str, str], pure: bool) -> dict:
    env = dict(env, BRICKSCOPE_PURE_PYTHON="1" if pure else "0")
    result = subprocess.run([sys.executable, str(PROGRAM)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cuda_spans_are_the_same_under_both_implementations(simdriver_env: dict[str, str]) -> None:
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda-bindings) is not installed")
    if importlib.util.find_spec("brickscope._hotpath") is None and not native.REQUIRE_NATIVE:
        pytest.skip("brickscope._hotpath is not built here (no C compiler?): nothing to compare")
    python, c = run(simdriver_env, pure=True), run(simdriver_env, pure=False)
    # (the session's report table loads brickscope._tablerows too: same switch)
    # (the SDK fast paths, "sdk.*", are listed there too: the accelerators are the rest)
    accelerators = [{k: v for k, v in run.pop("implementation").items() if not k.startswith("sdk.")} for run in (python, c)]
    assert accelerators[0] == {"brickscope._hotpath": "python", "brickscope._tablerows": "python"}
    assert accelerators[1] == {"brickscope._hotpath": "c", "brickscope._tablerows": "c"}
    # What the program is meant to exercise, counted by hand: steps 0 and 2 traced, 9 spans
    # each; the failing record in each of the 3 steps; step 1's 9 scopes untraced.
    stats = python["stats"]
    assert (stats["spans_emitted"], stats["gpu_timing_errors"], stats["scopes_unsampled"]) == (18, 3, 9)
    clocks = {(s["name"], s["attributes"]["brickscope.clock"]) for s in python["spans"]}
    assert ("record_fails", "host") in clocks and ("softmax_kernel", "cuda") in clocks and ("nested", "cuda") in clocks
    assert c["spans"] == python["spans"]
    assert c["stats"] == python["stats"]
