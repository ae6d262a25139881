# SPDX-License-Identifier: Apache-2.0
"""Traces torch.profiler writes (export_chrome_trace, Kineto's Chrome trace JSON) read by every
command: the report's per-operation counts are the profiler's own key_averages() counts."""

from __future__ import annotations

import collections
import json
from typing import NamedTuple

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402

from brickscope import analysis, cli  # noqa: E402
from brickscope.offline import open_spans  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402


def _covered_ns(event) -> tuple[int, bool]:
    """ns of the profiler event's interval covered by its children in the profiler's own tree
    (each overlap counted once), and whether any two children overlap."""
    covered, reached, overlap = 0, _ns(event.time_range.start), False
    for child in sorted(event.cpu_children, key=lambda c: c.time_range.start):
        low, high = _ns(child.time_range.start), min(_ns(child.time_range.end), _ns(event.time_range.end))
        overlap = overlap or low < reached
        low = max(low, reached)
        if high > low:
            covered, reached = covered + high - low, high
    return covered, overlap


def _ns(us: float) -> int:
    return round(us * 1000)


class Profiled(NamedTuple):
    """A torch.profiler run's exported trace and, per key, key_averages()'s count and self CPU
    µs, the self ns of the profiler's own tree with overlapping children counted once, and the
    keys with an instance whose children overlap one another."""

    path: str
    counts: dict[str, int]
    self_us: dict[str, float]
    self_ns_once: dict[str, int]
    overlapped: set[str]


