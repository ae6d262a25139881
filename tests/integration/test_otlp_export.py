# SPDX-License-Identifier: Apache-2.0
"""An app configured only by OTEL_* variables sends intact spans and metrics to real OTLP receivers."""

from __future__ import annotations

import socket
from collections import Counter
from typing import Any

import pytest
from harness import otlp_env
from otlp_receiver import ReceivedSpan

from brickscope.trace import attributes as A

STEPS, LAYERS = 3, 2
#: The app's bricks: (brick, category, kernel, grid, block, shared memory, simulated GPU ns).
BRICKS = (
    ("rms_norm", "norm", "rms_norm_fwd", [4, 1, 1], [128, 1, 1], 0, 20_000),
    ("attention", "attention", "flash_attn_fwd", [8, 4, 1], [128, 1, 1], 49_152, 300_000),
    ("ffn_down", "ffn", "gemm_down", [16, 1, 1], [256, 1, 1], 16_384, 100_000),
)
SPANS_PER_STEP = 1 + LAYERS * (1 + 2 * len(BRICKS))
EXPECTED_SPANS = STEPS * SPANS_PER_STEP + 1  # and the app's own "generate" span


def run_and_collect(app: Any, receiver: Any, protocol: str, **env: str) -> tuple[Any, list[ReceivedSpan]]:
    """Run the app against ``receiver``; wait until every span and the final metrics arrived."""
    result = app.run(
        otlp_env(receiver, protocol, OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=test", **env),
        "--steps", str(STEPS), "--layers", str(LAYERS),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert receiver.wait_for(lambda r: len(r.spans()) >= EXPECTED_SPANS, timeout_s=60)
    return result, receiver.spans()


def by_kind(spans: list[ReceivedSpan], kind: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.attributes.get(A.SCOPE_KIND) == kind]


@pytest.fixture(params=["grpc", "http/protobuf", "brickscope_otlp:grpc", "brickscope_otlp:http/protobuf"])
def exported(request: pytest.FixtureRequest, app: Any) -> tuple[Any, list[ReceivedSpan], Any]:
    """The app run once against the gRPC or the HTTP receiver: (result, spans, receiver).
    ``brickscope_otlp:<protocol>``: spans through brickscope-exporter-otlp's encoder."""
    exporter, _, protocol = request.param.rpartition(":")
    receiver = request.getfixturevalue("grpc_receiver" if protocol == "grpc" else "http_receiver")
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
    if exporter:
        env["OTEL_TRACES_EXPORTER"] = exporter
    result, spans = run_and_collect(app, receiver, protocol, **env)
    return result, spans, receiver


class TestSpansAtTheReceiver:
    def test_every_span_arrives_once(self, exported):
        """Every span the app made arrives exactly once: brickscope's scopes plus the user span."""
        result, spans, _ = exported
        assert len(spans) == EXPECTED_SPANS
        assert len({s.span_id for s in spans}) == EXPECTED_SPANS
        assert result.report["stats"]["spans_emitted"] == EXPECTED_SPANS - 1

    def test_span_tree(self, exported):
        """generate > step > layer > brick > kernel, in the app's trace, with the app's step ids."""
        result, spans, _ = exported
        by_id = {s.span_id: s for s in spans}
        (root,) = [s for s in spans if not s.parent_span_id]
        assert root.name == "generate" and root.scope == "decoder_app"
        assert {s.trace_id for s in spans} == {result.report["trace_id"]}
        expected_parent = {"step": "generate", "layer": "step", "brick": "layer", "kernel": "brick"}
        for span in spans:
            if span is root:
                continue
            parent = by_id[span.parent_span_id]
            assert parent.attributes.get(A.SCOPE_KIND, parent.name) == expected_parent[span.attributes[A.SCOPE_KIND]]
            assert span.scope == "brickscope"
        assert sorted(s.span_id for s in by_kind(spans, "step")) == sorted(result.report["steps"])
        kernels_per_brick = Counter(by_id[k.parent_span_id].name for k in by_kind(spans, "kernel"))
        assert kernels_per_brick == {brick: STEPS * LAYERS for brick, *_ in BRICKS}

    def test_brick_and_kernel_attributes(self, exported):
        """Brick name, category, elements, layer, step and the kernels' launch configuration survive."""
        _, spans, _ = exported
        table = {brick: row for brick, *row in BRICKS}
        for brick in by_kind(spans, "brick"):
            category = table[brick.name][0]
            assert brick.attributes[A.BRICK_NAME] == brick.name
            assert brick.attributes[A.BRICK_CATEGORY] == category
            assert brick.attributes[A.BRICK_ELEMENTS] == 4096
            assert brick.attributes[A.LAYER_INDEX] in range(LAYERS)
            assert brick.attributes[A.STEP_NUMBER] in range(STEPS)
        kernels = by_kind(spans, "kernel")
        for kernel in kernels:
            category, name, grid, block, smem, _ = table[kernel.attributes[A.BRICK_NAME]]
            assert (kernel.name, kernel.attributes[A.KERNEL_NAME]) == (name, name)
            assert kernel.attributes[A.KERNEL_GRID] == grid
            assert kernel.attributes[A.KERNEL_BLOCK] == block
            assert kernel.attributes[A.KERNEL_SHARED_MEM_BYTES] == smem
            assert kernel.attributes[A.BRICK_CATEGORY] == category

    def test_host_timing_attributes(self, exported):
        """Host-timed spans say so; their host interval is their span interval."""
        _, spans, _ = exported
        for span in spans:
            if span.scope != "brickscope":
                continue
            assert span.attributes[A.CLOCK] == "host"
            assert span.attributes[A.HOST_START_NS] == span.start_ns
            assert span.attributes[A.HOST_DURATION_NS] == span.duration_ns
            assert A.GPU_DURATION_NS not in span.attributes

    def test_resource(self, exported):
        """Service, OTEL_RESOURCE_ATTRIBUTES, host and the launcher's rank reach the receiver on every span."""
        result, spans, _ = exported
        resources = {tuple(sorted((k, str(v)) for k, v in s.resource.items())) for s in spans}
        assert len(resources) == 1
        resource = spans[0].resource
        assert resource["service.name"] == "decoder-test"
        assert resource["deployment.environment.name"] == "test"
        assert resource[A.HOST_NAME] == socket.gethostname()
        assert (resource[A.RANK], resource[A.LOCAL_RANK], resource[A.WORLD_SIZE]) == (3, 1, 8)
        assert resource == result.report["resource"]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_data_added_inside_a_brick_arrives_on_its_span(app, grpc_receiver, http_receiver, protocol):
    """set_attribute/add_event on trace.get_current_span() and bs.event inside a brick reach the
    exported brick (and kernel) spans, with their attributes; nothing else gains events."""
    receiver = grpc_receiver if protocol == "grpc" else http_receiver
    result = app.run(otlp_env(receiver, protocol), "--steps", str(STEPS), "--layers", str(LAYERS), "--annotate")
    assert result.returncode == 0, result.stderr
    assert receiver.wait_for(lambda r: len(r.spans()) >= EXPECTED_SPANS, timeout_s=60)
    spans = receiver.spans()
    attention = [s for s in by_kind(spans, "brick") if s.name == "attention"]
    assert len(attention) == STEPS * LAYERS
    for brick in attention:
        step, layer = brick.attributes[A.STEP_NUMBER], brick.attributes[A.LAYER_INDEX]
        assert brick.attributes["app.kv_blocks"] == 10 * step + layer
        assert brick.events == ["kv.lookup"]
        assert brick.event_attributes == [{"hit": layer % 2 == 0}]
    kernels = [s for s in by_kind(spans, "kernel") if s.name == "flash_attn_fwd"]
    assert [(k.events, k.event_attributes) for k in kernels] == [(["launch.retry"], [{"attempt": 1}])] * (STEPS * LAYERS)
    others = [s for s in spans if s.name not in ("attention", "flash_attn_fwd")]
    assert not any(s.events for s in others)
    assert result.report["stats"]["scope_data_dropped"] == 0


class TestMetricsAtTheReceiver:
    def test_duration_histogram_matches_the_bricks(self, exported):
        """Per brick, the histogram counts every brick span and sums their self times."""
        _, spans, receiver = exported
        assert receiver.wait_for(lambda r: _histograms(r) == {b for b, *_ in BRICKS}, timeout_s=60)
        latest = receiver.latest_points()
        for brick, category, *_ in BRICKS:
            point = latest[(A.METRIC_BRICK_DURATION, ((A.BRICK_CATEGORY, category), (A.BRICK_NAME, brick)))]
            self_times = [s.attributes[A.BRICK_SELF_DURATION_NS] for s in by_kind(spans, "brick") if s.name == brick]
            assert point.count == len(self_times) == STEPS * LAYERS
            assert point.total == pytest.approx(sum(self_times) / 1e9, rel=1e-9)
            assert point.resource == spans[0].resource

    def test_elements_counter(self, exported):
        """The elements counter adds up the elements of every brick."""
        _, _, receiver = exported
        assert receiver.wait_for(lambda r: _histograms(r) == {b for b, *_ in BRICKS}, timeout_s=60)
        latest = receiver.latest_points()
        for brick, category, *_ in BRICKS:
            point = latest[(A.METRIC_BRICK_ELEMENTS, ((A.BRICK_CATEGORY, category), (A.BRICK_NAME, brick)))]
            assert point.value == STEPS * LAYERS * 4096

    def test_exemplars_point_at_brick_spans(self, exported):
        """Duration exemplars carry the trace and span id of a received brick span of that brick."""
        _, spans, receiver = exported
        assert receiver.wait_for(lambda r: _histograms(r) == {b for b, *_ in BRICKS}, timeout_s=60)
        bricks = {(s.trace_id, s.span_id): s for s in by_kind(spans, "brick")}
        seen = 0
        for point in receiver.points():
            if point.metric != A.METRIC_BRICK_DURATION:
                continue
            for trace_id, span_id, value in point.exemplars:
                brick = bricks[(trace_id, span_id)]
                assert brick.name == point.attributes[A.BRICK_NAME]
                assert value == pytest.approx(brick.attributes[A.BRICK_SELF_DURATION_NS] / 1e9)
                seen += 1
        assert seen >= len(BRICKS)


def _histograms(receiver: Any) -> set[str]:
    """Bricks whose duration histogram already counts every brick of the run."""
    return {
        point.attributes[A.BRICK_NAME]
        for (metric, _), point in receiver.latest_points().items()
        if metric == A.METRIC_BRICK_DURATION and point.count == STEPS * LAYERS
    }


@pytest.mark.gpu
class TestGpuSpansAtTheReceiver:
    @pytest.fixture(name="gpu_run")
    def _gpu_run(self, app, grpc_receiver, simdriver_lib):
        import simdriver

        env = simdriver.subprocess_env(simdriver_lib, base={})
        env.update(BRICKSCOPE_CLOCK="cuda", SIMCUDA_DEVICE_COUNT="2")
        result = app.run(
            otlp_env(grpc_receiver, **env), "--steps", str(STEPS), "--layers", str(LAYERS),
            "--simdriver", str(simdriver_lib),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= EXPECTED_SPANS, timeout_s=60)
        return result, grpc_receiver.spans()

    def test_bricks_last_their_gpu_time(self, gpu_run):
        """A GPU-timed brick's span duration is the simulated kernel time, equal to brickscope.gpu.duration_ns."""
        result, spans = gpu_run
        gpu_ns = {brick: ns for brick, *_, ns in BRICKS}
        exact = 0
        for brick in by_kind(spans, "brick"):
            assert brick.attributes[A.CLOCK] == "cuda"
            assert brick.attributes[A.GPU_DURATION_NS] == brick.duration_ns
            # The kernel runs right after the brick's start event when the stream is busy
            # (then exactly), or a host gap later when the stream was idle: that gap is the
            # host's scheduling (3.8 and 7.2 ms seen at load average 4-6 on 2 cores), so no
            # upper bound here; the exact ones are counted below.
            assert gpu_ns[brick.name] - 1_000 <= brick.duration_ns
            exact += abs(brick.duration_ns - gpu_ns[brick.name]) <= 1_000
            assert brick.attributes[A.GPU_DEVICE_ID] == 0
            assert brick.attributes[A.GPU_STREAM_ID] == result.report["stream"]
            assert brick.attributes[A.HOST_START_NS] != brick.start_ns
        assert exact >= len(by_kind(spans, "brick")) // 2

    def test_device_names_on_the_resource(self, gpu_run):
        """The resource names every CUDA device the driver reports."""
        _, spans = gpu_run
        assert spans[0].resource[A.GPU_DEVICE_NAMES] == ["brickscope SimGPU 0", "brickscope SimGPU 1"]

    def test_steps_span_their_gpu_work(self, gpu_run):
        """Step spans are GPU-timed: they cover the GPU intervals of their bricks."""
        _, spans = gpu_run
        by_id = {s.span_id: s for s in spans}
        for step in by_kind(spans, "step"):
            assert step.attributes[A.CLOCK] == "cuda"
            bricks = [
                b for b in by_kind(spans, "brick") if by_id[b.parent_span_id].parent_span_id == step.span_id
            ]
            assert step.start_ns == min(b.start_ns for b in bricks)
            assert step.end_ns == max(b.end_ns for b in bricks)
