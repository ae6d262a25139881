# SPDX-License-Identifier: Apache-2.0
"""One implementation of the scope machine, driven over a pipe by test_scope_machine.py.

The test starts two of these, one with ``BRICKSCOPE_PURE_PYTHON=1`` and one with the C
accelerator (the implementation is chosen once, when brickscope is imported, so one
process cannot hold both), sends both the same commands, one JSON object a line, and
compares the answers. Each answer is one JSON line: ``{"ok": value}``, or
``{"raised": "TypeName: message"}`` when the command raised into the caller (which
brickscope's scope calls never should).

Commands (``op`` and its fields):

- ``reset``: shut every session down and configure a fresh one;
- ``open`` (``id``, ``form``, ``kind``, ``name``, ``where``): open a scope; ``form`` is
  ``with`` (``__enter__`` of the factory's scope), ``shared`` (``__enter__`` of one
  scope object kept per name, entered again while open), ``token`` (``enter_scope``) or
  ``handle`` (``start_brick``); a token or handle can be opened on another ``thread``
  or in an asyncio ``task`` (``where``);
- ``close`` (``id``, ``error``, ``where``): ``__exit__`` / ``exit_scope`` of that scope,
  with an exception or not; a token or handle can be closed from another thread or task;
- ``close_again`` (``id``): ``exit_scope`` of a token already closed (misuse);
- ``event`` (``name``): ``bs.event`` on the innermost scope; ``enable`` / ``disable``;
- ``reconfigure`` (``every``): ``configure()`` again, on a new provider, with another step
  sampling (every step when ``every`` is None), while scopes are open;
- ``snapshot``: sync, then every session's spans and counters.

The host clock is driven (each read advances it by 1 µs, from the same start at each
``reset``), so times are compared too: both implementations read it at the same points.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope import _scope_data, native
from brickscope.sdk import _config
from brickscope.sdk.trace import _recorder, _spans
from brickscope.testing import SequentialIdGenerator, reset_globals
from brickscope.trace import attributes as A

#: Thread ids differ between two runs (the operating system reuses the id of a thread that
#: ended, or not); ``thread.name`` is compared, numbered by first appearance (the names'
#: counter counts every thread the process started, brickscope's own among them).
MEASURED = {A.THREAD_ID}
EPOCH = 1_700_000_000_000_000_000


class Clock:
    """``perf_counter_ns`` for the recorder: each read advances 1 µs."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        self.now += 1_000
        return self.now
FACTORIES = {"brick": bs.brick, "kernel": bs.kernel, "layer": bs.layer, "step": bs.step}


