# SPDX-License-Identifier: Apache-2.0
"""Each fast path through the OpenTelemetry SDK's internals (sdk/_otel_internals.py) is in use
on the installed SDK, and a release outside its checked range or a failed layout probe turns
it off with one log line, the reference path giving the same spans and counts."""

from __future__ import annotations

import contextlib
import logging

import pytest
from opentelemetry.metrics._internal.instrument import _ProxyHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased

import brickscope as bs
from brickscope import native
from brickscope.sdk import _otel_internals as oi
from brickscope.sdk.trace import _spans
from brickscope.testing import SequentialIdGenerator, reset_globals

NEWER, OLDER = "1.99.0", "1.29.0"
LOGGER = "brickscope.sdk._otel_internals"


@pytest.fixture(autouse=True)
def _fresh_paths(monkeypatch, caplog):
    """Each test decides every fast path anew; the decisions and notes are put back after."""
    caplog.set_level(logging.INFO, LOGGER)
    for name, path in oi.FAST_PATHS.items():
        monkeypatch.setattr(path, "on", None)
        if name in native._parts:
            monkeypatch.setitem(native._parts, name, native._parts[name])
        else:
            monkeypatch.delitem(native._parts, name, raising=False)
    yield
    reset_globals()


def fake_release(monkeypatch, version: str) -> None:
    monkeypatch.setattr(oi, "SDK_VERSION", version)


def only_off(monkeypatch, version: str, *names: str) -> None:
    """Fake ``version`` as the installed release, still within every fast path's range but ``names``'."""
    fake_release(monkeypatch, version)
    release = oi._release(version)
    wide = (min(release, (1, 30)), max(release, (1, 45)))
    monkeypatch.setattr(oi, "CHECKED", {name: (oi.CHECKED[name] if name in names else wide) for name in oi.CHECKED})


def state(name: str) -> native.Implementation:
    return bs.implementations()[name]


def off_lines(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and f"fast path {name} off" in r.getMessage()]


def run_session(processor_factory=None, sampler=None, prepare=None) -> tuple[list, dict, TracerProvider]:
    """Five bricks through a configured provider (``prepare(provider)`` first, when given);
    (exported spans, session stats, provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SequentialIdGenerator(), shutdown_on_exit=False, **({"sampler": sampler} if sampler else {}))
    provider.add_span_processor((processor_factory or SimpleSpanProcessor)(exporter))
    if prepare is not None:
        prepare(provider)
    session = bs.configure(provider, clock="host")
    with bs.step(0):
        for index in range(5):
            with bs.brick("rms_norm", elements=index):
                pass
    bs.sync()
    stats = session.stats()
    session.shutdown()
    names = sorted(span.name for span in exporter.get_finished_spans())
    return names, stats, provider


def delivery(stats: dict) -> tuple:
    return stats["spans_emitted"], stats.get("processor_errors")


class TestFastPathsOnTheInstalledSdk:
    def test_every_fast_path_a_session_asks_is_fast(self):
        """A session with a batch processor, a static sampler and a meter provider runs every SDK fast path."""
        reader = InMemoryMetricReader()
        exporter = InMemorySpanExporter()
        provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), shutdown_on_exit=False)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        session = bs.configure(provider, clock="host", meter_provider=MeterProvider(metric_readers=[reader]))
        with bs.step(0), bs.brick("rms_norm"):
            pass
        bs.sync()
        reader.get_metrics_data()
        session.shutdown()
        paths = ["sdk.span_processors", "sdk.processor_order", "sdk.batch_queue", "sdk.batch_exporter",
                 "sdk.static_sampler", "sdk.histogram"]  # fmt: skip
        assert {name: state(name) for name in paths} == {name: native.Implementation("fast") for name in paths}

    def test_the_resource_and_proxy_paths_are_fast(self):
        """Rewriting a provider's resource and telling a proxy histogram with no SDK behind it are fast."""
        provider = TracerProvider(shutdown_on_exit=False)
        assert oi.update_provider_resource(provider, Resource({"a": 1}))
        assert provider.resource.attributes["a"] == 1
        assert oi.proxy_without_sdk(_ProxyHistogram("h", "s", "d"))
        assert state("sdk.resource_rewrite").in_use == state("sdk.proxy_instrument").in_use == "fast"

    @pytest.mark.skipif(not _spans._MAKER_USABLE, reason="the C span maker is not in use")
    def test_the_readable_span_path_is_fast_with_the_c_maker(self):
        """The C span maker writes ReadableSpan's fields: the probe passed."""
        assert oi.readable_span_fields(_spans.INSTRUMENTATION_SCOPE) == oi.READABLE_SPAN_FIELDS
        assert state("sdk.readable_span").in_use == "fast"


