# SPDX-License-Identifier: Apache-2.0
"""Step graphs: critical path and slack on hand-built two-stream cases (figures computed by
hand, see graph_cases.py), the median over steps, and ``brickscope tree`` output: snapshot,
byte-for-byte determinism, DOT that Graphviz accepts, JSON, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from analysis_graph_cases import RESOURCE, SOURCE_HASH, T0, US, gpu, table_of, two_streams
from analysis_synthetic import write_otlp_json, write_pftrace

from brickscope import analysis
from brickscope.analysis import median_graph, step_graphs
from brickscope.cli import main
from brickscope.testing import MAIN_THREAD, make_span
from brickscope.trace import attributes as A

SNAPSHOTS = Path(__file__).with_name("snapshots")


def by_name(graph):
    return {node.name: node for node in graph.nodes()}


class TestCriticalPathAndSlack:
    def test_two_streams(self, backend):
        """Stream 1's chain A -> B -> D is critical (D ends last); stream 2's work has 20 us of slack."""
        (graph,) = step_graphs(table_of(two_streams(0), backend))
        nodes = by_name(graph)
        assert [n.name for n in graph.path] == ["A", "B", "D"]
        assert (graph.path_ns, graph.duration_ns) == (85 * US, 100 * US)
        assert {name: nodes[name].slack_ns for name in "ABCDE"} == {
            "A": 0, "B": 0, "C": 20 * US, "D": 0, "E": 20 * US
        }
        assert nodes["k"].slack_ns == 20 * US  # E's latest end 100 minus E's tail (80 - 70)
        assert {name for name, n in nodes.items() if n.critical} == {"step 0", "layer 0", "A", "B", "D"}
        assert nodes["a_launch"].slack_ns is None and not nodes["a_launch"].critical  # host clock under GPU brick

    def test_slack_above_a_threshold(self, backend):
        (graph,) = step_graphs(table_of(two_streams(0), backend))
        assert [(n.name, n.slack_ns) for n in graph.slack_above(0.1)] == [("C", 20 * US), ("E", 20 * US), ("k", 20 * US)]
        assert graph.slack_above(0.25) == []  # 20 us < 25% of 100 us

    def test_parent_tail_and_the_last_child_on_the_other_stream(self, backend):
        """P [0,70] waits 10 us after its last child. Stream 2: Y [0,20] then Z [25,60] (ends last);
        stream 1: X [0,40]. Z may end by 70 - 10 = 60: slack 0; Y by Z's latest start 25 minus
        the 5 us gap = 20: slack 0; X by 60: slack 20. Path Y, Z = 20 + 35 = 55 us of 70."""
        step = gpu("step", None, 0)
        spans = [
            make_span(1, "step", T0, T0 + 70 * US, attributes=step, resource=RESOURCE),
            make_span(2, "X", T0, T0 + 40 * US, 1, attributes=gpu("brick", 1, 0), resource=RESOURCE),
            make_span(3, "Y", T0, T0 + 20 * US, 1, attributes=gpu("brick", 2, 0), resource=RESOURCE),
            make_span(4, "Z", T0 + 25 * US, T0 + 60 * US, 1, attributes=gpu("brick", 2, 0), resource=RESOURCE),
        ]
        (graph,) = step_graphs(table_of(spans, backend))
        nodes = by_name(graph)
        assert [n.name for n in graph.path] == ["Y", "Z"]
        assert (graph.path_ns, graph.duration_ns) == (55 * US, 70 * US)
        assert (nodes["X"].slack_ns, nodes["Y"].slack_ns, nodes["Z"].slack_ns) == (20 * US, 0, 0)

    def test_work_that_waited_for_another_stream_continues_the_path_there(self, backend):
        """A tensor-parallel step [0,100]: stream 1 runs attn [0,40] then ffn [45,80]; stream 2 a
        prefetch [0,10], then the all-reduce [82,100], which could start only after ffn (it
        started 72 us after the prefetch ended: ffn, ending at 80, is the latest end before its
        start). Path: attn 40 + ffn 35 + all-reduce 18 = 93 us of 100 (the all-reduce's own
        stream alone would give prefetch + all-reduce, 28). Slack: ffn may end by the
        all-reduce's latest start 82 less the 2 us gap = 80: 0; the prefetch by 82 (its stream
        runs one thing at a time; the all-reduce did not wait for it): 72."""
        spans = [make_span(1, "step", T0, T0 + 100 * US, attributes=gpu("step", None, 0), resource=RESOURCE)]
        for span_id, name, start, end, stream in (
            (2, "attn", 0, 40, 1), (3, "prefetch", 0, 10, 2), (4, "ffn", 45, 80, 1), (5, "all_reduce", 82, 100, 2)
        ):  # fmt: skip
            spans.append(make_span(span_id, name, T0 + start * US, T0 + end * US, 1,
                                   attributes=gpu("brick", stream, 0), resource=RESOURCE))  # fmt: skip
        (graph,) = step_graphs(table_of(spans, backend))
        nodes = by_name(graph)
        assert [n.name for n in graph.path] == ["attn", "ffn", "all_reduce"]
        assert (graph.path_ns, graph.gaps_ns) == (93 * US, 7 * US)
        assert {name: nodes[name].slack_ns for name in ("attn", "prefetch", "ffn", "all_reduce")} == {
            "attn": 0, "prefetch": 72 * US, "ffn": 0, "all_reduce": 0
        }  # fmt: skip
        assert {name for name, n in nodes.items() if n.critical} == {"step 0", "attn", "ffn", "all_reduce"}

    def test_layers_run_on_the_stream_of_their_bricks_beside_bricks_of_the_step(self, backend):
        """A GPU-timed step [0,100] holding, on stream 7, embed [0,10], layer 0 [12,50] (q [12,30],
        o [32,50]), layer 1 [52,90] (q [52,70], o [72,90]) and head [92,100]. Layers name no
        stream (brickscope writes none for them): they are on the lane of the brick they begin
        with, stream 7, so the step's children are one chain. Path: embed 10 + q 18 + o 18 +
        q 18 + o 18 + head 8 = 90 us of 100; gaps 2 + 2 + 2 + 2 + 2 = 10."""
        spans = [make_span(1, "step", T0, T0 + 100 * US, attributes=gpu("step", None, 0), resource=RESOURCE)]
        spans.append(make_span(2, "embed", T0, T0 + 10 * US, 1, attributes=gpu("brick", 7, 0), resource=RESOURCE))
        for layer, base in ((0, 12), (1, 52)):
            lid = 10 + layer * 10
            spans.append(make_span(lid, "layer", T0 + base * US, T0 + (base + 38) * US, 1,
                                   attributes=gpu("layer", None, 0, layer), resource=RESOURCE))  # fmt: skip
            spans.append(make_span(lid + 1, "q", T0 + base * US, T0 + (base + 18) * US, lid,
                                   attributes=gpu("brick", 7, 0, layer), resource=RESOURCE))  # fmt: skip
            spans.append(make_span(lid + 2, "o", T0 + (base + 20) * US, T0 + (base + 38) * US, lid,
                                   attributes=gpu("brick", 7, 0, layer), resource=RESOURCE))  # fmt: skip
        spans.append(make_span(3, "head", T0 + 92 * US, T0 + 100 * US, 1, attributes=gpu("brick", 7, 0), resource=RESOURCE))
        (graph,) = step_graphs(table_of(spans, backend))
        assert [n.name for n in graph.path] == ["embed", "q", "o", "q", "o", "head"]
        assert (graph.path_ns, graph.gaps_ns) == (90 * US, 10 * US)
        assert not graph.parallel  # one lane throughout
        assert all(n.slack_ns == 0 for n in graph.nodes())

    @pytest.mark.parametrize("loop", ["above the step", "through the step"])
    def test_a_loop_of_parent_ids_ends_the_walk(self, backend, loop):
        """Impossible input: A's parent is B and B's is A above the step, or the step's parent
        is its own child A. Each row is walked once: one graph, the step holding k (and A when A
        is its child); before, the first case never returned and the second drew no step."""
        attributes = gpu("brick", 7, 0)
        step_parent = 2
        spans = [
            make_span(1, "step", T0, T0 + 100 * US, step_parent, attributes=gpu("step", None, 0), resource=RESOURCE),
            make_span(4, "k", T0, T0 + 50 * US, 1, attributes=attributes, resource=RESOURCE),
        ]
        if loop == "above the step":
            spans += [
                make_span(2, "A", T0, T0 + 100 * US, 3, attributes=attributes, resource=RESOURCE),
                make_span(3, "B", T0, T0 + 100 * US, 2, attributes=attributes, resource=RESOURCE),
            ]
        else:
            spans.append(make_span(2, "A", T0, T0 + 100 * US, 1, attributes=attributes, resource=RESOURCE))
        (graph,) = step_graphs(table_of(spans, backend))
        assert graph.step == 0
        expected = ["k"] if loop == "above the step" else ["A", "k"]
        assert sorted(child.name for child in graph.root.children) == expected

    def test_one_stream_is_sequential_so_everything_on_it_is_critical(self, backend):
        """Three bricks on one stream with gaps: all critical, path = their sum, gaps = the rest."""
        spans = [make_span(1, "step", T0, T0 + 50 * US, attributes=gpu("step", None, 0), resource=RESOURCE)]
        for i, (a, b) in enumerate(((0, 10), (15, 30), (32, 50))):
            spans.append(make_span(2 + i, f"b{i}", T0 + a * US, T0 + b * US, 1, attributes=gpu("brick", 7, 0), resource=RESOURCE))
        (graph,) = step_graphs(table_of(spans, backend))
        assert [n.name for n in graph.path] == ["b0", "b1", "b2"]
        assert graph.path_ns == (10 + 15 + 18) * US
        assert all(n.slack_ns == 0 for n in graph.nodes())

    def test_a_bricks_own_work_is_on_the_path(self, backend):
        """Host-timed, one thread: step [0,60] > layer [0,60] > rope [0,40] holding its kernel
        k [5,15], then norm [45,60]. rope's 30 us outside k is its own work (host code around
        the launch), on the path; the layer's 5 us between rope and norm is a gap. Path: rope
        30 + k 10 + norm 15 = 55 us of 60."""
        (graph,) = step_graphs(table_of(_host_step(0), backend))
        assert [(n.name, n.path_ns) for n in graph.path] == [("rope", 30 * US), ("k", 10 * US), ("norm", 15 * US)]
        assert (graph.path_ns, graph.duration_ns) == (55 * US, 60 * US)

    def test_a_bricks_own_work_over_steps_is_its_median(self, backend):
        """The same step again with rope 20 us longer (own work 50 us): over the two steps,
        rope's own work is the nearest-rank median of 30 and 50 us, 30 us."""
        median = median_graph(step_graphs(table_of(_host_step(0) + _host_step(1, base=1000, longer=20), backend)))
        assert [(n.name, n.path_ns) for n in median.path] == [("rope", 30 * US), ("k", 10 * US), ("norm", 15 * US)]
        assert median.path_ns == 55 * US

    def test_median_over_steps(self, backend):
        """Three steps whose D takes 30, 50 and 230 us: the median tree has D = 50 us, step = 120 us."""
        spans = two_streams(0) + two_streams(1, base=1000, stretch=20) + two_streams(2, base=2000, stretch=200)
        graphs = step_graphs(table_of(spans, backend))
        assert [g.step for g in graphs] == [0, 1, 2]
        median = median_graph(graphs)
        nodes = by_name(median)
        assert median.steps == 3 and median.duration_ns == 120 * US
        assert nodes["D"].duration_ns == 50 * US and nodes["D"].critical_in == 3
        assert nodes["C"].slack_ns == 40 * US  # 20, 40, 220 us in the three steps
        assert [n.name for n in median.path] == ["A", "B", "D"]


    def test_the_slowest_steps_alone_are_the_same_graphs(self, backend):
        """step_graphs(slowest=1) of eight steps reads only that step's rows (the rest of the
        node columns stay unread): its graph equals the one built from every row."""
        spans = [span for i in range(8) for span in two_streams(i, base=1000 * i, stretch=200 if i == 5 else 10 * i)]
        table = table_of(spans, backend)
        (slowest,) = step_graphs(table, slowest=1)
        full = {g.step: g for g in step_graphs(table)}
        assert slowest.step == 5 and slowest.duration_ns == 300 * US

        def shape(graph):
            return [(n.kind, n.name, n.category, n.start, n.duration_ns, n.self_ns, n.elements, n.clock, n.lane,
                     n.launch, n.source, n.checksum, n.layer, n.slack_ns, n.critical) for n in graph.nodes()]  # fmt: skip

        assert shape(slowest) == shape(full[5])
        assert [n.name for n in slowest.path] == [n.name for n in full[5].path] == ["A", "B", "D"]


