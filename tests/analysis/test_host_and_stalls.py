# SPDX-License-Identifier: Apache-2.0
"""brickscope's own work (overhead spans), GC pauses and stalls in the analysis, on
hand-built traces whose every figure is worked out in the docstrings (times in us)."""

from __future__ import annotations

import json
import math

import pytest
from analysis_synthetic import _resource, span, write_otlp_json, write_pftrace

from brickscope.analysis import analyse, get_backend, load, render
from brickscope.analysis._table import TableBuilder
from brickscope.trace import attributes as A

US = 1_000
APP, OTHER = 11, 22  # thread ids
R0 = _resource(0)


def _host(**extra):
    return {A.CLOCK: "host", A.THREAD_ID: APP, **extra}


def quickstart_trace():
    """A user span ``generate`` [0,1000) holding two steps, each followed by brickscope's
    resolution of it (overhead spans, children of ``generate``, carrying the step number)::

        step 0 [0,300)    rms_norm [0,200)     overhead [300,340)
        step 1 [340,640)  rms_norm [340,540)   overhead [640,700)
        rest of generate  [700,1000): the program's own work after the loop

    generate's self time: 1000 - 40 - 60 = 900 (it leaves out only overhead children;
    a non-brick span's self time is otherwise its duration). Step walls: 340 and 360;
    tokens/s over the walls: 2 tokens / 700 us; brickscope: 100 us of 700 us of wall.
    """
    host = _host()
    return [
        span(1, "generate", "other", 0, 1000, R0, **host),
        span(2, "step", "step", 0, 300, R0, parent=1, step=0, **_host(**{A.STEP_TOKENS: 1})),
        span(3, "rms_norm", "brick", 0, 200, R0, parent=2, step=0, category="norm", **host),
        span(4, A.OVERHEAD_SPAN_NAME, "overhead", 300, 340, R0, parent=1, step=0, **host),
        span(5, "step", "step", 340, 640, R0, parent=1, step=1, **_host(**{A.STEP_TOKENS: 1})),
        span(6, "rms_norm", "brick", 340, 540, R0, parent=5, step=1, category="norm", **host),
        span(7, A.OVERHEAD_SPAN_NAME, "overhead", 640, 700, R0, parent=1, step=1, **host),
    ]


def _table(spans, backend):
    builder = TableBuilder(get_backend(backend))
    builder.add_all(spans)
    return builder.build()


def _self_of(table, name):
    be = table.backend
    names = [table.operations[op].name for op in be.to_list(table["op"])]
    return [s for n, s in zip(names, be.to_list(table["self"])) if n == name]


