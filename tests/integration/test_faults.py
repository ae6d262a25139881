# SPDX-License-Identifier: Apache-2.0
"""Receiver faults: the app never blocks on export nor sees an exception, later spans arrive, losses are counted.

Every run sets a short ``OTEL_EXPORTER_OTLP_TIMEOUT`` (seconds, in the Python exporters)
and ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED=true``: the SDK then counts, per span,
whether its BatchSpanProcessor dropped it (``otel.sdk.processor.span.processed`` with
``error.type=queue_full``) and whether its export failed (``otel.sdk.exporter.span.exported``
with ``error.type``). Those counters reach the receiver with the app's last metric
export, so each test checks the ledger: every span the app made was received, or
dropped with a count, or failed with a count.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import grpc
import pytest
from harness import otlp_env
from otlp_receiver import GrpcReceiver, free_port

from brickscope.trace import attributes as A

pytestmark = pytest.mark.slow

LAYERS = 2
SPANS_PER_STEP = 1 + LAYERS * 7
EXPORT_TIMEOUT_S = 1.0
#: Where a receiver comes back: after an outage the exporter's first call can fail fast on
#: the channel it made while the receiver was down; it retries on a new channel after a
#: backoff of about 1 s, which only fits in a deadline of a few seconds (the default is 10).
RECOVERY_TIMEOUT_S = 3.0
#: Every wait below ends on an event (a phase line, a received span, the app's
#: ``EXPORT_FAILED`` line); this only stops a test that would hang. No test asserts how
#: long anything took: that the app never waits for an exporter is shown by phases that
#: end while the receiver holds the export call (nothing depends on speed or load).
HANG_GUARD_S = 120


def fault_env(receiver: Any, timeout_s: float = EXPORT_TIMEOUT_S, **extra: str) -> dict[str, str]:
    return otlp_env(
        receiver,
        OTEL_EXPORTER_OTLP_TIMEOUT=str(int(timeout_s)),
        OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED="true",
        **extra,
    )


def ledger(receiver: Any) -> Counter:
    """The SDK's own span counters as last received: processed, dropped, exported, failed."""
    out: Counter = Counter()
    for (metric, _), point in receiver.latest_points().items():
        failed = "error.type" in point.attributes
        if metric == "otel.sdk.processor.span.processed":
            out["dropped" if failed else "processed"] += int(point.value)
        elif metric == "otel.sdk.exporter.span.exported":
            out["failed" if failed else "exported"] += int(point.value)
    return out


