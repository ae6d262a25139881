# SPDX-License-Identifier: Apache-2.0
"""Export work in short slices, so the application thread never waits long for the interpreter.

Example::

    pacer = Pacer()
    pacer.start()
    for span in batch:
        encode(span)
        pacer.tick()      # sleeps briefly once PACE_BUDGET_NS have passed since the last pause

An exporter runs on its span processor's thread while the application runs, and
one thread at a time runs Python. A thread that wants the interpreter back (the
application's, returning from a GPU wait, a lock or I/O) waits until the running
thread lets go of it: at once if that thread sleeps or does I/O, but for Python
code only after ``sys.getswitchinterval()`` (5 ms by default), every time. A batch
of 512 spans is 15 to 30 ms of Python in the Perfetto writer, so without pauses a
step ending during an export waited about 5 ms at each of its waits.

The Perfetto and flamegraph exporters pace their encoding, folding and writing with it;
an exporter of one's own that does long stretches of Python work on a processor's thread
can do the same.

``tick()`` is called between small units of work (a span, a slice, an event, each
a few microseconds); once ``budget_ns`` have passed since the last pause it
sleeps ``pause_s``: a real sleep releases the interpreter for long enough that a
waiting thread takes it (``time.sleep(0)`` may hand it straight back to the
sleeper). Pausing changes nothing in what is written.

A pause only serves another thread, so none is taken while the exporter's thread is
the process's only Python thread (``threading.active_count()``): an offline command
(``brickscope convert``, ``flamegraph``) or a ``SimpleSpanProcessor`` in a program of one
thread would only sleep. The count is read when the budget is spent, not at each tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: The most Python work the exporter does between two pauses.
PACE_BUDGET_NS = 500_000
#: How long a pause sleeps: enough for a waiting thread to be woken and take the interpreter.
PACE_PAUSE_S = 0.00005


class Pacer:
    """Sleeps ``pause_s`` whenever ``budget_ns`` have passed since the last pause (or ``start``)
    and another Python thread could want the interpreter.

    Args:
        budget_ns: the longest stretch of work between pauses, in ``clock`` units.
        pause_s: how long each pause sleeps.
        clock: the monotonic clock read at each tick (nanoseconds).
        sleep: what pauses (tests pass a recorder).
        threads: how many Python threads the process runs (``threading.active_count``); at
            one, the budget restarts without a pause.
    """

    __slots__ = ("budget_ns", "pause_s", "pauses", "_clock", "_sleep", "_threads", "_since")

    def __init__(
        self,
        budget_ns: int = PACE_BUDGET_NS,
        pause_s: float = PACE_PAUSE_S,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        sleep: Callable[[float], object] = time.sleep,
        threads: Callable[[], int] = threading.active_count,
    ) -> None:
        if budget_ns <= 0 or pause_s < 0:
            raise ValueError(f"budget_ns must be positive and pause_s not negative, got {budget_ns}, {pause_s}")
        self.budget_ns = budget_ns
        self.pause_s = pause_s
        self.pauses = 0  #: pauses taken so far
        self._clock = clock
        self._sleep = sleep
        self._threads = threads
        self._since = clock()

    def start(self) -> None:
        """Begin a stretch of work: the budget counts from now."""
        self._since = self._clock()

    def tick(self) -> None:
        """One unit of work done: pause if the budget is spent and another thread runs."""
        if self._clock() - self._since >= self.budget_ns:
            if self._threads() > 1:
                self._sleep(self.pause_s)
                self.pauses += 1
            self._since = self._clock()
