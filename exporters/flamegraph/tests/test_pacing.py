# SPDX-License-Identifier: Apache-2.0
"""The exporter gives the interpreter back often: a pause point between spans and
between writing stages, nothing lost, and a late window the garbage collector does not
have to walk."""

from __future__ import annotations

import gc

from brickscope.exporter.flamegraph import FlamegraphSpanExporter
from brickscope.exporter.flamegraph._stacks import StackAggregator
from brickscope.exporter.flamegraph._weights import Weight


class _CountingPacer:
    """Stands in for the exporter's pacer: counts pause points and what was folded between."""

    def __init__(self, exporter: FlamegraphSpanExporter) -> None:
        self.exporter = exporter
        self.points = 0
        self.worst = 0
        self._seen = 0

    def start(self) -> None:
        self._seen = self.exporter._stacks.stats.spans

    def tick(self) -> None:
        folded = self.exporter._stacks.stats.spans
        self.worst = max(self.worst, folded - self._seen)
        self._seen = folded
        self.points += 1


def _batch(make_span, bricks: int) -> list:
    """``bricks`` bricks of one GPU kernel each, kernels first: ``2 * bricks`` spans."""
    spans = []
    for i in range(bricks):
        brick = make_span("brick", host=(i * 100, i * 100 + 90))
        spans.append(make_span("k", brick, gpu=(i * 100 + 10, i * 100 + 50)))
        spans.append(brick)
    return spans


def test_at_most_one_span_is_folded_between_pause_points(tmp_path, make_span):
    exporter = FlamegraphSpanExporter(tmp_path / "f.folded", weight="gpu", write_interval_millis=None)
    pacer = exporter._pacer = _CountingPacer(exporter)
    exporter.export(_batch(make_span, 300))
    assert pacer.worst == 1
    assert pacer.points == 600


def test_writing_has_pause_points_between_its_stages(tmp_path, make_span):
    """Snapshot, folded lines, the folded file, the speedscope document and its file."""
    exporter = FlamegraphSpanExporter(
        tmp_path / "f.folded", weight="gpu", speedscope_path=tmp_path / "f.json", write_interval_millis=None
    )
    exporter.export(_batch(make_span, 10))
    pacer = exporter._pacer = _CountingPacer(exporter)
    assert exporter.force_flush()
    assert pacer.points == 5


def test_nothing_is_lost(tmp_path, make_span):
    """Every span exported is folded: 2,000 kernels of 40 ns under their bricks."""
    exporter = FlamegraphSpanExporter(tmp_path / "f.folded", weight="gpu", unit="ns", write_interval_millis=None)
    spans = _batch(make_span, 2000)
    for first in range(0, len(spans), 512):
        exporter.export(spans[first : first + 512])
    exporter.shutdown()
    assert exporter.stats.spans == 4000 and exporter.stats.weighted == 2000
    assert (tmp_path / "f.folded").read_text() == f"svc;brick;k {2000 * 40}\n"


def test_the_late_window_adds_no_objects_for_the_garbage_collector(make_span):
    """20,000 remembered leaf spans leave the number of objects the cyclic GC walks almost
    unchanged (it was one per span): a full collection, which runs with the interpreter
    held, does not grow with ``late_window``."""
    spans = [make_span("k", 10**9, gpu=(i * 10, i * 10 + 5)) for i in range(20_000)]
    stacks = StackAggregator(Weight.parse("gpu"), late_window=65_536)
    gc.collect()
    before = len(gc.get_objects())
    for span in spans:
        stacks.add(span)
    gc.collect()
    assert len(stacks._arrived) == 20_000
    assert len(gc.get_objects()) - before < 100
