# SPDX-License-Identifier: Apache-2.0
"""The report as text and Markdown: an empty section is left out with one line saying why
(JSON keeps it), and the figures of one column share one format."""

from __future__ import annotations

import json

from analysis_synthetic import _resource, span

from brickscope import analysis
from brickscope.trace import attributes as A


def _host_run(backend):
    """A host-timed run, no communication, no bytes or flops: two bricks, 100 us of 1 element
    and 10 us of 1,000,000 elements (elements/s 1e4 and 1e11)."""
    resource = _resource(0)
    return analysis.load_spans(
        [
            span(1, "tiny", "brick", 0, 100, resource, category="norm", **{A.BRICK_ELEMENTS: 1}),
            span(2, "huge", "brick", 100, 110, resource, category="norm", **{A.BRICK_ELEMENTS: 1_000_000}),
        ],
        backend=backend,
    )


class TestEmptySections:
    def test_host_only_run_says_in_one_line_what_it_leaves_out(self, backend):
        """No GPU, no communication, no bytes, no flops, no steps: each of those sections is one
        line saying why, and none of their titles or tables is printed."""
        text = analysis.render(analysis.analyse(_host_run(backend)), "text")
        lines = text.splitlines()
        for line in (
            "Devices: not shown, no GPU-timed spans (timed on the host clock;"
            " needs brickscope.clock=cuda or gpu and brickscope.gpu.device.id)",
            "Communication: not shown, no communication bricks (needs brickscope.scope.kind=brick"
            " with brickscope.brick.category=communication or a collective's name)",
            "Memory traffic: not shown, no span carries bytes"
            " (needs brickscope.work.bytes, or brickscope.work.output_shape and brickscope.work.dtype)",
            "Roofline: not shown, no span carries flops or bytes (needs brickscope.work.flops or brickscope.work.bytes)",
            "Steps: not shown, no step spans (needs brickscope.scope.kind=step)",
        ):
            assert lines.count(line) == 1
        for title in ("Devices (busy", "Memory traffic (bytes", "Roofline (flops", "device / stream"):
            assert title not in text
        assert "Ranks" in lines  # a section with figures stays

    def test_markdown_leaves_them_out_the_same_way(self, backend):
        markdown = analysis.render(analysis.analyse(_host_run(backend)), "markdown")
        assert any(line.startswith("Communication: not shown, no communication bricks") for line in markdown.splitlines())
        assert "**Communication**" not in markdown

    def test_json_keeps_every_section(self, backend):
        data = json.loads(analysis.render(analysis.analyse(_host_run(backend)), "json"))
        assert data["devices"] == [] and data["communication"]["operations"] == []


def _rows(text: str, title: str) -> dict[str, list[str]]:
    """The rows of the text table under ``title``, split on whitespace, by their first cell."""
    lines = text[text.index(title) :].splitlines()[3:]
    return {line.split()[0]: line.split() for line in lines[: lines.index("")] if line}


class TestColumnFormats:
    def test_a_rate_column_has_one_format(self, backend):
        """elements/s: 1 / 100 us = 1e4 and 1e6 / 10 us = 1e11, both scientific with three
        decimals (the general format gave "1e+04" beside "1e+11", or "8632" beside "1.7e+06")."""
        text = analysis.render(analysis.analyse(_host_run(backend)), "text")
        rows = _rows(text, "Self time by brick")
        assert (rows["tiny"][-2], rows["huge"][-2]) == ("1.000e+04", "1.000e+11")

    def test_fixed_point_columns_keep_three_decimals_and_never_read_zero(self, backend):
        """Per brick: small moves 100 B and does 100 FLOP in 100 us (0.001 GB/s, 0.001 GFLOP/s,
        1 FLOP/B); large 1e6 B and 1e9 FLOP in 10 us (100 GB/s, 100,000 GFLOP/s, 1,000
        FLOP/B); tiny 1 B and 1 FLOP in 100 us (1e-5 GB/s: too small for three decimals)."""
        resource = _resource(0)
        table = analysis.load_spans(
            [
                span(1, "small", "brick", 0, 100, resource, **{A.BRICK_ELEMENTS: 10, A.WORK_BYTES: 100, A.WORK_FLOPS: 100}),
                span(2, "large", "brick", 100, 110, resource, **{A.WORK_BYTES: 10**6, A.WORK_FLOPS: 10**9}),
                span(3, "tiny", "brick", 110, 210, resource, **{A.WORK_BYTES: 1, A.WORK_FLOPS: 1}),
            ],
            backend=backend,
        )
        text = analysis.render(analysis.analyse(table), "text")
        roofline = _rows(text, "Roofline")
        assert [roofline[name][3:6] for name in ("small", "large", "tiny")] == [
            ["0.001", "0.001", "1.000"], ["100000.000", "100.000", "1000.000"], ["<0.001", "<0.001", "1.000"]
        ]
        bricks = _rows(text, "Self time by brick")
        assert [bricks[name][-1] for name in ("small", "large", "tiny")] == ["0.001", "100.000", "<0.001"]
