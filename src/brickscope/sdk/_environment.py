# SPDX-License-Identifier: Apache-2.0
"""Providers built from the standard ``OTEL_*`` variables, with the SDK's own configuration code.

Example::

    # OTEL_TRACES_EXPORTER=otlp OTEL_METRICS_EXPORTER=otlp OTEL_SERVICE_NAME=decoder
    from brickscope.sdk import _environment, _resource
    resource = _resource.create_resource()
    tracer_provider = _environment.tracer_provider_from_environment(resource)
    meter_provider = _environment.meter_provider_from_environment(resource)  # None: no exporter named

What the OpenTelemetry SDK already knows how to read, it reads: exporter names and
their entry points (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``, and the OTLP
protocol variables that pick gRPC or HTTP), the sampler (``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_SAMPLER_ARG``), the id generator, and each exporter reads its own
``OTEL_EXPORTER_*`` settings; ``BatchSpanProcessor`` reads ``OTEL_BSP_*`` and the
periodic metric reader ``OTEL_METRIC_EXPORT_*``. This module only turns the SDK's
lenient handling of bad values (a warning, then a default) into an error at
configure time that names the variable, as brickscope does for its own settings.
"""

from __future__ import annotations

import os
from importlib import metadata

from opentelemetry.environment_variables import OTEL_METRICS_EXPORTER, OTEL_PYTHON_ID_GENERATOR, OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_SDK_DISABLED,
    OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

from brickscope.sdk._otel_internals import (
    get_exporter_names,
    get_id_generator,
    get_sampler,
    import_exporters,
    import_id_generator,
    import_sampler,
)

_PROTOCOL_VARIABLES = {
    "traces": (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL),
    "metrics": (OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL),
}
_EXPORTER_VARIABLE = {"traces": OTEL_TRACES_EXPORTER, "metrics": OTEL_METRICS_EXPORTER}
_EXPORTER_GROUP = {"traces": "opentelemetry_traces_exporter", "metrics": "opentelemetry_metrics_exporter"}
_RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
#: BatchSpanProcessor's queue when OTEL_BSP_MAX_QUEUE_SIZE is unset (the SDK's default).
_SDK_DEFAULT_QUEUE = 2048


def sdk_disabled() -> bool:
    """Whether ``OTEL_SDK_DISABLED`` turns OpenTelemetry off (only ``true`` does, any case).

    Raises:
        ValueError: a value other than ``true`` or ``false``: the SDK would
            silently read it as false, which is rarely what was meant by ``1``.
    """
    raw = os.environ.get(OTEL_SDK_DISABLED, "").strip().lower()
    if raw in ("", "false"):
        return False
    if raw == "true":
        return True
    raise ValueError(
        f"brickscope: {OTEL_SDK_DISABLED}={os.environ[OTEL_SDK_DISABLED]!r} is not 'true' or 'false' "
        "(the OpenTelemetry specification reads anything but 'true' as false)"
    )


def validate(*, traces: bool, metrics: bool) -> None:
    """Check the ``OTEL_*`` values the builders below will read, before anything is built.

    configure() calls it first with what it is going to build, so a bad value fails
    before any global provider is registered or exporter started.

    Raises:
        ValueError: the first bad value, naming its variable.
    """
    if traces:
        _exporter_classes("traces")
        _sampler()
        _id_generator()
    if metrics:
        _exporter_classes("metrics")


def tracer_provider_from_environment(resource: Resource, *, min_queue_size: int = _SDK_DEFAULT_QUEUE) -> TracerProvider:
    """A TracerProvider with the sampler, id generator and span exporters the environment names.

    Each exporter gets a ``BatchSpanProcessor``. brickscope emits the scopes of a
    sync point in one burst, so when ``OTEL_BSP_MAX_QUEUE_SIZE`` is unset the queue
    holds at least ``min_queue_size`` spans (configure() passes its pending bound):
    a full queue drops spans.

    Args:
        resource: the provider's resource.
        min_queue_size: the smallest BatchSpanProcessor queue when the variable is unset.

    Raises:
        ValueError: an unknown exporter, sampler, id generator or OTLP protocol,
            or a bad sampler argument; the message names the variable.
    """
    exporters = _exporter_classes("traces")
    # No SDK exit handler (it waits up to 30 s per processor): configure() shuts the
    # provider down at exit within its own deadline.
    provider = TracerProvider(
        resource=resource, sampler=_sampler(), id_generator=_id_generator(), shutdown_on_exit=False
    )
    queue = None if os.environ.get(OTEL_BSP_MAX_QUEUE_SIZE) else max(_SDK_DEFAULT_QUEUE, min_queue_size)
    for exporter_class in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter_class(), max_queue_size=queue))
    return provider