class TestOverheadIsNotTheParents:
    def test_parent_self_time_leaves_the_overhead_children_out(self, backend):
        table = _table(quickstart_trace(), backend)
        assert _self_of(table, "generate") == [900 * US]
        assert _self_of(table, A.OVERHEAD_SPAN_NAME) == [40 * US, 60 * US]
        assert _self_of(table, "step") == [300 * US, 300 * US]  # no overhead inside the steps

    def test_a_brick_parent_keeps_its_recorded_self_time(self, backend):
        """A brick [0,500) with a poll's overhead [100,150) inside: brickscope credited the
        interval to the brick when it recorded it (self attribute 450), so nothing more
        comes off; the overhead stays its own row."""
        host = _host()
        spans = [
            span(1, "attention", "brick", 0, 500, R0, category="attention", self_us=450, **host),
            span(2, A.OVERHEAD_SPAN_NAME, "overhead", 100, 150, R0, parent=1, **host),
        ]
        table = _table(spans, backend)
        assert _self_of(table, "attention") == [450 * US]

    def test_overhead_sticking_out_of_its_parent_takes_only_its_inside_part(self, backend):
        """A layer [0,100) and an overhead child [80,130): 20 us inside, self 80."""
        host = _host()
        spans = [
            span(1, "layer", "layer", 0, 100, R0, **host),
            span(2, A.OVERHEAD_SPAN_NAME, "overhead", 80, 130, R0, parent=1, **host),
        ]
        assert _self_of(_table(spans, backend), "layer") == [80 * US]

    def test_a_gpu_timed_parent_keeps_its_gpu_interval(self, backend):
        """A step timed by the extent of its GPU work [0,500) with a poll's overhead [100,150)
        inside on the host clock: GPU time has no host work in it; self stays 500."""
        spans = [
            span(1, "step", "step", 0, 500, R0, step=0, **{A.CLOCK: "cuda", A.THREAD_ID: APP}),
            span(2, A.OVERHEAD_SPAN_NAME, "overhead", 100, 150, R0, parent=1, step=0, **_host()),
        ]
        assert _self_of(_table(spans, backend), "step") == [500 * US]

    def test_throughput_is_over_the_wall_time_including_resolution(self, backend):
        report = analyse(_table(quickstart_trace(), backend))
        steps = report.throughput.steps
        assert [(s.step, s.duration_ns, s.wall_ns) for s in steps] == [(0, 300 * US, 340 * US), (1, 300 * US, 360 * US)]
        assert steps[0].tokens_per_second == pytest.approx(1 / 340e-6)
        assert report.throughput.tokens_per_second == pytest.approx(2 / 700e-6)  # not 2 / 600 us
        assert report.throughput.mean_step_wall_ns == pytest.approx(350 * US)

    def test_brickscope_share_of_wall_time(self, backend):
        host = analyse(_table(quickstart_trace(), backend)).host
        assert (host.wall_ns, host.steps, host.brickscope_count, host.brickscope_ns) == (700 * US, True, 2, 100 * US)
        assert host.brickscope_share == pytest.approx(100 / 700)
        assert (host.brickscope_outside_ns, host.gc_count, host.gc_ns) == (0, 0, 0)
        assert "brickscope 0.100 ms in 2 sync points, 14.3% of 0.700 ms step wall time; no GC pause inside a scope" in render(
            analyse(_table(quickstart_trace(), backend))
        )

    def test_without_overhead_or_gc_spans_the_section_says_so(self, backend):
        spans = [s for s in quickstart_trace() if s.attributes[A.SCOPE_KIND] != "overhead"]
        report = analyse(_table(spans, backend))
        assert report.host is None
        assert report.throughput.tokens_per_second == pytest.approx(2 / 600e-6)
        assert "no overhead or gc spans in the trace" in render(report)

    @pytest.mark.parametrize("writer", ["otlp_json", "pftrace"])
    def test_the_figures_survive_the_trace_files(self, tmp_path, writer):
        pytest.importorskip("brickscope.exporter.perfetto")
        write = write_otlp_json if writer == "otlp_json" else write_pftrace
        path = write(tmp_path / ("t.json" if writer == "otlp_json" else "t.pftrace"), quickstart_trace())
        table = load(path)
        assert _self_of(table, "generate") == [900 * US]
        report = analyse(table)
        assert report.host.brickscope_ns == 100 * US
        assert report.throughput.tokens_per_second == pytest.approx(2 / 700e-6)


def stall_trace():
    """Ten ``lm_head`` bricks of 100 us on the app thread, one every 1000 us, the seventh
    (step 6, [6000,8000)) stalled to 2000 us: 20x. Nearest-rank median 100 (5th of 10),
    MAD 0 (9 deviations of 0), threshold max(5 x 100, 100 + 0) = 500: only the stall is
    above. lm_head self 9 x 100 + 2000 = 2900; in stalls 2000/2900.

    During the stall, on rank 0: a GC pause [6100,7600) (1500 us of it), brickscope's
    overhead [7900,8100) (100 us of it), a ``loader`` span of another thread [5000,6700)
    (700 us), and the stall's own step (same thread: not listed).

    Each lm_head holds a kernel ``lm_gemv`` of the same interval: the seventh is a stall of
    its operation too, counted in its table row, but listed with its brick, not again.

    ``jittery``: 7 instances [10,20,100,1000,1000,1000,5200]: median 1000, deviations
    sorted [0,0,0,900,980,990,4200], MAD 900: threshold max(5000, 1000 + 4500) = 5500, so
    5200 (over 5x the median) is not a stall: the spread says it is ordinary.
    ``rare``: 4 instances (fewer than 5): never a stall, even at 100x.
    """
    host = _host()
    spans = []
    for i in range(10):
        start = i * 1000
        end = start + (2000 if i == 6 else 100)
        spans.append(span(100 + i, "step", "step", start, end + 1, R0, step=i, **host))
        spans.append(span(200 + i, "lm_head", "brick", start, end, R0, parent=100 + i, step=i, category="head", **host))
        spans.append(span(600 + i, "lm_gemv", "kernel", start, end, R0, parent=200 + i, step=i, brick="lm_head", **host))
    for i, value in enumerate((10, 20, 100, 1000, 1000, 1000, 5200)):
        start = 20_000 + i * 10_000
        spans.append(span(300 + i, "jittery", "brick", start, start + value, R0, category="head", **host))
    for i, value in enumerate((10, 10, 10, 1000)):
        start = 100_000 + i * 2000
        spans.append(span(400 + i, "rare", "brick", start, start + value, R0, category="misc", **host))
    spans += [
        span(501, "gc", "gc", 6100, 7600, R0, parent=206, step=6, **host),
        span(502, A.OVERHEAD_SPAN_NAME, "overhead", 7900, 8100, R0, **host),
        span(503, "loader", "other", 5000, 6700, R0, **_host(**{A.THREAD_ID: OTHER})),
    ]
    return spans