class TestWhatThePathSays:
    def test_one_lane_says_so_and_marks_nothing(self, backend):
        """_host_step runs on one thread: every span is on the path, so the tree says "one lane",
        marks no span critical, lists no slack, and the DOT has no red. Spans ran rope's own
        30 + k 10 + norm 15 = 55 us of 60; the 5 us between rope and norm is the gap."""
        (graph,) = step_graphs(table_of(_host_step(0), backend))
        assert not graph.parallel
        text = analysis.render_tree([graph], "text")
        assert text.splitlines()[0] == (
            "step 0, rank 0: one lane: the path is the whole step; spans ran 0.055 ms of 0.060 ms, gaps 0.005 ms"
        )
        assert "critical" not in text and "slack" not in text
        assert "red" not in analysis.render_tree([graph], "dot")
        assert json.loads(analysis.render_tree([graph], "json"))["trees"][0]["parallel"] is False

    def test_dot_is_red_only_where_work_ran_on_several_lanes(self, backend):
        """two_streams: the layer's bricks ran on streams 1 and 2, so its path A, B, D is red;
        the step and the layer (each alone under its parent) are on the path but not red."""
        (graph,) = step_graphs(table_of(two_streams(0), backend))
        assert graph.parallel
        dot = analysis.render_tree([graph], "dot")
        lines = [line.strip() for line in dot.splitlines()]
        names = {line.split(" ")[0]: line.split('"')[1].split(" ")[0].split("\\n")[0] for line in lines if "label=" in line and line.startswith("n")}
        red_nodes = [names[line.split(" ")[0]] for line in lines if "label=" in line and "red" in line]
        red_edges = [names[line.split(" ")[2]] for line in lines if "->" in line and "red" in line]
        assert red_nodes == red_edges == ["A", "B", "D"]

    def test_gaps_are_computed_per_step_in_the_median_too(self, backend):
        """Three one-thread steps: brick x then, 5 us later, brick y; x and y take 50 and 10, 10
        and 50, 10 and 10 us (a stall in a different brick each time). Each step's gaps are 5 us;
        durations 65, 65, 25 (median 65), paths 60, 60, 20 (median 60). The median view says
        gaps 5 us, as every step does (a sum of per-span medians, 10 + 10, would leave 45)."""
        spans = []
        for step, (x, y) in enumerate(((50, 10), (10, 50), (10, 10))):
            spans += _two_bricks(step, 1000 * step, x, y)
        graphs = step_graphs(table_of(spans, backend))
        assert [(g.duration_ns, g.path_ns, g.gaps_ns) for g in graphs] == [
            (65 * US, 60 * US, 5 * US), (65 * US, 60 * US, 5 * US), (25 * US, 20 * US, 5 * US)
        ]
        median = median_graph(graphs)
        assert (median.duration_ns, median.path_ns, median.gaps_ns) == (65 * US, 60 * US, 5 * US)
        assert "spans ran 0.060 ms of 0.065 ms, gaps 0.005 ms" in analysis.render_tree([median], "text")
        report = analysis.analyse(table_of(spans, backend), top=1)
        (report_path,) = report.critical_paths
        assert (report_path.gaps_ns, report_path.parallel) == (5 * US, False)
        text = analysis.render(report, "text")
        assert "; one lane: the path is the whole step" in text and text.rstrip().endswith("one lane")

    def test_unknown_launch_fields_are_left_out(self, backend):
        """A kernel that gave grid and block but no shared memory size shows no ``smem=``; one
        that gave only its grid shows ``grid=``; nothing prints ``?``."""
        spans = _host_step(0)
        host = {A.SCOPE_KIND: "kernel", A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: 0, A.LAYER_INDEX: 0, **MAIN_THREAD}
        spans[3] = make_span(104, "k", T0 + 5 * US, T0 + 15 * US, 103, resource=RESOURCE,
                             attributes={**host, A.KERNEL_GRID: (4, 1, 1), A.KERNEL_BLOCK: (128, 1, 1)})
        spans.append(make_span(106, "k2", T0 + 46 * US, T0 + 50 * US, 105, resource=RESOURCE,
                               attributes={**host, A.KERNEL_GRID: (2, 1, 1)}))  # fmt: skip
        text = analysis.render_tree(step_graphs(table_of(spans, backend)), "text")
        assert "k <<<(4,1,1),(128,1,1)>>>  0.010 ms" in text and "k2 grid=(2,1,1)  0.004 ms" in text
        assert "?" not in text and "smem" not in text