def meter_provider_from_environment(resource: Resource) -> MeterProvider | None:
    """A MeterProvider with the readers ``OTEL_METRICS_EXPORTER`` names, or None if it names none.

    Push exporters (OTLP) get a ``PeriodicExportingMetricReader``; pull readers
    (``prometheus``) are used as they are. Exemplars follow ``OTEL_METRICS_EXEMPLAR_FILTER``
    (default ``trace_based``: a measurement made for a sampled span keeps its trace and span id).

    Raises:
        ValueError: an unknown metrics exporter or OTLP protocol; the message names the variable.
    """
    readers: list[MetricReader] = []
    for exporter_class in _exporter_classes("metrics"):
        if issubclass(exporter_class, MetricReader):
            readers.append(exporter_class())
        else:
            readers.append(PeriodicExportingMetricReader(exporter_class()))
    if not readers:
        return None
    return MeterProvider(resource=resource, metric_readers=readers)


def _exporter_classes(signal: str) -> list[type]:
    """The exporter classes the environment names for ``signal``, through the SDK's entry points."""
    variable = _EXPORTER_VARIABLE[signal]
    try:
        names = get_exporter_names(signal)  # resolves "otlp" to otlp_proto_grpc / otlp_proto_http
    except RuntimeError as exc:  # an unknown OTLP protocol
        protocol, general = _PROTOCOL_VARIABLES[signal]
        raise ValueError(
            f"brickscope: {exc} (from {protocol} or {general}); expected 'grpc' or 'http/protobuf'"
        ) from None
    if not names:
        return []
    try:
        span_exporters, metric_exporters, _ = import_exporters(
            names if signal == "traces" else [], names if signal == "metrics" else [], []
        )
    except RuntimeError as exc:
        installed = sorted({ep.name for ep in metadata.entry_points(group=_EXPORTER_GROUP[signal])})
        missing_otlp = {"otlp_proto_grpc", "otlp_proto_http"}.intersection(names).difference(installed)
        hint = " (pip install 'brickscope[otlp]')" if missing_otlp else ""
        raise ValueError(
            f"brickscope: {variable}={os.environ.get(variable)!r}: {exc}{hint}; installed: {', '.join(installed)}"
        ) from None
    return list((span_exporters if signal == "traces" else metric_exporters).values())


def _sampler() -> Sampler | None:
    """The sampler ``OTEL_TRACES_SAMPLER`` names (None: the SDK default), checked first."""
    name = (get_sampler() or "").strip()
    if not name:
        return None
    known = sorted({ep.name for ep in metadata.entry_points(group="opentelemetry_traces_sampler")})
    if name not in known:
        raise ValueError(f"brickscope: unknown {OTEL_TRACES_SAMPLER}={name!r}; installed samplers: {', '.join(known)}")
    raw = os.environ.get(OTEL_TRACES_SAMPLER_ARG, "").strip()
    if name in _RATIO_SAMPLERS and raw:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(
                f"brickscope: {OTEL_TRACES_SAMPLER_ARG}={raw!r} is not a ratio between 0 and 1 "
                f"(for {OTEL_TRACES_SAMPLER}={name})"
            )
    sampler = import_sampler(name)
    if sampler is None:  # the SDK logged why
        raise ValueError(f"brickscope: {OTEL_TRACES_SAMPLER}={name!r} could not be created (see the log)")
    return sampler


def _id_generator() -> IdGenerator:
    """The id generator ``OTEL_PYTHON_ID_GENERATOR`` names (default: random)."""
    name = get_id_generator()
    try:
        return import_id_generator(name)
    except RuntimeError as exc:
        raise ValueError(f"brickscope: {OTEL_PYTHON_ID_GENERATOR}={name!r}: {exc}") from None