class TestStalls:
    def test_the_stall_is_listed_with_what_overlapped_it(self, backend):
        report = analyse(_table(stall_trace(), backend))
        (stall,) = report.stalls
        assert (stall.instance.name, stall.instance.step, stall.instance.self_ns) == ("lm_head", 6, 2000 * US)
        assert (stall.median_ns, stall.threshold_ns, stall.excess_ns) == (100 * US, 500 * US, 1900 * US)
        assert stall.ratio == pytest.approx(20.0)
        assert [(o.name, o.kind, o.thread, o.overlap_ns) for o in stall.overlaps] == [
            ("gc", "gc", APP, 1500 * US),
            (A.OVERHEAD_SPAN_NAME, "overhead", APP, 100 * US),
            ("loader", "other", OTHER, 700 * US),
        ]

    def test_operation_tables_keep_the_total_and_show_the_stall_share(self, backend):
        report = analyse(_table(stall_trace(), backend))
        (lm_head,) = [s for s in report.operations if s.name == "lm_head"]
        assert (lm_head.self_ns, lm_head.stalls, lm_head.stall_ns) == (2900 * US, 1, 2000 * US)
        assert lm_head.stall_share == pytest.approx(2000 / 2900)
        (kernel,) = [s for s in report.operations if s.name == "lm_gemv"]
        assert (kernel.kind, kernel.stalls, kernel.stall_ns) == ("kernel", 1, 2000 * US)
        for name in ("jittery", "rare"):
            (stats,) = [s for s in report.operations if s.name == name]
            assert (stats.stalls, stats.stall_ns, stats.stall_share) == (0, 0, 0.0)
        (head,) = [c for c in report.categories if c.name == "head"]
        # head: lm_head 2900 + jittery 8330 = 11230 us of self time, 2000 of it in stalls
        assert (head.self_ns, head.stalls, head.stall_ns) == (11230 * US, 1, 2000 * US)

    def test_text_and_json(self, backend):
        report = analyse(_table(stall_trace(), backend))
        text = render(report)
        assert "Stalls (self time over max(5x, median + 5 MAD)" in text
        assert "gc 1.500 ms, brickscope.resolve 0.100 ms, loader (thread 22) 0.700 ms" in text
        assert "69.0%" in text  # lm_head's share in stalls, 2000/2900
        data = json.loads(render(report, "json"))
        (stall,) = data["stalls"]
        assert stall["instance"]["name"] == "lm_head" and stall["excess_ns"] == 1900 * US
        assert stall["overlaps"][0] == {"name": "gc", "kind": "gc", "thread": APP, "overlap_ns": 1500 * US}
        (lm_head,) = [s for s in data["operations"] if s["name"] == "lm_head"]
        assert lm_head["stall_ns"] == 2000 * US and math.isclose(lm_head["stall_share"], 2000 / 2900)
        assert data["host"]["gc_ns"] == 1500 * US

    def test_a_zero_median_gives_no_ratio_in_json(self, backend):
        """Five instances of 0 us and one of 50: median 0, MAD 0, threshold 0: a stall of
        no finite ratio, written as null."""
        host = _host()
        spans = [span(i + 1, "tick", "brick", i * 100, i * 100 + (50 if i == 5 else 0), R0, **host) for i in range(6)]
        data = json.loads(render(analyse(_table(spans, backend)), "json"))
        (stall,) = data["stalls"]
        assert stall["ratio"] is None and stall["excess_ns"] == 50 * US
