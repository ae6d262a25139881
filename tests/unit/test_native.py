# SPDX-License-Identifier: Apache-2.0
"""The C accelerator of the scope hot path: which implementation runs, and that it gives the
same spans as the pure-Python reference on the same program."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import brickscope as bs
from brickscope import _record, _scope, native
from brickscope.sdk.trace import _recorder

PROGRAM = Path(__file__).with_name("native_program.py")


def test_the_implementation_in_use_is_the_one_asked_for():
    """BRICKSCOPE_PURE_PYTHON=1 runs the Python reference everywhere; otherwise the C types
    are the ones in use, and BRICKSCOPE_REQUIRE_NATIVE=1 (make test, CI) makes a missing
    accelerator a failure instead of a silent fallback."""
    in_use = native.implementations()["brickscope._hotpath"].in_use
    if native.PURE_PYTHON:
        assert in_use == "python"
    elif native.REQUIRE_NATIVE:
        assert in_use == "c", "BRICKSCOPE_REQUIRE_NATIVE=1 but brickscope._hotpath was not built or does not import"
    if in_use == "c":
        assert _record.Record is _record.hotpath.Record
        assert _recorder.Recorder.__mro__[1] is _record.hotpath.RecorderCore
        assert type(bs.brick).__name__ == "builtin_function_or_method"
        assert isinstance(_scope.Brick("x"), _record.hotpath.ScopeBase)
    else:
        assert _record.hotpath is None
        assert _record.Record is _record.PyRecord
        assert _recorder.Recorder.__mro__[1] is _recorder._PyRecording
        assert bs.brick.__module__ == "brickscope._scope._factories"


def _run_program(pure: bool) -> dict:
    env = dict(os.environ, BRICKSCOPE_PURE_PYTHON="1" if pure else "0")
    result = subprocess.run(
        [sys.executable, str(PROGRAM)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_accelerator_gives_the_spans_of_the_reference():
    """One scripted program (nesting, errors, out-of-order ends and tokens, the same scope
    entered twice, decorators, disabled, step sampling, an unsampled and a user parent, a
    thread, asyncio tasks), driven clock and ids, run under each implementation: the same
    spans (ids, parents, times, attributes, events, status), counters and metrics."""
    if importlib.util.find_spec("brickscope._hotpath") is None and not native.REQUIRE_NATIVE:
        pytest.skip("brickscope._hotpath is not built here (no C compiler?): nothing to compare")
    python, c = _run_program(pure=True), _run_program(pure=False)
    # (the session's report table loads brickscope._tablerows too: same switch)
    # (the SDK fast paths, "sdk.*", are listed there too: the accelerators are the rest)
    accelerators = [{k: v for k, v in run.pop("implementation").items() if not k.startswith("sdk.")} for run in (python, c)]
    assert accelerators[0] == {"brickscope._hotpath": "python", "brickscope._tablerows": "python"}
    assert accelerators[1] == {"brickscope._hotpath": "c", "brickscope._tablerows": "c"}
    # The program exercised what it is meant to: figures counted by hand from it.
    stats = python["stats"]
    assert stats["scope_repairs"] == 4  # the outer token ended under two open scopes, once per step
    assert stats["misuse"] == 4  # exit_scope of an ended token, once per step
    names = [span["name"] for span in python["spans"]]
    assert names.count("step") == 2  # steps 0 and 2 of 0..3 (every=2); step 9 ran disabled
    assert "while_disabled" not in names and "unsampled_parent" not in names
    errors = [span for span in python["spans"] if span["status"][0] == "ERROR"]
    assert sorted(span["name"] for span in errors) == ["decorated", "decorated", "ffn_down", "ffn_down", "handle", "handle"]
    assert c["spans"] == python["spans"]
    assert c["stats"] == python["stats"]
    assert c["metrics"] == python["metrics"]


def test_sequential_ids_are_the_same_on_every_run():
    """The comparison programs rely on it: two generators give the same ids, in order."""
    from brickscope.testing import SequentialIdGenerator

    first, second = SequentialIdGenerator(), SequentialIdGenerator()
    assert [first.generate_span_id() for _ in range(3)] == [0x1000, 0x1001, 0x1002]
    assert [second.generate_span_id() for _ in range(3)] == [0x1000, 0x1001, 0x1002]
    assert (first.generate_trace_id(), first.generate_trace_id()) == (0x10000, 0x10001)