def _profile(directory, *, with_stack: bool, seed: int = 0) -> Profiled:
    """Train a small model for 5 steps under torch.profiler (wait 1, warm up 1, record 3) and
    export the recorded window."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(8, 16), torch.randn(8, 4)
    found: dict[str, object] = {}

    def ready(prof: profile) -> None:
        path = directory / f"kineto-{'stack' if with_stack else 'ops'}-{seed}.json"
        prof.export_chrome_trace(str(path))
        averages = prof.key_averages()
        once: collections.Counter[str] = collections.Counter()
        overlapped = set()
        for event in prof.events():
            covered, overlap = _covered_ns(event)
            once[event.key] += _ns(event.time_range.end) - _ns(event.time_range.start) - covered
            if overlap:
                overlapped.add(event.key)
        found.update(
            path=str(path),
            counts={e.key: e.count for e in averages},
            self_us={e.key: e.self_cpu_time_total for e in averages},
            self_ns_once=dict(once),
            overlapped=overlapped,
        )

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=ready,
        record_shapes=True,
        with_stack=with_stack,
    ) as prof:
        for _ in range(5):
            with record_function("forward"):
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    return Profiled(**found)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=[False, True], ids=["ops", "with_stack"])
def kineto(request, tmp_path_factory):
    return _profile(tmp_path_factory.mktemp("kineto"), with_stack=request.param)


class TestKeyAverages:
    def test_counts_per_operation_equal_key_averages(self, kineto):
        """Every key of key_averages() is an operation of the report with the same count (the
        ProfilerStep* key: the report's steps), and the report has no operation it lacks."""
        path, counts = kineto.path, dict(kineto.counts)
        report = analysis.analyse(analysis.load(path))
        steps = counts.pop("ProfilerStep*")
        found = collections.Counter()
        for operation in report.operations:
            assert operation.kind == "brick"
            found[operation.name] += operation.count
        assert dict(found) == counts
        assert steps == 3 and sorted(s.step for s in report.throughput.steps) == [2, 3, 4]

    def test_self_time_per_operation_equals_the_profilers_tree(self, kineto):
        """Self time per operation is its duration less what its children in the profiler's own
        tree cover (within 1 ns an instance: the profiler counts in µs with ns decimals). Where
        no instance's children overlap one another, that is key_averages()'s self CPU time.
        Python frames (with_stack) partly overlap the operations they call: key_averages()
        subtracts both children, which can make a frame's self time negative; brickscope counts
        the overlap once."""
        report = analysis.analyse(analysis.load(kineto.path))
        mine: collections.Counter[str] = collections.Counter()
        categories = {}
        for operation in report.operations:
            mine[operation.name] += operation.self_ns
            categories[operation.name] = operation.category
        compared = 0
        for name, count in kineto.counts.items():
            if name == "ProfilerStep*":
                continue
            assert mine[name] == pytest.approx(kineto.self_ns_once[name], abs=count), name
            assert mine[name] >= 0
            if name not in kineto.overlapped:
                assert mine[name] == pytest.approx(kineto.self_us[name] * 1000, abs=count), name
                compared += categories[name] != "python_function"
        assert compared >= 10  # the model's aten operations, the optimizer's and "forward"

    def test_spans_are_bricks_of_the_profiled_thread_inside_their_step(self, kineto):
        """Each operation is a host-clock brick of its Kineto category, inside a step."""
        path = kineto.path
        with open_spans(path) as spans:
            read = list(spans)
        categories = {s.attributes[A.BRICK_CATEGORY] for s in read if s.attributes[A.SCOPE_KIND] == "brick"}
        assert {"cpu_op", "user_annotation"} <= categories <= {"cpu_op", "user_annotation", "python_function"}
        forward = [s for s in read if s.name == "forward"]
        assert len(forward) == 3 and all(s.attributes[A.CLOCK] == "host" for s in forward)
        assert sorted(s.attributes[A.STEP_NUMBER] for s in forward) == [2, 3, 4]


class TestCommands:
    def test_every_command_reads_a_torch_profiler_trace(self, tmp_path, capsys):
        """report, tree, flamegraph, diff, convert (to .pftrace, and that back to Chrome JSON)
        and merge each run on the profiler's file and exit 0."""
        first, counts = _profile(tmp_path, with_stack=False, seed=1)[:2]
        second = _profile(tmp_path, with_stack=False, seed=2).path
        assert cli.main(["report", first, "--format", "json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert {o["name"]: o["count"] for o in report["operations"]}["aten::linear"] == counts["aten::linear"]
        assert cli.main(["tree", first]) == 0
        assert "forward" in capsys.readouterr().out
        assert cli.main(["diff", first, second]) == 0
        pftrace, back = str(tmp_path / "run.pftrace"), str(tmp_path / "back.json")
        assert cli.main(["convert", first, "-o", pftrace, "-q"]) == 0
        assert cli.main(["convert", pftrace, "-o", back, "-q"]) == 0
        for converted in (pftrace, back):
            again = analysis.analyse(analysis.load(converted))
            assert {o.name: o.count for o in again.operations} == {
                o["name"]: o["count"] for o in report["operations"]
            }
        assert cli.main(["flamegraph", first, "-o", str(tmp_path / "run.folded")]) == 0
        assert (tmp_path / "run.folded").read_text().count("forward") >= 1
        merged = str(tmp_path / "both.pftrace")
        assert cli.main(["merge", first, second, "-o", merged, "-q"]) == 0
        both = analysis.analyse(analysis.load(merged))
        assert {o.name: o.count for o in both.operations}["forward"] == 6


class TestDistributed:
    def test_distributed_info_gives_the_rank_and_collectives_are_communication(self, tmp_path):
        """A gloo job of one rank: the profiler writes distributedInfo (rank 0, world size 1),
        which every span's resource carries; its all_reduce is communication in the report."""
        dist = torch.distributed
        if not dist.is_available():
            pytest.skip("this torch build has no torch.distributed")
        dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                tensor = torch.ones(4)
                dist.all_reduce(tensor)
            path = str(tmp_path / "rank0.json")
            prof.export_chrome_trace(path)
        finally:
            dist.destroy_process_group()
        with open_spans(path) as spans:
            resources = {(s.resource.attributes[A.RANK], s.resource.attributes[A.WORLD_SIZE]) for s in spans}
        assert resources == {(0, 1)}
        report = analysis.analyse(analysis.load(path))
        assert report.ranks[0].name == "0"
        assert "c10d::allreduce_" in {o.name for o in report.communication.operations}
