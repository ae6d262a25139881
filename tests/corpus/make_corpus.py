# SPDX-License-Identifier: Apache-2.0
"""Generate the bad-input corpus: files every ``brickscope`` subcommand must refuse cleanly.

Run from the repository root (rewrites ``tests/corpus/files/`` and ``manifest.json``)::

    .venv/bin/python tests/corpus/make_corpus.py

``tests/integration/test_bad_inputs.py`` runs every file against every subcommand. The
manifest says what each command must do with each file: ``error`` (exit status 1, one
line on stderr naming the file, no output left), ``ok`` (exit status 0, an output), or
``either`` (a byte flip may hit a value rather than the structure; anything but a
traceback, a partial output or a silent empty one). ``read`` is the expectation of the
commands that read spans (``convert``, ``flamegraph`` and the analysis commands);
``merge`` copies packets and is told apart. A subcommand that prints instead of writing a
file (``report``) must print nothing on stdout when it fails.

What is generated (the ``.pftrace`` ids are random, so the bytes differ per run; the
expectations do not):

- a small trace of three export batches, cut at every packet boundary and in the middle
  of every packet; 24 single-byte flips spread over it; a packet with nesting deeper than
  protobuf decodes;
- the same spans as OTLP JSON Lines, cut inside every line; gzip cut short and corrupted;
- a torch.profiler-style Chrome trace JSON, cut inside its events, with a timestamp that is no
  number, and with nothing but a slice never ended;
- empty, blank, text, PNG, random bytes, JSON that is not OTLP, OTLP with no spans, an
  array of numbers, zstd, deep JSON nesting, and a gzip bomb (64 MiB of newlines in 64 KiB).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import sys
from typing import Any

from opentelemetry.sdk.trace import Event

from brickscope.exporter.perfetto import PerfettoSpanExporter
from brickscope.exporter.perfetto._reader import iter_packets
from brickscope.exporter.perfetto._schema import pb
from brickscope.exporter.perfetto._wire import A_DICT, field, frame
from brickscope.testing import MAIN_THREAD, gpu_attributes, make_span
from brickscope.trace import attributes as A

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")
T0 = 1_700_000_000_000_000_000
_NAME = bytes(((10 << 3) | 2,))  # DebugAnnotation.name
_INT_ONE = bytes(((4 << 3) | 0, 1))  # DebugAnnotation.int_value = 1
_ANNOTATION = bytes(((4 << 3) | 2,))  # TrackEvent.debug_annotations
_TRACK_EVENT = bytes(((11 << 3) | 2,))  # TracePacket.track_event


def _batches() -> list[list]:
    """Three export batches: a step with a brick and an event, a GPU kernel, a second step (µs)."""
    us = 1_000
    step = {**MAIN_THREAD, A.SCOPE_KIND: A.SCOPE_KIND_STEP}
    brick = {**MAIN_THREAD, A.SCOPE_KIND: A.SCOPE_KIND_BRICK, A.BRICK_NAME: "rms_norm", A.BRICK_CATEGORY: "norm"}
    return [
        [
            make_span(2, "rms_norm", T0 + 10 * us, T0 + 20 * us, 1, attributes=brick),
            make_span(1, "step", T0, T0 + 100 * us, attributes=step, events=[Event("mark", {"i": 1}, T0 + 50 * us)]),
        ],
        [make_span(3, "gemm", T0 + 130 * us, T0 + 190 * us, 4, attributes=gpu_attributes(T0 + 112 * us, 5 * us, 60 * us))],
        [make_span(4, "step", T0 + 110 * us, T0 + 200 * us, attributes=step)],
    ]


def _open_span_slices(data: bytes) -> list[int]:
    """Before each packet: how many span slices (the ones carrying annotations; launch
    slices carry none) are begun and not yet ended, per the track-event rules."""
    stacks: dict[int, list[bool]] = {}
    counts = []
    for _, raw in iter_packets(io.BytesIO(data)):
        counts.append(sum(flag for stack in stacks.values() for flag in stack))
        packet = pb.TracePacket.FromString(raw)
        if packet.HasField("track_event"):
            event = packet.track_event
            if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                stacks.setdefault(event.track_uuid, []).append(bool(event.debug_annotations))
            elif event.type == pb.TrackEvent.TYPE_SLICE_END and stacks.get(event.track_uuid):
                stacks[event.track_uuid].pop()
    return counts


def _otlp_line(spans: list) -> str:
    out = []
    for span in spans:
        out.append(
            {
                "traceId": f"{span.context.trace_id:032x}",
                "spanId": f"{span.context.span_id:016x}",
                "parentSpanId": f"{span.parent.span_id:016x}" if span.parent else "",
                "name": span.name,
                "startTimeUnixNano": str(span.start_time),
                "endTimeUnixNano": str(span.end_time),
                "attributes": [
                    {"key": key, "value": {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}}
                    for key, value in span.attributes.items()
                ],
            }
        )
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": out}]}]}) + "\n"


def _chrome_files(add: Any) -> None:
    """Chrome trace JSON as torch.profiler writes it (merge converts it, so it reads it too)."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": 10.5, "dur": 90},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 20.25, "dur": 30,
         "args": {"External id": 1, "Input Dims": [[4, 8], [8, 2]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 7, "ts": 60, "dur": 10.125},
    ]  # fmt: skip
    document = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}
    text = json.dumps(document, indent=1).encode()
    add("chrome-complete.json", text, "ok", "ok")
    add("chrome-cut-inside-events.json", text[: text.index(b'"aten::add"')], "error")
    add("chrome-ts-not-a-number.json", text.replace(b'"ts": 60', b'"ts": "60"'), "error")
    never_ended = [{"ph": "B", "name": "open", "pid": 7, "tid": 7, "ts": 1}]
    add("chrome-only-impossible.json", json.dumps(never_ended).encode(), "error")


