# SPDX-License-Identifier: Apache-2.0
"""The counters behind ``Session.stats()``: one dict every part of the pipeline adds to.

The hot path adds to the dict directly (``counts.values["polls"] += 1``); everything
else goes through :meth:`Counters.add`. Faults are also logged, once per kind.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("brickscope.trace")

#: Every counter ``stats()`` reports, in a stable order (``pending`` is added live).
NAMES = (
    "scopes_unsampled",
    "resolution_cpu_ns_app",
    "resolution_cpu_ns_worker",
    "spans_emitted",
    "syncs",
    "forced_syncs",
    "polls",
    "gpu_timing_errors",
    "processor_errors",
    "scope_errors",
    "misuse",
    "self_time_clamped",
    "reanchor_errors",
    "pacing_waits",
    "pacing_timeouts",
    "gpu_sync_errors",
    "closed_after_shutdown",
    "scope_repairs",
    "scope_data_dropped",
    "spans_dropped",
    "span_build_errors",
    "spans_produced",
    "export_timeouts",
    "gpu_fallbacks",
    "sync_timeouts",
    "overhead_ns_app",
    "overhead_spans",
    "gc_pauses",
    "gc_pause_ns",
    "gc_pauses_shed",
)


class Counters:
    """Named event counts plus the once-only fault log of one pipeline."""

    __slots__ = ("values", "_warned")

    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(NAMES, 0)
        self._warned: set[str] = set()

    def add(self, what: str, amount: int = 1) -> None:
        """Count ``amount`` events of ``what``."""
        self.values[what] = self.values.get(what, 0) + amount

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` as a warning, the first time ``key`` is seen."""
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    def log_once(self, key: str, message: str) -> None:
        """Log ``message`` with the current exception, the first time ``key`` is seen."""
        if key not in self._warned:
            self._warned.add(key)
            logger.exception(message)