def _two_bricks(step: int, base: int, x: int, y: int) -> list:
    """A one-thread step at T0 + base us: brick x [0, x], brick y [x + 5, x + 5 + y]."""
    attributes = {A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: step, **MAIN_THREAD}
    ids, end = 10 * (step + 1), x + 5 + y

    def us(a: int, b: int) -> tuple[int, int]:
        return T0 + (base + a) * US, T0 + (base + b) * US

    return [
        make_span(ids, "step", *us(0, end), attributes={**attributes, A.SCOPE_KIND: "step"}, resource=RESOURCE),
        make_span(ids + 1, "x", *us(0, x), ids, attributes={**attributes, A.SCOPE_KIND: "brick"}, resource=RESOURCE),
        make_span(ids + 2, "y", *us(x + 5, end), ids, attributes={**attributes, A.SCOPE_KIND: "brick"}, resource=RESOURCE),
    ]


def _host_step(step: int, base: int = 0, longer: int = 0) -> list:
    """A host-timed step (see test_a_bricks_own_work_is_on_the_path) at T0 + base us, its
    rope brick ``longer`` us longer (and everything after it later)."""

    def host(kind: str) -> dict[str, object]:
        attributes = {A.SCOPE_KIND: kind, A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: step, **MAIN_THREAD}
        return attributes if kind == "step" else {**attributes, A.LAYER_INDEX: 0}

    def us(a: int, b: int) -> tuple[int, int]:
        return T0 + (base + a) * US, T0 + (base + b) * US

    ids, extra = 100 * (step + 1), longer
    return [
        make_span(ids + 1, "step", *us(0, 60 + extra), attributes=host("step"), resource=RESOURCE),
        make_span(ids + 2, "layer", *us(0, 60 + extra), ids + 1, attributes=host("layer"), resource=RESOURCE),
        make_span(ids + 3, "rope", *us(0, 40 + extra), ids + 2, attributes=host("brick"), resource=RESOURCE),
        make_span(ids + 4, "k", *us(5, 15), ids + 3, attributes=host("kernel"), resource=RESOURCE),
        make_span(ids + 5, "norm", *us(45 + extra, 60 + extra), ids + 2, attributes=host("brick"), resource=RESOURCE),
    ]


