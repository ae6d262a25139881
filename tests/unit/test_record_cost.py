# SPDX-License-Identifier: Apache-2.0
"""The record's CPU cost is calibrated, not timed per scope: the arithmetic, with a driven clock."""

from __future__ import annotations

from brickscope.sdk.trace import _record_cost


class ScriptedClock:
    """Returns the scripted readings in order (a CPU clock the test drives)."""

    def __init__(self, *readings: int) -> None:
        self.readings = list(readings)

    def __call__(self) -> int:
        return self.readings.pop(0)


def test_the_cheaper_round_per_record():
    """Two rounds of 2000 records: 1.8 ms then 1.4 ms of CPU -> 700 ns per record."""
    clock = ScriptedClock(10, 10 + 1_800_000, 50, 50 + 1_400_000)
    assert _record_cost.calibrate(2000, clock) == 700.0
    assert clock.readings == []  # each round read the clock exactly twice, around the records


def test_calibration_runs_real_records_in_a_private_context():
    """On the real thread clock: a positive cost, and the caller's scope stack untouched."""
    from brickscope import _record

    before = _record.TOP.get()
    assert _record_cost.calibrate(50) > 0
    assert _record.TOP.get() is before


def test_calibrated_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(_record_cost, "_per_record_ns", None)
    monkeypatch.setattr(_record_cost, "calibrate", lambda: calls.append(1) or 650.0)
    assert _record_cost.per_record_ns() == 650.0
    assert _record_cost.per_record_ns() == 650.0
    assert calls == [1]
