# SPDX-License-Identifier: Apache-2.0
"""The C scope machine and the Python reference, driven through the same random sequences
(hypothesis ``RuleBasedStateMachine``), give the same spans and counters.

The implementation is chosen once per interpreter, when brickscope is imported, so the
two run in two worker processes (``scope_worker.py``) that get the same commands: scopes
opened in every form (``with``, a shared scope object entered again, tokens, handles),
same-name nesting, closes in any order, with or without an exception, tokens opened or
closed on another thread or in an asyncio task, tokens closed twice, events, disable and
enable, and a new ``configure()`` (another step sampling) while scopes are open. The
host clock is driven, so after every sequence, once both have closed what is still
open, the spans (names, ids, parents, attributes, times, events, status) and every
session's counters (``stats()``) must be equal.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from brickscope import native

WORKER = Path(__file__).with_name("scope_worker.py")
NAMES = {"brick": ["attn", "ffn"], "kernel": ["attn", "gemm"], "layer": [0, 1], "step": [0, 1, 2, 3]}


def first_difference(c: Any, python: Any, path: str = "") -> str:
    """Where two answers first differ, as a short line (the answers can be long)."""
    if isinstance(c, dict) and isinstance(python, dict) and c.keys() == python.keys():
        key = next(k for k in c if c[k] != python[k])
        return first_difference(c[key], python[key], f"{path}.{key}")
    if isinstance(c, list) and isinstance(python, list) and len(c) == len(python):
        index = next(i for i, (a, b) in enumerate(zip(c, python)) if a != b)
        return first_difference(c[index], python[index], f"{path}[{index}]")
    return f"at {path or 'the top'}: C has {c!r}, Python {python!r}"


class Worker:
    """One scope_worker.py process: a command in, its JSON answer out."""

    def __init__(self, pure: bool) -> None:
        env = dict(os.environ, BRICKSCOPE_PURE_PYTHON="1" if pure else "0")
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env, bufsize=1,
        )  # fmt: skip

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")

    def answer(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the worker died (exit {self.process.poll()})"
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[Worker, Worker]]:
    if importlib.util.find_spec("brickscope._hotpath") is None and not native.REQUIRE_NATIVE:
        pytest.skip("brickscope._hotpath is not built here (no C compiler?): nothing to compare")
    pair = (Worker(pure=True), Worker(pure=False))
    yield pair
    for worker in pair:
        worker.close()


class ScopeMachine(RuleBasedStateMachine):
    """Every rule sends one command to both implementations and asserts the same answer."""

    pair: tuple[Worker, Worker]

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[int, str] = {}  # id -> form, in opening order
        self.closed_tokens: list[int] = []
        self.next_id = 0
        self.reconfigured = 0

    def both(self, op: str, **fields: Any) -> Any:
        python, c = self.pair
        for worker in self.pair:
            worker.send({"op": op, **fields})
        expected, got = python.answer(), c.answer()
        assert got == expected, f"{op} {fields}: {first_difference(got, expected)}"
        assert "raised" not in expected, f"{op} {fields} raised into the caller: {expected}"
        return expected["ok"]

    @initialize()
    def start(self) -> None:
        assert [self.pair[0].process.poll(), self.pair[1].process.poll()] == [None, None]
        self.both("reset")

    @rule(data=st.data(), count=st.integers(1, 3))
    def open_scopes(self, data: st.DataObject, count: int) -> None:
        for _ in range(count):
            kind = data.draw(st.sampled_from(sorted(NAMES)))
            form = data.draw(st.sampled_from(["with", "shared", "token", "handle"]))
            name = data.draw(st.sampled_from(NAMES["brick" if form == "handle" else kind]))
            where = data.draw(st.sampled_from(["here", "here", "thread", "task"])) if form in ("token", "handle") else "here"
            self.both("open", id=self.next_id, form=form, kind=kind, name=name, where=where)
            self.open[self.next_id] = form
            self.next_id += 1

    @precondition(lambda self: self.open)
    @rule(data=st.data(), count=st.integers(1, 2))
    def close_scopes(self, data: st.DataObject, count: int) -> None:
        for _ in range(min(count, len(self.open))):
            # mostly the innermost (as with blocks do), else any: out of order
            ids = list(self.open)
            id = data.draw(st.one_of(st.just(ids[-1]), st.sampled_from(ids)))
            form = self.open.pop(id)
            error = data.draw(st.booleans())
            where = data.draw(st.sampled_from(["here", "here", "thread", "task"])) if form in ("token", "handle") else "here"
            self.both("close", id=id, error=error, where=where)
            if form in ("token", "handle"):
                self.closed_tokens.append(id)

    @precondition(lambda self: self.closed_tokens)
    @rule(data=st.data())
    def close_token_again(self, data: st.DataObject) -> None:
        self.both("close_again", id=data.draw(st.sampled_from(self.closed_tokens)))

    @rule(name=st.sampled_from(["eos", "retry"]))
    def event(self, name: str) -> None:
        self.both("event", name=name)

    @rule(on=st.sampled_from([True, True, False]))  # mostly on: a disabled scope records nothing to compare
    def switch(self, on: bool) -> None:
        self.both("enable" if on else "disable")

    @precondition(lambda self: self.reconfigured < 2)
    @rule(every=st.sampled_from([None, 2, 3]))
    def reconfigure(self, every: int | None) -> None:
        self.reconfigured += 1
        self.both("reconfigure", every=every)

    @rule()
    def snapshot(self) -> None:
        self.both("snapshot")

    def teardown(self) -> None:
        for id in reversed(list(self.open)):
            self.both("close", id=id, error=False, where="here")
        self.open.clear()
        self.both("enable")
        self.both("snapshot")


def test_the_c_scope_machine_does_what_the_python_one_does(workers: tuple[Worker, Worker]) -> None:
    """Random sequences of opens, closes (in any order, from other threads and tasks),
    misuse, disable/enable and reconfiguration give the same spans and counters in both."""
    python, c = workers
    for worker in workers:
        worker.send({"op": "implementation"})
    assert [python.answer(), c.answer()] == [{"ok": "python"}, {"ok": "c"}]
    ScopeMachine.pair = workers
    run_state_machine_as_test(
        ScopeMachine,
        settings=settings(
            max_examples=150, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        ),
    )