def main() -> int:
    shutil.rmtree(FILES, ignore_errors=True)
    os.makedirs(FILES)
    manifest: dict[str, dict[str, str]] = {}

    def add(name: str, data: bytes, read: str, merge: str = "error") -> None:
        with open(os.path.join(FILES, name), "wb") as out:
            out.write(data)
        manifest[name] = {"read": read, "merge": merge}

    # --- a .pftrace, cut and flipped ------------------------------------------------
    base = os.path.join(FILES, "_base.pftrace")
    batch_ends = []
    with PerfettoSpanExporter(base) as exporter:
        for batch in _batches():
            exporter.export(batch)
            batch_ends.append(os.path.getsize(base))
    data = open(base, "rb").read()
    os.unlink(base)
    starts = [offset for offset, _ in iter_packets(io.BytesIO(data))] + [len(data)]
    open_spans = _open_span_slices(data)
    for index, (start, end) in enumerate(zip(starts, starts[1:])):
        if 0 < start:
            # At a packet boundary: a valid packet stream, but a span slice begun and not
            # ended means the writer was cut off; no span at all is nothing to convert.
            read = "ok" if open_spans[index] == 0 and start >= batch_ends[0] else "error"
            add(f"pftrace-cut-at-packet-{index:03d}.pftrace", data[:start], read, "ok")
        add(f"pftrace-cut-inside-packet-{index:03d}.pftrace", data[: (start + end) // 2], "error")
    rng = random.Random(12)
    for position in sorted(rng.sample(range(len(data)), 24)):
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        add(f"pftrace-flip-{position:05d}.pftrace", bytes(flipped), "either", "either")
    add("pftrace-complete.gz", gzip.compress(data), "ok", "ok")
    add("pftrace-gzip-cut.pftrace.gz", gzip.compress(data)[:-20], "error")
    # Nested by hand: protobuf itself refuses to build messages nested deeper than 100.
    deep = field(_NAME, b"leaf") + _INT_ONE
    for level in range(150):
        deep = field(_NAME, f"d{level}".encode()) + field(A_DICT, deep)
    packet = pb.TracePacket(trusted_packet_sequence_id=7, timestamp=T0)
    packet.track_event.type = pb.TrackEvent.TYPE_INSTANT
    packet.track_event.name = "deep"
    packet.ClearField("track_event")
    head = packet.SerializeToString()
    event = pb.TrackEvent(type=pb.TrackEvent.TYPE_INSTANT, name="deep").SerializeToString() + field(_ANNOTATION, deep)
    add("pftrace-deep-nesting.pftrace", data[: starts[1]] + frame(head + field(_TRACK_EVENT, event)), "error")

    # --- OTLP JSON, cut -------------------------------------------------------------
    lines = [_otlp_line(batch) for batch in _batches()]
    text = "".join(lines).encode()
    add("otlp-complete.jsonl", text, "ok", "ok")  # merge converts it first
    offset = 0
    for index, line in enumerate(lines):
        add(f"otlp-cut-inside-line-{index}.jsonl", text[: offset + len(line) // 2], "error")
        offset += len(line)
    packed = gzip.compress(text)
    add("otlp-gzip-cut.jsonl.gz", packed[: len(packed) // 2], "error")
    corrupt = bytearray(packed)
    corrupt[len(corrupt) // 2] ^= 0xFF
    add("otlp-gzip-corrupt.jsonl.gz", bytes(corrupt), "error")

    _chrome_files(add)

    # --- not a trace at all ---------------------------------------------------------
    add("empty.bin", b"", "error")
    add("blank.jsonl", b"\n\n  \n", "error")
    add("text.txt", b"hello, this is not a trace\n", "error")
    add("image.png", b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(200)), "error")
    add("random.bin", bytes(rng.randrange(256) for _ in range(4096)), "error")
    add("json-not-otlp.json", b'{"hello": "world", "list": [1, 2, 3]}\n', "error")
    add("otlp-no-spans.jsonl", b'{"resourceSpans": []}\n{"resourceSpans": [{"scopeSpans": []}]}\n', "error")
    add("json-numbers.json", b"[1, 2, 3]\n", "error")
    add("otlp-bad-field.jsonl", lines[0].replace('"name": "step"', '"name": 42').encode(), "error")
    add("zstd.jsonl.zst", b"\x28\xb5\x2f\xfd" + bytes(60), "error")
    add("deep-nesting.json", b"[" * 100_000 + b"]" * 100_000, "error")
    add("gzip-bomb.jsonl.gz", gzip.compress(b"\n" * (64 << 20), compresslevel=9), "error")

    with open(os.path.join(HERE, "manifest.json"), "w") as out:
        json.dump(manifest, out, indent=1, sort_keys=True)
        out.write("\n")
    print(f"{len(manifest)} files in {FILES}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