def _tree(capsys, *argv):
    status = main(["tree", *map(str, argv), "-q"])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(name="fixed_trace")
def _fixed_trace(tmp_path):
    pytest.importorskip("brickscope.exporter.perfetto")
    spans = two_streams(0) + two_streams(1, base=1000, stretch=20)
    return write_pftrace(tmp_path / "fixed.pftrace", spans), spans


#: (steps, format, show_sources) -> snapshot; the CLI arguments that print the same bytes.
SNAPSHOT_CASES = [
    ((0, 1), "text", False, "tree-step0.txt", ("--step", "0")),
    (None, "text", False, "tree-median.txt", ()),
    ((1, 2), "text", True, "tree-step1-sources.txt", ("--step", "1", "--sources")),
    ((0, 1), "dot", False, "tree-step0.dot", ("--step", "0", "--format", "dot")),
]


class TestTreeSnapshots:
    @pytest.mark.parametrize("steps, fmt, show_sources, snapshot, _", SNAPSHOT_CASES)
    def test_public_api_snapshot(self, fixed_trace, steps, fmt, show_sources, snapshot, _):
        """load, tree_graphs and render_tree (brickscope.analysis's public names) give the snapshot."""
        table = analysis.load(fixed_trace[0])
        graphs = analysis.tree_graphs(table, steps)
        out = analysis.render_tree(graphs, fmt, sources=table.kernel_sources, show_sources=show_sources)
        assert out == (SNAPSHOTS / snapshot).read_text()

    @pytest.mark.parametrize("_, __, ___, snapshot, args", SNAPSHOT_CASES)
    def test_the_command_prints_the_same(self, capsys, fixed_trace, _, __, ___, snapshot, args):
        status, out, err = _tree(capsys, fixed_trace[0], *args)
        assert (status, err) == (0, "")
        assert out == (SNAPSHOTS / snapshot).read_text()