def assert_accounted(result: Any, *receivers: Any, batch: int = 512, extra_spans: int = 1) -> Counter:
    """Every span made is received, failed (counted) or dropped from the queue (counted).

    ``extra_spans``: spans the app made beside brickscope's (its "generate" span).
    The final counters come from the last receiver. ``processed`` (handed to the
    exporter) is exact, so the spans the queue shed are ``made - processed``. The
    SDK's ``queue_full`` counter can exceed that by one per batch its worker popped:
    ``BatchProcessor.emit`` counts a drop when it finds the queue full and appends
    afterwards, and a batch popped in between means nothing was dropped after all.

    Returns:
        The ledger, with ``lost``: the spans the queue really shed.
    """
    made = result.report["stats"]["spans_emitted"] + extra_spans  # brickscope's spans and "generate"
    received = sum(len(receiver.spans()) for receiver in receivers)
    books = ledger(receivers[-1])
    books["lost"] = made - books["processed"]
    assert books["lost"] >= 0, books
    assert books["exported"] + books["failed"] == books["processed"], books
    assert books["exported"] == received, books
    assert books["lost"] <= books["dropped"] <= books["lost"] + -(-books["processed"] // batch), books
    assert received + books["failed"] + books["lost"] == made
    return books


def steps_received(receiver: Any, steps: range) -> int:
    return sum(1 for s in receiver.spans() if s.attributes.get(A.STEP_NUMBER) in steps)


def assert_clean_exit(result: Any) -> None:
    """The app finished normally: exit 0, its report written, no traceback printed."""
    assert result.returncode == 0, result.stderr
    assert result.report["stats"]["processor_errors"] == 0
    assert "Traceback" not in result.stderr, result.stderr


class TestReceiverFaults:
    def test_receiver_absent_at_start(self, app, tmp_path):
        """Nothing listens while the first phase exports; spans made after the receiver appears all arrive."""
        receiver = GrpcReceiver(port=free_port())
        env = fault_env(receiver, RECOVERY_TIMEOUT_S)
        running = app.start(env, "--phases", "2", "--steps", "2", "--layers", str(LAYERS))
        try:
            running.wait_phase(HANG_GUARD_S)
            running.wait_stderr("EXPORT_FAILED traces", HANG_GUARD_S)  # phase 0's export, retries included, met a closed port
            receiver.start()
            running.go_on()
            result = running.finish(timeout_s=HANG_GUARD_S)
            assert_clean_exit(result)
            # Phase 1 is one batch. It arrives whole, or, when gRPC's reconnect backoff
            # (grown by phase 0's failures, in wall-clock time) outlasts its export
            # deadline, it fails whole and is counted: never lost, never split.
            assert steps_received(receiver, range(2, 4)) in (0, 2 * SPANS_PER_STEP)
            books = assert_accounted(result, receiver)
            assert books["failed"] > 0  # phase 0's batch met the closed port
        finally:
            receiver.stop()

    def test_receiver_killed_mid_run_then_restarted(self, app, grpc_receiver):
        """A collector that dies and comes back: spans before it died arrive, those in between are
        counted, and the batch after it came back arrives whole or (when gRPC's reconnect
        backoff, grown in wall-clock time during the outage, outlasts its export deadline:
        a matter of load) fails whole and is counted: never lost, never split."""
        env = fault_env(grpc_receiver, RECOVERY_TIMEOUT_S)
        running = app.start(env, "--phases", "3", "--steps", "2", "--layers", str(LAYERS))
        running.wait_phase(HANG_GUARD_S)
        assert grpc_receiver.wait_for(lambda r: steps_received(r, range(0, 2)) == 2 * SPANS_PER_STEP, HANG_GUARD_S)
        port = grpc_receiver.port
        grpc_receiver.stop()
        running.go_on()
        running.wait_phase(HANG_GUARD_S)
        running.wait_stderr("EXPORT_FAILED traces", HANG_GUARD_S)  # phase 1's export, retries included, failed
        with GrpcReceiver(port=port) as restarted:
            running.go_on()
            result = running.finish(timeout_s=HANG_GUARD_S)
            assert_clean_exit(result)
            assert steps_received(restarted, range(4, 6)) in (0, 2 * SPANS_PER_STEP)
            during_outage = steps_received(restarted, range(2, 4)) + steps_received(grpc_receiver, range(2, 4))
            assert during_outage < 2 * SPANS_PER_STEP
            books = assert_accounted(result, grpc_receiver, restarted)
            assert books["failed"] > 0  # phase 1 met the dead receiver

    def test_receiver_killed_and_gone_bounds_the_exit(self, app, grpc_receiver):
        """With the receiver gone for good, the app still exits cleanly: what is pending at exit fails, it does not hang.

        The export timeout (1 s) ends the pending span batch's export, which the app
        reports as failed; the hang guard (far above any timeout here) catches an exit
        that waits forever. How long the exit took is not asserted: that depends on load.
        """
        env = fault_env(grpc_receiver)
        running = app.start(env, "--phases", "2", "--steps", "2", "--layers", str(LAYERS))
        running.wait_phase(HANG_GUARD_S)
        assert grpc_receiver.wait_for(lambda r: steps_received(r, range(0, 2)) == 2 * SPANS_PER_STEP, HANG_GUARD_S)
        grpc_receiver.stop()
        running.go_on()
        result = running.finish(timeout_s=HANG_GUARD_S)
        assert_clean_exit(result)
        assert "EXPORT_FAILED traces" in result.stderr  # phase 1's spans were given up, not waited for
        assert steps_received(grpc_receiver, range(2, 4)) == 0

    def test_unavailable_then_recovering(self, app, grpc_receiver):
        """UNAVAILABLE twice (with a RetryInfo delay): the exporter retries and nothing is lost."""
        grpc_receiver.fail_next(2, retry_after_s=0.2)
        result = app.run(
            fault_env(grpc_receiver, 5),
            "--steps", "3", "--layers", str(LAYERS),
        )  # fmt: skip
        assert_clean_exit(result)
        assert grpc_receiver.rejected["traces"] == 2
        books = assert_accounted(result, grpc_receiver)
        assert books["dropped"] == books["failed"] == 0
        assert len(grpc_receiver.spans()) == 3 * SPANS_PER_STEP + 1

    def test_stalling_receiver_and_queue_overflow(self, app, grpc_receiver):
        """A receiver that hangs costs one batch; the full queue sheds the rest; every span is accounted for.

        Driven step by step, nothing left to timing: phase 0 makes exactly one batch, which
        the receiver holds; phases 1 and 2 then overfill the queue behind it; the test fails
        the held call (a non-retryable status) and lets the app shut down. The export timeout
        and the batch delay are far longer than the test, so only the handshakes move it on.
        """
        per_phase = 2 * SPANS_PER_STEP  # 30: one export batch
        batch, queue = per_phase, per_phase + per_phase // 2  # the queue holds 45
        grpc_receiver.hold_next(1)
        env = fault_env(
            grpc_receiver,
            60,
            OTEL_BSP_MAX_QUEUE_SIZE=str(queue),
            OTEL_BSP_MAX_EXPORT_BATCH_SIZE=str(batch),
            OTEL_BSP_SCHEDULE_DELAY="600000",
        )
        running = app.start(env, "--phases", "3", "--steps", "2", "--layers", str(LAYERS), "--no-generate-span", "--pause-at-end")
        running.wait_phase(HANG_GUARD_S)  # phase 0: one full batch, handed to the exporter...
        assert grpc_receiver.wait_for(lambda r: r.holding["traces"] == 1, HANG_GUARD_S)  # ...and held there
        for _ in range(2):  # phases 1 and 2: 60 spans behind a stuck exporter, into a queue of 45
            running.go_on()
            running.wait_phase(HANG_GUARD_S)
        assert grpc_receiver.holding["traces"] == 1  # the phases ended while the export call was still held
        grpc_receiver.release_held(grpc.StatusCode.INVALID_ARGUMENT)  # not retryable: the batch fails
        running.go_on()
        result = running.finish(timeout_s=HANG_GUARD_S)
        assert_clean_exit(result)
        books = assert_accounted(result, grpc_receiver, batch=batch, extra_spans=0)
        made = 3 * per_phase
        assert result.report["stats"]["spans_emitted"] == made
        assert (books["failed"], len(grpc_receiver.spans()), books["lost"]) == (batch, queue, made - batch - queue)
        assert "Queue full, dropping Span." in result.stderr

    def test_a_burst_does_not_wait_for_a_dead_receiver(self, app, grpc_receiver):
        """Sync points that release hundreds of spans while the exporter is stuck do not wait for it.

        The receiver holds the first export call until the test releases it (the export
        timeout is far longer than the test): the burst phase can only end while the call
        is held if the app never waits for the exporter. Nothing here depends on speed.
        """
        batch = 64
        env = fault_env(grpc_receiver, 600, OTEL_BSP_MAX_QUEUE_SIZE="256", OTEL_BSP_MAX_EXPORT_BATCH_SIZE=str(batch))
        layers = 40  # 281 spans per step, all released when the step closes
        grpc_receiver.hold_next(1)
        running = app.start(env, "--phases", "2", "--steps", "3", "--layers", str(layers), "--pause-at-end")
        running.wait_phase(HANG_GUARD_S)
        assert grpc_receiver.wait_for(lambda r: r.holding["traces"] == 1, HANG_GUARD_S)  # the exporter is stuck
        running.go_on()
        running.wait_phase(HANG_GUARD_S)  # phase 1: 843 spans released behind the stuck exporter
        assert grpc_receiver.holding["traces"] == 1  # the burst ended while the export call was still held
        grpc_receiver.release_held(grpc.StatusCode.INVALID_ARGUMENT)  # not retryable: that batch fails
        running.go_on()
        result = running.finish(timeout_s=HANG_GUARD_S)
        assert_clean_exit(result)
        books = assert_accounted(result, grpc_receiver, batch=batch)
        assert 0 < books["failed"] <= batch and books["lost"] > 0  # the held batch failed; the full queue shed
