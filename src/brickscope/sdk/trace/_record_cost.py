# SPDX-License-Identifier: Apache-2.0
"""What one record costs the application thread: calibrated once, not timed per scope.

Timing every scope's enter and exit would double what it costs (two clock reads
against a record of about a microsecond), so brickscope's self-telemetry *estimates*
the record's CPU time: records made so far times the CPU time of one record,
measured once per process at the first ``configure()`` by running :data:`RECORDS`
host-clock brick records nested in a step through a private recorder (the same
``Recorder`` class, so the C accelerator when it is in use), in a fresh context, on
the thread CPU clock. Not included: the ``with`` statement around the record, CUDA
event records (driver calls, on top when GPU-timed) and an unsampled brick's fold.

Example::

    per_record = per_record_ns()           # e.g. 1150.0 (calibrated on first call)
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable

#: Records timed per calibration round (two rounds; the cheaper one counts: the first warms up).
RECORDS = 2000

_per_record_ns: float | None = None


def per_record_ns() -> float:
    """CPU ns of one record on this machine, calibrated on the first call in the process."""
    global _per_record_ns
    if _per_record_ns is None:
        _per_record_ns = calibrate()
    return _per_record_ns


def calibrate(records: int = RECORDS, clock: Callable[[], int] = time.thread_time_ns) -> float:
    """CPU ns per record (``Recorder.open`` + ``close`` of a host-clock brick in a step),
    the cheaper of two rounds of ``records`` each, read with ``clock``."""
    from opentelemetry.sdk.trace import TracerProvider

    from brickscope._scope import Brick, Step
    from brickscope.sdk.trace._counters import Counters
    from brickscope.sdk.trace._recorder import Recorder

    recorder = Recorder(
        TracerProvider(shutdown_on_exit=False),
        sync_mode="deferred",
        timer=None,
        max_pending=1 << 40,
        max_delay_millis=1e12,
        propagate_context=True,
        time_kernels=False,
        counters=Counters(),
        sync=lambda *args, **kwargs: True,
    )
    brick, step = Brick("brickscope.calibration"), Step(0)

    def one_round() -> int:
        root = recorder.open(step)
        start = clock()
        for _ in range(records):
            recorder.close(recorder.open(brick), None)
        elapsed = clock() - start
        recorder.close(root, None)
        recorder.pending.clear()
        return elapsed

    return min(contextvars.Context().run(one_round) for _ in range(2)) / records