class TestTreeCommand:
    def test_same_trace_same_bytes_whatever_the_file(self, capsys, tmp_path, fixed_trace):
        """Two .pftrace writes (random track uuids) and OTLP JSON of the same spans: identical output."""
        path, spans = fixed_trace
        again = write_pftrace(tmp_path / "again.pftrace", spans)
        as_json = write_otlp_json(tmp_path / "fixed.jsonl", spans)
        outputs = {_tree(capsys, p, "--format", fmt)[1] for p in (path, again, as_json) for fmt in ("text",)}
        assert len(outputs) == 1
        dots = {_tree(capsys, p, "--format", "dot")[1] for p in (path, again, as_json)}
        assert len(dots) == 1

    def test_json(self, capsys, fixed_trace):
        status, out, _ = _tree(capsys, fixed_trace[0], "--step", "0", "--format", "json")
        assert status == 0
        (tree,) = json.loads(out)["trees"]
        assert (tree["step"], tree["duration_ns"], tree["critical_path"]) == (
            0, 100 * US, {"length_ns": 85 * US, "gaps_ns": 15 * US, "spans": ["A", "B", "D"]}
        )
        layer = tree["root"]["children"][0]
        kernel = next(c for c in layer["children"] if c["name"] == "E")["children"][0]
        assert kernel["launch"] == {"grid": [4, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0}
        assert kernel["source"] == {"hash": SOURCE_HASH}
        assert [s["name"] for s in tree["slack"]] == ["C", "E", "k"]

    def test_graphviz_accepts_the_dot(self, capsys, tmp_path, fixed_trace):
        dot = shutil.which("dot")
        if dot is None:
            pytest.skip("Graphviz's dot is not installed (Debian: apt-get install graphviz)")
        _, out, _ = _tree(capsys, fixed_trace[0], "--format", "dot")
        result = subprocess.run([dot, "-Tsvg"], input=out, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        assert "<svg" in result.stdout and "layer 0" in result.stdout

    def test_missing_step_is_one_line_and_status_1(self, capsys, fixed_trace):
        status, out, err = _tree(capsys, fixed_trace[0], "--step", "9")
        assert (status, out) == (1, "")
        assert err.count("\n") == 1 and "no step 9 in the trace (steps 0 to 1)" in err

    def test_a_step_range_is_the_median_over_it(self, capsys, fixed_trace):
        """--step 0:1 is step 0's own graph (as --step 0); --step 1: and --step :2 cover steps
        1 and 0-1 of the two: the former step 1 alone, the latter the median of both."""
        assert _tree(capsys, fixed_trace[0], "--step", "0:1")[1] == (SNAPSHOTS / "tree-step0.txt").read_text()
        assert _tree(capsys, fixed_trace[0], "--step", "1:")[1].startswith("step 1, rank 0: critical path 0.105 ms of 0.120 ms")
        assert _tree(capsys, fixed_trace[0], "--step", ":2")[1] == (SNAPSHOTS / "tree-median.txt").read_text()

    def test_a_range_without_steps_is_one_line_and_status_1(self, capsys, fixed_trace):
        status, out, err = _tree(capsys, fixed_trace[0], "--step", "5:")
        assert (status, out) == (1, "")
        assert err == "brickscope tree: no step 5: in the trace (steps 0 to 1)\n"

    @pytest.mark.parametrize("args", [("--step", "-1"), ("--step", "3:2"), ("--step", "a"), ("--slack-above", "2"), ("--format", "svg")])
    def test_bad_arguments_are_one_line_and_status_2(self, capsys, fixed_trace, args):
        with pytest.raises(SystemExit) as exc:
            main(["tree", str(fixed_trace[0]), *args])
        captured = capsys.readouterr()
        assert exc.value.code == 2 and captured.out == ""
        (line,) = captured.err.splitlines()
        assert line.startswith(f"brickscope tree: argument {args[0]}: ") and line.endswith("(--help for usage)")


class TestInTheReport:
    def test_report_lists_the_longest_steps_paths(self, backend):
        """--top 2 of three steps: the 230 us and 50 us variants (steps 2 and 1), figures by hand."""
        from brickscope.analysis import analyse, render

        spans = two_streams(0) + two_streams(1, base=1000, stretch=20) + two_streams(2, base=2000, stretch=200)
        report = analyse(table_of(spans, backend), top=2)
        paths = {p.step: p for p in report.critical_paths}
        assert sorted(paths) == [1, 2]
        assert (paths[2].duration_ns, paths[2].path_ns, paths[2].gaps_ns) == (300 * US, 285 * US, 15 * US)
        assert paths[2].path == ("A", "B", "D")
        assert [(s.name, s.slack_ns) for s in paths[2].slack] == [("C", 220 * US), ("E", 220 * US), ("k", 220 * US)]
        text = render(report, "text")
        assert "Critical path of the 2 longest steps (median path share 87.5%; most gaps first)" in text
        rows = [line.split() for line in text.split("longest steps")[1].splitlines()[3:5]]
        assert rows == [  # equal gaps (15 us): by rank, then step
            ["0", "1", "0.120", "0.105", "87.5%", "0.015", "3", "C", "0.040", "ms"],
            ["0", "2", "0.300", "0.285", "95.0%", "0.015", "3", "C", "0.220", "ms"],
        ]