class Worker:
    def __init__(self) -> None:
        self.sessions: list[tuple[Any, InMemorySpanExporter]] = []
        self.scopes: dict[int, tuple[str, Any]] = {}  # id -> (form, the entered object or token)
        self.shared: dict[tuple[str, Any], Any] = {}
        # Threads started for a command stay alive until the next reset: the recorder names
        # a thread by its id, and the operating system may give a finished thread's id to
        # the next one (so that one's spans would carry the first one's name, in both
        # implementations, depending on timing).
        self.threads: list[threading.Thread] = []
        self.release = threading.Event()

    def reset(self) -> None:
        self.end_threads()
        reset_globals()
        clock = Clock()
        _recorder.perf_counter_ns = clock
        _scope_data.host_ns = lambda: clock() + EPOCH
        self.sessions.clear()
        self.scopes.clear()
        self.shared.clear()
        self.reconfigure()

    def end_threads(self) -> None:
        """Let the threads kept alive since the last reset end."""
        self.release.set()
        for thread in self.threads:
            thread.join()
        self.threads.clear()
        self.release = threading.Event()

    def reconfigure(self, every: int | None = 2) -> None:
        provider = TracerProvider(id_generator=SequentialIdGenerator())
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = _config.configure(provider, clock="host", step_sampling=None if every is None else f"every={every}")
        self.sessions.append((session, exporter))

    def scope(self, kind: str, name: Any) -> Any:
        return FACTORIES[kind](name)

    def elsewhere(self, where: str, call: Any, *args: Any) -> Any:
        """``call(*args)`` here, on a new thread, or in an asyncio task (a copied context)."""
        if where == "here":
            return call(*args)
        result: list[Any] = []
        if where == "thread":
            done, release = threading.Event(), self.release

            def run() -> None:
                try:
                    result.append(call(*args))
                finally:  # a call that raised: result stays empty, the command answers "raised"
                    done.set()
                release.wait()

            thread = threading.Thread(target=run, daemon=True)
            self.threads.append(thread)
            thread.start()
            done.wait()
            return result[0]

        async def task() -> Any:
            return call(*args)

        return asyncio.run(task())

    def open(self, id: int, form: str, kind: str, name: Any, where: str = "here") -> None:
        if form == "with":
            entered = self.scope(kind, name)
            entered.__enter__()
        elif form == "shared":  # what the factory gave the first time, kept and entered again
            if (kind, name) not in self.shared:
                self.shared[kind, name] = self.scope(kind, name)
            entered = self.shared[kind, name]
            entered.__enter__()
        elif form == "token":
            entered = self.elsewhere(where, lambda: bs.enter_scope(self.scope(kind, name)))
        else:
            entered = self.elsewhere(where, bs.start_brick, name)
        self.scopes[id] = (form, entered)

    def close(self, id: int, error: bool, where: str = "here") -> None:
        form, entered = self.scopes.pop(id)
        exc = ValueError(f"failed in scope {id}") if error else None
        if form in ("with", "shared"):
            entered.__exit__(type(exc) if exc else None, exc, None)
        else:
            self.elsewhere(where, bs.exit_scope, entered, exc)
            self.scopes[-id - 1] = (form, entered)  # for close_again

    def close_again(self, id: int) -> None:
        bs.exit_scope(self.scopes[-id - 1][1])

    def event(self, name: str) -> None:
        bs.event(name, n=1)

    def enable(self) -> None:
        bs.enable()

    def disable(self) -> None:
        bs.disable()

    def snapshot(self) -> dict[str, Any]:
        threads: dict[str, str] = {"MainThread": "MainThread"}

        def value(key: str, v: Any) -> Any:
            if key == A.THREAD_NAME:
                return threads.setdefault(v, f"thread-{len(threads)}")
            return list(v) if isinstance(v, tuple) else v

        out = []
        for session, exporter in self.sessions:
            session.sync()
            spans = [
                {
                    "name": span.name,
                    "start": span.start_time,
                    "end": span.end_time,
                    "span_id": span.context.span_id,
                    "trace_id": span.context.trace_id,
                    "parent": None if span.parent is None else span.parent.span_id,
                    "attributes": {k: value(k, v) for k, v in sorted((span.attributes or {}).items()) if k not in MEASURED},
                    "events": [[e.name, e.timestamp, dict(e.attributes or {})] for e in span.events],
                    "status": [span.status.status_code.name, span.status.description],
                }
                for span in exporter.get_finished_spans()
            ]
            stats = {k: v for k, v in session.stats().items() if "cpu_ns" not in k}
            out.append({"spans": spans, "stats": stats})
        return {"sessions": out}

    def implementation(self) -> str:
        return native.implementations()["brickscope._hotpath"].in_use


def main() -> None:
    _spans.EPOCH_OFFSET_NS = EPOCH  # before the first configure(): the span maker takes it then
    worker = Worker()
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            answer = {"ok": getattr(worker, op)(**command)}
        except Exception as exc:  # a scope call raised into its caller: reported, compared
            answer = {"raised": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer, sort_keys=True, default=repr) + "\n")
        sys.stdout.flush()
    worker.end_threads()  # end of input
    reset_globals()


if __name__ == "__main__":
    main()
