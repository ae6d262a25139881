# SPDX-License-Identifier: Apache-2.0
"""Tests for brickscope.otlp_json: OTLP JSON files read back into SDK spans.

The inputs are produced by the official OpenTelemetry encoder
(``opentelemetry-exporter-otlp-proto-common`` builds ``opentelemetry-proto``
messages from SDK spans) and protobuf's own JSON printer. Protobuf's generic JSON
mapping writes ``bytes`` fields (trace and span ids) as base64, while OTLP JSON
requires hex: ``_otlp_json_dict`` converts the id fields, exactly the one
deviation the OTLP specification makes from the generic mapping.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from brickscope.otlp_json import read_spans
from brickscope.testing import make_span

json_format = pytest.importorskip(
    "google.protobuf.json_format", reason="protobuf is needed to produce reference OTLP JSON"
)
trace_encoder = pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    reason="opentelemetry-exporter-otlp-proto-common is needed to produce reference OTLP JSON",
)

TRACE_ID = 0x5B8EFFF798038103D269B633813FC60C
OTHER_TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _dropping(attributes: dict[str, Any], dropped: int) -> BoundedAttributes:
    bounded = BoundedAttributes(attributes=attributes, immutable=True)
    bounded.dropped = dropped
    return bounded


def _sample_spans() -> list[ReadableSpan]:
    """Spans exercising every field OTLP carries, over two resources and two scopes."""
    gpu_host = Resource({"service.name": "trainer", "host.gpus": ("A100", "H100")}, "https://s/1")
    other = Resource({"service.name": "router"})
    brickscope_scope = InstrumentationScope("brickscope", "0.1.0", "https://s/2", {"scope.k": 1})
    bare_scope = InstrumentationScope("bare")
    step = make_span(
        0x1,
        "step",
        1_700_000_000_000_000_000,
        1_700_000_000_500_000_000,
        0xFEED,
        trace_id=TRACE_ID,
        remote_parent=True,  # a parent in another process
        resource=gpu_host,
        attributes={"brickscope.scope.kind": "step", "brickscope.step.number": 7},
        kind=SpanKind.SERVER,
        status=Status(StatusCode.OK),
        scope=brickscope_scope,
    )
    events = BoundedList.from_seq(
        None, [Event("exception", {"exception.type": "ValueError"}, 1_700_000_000_100_000_000)]
    )
    events.dropped = 2
    brick = ReadableSpan(
        name="rms_norm",
        context=SpanContext(
            TRACE_ID, 0x2, False, TraceFlags(TraceFlags.SAMPLED), TraceState([("vendor", "x1")])
        ),
        parent=SpanContext(TRACE_ID, 0x1, False),
        resource=gpu_host,
        attributes=_dropping(
            {
                "brickscope.clock": "cuda",
                "brickscope.gpu.duration_ns": 2_500,
                "brickscope.kernel.grid": (128, 1, 1),
                "ratio": 0.25,
                "nan": math.nan,
                "ok": True,
                "flags": (True, False),
                "names": ("a", "b"),
                "mixed": ("a", 1, None),
                "blob": b"\x00\xffbytes",
                "nested": {"inner": {"deep": -(2**63)}, "list": (1.5, "x")},
            },
            dropped=3,
        ),
        events=events,
        links=[
            Link(
                SpanContext(OTHER_TRACE_ID, 0x99, True, TraceFlags(TraceFlags.SAMPLED)),
                _dropping({"link.kind": "follows"}, dropped=1),
            )
        ],
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode.ERROR, "boom"),
        start_time=1_700_000_000_100_000_000,
        end_time=1_700_000_000_100_002_500,
        instrumentation_scope=brickscope_scope,
    )
    kinds = [SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER]
    plain = [
        make_span(0x10 + i, f"plain-{kind.name}", 10 + i, 20 + i, trace_id=OTHER_TRACE_ID, resource=other, kind=kind, scope=bare_scope)
        for i, kind in enumerate(kinds)
    ]
    return [step, brick, *plain]


def _request(spans: list[ReadableSpan]):
    return trace_encoder.encode_spans(spans)


def _hex_ids(value: Any) -> Any:
    """Protobuf JSON (base64 ids) to OTLP JSON (hex ids), recursively."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex()
            if key in _ID_KEYS and isinstance(item, str)
            else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


