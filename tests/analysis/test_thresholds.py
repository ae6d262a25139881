# SPDX-License-Identifier: Apache-2.0
"""What counts as communication (the documented name rule), and the two report thresholds:
communication bottlenecks (``--comm-min-ratio``) and memory hotspots (``--memory-min-share``),
on the hand-computed two-rank trace (synthetic.py) and on small traces built here."""

from __future__ import annotations

import json

import pytest
from analysis_synthetic import _resource, span, write_otlp_json

from brickscope.analysis import analyse, get_backend
from brickscope.analysis._table import TableBuilder, is_communication
from brickscope.cli import main

US = 1_000


def _table(spans, backend="python"):
    builder = TableBuilder(get_backend(backend))
    builder.add_all(spans)
    return builder.build()


def _two_rank_table(trace, backend):
    return _table([s for spans in trace.values() for s in spans], backend)


class TestTheRule:
    @pytest.mark.parametrize(
        "name",
        [
            "p2p_comm", "all_reduce", "AllReduce", "allreduce", "ncclKernel_AllReduce_RING_LL_Sum_float",
            "ncclDevKernel_Generic", "all-gather", "ReduceScatter", "all_to_allv", "broadcast_weights", "isend",
            "irecv", "sendRecv", "c10d::allreduce_", "P2P", "CommWait", "barrier", "gloo_allreduce",
            "collective_permute",
        ],
    )  # fmt: skip
    def test_communication_names(self, name):
        """Collective, point-to-point and library words, whole, in any case or separator style."""
        assert is_communication(name, "other")

    @pytest.mark.parametrize(
        "name", ["common_subexpr", "sender", "gemm", "reduce_sum", "gather", "scatter_add", "communicate", "commit"]
    )
    def test_compute_names(self, name):
        """A word inside a longer one, or a reduction or gather alone, is not communication."""
        assert not is_communication(name, "other")

    def test_the_category_decides_whatever_the_name(self):
        assert is_communication("gemm", "communication")

    def test_p2p_comm_is_in_the_communication_section(self, backend):
        """A brick named p2p_comm (category other): 300 of 400 us of brick self time."""
        r = _resource(0)
        spans = [
            span(1, "gemm", "brick", 0, 100, r, device=0, stream=7, category="matmul"),
            span(2, "p2p_comm", "brick", 100, 400, r, device=0, stream=9, category="other"),
        ]
        comm = analyse(_table(spans, backend)).communication
        assert [(o.name, o.self_ns) for o in comm.operations] == [("p2p_comm", 300 * US)]
        assert (comm.total_ns, comm.share, comm.bottlenecks) == (300 * US, 0.75, ("p2p_comm",))


class TestThresholds:
    def test_communication_bottleneck_at_its_share(self, trace, backend):
        """all_reduce holds 750 of 2450 us of brick self time (0.306): a bottleneck at 0.30, not at 0.31."""
        table = _two_rank_table(trace, backend)
        assert analyse(table).communication.bottlenecks == ("all_reduce",)  # default 0.10
        assert analyse(table, comm_min_ratio=0.30).communication.bottlenecks == ("all_reduce",)
        at_31 = analyse(table, comm_min_ratio=0.31).communication
        assert (at_31.bottlenecks, at_31.bottleneck_ratio) == ((), 0.31)

    def test_memory_hotspots_at_their_share(self, trace, backend):
        """gemm holds 9 of 11 MB, all_reduce 2 of 11 (0.18): both at the default 0.10, gemm alone at 0.2."""
        table = _two_rank_table(trace, backend)
        assert analyse(table).memory.hotspots == ("gemm", "all_reduce")
        memory = analyse(table, memory_min_share=0.2).memory
        assert (memory.hotspots, memory.hotspot_share) == (("gemm",), 0.2)

    @pytest.mark.parametrize("keyword", ["comm_min_ratio", "memory_min_share"])
    @pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
    def test_the_api_refuses_shares_outside_0_1(self, trace, keyword, value):
        with pytest.raises(ValueError, match=f"{keyword} nan|{keyword} -0.1|{keyword} 1.5"):
            analyse(_two_rank_table(trace, "python"), **{keyword: value})


class TestOptions:
    def test_both_options_reach_the_json(self, trace, tmp_path, capsys):
        """--comm-min-ratio 0.31 leaves no bottleneck; --memory-min-share 0.2 leaves gemm."""
        paths = [str(write_otlp_json(tmp_path / f"rank{rank}.jsonl", spans)) for rank, spans in trace.items()]
        assert main(["report", *paths, "--format", "json", "--comm-min-ratio", "0.31", "--memory-min-share", "0.2"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["communication"]["bottlenecks"], data["communication"]["bottleneck_ratio"]) == ([], 0.31)
        assert (data["memory"]["hotspots"], data["memory"]["hotspot_share"]) == (["gemm"], 0.2)

    @pytest.mark.parametrize("option", ["--comm-min-ratio", "--memory-min-share"])
    @pytest.mark.parametrize("value", ["1.01", "-1", "ten", "nan"])
    def test_bad_values_are_one_line_and_exit_2(self, trace, tmp_path, capsys, option, value):
        path = write_otlp_json(tmp_path / "rank0.jsonl", trace[0])
        assert main(["report", str(path), option, value]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"brickscope report: {option} {value!r}: expected a number between 0 and 1 (0.1 is 10%)"
        ]