@pytest.mark.parametrize("version", [NEWER, OLDER])
class TestAnUncheckedRelease:
    def test_the_processor_paths_run_when_the_layout_probe_passes(self, monkeypatch, caplog, version):
        """Listing and ordering the provider's processors have no public equivalent: on an
        unchecked release whose layout still passes the probe they run, with one warning
        each, and the spans and counts are the same."""
        expected = run_session()
        reset_globals()
        for name in ("sdk.span_processors", "sdk.processor_order"):
            monkeypatch.setattr(oi.FAST_PATHS[name], "on", None)
        fake_release(monkeypatch, version)
        names, stats, _ = run_session()
        assert (names, delivery(stats)) == (expected[0], delivery(expected[1]))
        for name in ("sdk.span_processors", "sdk.processor_order"):
            assert state(name).in_use == "fast"
            assert f"opentelemetry-sdk {version} is outside the releases checked" in state(name).reason
            assert state(name).reason.endswith("its layout probe passed")
            unchecked = [r for r in caplog.records if r.name == LOGGER and f"fast path {name} on an unchecked release" in r.getMessage()]
            assert [r.levelno for r in unchecked] == [logging.WARNING]

    def test_batch_queue_and_exporter_hand_spans_one_by_one(self, monkeypatch, caplog, version):
        """BatchSpanProcessor gets on_end per span, uncounted: the same spans arrive."""
        expected = run_session(BatchSpanProcessor)
        reset_globals()
        for name in ("sdk.batch_queue", "sdk.batch_exporter"):
            monkeypatch.setattr(oi.FAST_PATHS[name], "on", None)
        only_off(monkeypatch, version, "sdk.batch_queue", "sdk.batch_exporter")
        names, stats, _ = run_session(BatchSpanProcessor)
        assert (names, delivery(stats)) == (expected[0], delivery(expected[1]))
        assert len(off_lines(caplog, "sdk.batch_queue")) == len(off_lines(caplog, "sdk.batch_exporter")) == 1

    def test_every_path_off_at_once(self, monkeypatch, caplog, version):
        """The release read by the module turns each fast path that has a reference path off,
        each with its own line."""
        fake_release(monkeypatch, version)
        provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
        assert oi.static_root_decision(provider.sampler) is None
        assert oi.readable_span_fields(_spans.INSTRUMENTATION_SCOPE) is None
        assert not oi.update_provider_resource(provider, Resource({"a": 1}))
        assert "a" not in provider.resource.attributes
        assert not oi.proxy_without_sdk(_ProxyHistogram("h", "s", "d"))
        assert not oi.can_add_points(MeterProvider(), object(), (1.0,))
        for name in ("sdk.static_sampler", "sdk.readable_span", "sdk.resource_rewrite", "sdk.proxy_instrument",
                     "sdk.histogram"):  # fmt: skip
            assert len(off_lines(caplog, name)) == 1, name
            assert version in state(name).reason


class TestReferencePathsGiveTheSameResult:
    def test_a_static_sampler_asked_per_root(self, monkeypatch, caplog):
        """With the static-sampler path off the sampler is asked per root scope: the same spans."""
        expected = run_session(sampler=ALWAYS_ON)
        reset_globals()
        monkeypatch.setattr(oi.FAST_PATHS["sdk.static_sampler"], "on", None)
        only_off(monkeypatch, NEWER, "sdk.static_sampler")
        names, stats, _ = run_session(sampler=ALWAYS_ON)
        assert (names, delivery(stats)) == (expected[0], delivery(expected[1]))
        assert len(off_lines(caplog, "sdk.static_sampler")) == 1

    def test_the_histogram_records_per_value(self, monkeypatch, caplog):
        """With the histogram path off every value goes through Histogram.record: the same points."""
        found = []
        for off in (False, True):
            if off:
                monkeypatch.setattr(oi.FAST_PATHS["sdk.histogram"], "on", None)
                only_off(monkeypatch, NEWER, "sdk.histogram")
            reader = InMemoryMetricReader()
            provider = TracerProvider(shutdown_on_exit=False)
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            meter_provider = MeterProvider(metric_readers=[reader])
            session = bs.configure(provider, clock="host", meter_provider=meter_provider, duration_histogram="all")
            for index in range(20):
                with bs.step(index), bs.brick("rms_norm", elements=index):
                    pass
            bs.sync()
            data = reader.get_metrics_data()
            session.shutdown()
            reset_globals()
            found.append([
                (p.count, tuple(p.bucket_counts), p.min, p.max)
                for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                if m.name == "brickscope.brick.duration" for p in m.data.data_points
            ])  # fmt: skip
        assert [count for count, *_ in found[0]] == [count for count, *_ in found[1]] == [20]
        assert state("sdk.histogram").in_use == "reference"
        assert len(off_lines(caplog, "sdk.histogram")) == 1


