# SPDX-License-Identifier: Apache-2.0
"""The analysis engine on the hand-computed two-rank trace (conftest.two_rank_trace):
every figure below is worked out from the span intervals in the docstring there."""

from __future__ import annotations

import pytest

from brickscope.analysis import AnalysisError, Peak, analyse, get_backend
from brickscope.analysis._table import TableBuilder

US = 1_000


def _table(trace, backend):
    builder = TableBuilder(get_backend(backend))
    for spans in trace.values():
        builder.add_all(spans)
    return builder.build()


@pytest.fixture(name="report")
def _report(trace, backend):
    return analyse(_table(trace, backend), top=5)


def _op(report, name, kind="brick"):
    (stats,) = [s for s in report.operations if s.name == name and s.kind == kind]
    return stats


class TestOperations:
    def test_gemm_counts_percentiles_and_shares(self, report):
        """gemm: 6 instances of 100 us and one 900 us warm-up; nearest-rank p50 is the 4th value."""
        gemm = _op(report, "gemm")
        assert (gemm.count, gemm.total_ns, gemm.self_ns) == (7, 1500 * US, 1500 * US)
        assert (gemm.p50_ns, gemm.p90_ns, gemm.p99_ns, gemm.min_ns, gemm.max_ns) == (
            100 * US,
            900 * US,
            900 * US,
            100 * US,
            900 * US,
        )
        assert gemm.mean_ns == pytest.approx(1500 * US / 7)
        # brick self time in all: gemm 1500 + all_reduce 200+200+350 + ffn 300-100 = 2450 us
        assert gemm.share == pytest.approx(1500 / 2450)
        assert gemm.elements == 1000 and gemm.elements_per_second == pytest.approx(1000 / 1500e-6)
        # 8 MB on the warm-up gemm + 1000x500 bfloat16 output (1 MB) on another
        assert gemm.bytes == 9_000_000 and gemm.bytes_per_second == pytest.approx(9e6 / 1500e-6)

    def test_nested_brick_self_time(self, report):
        """ffn [1400,1700) holds gemm [1400,1500): total 300 us, self 200 us; its distribution is of self time."""
        ffn = _op(report, "ffn")
        assert (ffn.count, ffn.total_ns, ffn.self_ns, ffn.p50_ns, ffn.max_ns) == (
            1,
            300 * US,
            200 * US,
            200 * US,
            200 * US,
        )
        assert ffn.share == pytest.approx(200 / 2450)

    def test_all_reduce_and_order(self, report):
        """all_reduce 200, 200, 350 us; bricks are listed by self time, then kernels."""
        reduce = _op(report, "all_reduce")
        assert (reduce.count, reduce.self_ns, reduce.p50_ns, reduce.p90_ns) == (3, 750 * US, 200 * US, 350 * US)
        assert [(s.kind, s.name) for s in report.operations] == [
            ("brick", "gemm"),
            ("brick", "all_reduce"),
            ("brick", "ffn"),
            ("kernel", "sgemm"),
        ]

    def test_kernels_are_separate(self, report):
        """The one kernel (sgemm, 90 us) has its own row and share; it does not enter brick shares."""
        sgemm = _op(report, "sgemm", "kernel")
        assert (sgemm.count, sgemm.total_ns, sgemm.share, sgemm.category) == (1, 90 * US, 1.0, "matmul")
        assert sum(s.share for s in report.operations if s.kind == "brick") == pytest.approx(1.0)

    def test_categories(self, report):
        """Categories sum their bricks: matmul 1500, communication 750, ffn 200 us of self time."""
        assert [(c.name, c.count, c.self_ns) for c in report.categories] == [
            ("matmul", 7, 1500 * US),
            ("communication", 3, 750 * US),
            ("ffn", 1, 200 * US),
        ]
        assert report.categories[0].p90_ns == 900 * US


class TestInstances:
    def test_slowest_with_where_they_ran(self, report):
        """By self time: the warm-up gemm, rank 1's all_reduce, then three 200 us bricks by start time
        (rank 0's all-reduces at 800 and 1050 us, the ffn, whose 300 us hold a 100 us gemm)."""
        assert [
            (i.name, i.self_ns, i.duration_ns, i.step, i.rank, i.device, i.span_id) for i in report.slowest
        ] == [
            ("gemm", 900 * US, 900 * US, 0, "0", "gpu 0", f"{2:016x}"),
            ("all_reduce", 350 * US, 350 * US, 0, "1", "gpu 1", f"{13:016x}"),
            ("all_reduce", 200 * US, 200 * US, 0, "0", "gpu 0", f"{3:016x}"),
            ("all_reduce", 200 * US, 200 * US, 1, "0", "gpu 0", f"{6:016x}"),
            ("ffn", 200 * US, 300 * US, 2, "0", "gpu 0", f"{9:016x}"),
        ]
        assert report.slowest[0].stream == "gpu 0 stream 0x7"

    def test_warm_up_outlier_is_named(self, report):
        """900 us > 3 x gemm's median (100 us); no all_reduce is above 3 x 200 us."""
        (outlier,) = report.outliers
        assert (outlier.instance.name, outlier.instance.step, outlier.median_ns, outlier.ratio) == (
            "gemm",
            0,
            100 * US,
            9.0,
        )


