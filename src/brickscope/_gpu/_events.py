# SPDX-License-Identifier: Apache-2.0
"""Event pools: CUDA timing events created once per context and reused.

Example::

    budget = EventBudget(max_events=65536)
    pool = EventPool(drv, ctx, device=0, flags=EVENT_FLAGS, budget=budget)
    event = pool.take()          # a free event, or a new one (CudaError / PoolExhausted)
    ...                          # cuEventRecord(event, stream) ...
    pool.give(event)             # back to the free list; never destroyed per use
    pool.destroy()               # at close: cuEventDestroy on every event it created

Creating an event costs a driver call and device memory; recording one costs
about 2.5 us on real hardware. A scope therefore never creates or destroys an
event: it takes one from the pool and gives it back once its time is resolved.
The pool grows on demand up to a budget shared by all pools of a timer, so a
program that never releases its marks cannot leak events without bound.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from brickscope._gpu._driver import check, in_context

__all__ = ["EventBudget", "EventPool", "PoolExhausted"]


class PoolExhausted(RuntimeError):
    """Every event the budget allows is in use; the caller records nothing."""


class EventBudget:
    """How many events all pools of one timer may create together (thread-safe)."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self.created = 0
        self._lock = threading.Lock()

    def claim(self) -> bool:
        """Reserve one event; False when the budget is spent."""
        with self._lock:
            if self.created >= self.max_events:
                return False
            self.created += 1
            return True

    def unclaim(self, n: int = 1) -> None:
        """Give back reservations (an event creation failed, or events were destroyed)."""
        with self._lock:
            self.created -= n


class EventPool:
    """The timing events of one CUDA context.

    ``take``/``give`` are thread-safe (list pop/append under the GIL; growth takes
    a lock). Events are created with ``flags`` in ``ctx``, made current for the call.
    """

    __slots__ = ("_budget", "_drv", "_flags", "_lock", "all", "ctx", "device", "free")

    def __init__(self, drv: ModuleType, ctx: Any, device: int, flags: int, budget: EventBudget) -> None:
        self._drv = drv
        self.ctx = ctx
        self.device = device
        self._flags = flags
        self._budget = budget
        self._lock = threading.Lock()
        self.free: list[Any] = []
        self.all: list[Any] = []

    def take(self) -> Any:
        """A free event, creating one if none is free.

        Raises:
            PoolExhausted: the shared budget is spent.
            CudaError: ``cuEventCreate`` failed (e.g. CUDA_ERROR_OUT_OF_MEMORY).
        """
        try:
            return self.free.pop()
        except IndexError:
            return self.grow()

    def grow(self) -> Any:
        """Create one event (not added to the free list); see ``take``."""
        if not self._budget.claim():
            raise PoolExhausted(f"all {self._budget.max_events} CUDA events are in use")
        try:
            drv = self._drv
            event = in_context(drv, self.ctx, lambda: check(drv.cuEventCreate(self._flags)))
        except BaseException:
            self._budget.unclaim()
            raise
        with self._lock:
            self.all.append(event)
        return event

    def give(self, event: Any) -> None:
        """Return an event taken from this pool."""
        self.free.append(event)

    def destroy(self) -> int:
        """Destroy every event this pool created; returns how many destroys failed."""
        with self._lock:
            events, self.all, self.free = self.all, [], []
        failures = 0
        drv = self._drv

        def destroy_all() -> None:
            nonlocal failures
            for event in events:
                if int(drv.cuEventDestroy(event)[0]) != 0:
                    failures += 1

        in_context(drv, self.ctx, destroy_all)
        self._budget.unclaim(len(events))
        return failures
