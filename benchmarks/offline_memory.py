# SPDX-License-Identifier: Apache-2.0
"""Peak memory of the offline commands on a big trace: reading must stream.

Example::

    python benchmarks/offline_memory.py --size-mb 1024 --dir /tmp/bench   # the 1 GB run
    python benchmarks/offline_memory.py --size-mb 64 --json               # quick

Generates (once, kept in ``--dir``) a ``.pftrace`` of ``--size-mb`` written by
``PerfettoSpanExporter`` from the spans of ``benchmarks/export.py`` (GPU kernels with
their launches, host bricks) in batches of 4096, and an OTLP JSON Lines file of about
the same size. Then, each in a fresh interpreter, measures peak RSS (the kernel's
VmHWM of that process, written at exit by ``_peak.py``; Linux) and wall time of:

- ``read``: iterating ``brickscope.offline.open_spans`` over the ``.pftrace``;
- ``flamegraph``: ``brickscope flamegraph trace.pftrace``;
- ``convert``: ``brickscope convert spans.jsonl`` (to a ``.pftrace``);
- ``report``: ``brickscope report trace.pftrace`` (the analysis engine's loaded model,
  which holds columns for every span: it grows with the trace by design);
- ``baseline``: an interpreter that imports the same modules and reads nothing.

The target is under 300 MB for a 1 GB trace in ``flamegraph``,
``convert`` and reading. Wall times are for orientation only (shared machine).

``--only convert_cost`` measures what ``brickscope convert spans.jsonl -o x.pftrace``
costs a span against its two parts measured apart in the same run, each in a fresh
interpreter, in CPU time (user + system, the interpreter's start-up taken off):
reading the same file (``open_spans``), and ``PerfettoSpanExporter`` exporting the
same spans in the same batches of 4096 (made by ``export.py``'s generator, only the
``export`` calls timed). Keys ``convert_us_per_span``, ``read_us_per_span``,
``export_us_per_span`` and ``convert_ratio``, convert over read plus export: 1.0
when converting costs what its parts cost, more when convert adds work of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from export import make_spans  # noqa: E402

BATCH = 4096

_PEAK = [sys.executable, str(HERE / "_peak.py")]
COMMANDS = {
    "baseline": [*_PEAK, "-c", "import brickscope.offline, brickscope.exporter.perfetto, opentelemetry.sdk.trace"],
    "read": [*_PEAK, "-c", "import sys; from brickscope.offline import open_spans; sum(1 for _ in open_spans(sys.argv[1]))", "{trace}"],
    "flamegraph": [*_PEAK, "-m", "brickscope", "flamegraph", "{trace}", "-o", "{out}/out.folded", "-f", "-q"],
    "convert": [*_PEAK, "-m", "brickscope", "convert", "{jsonl}", "-o", "{out}/converted.pftrace", "-f", "-q"],
    "report": [*_PEAK, "-m", "brickscope", "report", "{trace}", "-q"],
}


# The export peer of convert_cost: the spans of the JSON Lines file, exported in convert's
# batches; prints the CPU seconds of the export calls alone.
_EXPORT_PEER = """
import sys, time
sys.path.insert(0, sys.argv[3])
from export import make_spans
from brickscope.exporter.perfetto import PerfettoSpanExporter
count, spent = int(sys.argv[1]), 0.0
with PerfettoSpanExporter(sys.argv[2], overwrite=True) as exporter:
    for first in range(0, count, 4096):
        batch = list(make_spans(min(4096, count - first), first))
        started = time.process_time()
        exporter.export(batch)
        spent += time.process_time() - started