class TestPlacement:
    def test_device_busy_is_the_union(self, report):
        """gpu 0: [0,1250) u [1300,1700) = 1650 us busy, 50 us idle inside steps [0,1700);
        gpu 1: [0,450) u [500,600) u [800,900) = 650 us, steps [0,900) leave 250 us idle."""
        gpu0, gpu1 = report.devices
        assert (gpu0.name, gpu0.model, gpu0.count, gpu0.busy_ns, gpu0.idle_in_steps_ns) == (
            "gpu 0",
            "NVIDIA H100 80GB HBM3",
            7,
            1650 * US,
            50 * US,
        )
        assert (gpu1.name, gpu1.count, gpu1.busy_ns, gpu1.idle_in_steps_ns) == ("gpu 1", 5, 650 * US, 250 * US)

    def test_streams(self, report):
        """gpu 0 stream 7: 900+100+400 us busy; stream 9: the two all-reduces, 400 us."""
        gpu0 = report.devices[0]
        assert [(s.name, s.count, s.busy_ns, s.idle_in_steps_ns) for s in gpu0.streams] == [
            ("gpu 0 stream 0x7", 5, 1400 * US, 300 * US),
            ("gpu 0 stream 0x9", 2, 400 * US, 1300 * US),
        ]

    def test_ranks(self, report):
        """Each rank ran one GPU: the same busy and idle times as its device."""
        assert [(r.name, r.count, r.busy_ns, r.idle_in_steps_ns) for r in report.ranks] == [
            ("0", 7, 1650 * US, 50 * US),
            ("1", 5, 650 * US, 250 * US),
        ]

    def test_load_balance(self, report):
        """busy 1650 and 650 us: mean 1150, ratio (1650 - 1150) / 1150; gpu 0 / rank 0 straggle."""
        devices, ranks = report.load_balance["devices"], report.load_balance["ranks"]
        assert devices.imbalance_ratio == pytest.approx(500 / 1150)
        assert (devices.mean_busy_ns, devices.max_busy_ns, devices.straggler) == (1150 * US, 1650 * US, "gpu 0")
        assert (ranks.imbalance_ratio, ranks.straggler) == (pytest.approx(500 / 1150), "0")
        assert devices.busy_ns == {"gpu 0": 1650 * US, "gpu 1": 650 * US}

    def test_throughput(self, report):
        """Six steps of 1000, 400, 300, 500, 300, 100 us, 8 tokens each: 48 tokens in 2600 us."""
        throughput = report.throughput
        assert [(s.step, s.rank, s.duration_ns) for s in throughput.steps] == [
            (0, "0", 1000 * US),
            (0, "1", 500 * US),
            (1, "0", 400 * US),
            (1, "1", 300 * US),
            (2, "0", 300 * US),
            (2, "1", 100 * US),
        ]
        assert throughput.tokens == 48
        assert throughput.tokens_per_second == pytest.approx(48 / 2600e-6)
        assert throughput.mean_step_ns == pytest.approx(2600 * US / 6)
        assert throughput.steps[0].tokens_per_second == pytest.approx(8 / 1000e-6)


class TestCommunication:
    def test_totals(self, report):
        """Three all_reduce bricks (category communication): 750 of 2450 us of brick self time."""
        comm = report.communication
        assert (comm.count, comm.total_ns, comm.share) == (3, 750 * US, pytest.approx(750 / 2450))
        assert [(o.name, o.count, o.self_ns) for o in comm.operations] == [("all_reduce", 3, 750 * US)]

    def test_exposed_versus_overlapped(self, report):
        """gpu 0: communication [800,1000) u [1050,1250) meets compute on [800,900) and [1050,1100):
        150 us overlapped, 250 exposed. gpu 1: [100,450) only touches compute: all 350 exposed."""
        comm = report.communication
        assert [(d.device, d.communication_ns, d.overlapped_ns, d.exposed_ns) for d in comm.devices] == [
            ("gpu 0", 400 * US, 150 * US, 250 * US),
            ("gpu 1", 350 * US, 0, 350 * US),
        ]
        assert (comm.exposed_ns, comm.overlapped_ns) == (600 * US, 150 * US)


