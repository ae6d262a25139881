# SPDX-License-Identifier: Apache-2.0
"""The resolver thread: resolution, span building and aggregation off the application thread.

With ``configure(resolver="thread")`` the application thread only records: a step's
end wakes this thread (one ``Event.set``) when records wait to be resolved, and the
thread polls every ``interval`` on its own while there is work, resolving whatever is
complete under the resolver's lock, exactly as an inline sync point would. After a
period with nothing woken and nothing pending it sleeps until woken: the next close
that leaves a record pending wakes it (``Recorder.arm_wake``), so metrics-only
traffic, whose unsampled bricks never wait, costs no wake-ups at all. ``sync()``,
``force_flush``, shutdown and exit take the same lock, so they wait for a batch in
progress and then resolve the rest themselves: nothing is left pending when they
return. Memory stays bounded by ``max_pending``: at half of it the thread is woken; at
``max_pending`` the recording thread resolves (a forced sync, counted), as inline mode
does; nothing is dropped.

Example::

    worker = ResolverThread(processor.sync, 0.05, lambda: len(recorder.pending), recorder.arm_wake)
    worker.start()
    ...
    worker.stop()      # joins; the caller then flushes what is left
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: The thread's name (``threading.current_thread().name`` in processors it feeds).
THREAD_NAME = "brickscope-resolver"


class ResolverThread:
    """A daemon thread calling ``sync(block=False)`` when woken and every ``interval_s``
    while there is work.

    Args:
        sync: the resolution entry point.
        interval_s: the poll period while records are pending or just resolved.
        backlog: how many records are pending.
        arm_wake: called after an idle period; True if the thread may sleep until woken.
    """

    def __init__(
        self, sync: Callable[..., bool], interval_s: float, backlog: Callable[[], int], arm_wake: Callable[[], bool]
    ) -> None:
        self._sync = sync
        self._interval_s = interval_s
        self._backlog = backlog
        self._arm_wake = arm_wake
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.wake = self._wake.set  # bound once: the recorder calls it at a step end with work

    def start(self) -> int:
        """Start the thread; returns its ident."""
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        return self._thread.ident

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the batch in progress; joins (up to ``timeout_s``). Idempotent."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        wait, clear, sync, interval = self._wake.wait, self._wake.clear, self._sync, self._interval_s
        timeout = None if self._arm_wake() else interval
        while not self._stopping:
            woken = wait(timeout)
            clear()
            if self._stopping:
                return
            busy = woken or self._backlog() > 0
            sync(block=False)  # never raises
            # After a wake-up or a poll that found records, poll again in a period (more
            # tend to follow); after a quiet period, sleep until a record is pending.
            timeout = interval if busy or not self._arm_wake() else None
