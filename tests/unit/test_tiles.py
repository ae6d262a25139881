# SPDX-License-Identifier: Apache-2.0
"""bs.tile: per-level totals on the enclosing scope's span (no span per tile), aggregated per level
by the analysis engine (figures computed by hand on hand-built spans)."""

from __future__ import annotations

import pytest

import brickscope as bs
from brickscope.analysis import analyse, get_backend, render
from brickscope.analysis._table import TableBuilder
from brickscope.testing import MAIN_THREAD, capture_spans, make_span
from brickscope.trace import attributes as A


def test_tiles_are_totals_on_the_enclosing_scope_not_spans():
    with capture_spans() as captured:
        with bs.brick("gemm_cpu"):
            for _ in range(4):
                with bs.tile("macro", elements=100):
                    for _ in range(3):
                        with bs.tile("micro", elements=8):
                            pass
        (span,) = captured.spans  # no span per tile
    attributes = span.attributes
    assert (attributes["brickscope.tile.macro.count"], attributes["brickscope.tile.macro.elements"]) == (4, 400)
    assert (attributes["brickscope.tile.micro.count"], attributes["brickscope.tile.micro.elements"]) == (12, 96)
    assert "brickscope.tile.midi.count" not in attributes
    # micro tiles run inside macro tiles: their time is part of the macro time, and of the brick's
    host_ns = attributes[A.HOST_DURATION_NS]
    assert 0 < attributes["brickscope.tile.micro.duration_ns"] <= attributes["brickscope.tile.macro.duration_ns"] <= host_ns


def test_tiles_go_to_the_innermost_scope_and_nowhere_when_off():
    bs.tile("midi").__enter__()  # brickscope off: an empty with
    with capture_spans() as captured:
        with bs.brick("outer"):
            with bs.kernel("inner"):
                with bs.tile("midi", elements=5):
                    pass
        spans = {s.name: s for s in captured.spans}
    assert spans["inner"].attributes["brickscope.tile.midi.count"] == 1
    assert "brickscope.tile.midi.count" not in spans["outer"].attributes


@pytest.mark.parametrize("args", [("nano",), ("macro", -1), ("macro", 1.5)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        bs.tile(*args)


def test_report_aggregates_per_level():
    """Two bricks: gemm 10 macro tiles, 2 ms, 1000 elements; conv 30 macro tiles, 1 ms,
    500 elements, and 90 micro tiles, 0.5 ms, 900 elements. Macro in all: 40 tiles, 3 ms,
    1500 elements, 500,000 elements/s, mean 75 us."""
    tile = {A.SCOPE_KIND: "brick", **MAIN_THREAD}
    spans = [
        make_span(1, "gemm", 1_000, 3_001_000, attributes={**tile, "brickscope.tile.macro.count": 10,
                  "brickscope.tile.macro.duration_ns": 2_000_000, "brickscope.tile.macro.elements": 1000}),
        make_span(2, "conv", 4_000_000, 6_000_000, attributes={**tile, "brickscope.tile.macro.count": 30,
                  "brickscope.tile.macro.duration_ns": 1_000_000, "brickscope.tile.macro.elements": 500,
                  "brickscope.tile.micro.count": 90, "brickscope.tile.micro.duration_ns": 500_000,
                  "brickscope.tile.micro.elements": 900}),
    ]  # fmt: skip
    for name in ("numpy", "python"):
        builder = TableBuilder(get_backend(name))
        builder.add_all(spans)
        report = analyse(builder.build())
        by = {(t.name, t.level): t for t in report.tiles}
        macro = by[("", "macro")]
        assert (macro.count, macro.total_ns, macro.elements, macro.mean_ns) == (40, 3_000_000, 1500, 75_000)
        assert macro.elements_per_second == pytest.approx(500_000)
        assert (by[("", "micro")].count, by[("", "micro")].elements_per_second) == (90, pytest.approx(1_800_000))
        assert [(t.name, t.level) for t in report.tiles] == [
            ("", "macro"), ("", "micro"), ("gemm", "macro"), ("conv", "macro"), ("conv", "micro")
        ]
        text = render(report, "text")
        assert "Tiles (bs.tile, host clock)" in text
        assert any(line.split()[:6] == ["(all)", "macro", "40", "3.000", "75.0", "1500"] for line in text.splitlines())