class TestMemoryAndRoofline:
    def test_memory(self, report):
        """gemm 8 MB + 1 MB (1000x500 bfloat16), all_reduce 2 MB: 11 MB, both above 10%."""
        memory = report.memory
        assert memory.total_bytes == 11_000_000
        assert [(m.name, m.count, m.bytes, m.max_bytes) for m in memory.operations] == [
            ("gemm", 2, 9_000_000, 8_000_000),
            ("all_reduce", 1, 2_000_000, 2_000_000),
        ]
        assert memory.operations[0].share == pytest.approx(9 / 11)
        assert (memory.peak.name, memory.peak.span_id, memory.peak_bytes) == ("gemm", f"{2:016x}", 8_000_000)
        assert memory.hotspots == ("gemm", "all_reduce")

    def test_roofline_against_the_h100_datasheet(self, report):
        """gemm on gpu 0: 4 GFLOP and 9 MB over 1000 us self time: 4 TFLOP/s, AI 444 FLOP/B, above
        the H100 ridge (989e12 / 3.35e12 = 295), so compute-bound at 4e12 / 989e12 of the roof."""
        gemm, reduce = report.roofline
        assert (gemm.name, gemm.device, gemm.time_ns) == ("gemm", "gpu 0", 1000 * US)
        assert gemm.flops_per_second == pytest.approx(4e12)
        assert gemm.bytes_per_second == pytest.approx(9e9)
        assert gemm.arithmetic_intensity == pytest.approx(4e9 / 9e6)
        assert (gemm.bound, gemm.peak_flops_per_second) == ("compute", 989e12)
        assert gemm.fraction_of_roof == pytest.approx(4e12 / 989e12)
        # bytes without flops: the fraction of peak bandwidth, 2 MB in 200 us
        assert reduce.arithmetic_intensity is None and reduce.bound is None
        assert reduce.fraction_of_roof == pytest.approx(1e10 / 3.35e12)

    def test_user_peak_overrides_the_table(self, trace, backend):
        """A user peak matching the device name wins: AI 444 < ridge 1000 makes gemm memory-bound."""
        report = analyse(_table(trace, backend), peaks={"H100": Peak(1e15, 1e12)})
        gemm = report.roofline[0]
        assert gemm.bound == "memory"
        assert gemm.fraction_of_roof == pytest.approx(4e12 / (4e9 / 9e6 * 1e12))


class TestFilters:
    def test_step_range_skips_warm_up(self, trace, backend):
        """--step 1: drops step 0: five gemm instances of 100 us remain and no outlier."""
        report = analyse(_table(trace, backend), steps=(1, None))
        gemm = _op(report, "gemm")
        assert (gemm.count, gemm.max_ns) == (5, 100 * US)
        assert report.outliers == ()
        assert report.filters == {"step": "1:"}

    def test_rank_and_device(self, trace, backend):
        """--rank 1 keeps rank 1's spans; --device 0 keeps gpu 0's."""
        rank1 = analyse(_table(trace, backend), ranks=["1"])
        assert [r.name for r in rank1.ranks] == ["1"] and _op(rank1, "gemm").count == 3
        gpu0 = analyse(_table(trace, backend), devices=[0])
        assert [d.name for d in gpu0.devices] == ["gpu 0"] and _op(gpu0, "gemm").count == 4

    def test_unknown_rank_or_empty_selection_is_an_error(self, trace, backend):
        """A filter that names nothing, or selects nothing, says so instead of printing an empty report."""
        table = _table(trace, backend)
        with pytest.raises(AnalysisError, match="no rank 7 in the trace"):
            analyse(table, ranks=["7"])
        with pytest.raises(AnalysisError, match="no brick or kernel span matches --step 5:"):
            analyse(table, steps=(5, None))
        with pytest.raises(AnalysisError, match="no GPU device 3"):
            analyse(table, devices=[3])


def test_malformed_attribute_values_do_not_shift_columns(backend):
    """A string step number, a huge element count, a text flops: the row keeps its place, the
    bad values become 'absent', and the rows around them keep theirs."""
    from analysis_synthetic import _resource, span

    from brickscope.trace import attributes as A

    spans = [
        span(1, "ok", "brick", 0, 10, _resource(0), step=1, **{A.BRICK_ELEMENTS: 5}),
        span(2, "bad", "brick", 10, 30, _resource(0), **{A.STEP_NUMBER: "two", A.BRICK_ELEMENTS: 1 << 70}),
        span(3, "ok", "brick", 30, 40, _resource(0), step=3, **{A.WORK_FLOPS: "many"}),
    ]
    builder = TableBuilder(get_backend(backend))
    builder.add_all(spans)
    table = builder.build()
    be = table.backend
    assert be.to_list(table["step"]) == [1, -1, 3]
    assert be.to_list(table["elements"]) == [5, 0, 0]
    assert be.to_list(table["duration"]) == [10 * US, 20 * US, 10 * US]
    assert be.to_list(table["flops"]) == [0.0, 0.0, 0.0]


def test_span_tree_adjacency(trace, backend):
    """children(): the span tree the step graphs walk. Rows are the spans in load order (span id - 1 here):
    rank 0's step 0 holds its gemm and all-reduce, the ffn holds a gemm, a gemm holds the kernel."""
    table = _table(trace, backend)
    be = table.backend
    rows, offsets = table.children()
    rows = be.to_list(rows)

    def children(row):
        return rows[offsets[row + 1] : offsets[row + 2]]

    assert children(0) == [1, 2]  # step 0 of rank 0 (span 1): gemm (2), all_reduce (3)
    assert children(8) == [9]  # ffn (span 9): the nested gemm (span 10)
    assert children(14) == [15]  # rank 1's gemm (span 15): kernel sgemm (span 16)
    assert rows[offsets[0] : offsets[1]] == [0, 3, 7, 10, 13, 16]  # the six step spans are the roots
    assert be.to_list(table["parent"])[15] == 14