def _otlp_json_dict(spans: list[ReadableSpan], *, integer_enums: bool = True) -> dict[str, Any]:
    message = json_format.MessageToDict(_request(spans), use_integers_for_enums=integer_enums)
    return _hex_ids(message)


def _write_jsonl(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return path


def _reencoded(spans: list[ReadableSpan]):
    return _request(list(spans))


@pytest.fixture(name="spans")
def _spans() -> list[ReadableSpan]:
    return _sample_spans()


class TestRoundTrip:
    def test_jsonl_round_trips_every_field(self, spans, tmp_path):
        """Spans from the official encoder, read back, re-encode to the identical message."""
        path = _write_jsonl(tmp_path / "spans.jsonl", [_otlp_json_dict(spans)])
        assert _reencoded(read_spans(path)) == _request(spans)

    def test_pretty_printed_document_round_trips(self, spans, tmp_path):
        """A single pretty-printed document (many lines) is read as one request."""
        path = tmp_path / "spans.json"
        path.write_text(json.dumps(_otlp_json_dict(spans), indent=2))
        assert _reencoded(read_spans(path)) == _request(spans)

    def test_enum_names_are_accepted(self, spans, tmp_path):
        """Enums written as proto names (SPAN_KIND_SERVER) decode like their integers."""
        path = _write_jsonl(tmp_path / "s.jsonl", [_otlp_json_dict(spans, integer_enums=False)])
        assert _reencoded(read_spans(path)) == _request(spans)

    def test_int64_as_numbers_is_accepted(self, tmp_path):
        """64-bit integers written as JSON numbers decode like the string form."""
        text = json.dumps(_otlp_json_dict(_sample_spans()))
        as_numbers = json.loads(text, parse_int=int)
        _numbers_for_int_strings(as_numbers)
        path = _write_jsonl(tmp_path / "n.jsonl", [as_numbers])
        assert _reencoded(read_spans(path)) == _request(_sample_spans())

    def test_multi_line_file_keeps_file_order(self, spans, tmp_path):
        """Each line is one request; spans come out line after line."""
        path = _write_jsonl(
            tmp_path / "s.jsonl", [_otlp_json_dict(spans[:2]), {}, _otlp_json_dict(spans[2:])]
        )
        assert [s.name for s in read_spans(path)] == [s.name for s in spans]

    def test_gzip_file_is_read(self, spans, tmp_path):
        """A gzip-compressed JSON Lines file is decompressed transparently."""
        path = tmp_path / "s.jsonl.gz"
        with gzip.open(path, "wt") as out:
            out.write(json.dumps(_otlp_json_dict(spans)) + "\n")
        assert _reencoded(read_spans(path)) == _request(spans)

    def test_array_document_is_read(self, spans, tmp_path):
        """A document holding a JSON array of requests yields the spans of each."""
        path = tmp_path / "a.json"
        path.write_text(
            json.dumps([_otlp_json_dict(spans[:1]), _otlp_json_dict(spans[1:])], indent=1)
        )
        assert [s.name for s in read_spans(path)] == [s.name for s in spans]


def _numbers_for_int_strings(value: Any) -> None:
    """Turn every decimal-string int64 field (times, intValue) into a JSON number, in place."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("UnixNano") or key == "intValue":
                value[key] = int(item)
            else:
                _numbers_for_int_strings(item)
    elif isinstance(value, list):
        for item in value:
            _numbers_for_int_strings(item)


class TestDecodedFields:
    @pytest.fixture(name="decoded")
    def _decoded(self, spans, tmp_path) -> dict[str, ReadableSpan]:
        path = _write_jsonl(tmp_path / "s.jsonl", [_otlp_json_dict(spans)])
        return {s.name: s for s in read_spans(path)}

    def test_ids_and_parent(self, decoded):
        """Hex ids become the integer trace, span and parent ids."""
        brick = decoded["rms_norm"]
        assert (brick.context.trace_id, brick.context.span_id) == (TRACE_ID, 0x2)
        assert (brick.parent.trace_id, brick.parent.span_id) == (TRACE_ID, 0x1)
        assert decoded["plain-CLIENT"].parent is None

    def test_remote_parent_flag(self, decoded):
        """The span flags' is-remote bits set the parent's is_remote."""
        assert decoded["step"].parent.is_remote is True
        assert decoded["rms_norm"].parent.is_remote is False

    def test_kind_and_status(self, decoded):
        """Kinds and status codes map onto the SDK enums, with the error description."""
        assert decoded["step"].kind is SpanKind.SERVER
        assert decoded["plain-CONSUMER"].kind is SpanKind.CONSUMER
        assert decoded["rms_norm"].status.status_code is StatusCode.ERROR
        assert decoded["rms_norm"].status.description == "boom"
        assert decoded["step"].status.status_code is StatusCode.OK

    def test_attribute_value_kinds(self, decoded):
        """Every AnyValue kind decodes to the matching Python type."""
        attributes = decoded["rms_norm"].attributes
        assert attributes["brickscope.gpu.duration_ns"] == 2_500
        assert attributes["brickscope.kernel.grid"] == (128, 1, 1)
        assert attributes["ratio"] == 0.25 and math.isnan(attributes["nan"])
        assert attributes["flags"] == (True, False) and attributes["ok"] is True
        assert attributes["mixed"] == ("a", 1, None)
        assert attributes["blob"] == b"\x00\xffbytes"
        assert attributes["nested"] == {"inner": {"deep": -(2**63)}, "list": (1.5, "x")}

    def test_resource_scope_events_links(self, decoded):
        """Resource, scope, events and links (with trace state and drop counts) survive."""
        brick = decoded["rms_norm"]
        assert brick.resource.attributes["service.name"] == "trainer"
        assert brick.resource.schema_url == "https://s/1"
        assert (brick.instrumentation_scope.name, brick.instrumentation_scope.version) == (
            "brickscope",
            "0.1.0",
        )
        assert (
            brick.events[0].name == "exception"
            and brick.events[0].timestamp == 1_700_000_000_100_000_000
        )
        assert (
            brick.links[0].context.trace_id == OTHER_TRACE_ID and brick.links[0].context.is_remote
        )
        assert brick.context.trace_state.get("vendor") == "x1"
        assert (
            brick.dropped_attributes,
            brick.dropped_events,
            brick.links[0].dropped_attributes,
        ) == (3, 2, 1)

    def test_spans_of_one_resource_share_it(self, decoded):
        """Spans from one resourceSpans entry share a single Resource object."""
        assert decoded["step"].resource is decoded["rms_norm"].resource


class TestStreamingAndProgress:
    def test_progress_reaches_total(self, spans, tmp_path):
        """The progress callback ends at (size, size) and never goes backwards."""
        path = _write_jsonl(tmp_path / "s.jsonl", [_otlp_json_dict(spans)] * 3)
        calls: list[tuple[int, int]] = []
        assert (
            len(list(read_spans(path, progress=lambda done, total: calls.append((done, total)))))
            == 15
        )
        size = path.stat().st_size
        assert calls[-1] == (size, size)
        assert [done for done, _ in calls] == sorted(done for done, _ in calls)

    def test_lines_are_decoded_lazily(self, spans, tmp_path):
        """Spans of the first line come out before a bad later line is even parsed."""
        path = tmp_path / "s.jsonl"
        path.write_text(json.dumps(_otlp_json_dict(spans)) + "\n{not json\n")
        reader = read_spans(path)
        assert next(reader).name == "step"
        with pytest.raises(ValueError, match=r"s\.jsonl:2: not valid JSON"):
            list(reader)

    def test_empty_file_yields_nothing(self, tmp_path):
        """An empty file is a valid trace with no spans."""
        path = tmp_path / "empty.jsonl"
        path.write_text("\n\n")
        assert list(read_spans(path)) == []

    def test_other_signals_are_skipped(self, spans, tmp_path):
        """Collector lines of logs or metrics (no resourceSpans) are skipped."""
        path = _write_jsonl(
            tmp_path / "s.jsonl", [{"resourceLogs": []}, _otlp_json_dict(spans[:1])]
        )
        assert [s.name for s in read_spans(path)] == ["step"]


class TestBadInput:
    def _single_span_file(self, tmp_path: Path, **overrides: Any) -> Path:
        request = _otlp_json_dict(_sample_spans()[:1])
        request["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(overrides)
        return _write_jsonl(tmp_path / "bad.jsonl", [request])

    def test_base64_ids_are_refused_with_a_hint(self, tmp_path):
        """Base64 ids (protobuf's generic mapping) are refused, naming the line, field and fix."""
        path = self._single_span_file(tmp_path, spanId=base64.b64encode(b"\0" * 7 + b"\1").decode())
        with pytest.raises(ValueError, match=r"bad\.jsonl:1: .*spans\[0\]\.spanId: .*base64.*hex"):
            list(read_spans(path))

    def test_wrong_type_names_the_field(self, tmp_path):
        """A field of the wrong JSON type is reported with its path."""
        path = self._single_span_file(tmp_path, startTimeUnixNano="soon")
        with pytest.raises(ValueError, match=r"spans\[0\]\.startTimeUnixNano: expected an integer"):
            list(read_spans(path))

    def test_unknown_kind_is_refused(self, tmp_path):
        """An enum value outside the OTLP definition is an error, not a guess."""
        path = self._single_span_file(tmp_path, kind=9)
        with pytest.raises(ValueError, match=r"spans\[0\]\.kind: unknown value 9"):
            list(read_spans(path))

    def test_missing_span_id_is_refused(self, tmp_path):
        """A span without a span id cannot be placed in a tree and is refused."""
        path = self._single_span_file(tmp_path, spanId="")
        with pytest.raises(ValueError, match=r"spans\[0\]\.spanId: missing"):
            list(read_spans(path))

    def test_broken_document_names_the_line(self, tmp_path):
        """A pretty-printed document with a syntax error reports its line."""
        path = tmp_path / "doc.json"
        path.write_text('{\n  "resourceSpans": [\n    oops\n  ]\n}\n')
        with pytest.raises(ValueError, match=r"doc\.json:3: not valid JSON"):
            list(read_spans(path))

    def test_non_object_request_is_refused(self, tmp_path):
        """A line that is JSON but not a request object is refused."""
        path = tmp_path / "s.jsonl"
        path.write_text('{"resourceSpans": []}\n[1, 2]\n')
        with pytest.raises(ValueError, match=r"s\.jsonl:2: expected an ExportTraceServiceRequest"):
            list(read_spans(path))

    def test_zstd_is_refused_with_a_hint(self, tmp_path):
        """A zstd-compressed file is refused with the command that decompresses it."""
        path = tmp_path / "s.jsonl.zst"
        path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
        with pytest.raises(ValueError, match=r"zstd -d"):
            list(read_spans(path))

    def test_truncated_gzip_is_a_value_error(self, spans, tmp_path):
        """A truncated gzip file is reported as truncated, naming the file and the offset."""
        path = tmp_path / "s.jsonl.gz"
        data = gzip.compress((json.dumps(_otlp_json_dict(spans)) + "\n").encode() * 50)
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(ValueError, match=r"s\.jsonl\.gz: offset [0-9]+: truncated: the gzip stream ends"):
            list(read_spans(path))