print(spent)
"""


def _generate_trace(path: Path, size: int) -> int:
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    count = 0
    with PerfettoSpanExporter(path, overwrite=True) as exporter:
        while path.stat().st_size < size:
            exporter.export(list(make_spans(BATCH, count)))
            count += BATCH
    return count


def _generate_jsonl(path: Path, size: int) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        while out.tell() < size:
            out.write(_otlp_line(list(make_spans(BATCH // 8, count))))
            count += BATCH // 8
    return count


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, (tuple, list)):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _otlp_line(spans: list) -> str:
    encoded = [
        {
            "traceId": f"{s.context.trace_id:032x}",
            "spanId": f"{s.context.span_id:016x}",
            "parentSpanId": f"{s.parent.span_id:016x}" if s.parent else "",
            "name": s.name,
            "kind": 1,
            "startTimeUnixNano": str(s.start_time),
            "endTimeUnixNano": str(s.end_time),
            "attributes": [{"key": k, "value": _value(v)} for k, v in s.attributes.items()],
        }
        for s in spans
    ]
    resource = [{"key": k, "value": _value(v)} for k, v in spans[0].resource.attributes.items()]
    request = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"scope": {"name": "brickscope"}, "spans": encoded}]}]}
    return json.dumps(request, separators=(",", ":")) + "\n"


def _measure(command: list[str], paths: dict[str, str]) -> dict[str, float]:
    args = [part.format(**paths) for part in command]
    peak_file = Path(paths["out"]) / "peak.txt"
    started, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PEAK_FILE": str(peak_file)})
    seconds, cpu = time.monotonic() - started, _children_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode()}")
    return {"peak_rss_mb": round(int(peak_file.read_text()) / 1024, 1), "seconds": round(seconds, 1), "cpu_s": round(cpu, 2)}


def _children_cpu() -> float:
    """User plus system CPU seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def convert_cost(jsonl: Path, spans: int, out: Path) -> dict[str, float]:
    """convert's CPU µs a span against reading the same file and exporting the same spans."""
    paths = {"jsonl": str(jsonl), "out": str(out), "trace": ""}
    startup = _measure(COMMANDS["baseline"], paths)["cpu_s"]
    read = _measure(COMMANDS["read"], {**paths, "trace": str(jsonl)})["cpu_s"] - startup
    convert = _measure(COMMANDS["convert"], paths)["cpu_s"] - startup
    peer = [sys.executable, "-c", _EXPORT_PEER, str(spans), str(out / "exported.pftrace"), str(HERE)]
    export = float(subprocess.run(peer, check=True, capture_output=True, text=True).stdout)
    per_span = 1e6 / spans
    return {
        "spans": spans,
        "convert_us_per_span": round(convert * per_span, 1),
        "read_us_per_span": round(read * per_span, 1),
        "export_us_per_span": round(export * per_span, 1),
        "convert_ratio": round(convert / (read + export), 2),
    }


def _count_spans(jsonl: Path) -> int:
    """Spans in the generated JSON Lines file (each line is one request of BATCH // 8)."""
    with open(jsonl, "rb") as lines:
        return sum(1 for _ in lines) * (BATCH // 8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/brickscope-bench"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted([*COMMANDS, "convert_cost"]))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    size = args.size_mb << 20
    trace, jsonl = args.dir / f"trace-{args.size_mb}mb.pftrace", args.dir / f"spans-{args.size_mb}mb.jsonl"
    chosen = args.only or list(COMMANDS)
    # Only the inputs the chosen commands read are generated (convert_cost reads the JSON Lines).
    needs_trace = any("{trace}" in COMMANDS[name] for name in chosen if name in COMMANDS)
    made: dict[str, Any] = {}
    if needs_trace and (not trace.exists() or trace.stat().st_size < size):
        made["trace_spans"] = _generate_trace(trace, size)
    if not jsonl.exists() or jsonl.stat().st_size < size:
        made["jsonl_spans"] = _generate_jsonl(jsonl, size)
    paths = {"trace": str(trace), "jsonl": str(jsonl), "out": str(args.dir)}
    results: dict[str, Any] = {"jsonl_mb": round(jsonl.stat().st_size / 2**20, 1), **made}
    if needs_trace:
        results["trace_mb"] = round(trace.stat().st_size / 2**20, 1)
    for name in chosen:
        if name == "convert_cost":
            results[name] = convert_cost(jsonl, _count_spans(jsonl), args.dir)
        else:
            results[name] = _measure(COMMANDS[name], paths)
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:>12}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