class TestAFailedProbe:
    def test_a_provider_without_its_lock_gets_the_processor_appended(self, caplog):
        """The provider's multi processor's ``_lock`` is not a lock: appended, one log line, same spans."""
        expected = run_session()
        reset_globals()
        oi.FAST_PATHS["sdk.processor_order"].on = None  # (the fixture puts it back)

        def without_lock(provider):
            provider._active_span_processor._lock = contextlib.nullcontext()  # the SDK's own use still works

        names, stats, _ = run_session(prepare=without_lock)
        assert (names, delivery(stats)) == (expected[0], delivery(expected[1]))
        assert state("sdk.processor_order").reason.endswith("_lock is not a lock")
        assert len(off_lines(caplog, "sdk.processor_order")) == 1

    def test_a_provider_without_its_processor_tuple_is_refused(self, caplog):
        """No ``_span_processors`` tuple: configure raises, with one log line."""
        provider = TracerProvider(shutdown_on_exit=False)
        provider._active_span_processor._span_processors = list(provider._active_span_processor._span_processors)
        with pytest.raises(ValueError, match="is not a tuple"):
            bs.configure(provider, clock="host")
        assert len(off_lines(caplog, "sdk.span_processors")) == 1

    def test_a_batch_processor_without_its_queue_gets_spans_one_by_one(self, monkeypatch, caplog):
        """A BatchProcessor without ``_max_export_batch_size``: on_end per span, the same spans."""
        expected = run_session(BatchSpanProcessor)
        reset_globals()

        oi.FAST_PATHS["sdk.batch_queue"].on = None  # (the fixture puts it back)
        original = oi._probe_batch_queue
        monkeypatch.setattr(oi.FAST_PATHS["sdk.batch_queue"], "probe", lambda p: original(_without(p, "_max_export_batch_size")))
        names, stats, _ = run_session(BatchSpanProcessor)
        assert (names, delivery(stats)) == (expected[0], delivery(expected[1]))
        assert "_max_export_batch_size" in state("sdk.batch_queue").reason
        assert len(off_lines(caplog, "sdk.batch_queue")) == 1

    def test_a_provider_without_a_resource_keeps_its_own(self, caplog):
        """Neither ``_update_resource`` nor ``_resource``: the resource is left as built, one warning."""

        class Bare:
            resource = Resource({})

        assert not oi.update_provider_resource(Bare(), Resource({"a": 1}))
        assert len(off_lines(caplog, "sdk.resource_rewrite")) == 1
        assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.WARNING]

    def test_a_proxy_without_its_real_instrument_is_recorded_into(self, monkeypatch, caplog):
        """A proxy histogram without ``_real_instrument``: treated as real (recording is harmless)."""
        proxy = _ProxyHistogram("h", "s", "d")
        del proxy._real_instrument
        assert not oi.proxy_without_sdk(proxy)
        assert len(off_lines(caplog, "sdk.proxy_instrument")) == 1

    def test_a_meter_provider_with_another_layout_records_per_value(self, caplog):
        """A measurement consumer whose reader storages are not a dict: every value through record()."""
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        meter_provider._measurement_consumer._reader_storages = list(meter_provider._measurement_consumer._reader_storages.values())
        assert not oi.can_add_points(meter_provider, object(), (1.0,))
        assert len(off_lines(caplog, "sdk.histogram")) == 1

    def test_a_metrics_sdk_whose_internal_modules_do_not_import_is_said_once(self, monkeypatch, caplog):
        """Where the metrics SDK's private modules are not the known ones (its imports failed),
        the histogram fast path is listed as off with the reason and logged once, as every path."""
        monkeypatch.setattr(oi, "_SdkMeterProvider", None)
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        for _ in range(2):
            assert not oi.can_add_points(meter_provider, object(), (1.0,))
        reason = "layout probe failed: the metrics SDK's _internal modules are not the ones known"
        assert state("sdk.histogram") == native.Implementation("reference", reason)
        assert len(off_lines(caplog, "sdk.histogram")) == 1

    def test_the_decision_is_kept_and_logged_once(self, monkeypatch, caplog):
        """A path turned off stays off and logs one line however often it is asked."""
        fake_release(monkeypatch, NEWER)
        for _ in range(3):
            oi.static_root_decision(ALWAYS_ON)
        assert len(off_lines(caplog, "sdk.static_sampler")) == 1


def _without(processor, field):
    """A BatchSpanProcessor-shaped stand-in whose BatchProcessor (the SDK's class) lacks ``field``."""
    real = processor._batch_processor
    shadow = type(real).__new__(type(real))
    shadow.__dict__.update({key: value for key, value in vars(real).items() if key != field})
    stand_in = type("Shaped", (), {})()
    stand_in._batch_processor = shadow
    return stand_in
