# SPDX-License-Identifier: Apache-2.0
"""A Report as text (terminal), Markdown (CI summaries, PRs) or JSON (schema 1).

Names come from traces and may hold anything: text output replaces control
characters with escapes, Markdown also escapes its own markup, so a span name
can neither break a table nor inject a link.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from brickscope.analysis._diff import Comparison, OperationChange
from brickscope.analysis._model import Instance, OperationStats, Overlap, Report
from brickscope.analysis._operations import OUTLIER_FACTOR, STALL_FACTOR, STALL_MADS
from brickscope.trace import attributes as A

FORMATS = ("text", "markdown", "json")
# The attributes a section needs, named where a trace lacks them.
_KIND, _CATEGORY, _CLOCK, _DEVICE = A.SCOPE_KIND, A.BRICK_CATEGORY, A.CLOCK, A.GPU_DEVICE_ID
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Markdown's markup; "_" only where it could open or close emphasis (not inside a word,
# so rms_norm stays readable in the raw text).
_MARKDOWN = re.compile(r"([\\`*{}\[\]<>()#+!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def render(report: Report, format: str = "text") -> str:  # the CLI's word
    """``report`` in one of :data:`FORMATS`; ValueError for another."""
    if format not in FORMATS:
        raise ValueError(f"brickscope: unknown report format {format!r}; expected one of {FORMATS}")
    if format == "json":
        return json.dumps(to_json(report), indent=2)
    return "\n".join(_Writer(format == "markdown").report(report)).rstrip() + "\n"


def to_json(report: Report) -> dict[str, Any]:
    """The report as the JSON document of schema 1 (plain dicts and lists)."""
    data = dataclasses.asdict(report)
    data = {"schema": data.pop("schema"), **data}
    data["load_balance"] = {key: dataclasses.asdict(value) for key, value in report.load_balance.items()}
    data["stalls"] = [_finite(stall) for stall in data["stalls"]]  # a median of 0: ratio null
    return data


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}"


def _rate(value: float, unit: float = 1.0) -> str:
    """A rate in fixed point (GB/s, GFLOP/s): one format for a whole column; a rate too small
    for it is ``<0.001``, never a ``0.000`` that reads as none."""
    if not value:
        return "-"
    return f"{value / unit:.3f}" if value / unit >= 0.0005 else "<0.001"


def _count_rate(value: float) -> str:
    """A rate spanning many decades (elements/s): scientific, one format for a whole column."""
    return f"{value:.3e}" if value else "-"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _opt(value: Any) -> str:
    return "-" if value is None else str(value)


class _Writer:
    """Sections of the report, as text or Markdown lines."""

    def __init__(self, markdown: bool) -> None:
        self.markdown = markdown

    def name(self, text: str) -> str:
        text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
        return _MARKDOWN.sub(r"\\\1", text) if self.markdown else text

    def title(self, text: str) -> list[str]:
        return ["", f"**{text}**", ""] if self.markdown else ["", text]

    def note(self, text: str) -> list[str]:
        return [text, ""] if self.markdown else [f"  {text}"]

    def omitted(self, title: str, why: str) -> list[str]:
        """An empty section: left out, one line saying why (text and Markdown; JSON keeps it)."""
        return ["", f"{title}: not shown, {why}"] + ([""] if self.markdown else [])

    def table(self, header: tuple[str, ...], rows: list[tuple[str, ...]], text_columns: int) -> list[str]:
        """Names (the first ``text_columns``) left-aligned, figures right-aligned."""
        if self.markdown:
            align = "| " + " | ".join(":--" if i < text_columns else "--:" for i in range(len(header))) + " |"
            return ["| " + " | ".join(header) + " |", align] + ["| " + " | ".join(r) + " |" for r in rows] + [""]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(
                c.ljust(w) if i < text_columns else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
            ).rstrip()

        return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]

    def report(self, report: Report) -> list[str]:
        sources = ", ".join(self.name(s) for s in report.sources) or "live session"
        head = f"brickscope report: {sources}: {report.spans} spans, clock {', '.join(report.clocks) or 'none'}"
        if report.filters:
            head += " (" + ", ".join(f"{k} {v}" for k, v in report.filters.items()) + ")"
        lines = [f"**{head}**" if self.markdown else head]
        for note in report.notes:
            lines += self.note(self.name(note))
        if report.dropped_by_reason.get("bound"):
            lines += self.note(f"{report.dropped_by_reason['bound']} spans beyond the session's bound were not analysed")
        lines += self.operations(report)
        lines += self.others(report)
        lines += self.instances(report)
        lines += self.stalls(report)
        lines += self.host(report)
        lines += self.lanes(report)
        lines += self.communication(report)
        lines += self.memory(report)
        lines += self.roofline(report)
        lines += self.throughput(report)
        lines += self.tiles(report)
        lines += self.critical_paths(report)
        return lines

    def operations(self, report: Report) -> list[str]:
        header = (
            "count",
            "self ms",
            "share",
            "in stalls",
            "total ms",
            "mean us",
            "p50 us",
            "p90 us",
            "p99 us",
            "max us",
            "elem/s",
            "GB/s",
        )
        lines = []
        brick_ns = sum(s.self_ns for s in report.operations if s.kind == "brick")
        clocks = ", ".join(report.clocks) or "none"
        for kind, title, named in (
            ("brick", f"Self time by brick (clock: {clocks}, total {_ms(brick_ns)} ms)", True),
            ("kernel", "Time by kernel", False),
        ):
            rows = [s for s in report.operations if s.kind == kind]
            if rows:
                lines += self.title(title)
                lines += self.table(
                    ("brick" if named else "kernel", "category") + header,
                    [(self.name(s.name), self.name(s.category)) + self.figures(s) for s in rows],
                    2,
                )
        if report.categories:
            lines += self.title("Self time by category")
            lines += self.table(
                ("category",) + header, [(self.name(s.name),) + self.figures(s) for s in report.categories], 1
            )
        elif not any(s.kind == "brick" for s in report.operations):
            lines += self.omitted(
                "Self time by brick and category",
                f"no brick spans (needs {_KIND}=brick, and {_CATEGORY} for categories)",
            )
        return lines

    def others(self, report: Report) -> list[str]:
        """Spans of no brickscope kind (another producer's slices) by name: self time is the
        span's duration less its children's (docs/analysis.md)."""
        if not report.others:
            return []
        header = ("span", "count", "self ms", "share", "total ms", "mean us", "p50 us", "p90 us", "p99 us", "max us")
        rows = [
            (
                self.name(s.name), str(s.count), _ms(s.self_ns), _share(s.share), _ms(s.total_ns), _us(s.mean_ns),
                _us(s.p50_ns), _us(s.p90_ns), _us(s.p99_ns), _us(s.max_ns),
            )
            for s in report.others
        ]  # fmt: skip
        total = sum(s.self_ns for s in report.others)
        title = f"Self time by span name, spans of no brickscope kind (total {_ms(total)} ms)"
        return self.title(title) + self.table(header, rows, 1)

    @staticmethod
    def figures(s: OperationStats) -> tuple[str, ...]:
        return (
            str(s.count),
            _ms(s.self_ns),
            _share(s.share),
            _share(s.stall_share) if s.stalls else "-",
            _ms(s.total_ns),
            _us(s.mean_ns),
            _us(s.p50_ns),
            _us(s.p90_ns),
            _us(s.p99_ns),
            _us(s.max_ns),
            _count_rate(s.elements_per_second),
            _rate(s.bytes_per_second, 1e9),
        )

    def where(self, i: Instance) -> tuple[str, ...]:
        return (
            _opt(i.step),
            _opt(i.layer),
            self.name(i.rank),
            self.name(_opt(i.device)),
            self.name(_opt(i.stream)),
            i.span_id,
        )

    def instances(self, report: Report) -> list[str]:
        if report.slowest:
            lines = self.title(f"Slowest {len(report.slowest)} brick instances (self time)")
            lines += self.table(
                ("brick", "self us", "step", "layer", "rank", "device", "stream", "span"),
                [(self.name(i.name), _us(i.self_ns)) + self.where(i) for i in report.slowest],
                1,
            )
        else:
            lines = self.omitted("Slowest brick instances", f"no brick spans (needs {_KIND}=brick)")
        if not report.ranks:  # no brick or kernel span at all
            return lines + self.omitted("Outliers", f"no brick or kernel spans (needs {_KIND}=brick or kernel)")
        lines += self.title(f"Outliers (self time over {OUTLIER_FACTOR:g}x their operation's median)")
        if not report.outliers:
            return lines + self.note("none")
        return lines + self.table(
            ("name", "kind", "self us", "median us", "x", "step", "layer", "rank", "device", "stream", "span"),
            [
                (
                    self.name(o.instance.name),
                    o.instance.kind,
                    _us(o.instance.self_ns),
                    _us(o.median_ns),
                    f"{o.ratio:.1f}",
                )
                + self.where(o.instance)
                for o in report.outliers
            ],
            2,
        )

    def stalls(self, report: Report) -> list[str]:
        if not report.ranks:  # no brick or kernel span at all
            return self.omitted("Stalls", f"no brick or kernel spans (needs {_KIND}=brick or kernel)")
        lines = self.title(
            f"Stalls (self time over max({STALL_FACTOR:g}x, median + {STALL_MADS:g} MAD) of their operation;"
            " most time over the median first)"
        )
        if not report.stalls:
            return lines + self.note("none")
        rows: list[tuple[str, ...]] = [
            (
                self.name(s.instance.name),
                s.instance.kind,
                _us(s.instance.self_ns),
                _us(s.median_ns),
                "-" if s.median_ns == 0 else f"{s.ratio:.1f}",
                _opt(s.instance.step),
                _opt(s.instance.layer),
                self.name(s.instance.rank),
                ", ".join(self.overlap(o) for o in s.overlaps) or "nothing recorded",
            )
            for s in report.stalls
        ]
        header = ("name", "kind", "self us", "median us", "x", "step", "layer", "rank", "overlapped by")
        return lines + self.table(header, rows, 2)

    def overlap(self, o: Overlap) -> str:
        """``gc 50.113 ms``, ``brickscope.resolve 0.210 ms``, ``decode (thread 1234) 3.100 ms``."""
        where = "" if o.kind in ("gc", "overhead") else f" (thread {o.thread})"
        return f"{self.name(o.name)}{where} {_ms(o.overlap_ns)} ms"

    def host(self, report: Report) -> list[str]:
        host = report.host
        lines = self.title("brickscope's own work and GC pauses")
        if host is None:
            return lines + self.note(
                f"no overhead or gc spans in the trace (needs {_KIND}=overhead or gc: host_intervals off,"
                " the resolver thread, or an older brickscope)"
            )
        wall = "step wall time" if host.steps else "the trace's extent"
        gc = (
            f"GC {_ms(host.gc_ns)} ms in {host.gc_count} pause{'s' if host.gc_count > 1 else ''}, {_share(host.gc_share)}"
            if host.gc_count
            else "no GC pause inside a scope"
        )
        text = (
            f"brickscope {_ms(host.brickscope_ns)} ms in {host.brickscope_count} sync points,"
            f" {_share(host.brickscope_share)} of {_ms(host.wall_ns)} ms {wall}; {gc}"
        )
        lines += self.note(text)
        if host.brickscope_outside_ns:
            lines += self.note(f"brickscope {_ms(host.brickscope_outside_ns)} ms outside every step (not in the share)")
        return lines

    def lanes(self, report: Report) -> list[str]:
        if report.devices:
            lines = self.title("Devices (busy = union of GPU intervals)")
            rows = []
            for device in report.devices:
                rows.append(
                    (
                        self.name(device.name),
                        self.name(device.model or "-"),
                        str(device.count),
                        _ms(device.busy_ns),
                        _ms(device.idle_in_steps_ns),
                    )
                )
                rows += [
                    ("  " + self.name(s.name), "", str(s.count), _ms(s.busy_ns), _ms(s.idle_in_steps_ns))
                    for s in device.streams
                ]
            lines += self.table(("device / stream", "model", "count", "busy ms", "idle in steps ms"), rows, 2)
        else:
            lines = self.omitted(
                "Devices", f"no GPU-timed spans (timed on the host clock; needs {_CLOCK}=cuda or gpu and {_DEVICE})"
            )
        if not report.ranks:
            return lines + self.omitted("Ranks", f"no brick or kernel spans (needs {_KIND}=brick or kernel)")
        lines += self.title("Ranks")
        lines += self.table(
            ("rank", "count", "busy ms", "idle in steps ms"),
            [(self.name(r.name), str(r.count), _ms(r.busy_ns), _ms(r.idle_in_steps_ns)) for r in report.ranks],
            1,
        )
        rows = [
            (
                key, f"{balance.imbalance_ratio:.3f}", _ms(balance.mean_busy_ns), _ms(balance.max_busy_ns),
                self.name(balance.straggler or "-"),
            )
            for key, balance in report.load_balance.items()
            if balance.busy_ns
        ]  # fmt: skip
        if not rows:
            return lines + self.omitted("Load balance", "no busy time")
        return lines + self.title("Load balance: imbalance ratio = (max - mean) / mean of busy time") + self.table(("across", "imbalance", "mean busy ms", "max busy ms", "straggler"), rows, 1)

    def communication(self, report: Report) -> list[str]:
        comm = report.communication
        if not comm.operations:
            return self.omitted(
                "Communication",
                f"no communication bricks (needs {_KIND}=brick with {_CATEGORY}=communication or a collective's name)",
            )
        lines = self.title("Communication")
        lines += self.note(
            f"{comm.count} bricks, {_ms(comm.total_ns)} ms self time ({_share(comm.share)} of brick time);"
            f" on GPUs {_ms(comm.exposed_ns)} ms exposed, {_ms(comm.overlapped_ns)} ms overlapped by compute;"
            f" bottlenecks (>= {_share(comm.bottleneck_ratio)}): {', '.join(map(self.name, comm.bottlenecks)) or 'none'}"
        )
        lines += self.table(
            ("operation", "kind", "count", "self ms", "share", "total ms"),
            [
                (self.name(o.name), o.kind, str(o.count), _ms(o.self_ns), _share(o.share), _ms(o.total_ns))
                for o in comm.operations
            ],
            2,
        )
        if comm.devices:
            lines += [""] if not self.markdown else []
            lines += self.table(
                ("device", "communication ms", "overlapped ms", "exposed ms"),
                [
                    (self.name(d.device), _ms(d.communication_ns), _ms(d.overlapped_ns), _ms(d.exposed_ns))
                    for d in comm.devices
                ],
                1,
            )
        return lines

    def memory(self, report: Report) -> list[str]:
        memory = report.memory
        if not memory.operations:
            return self.omitted(
                "Memory traffic", f"no span carries bytes (needs {A.WORK_BYTES}, or {A.WORK_OUTPUT_SHAPE} and {A.WORK_DTYPE})"
            )
        lines = self.title("Memory traffic (bytes attributes)")
        peak = memory.peak
        lines += self.note(
            f"total {memory.total_bytes / 1e6:.3f} MB; peak instance {self.name(peak.name) if peak else '-'}"
            f" {memory.peak_bytes / 1e6:.3f} MB; hotspots (>= {_share(memory.hotspot_share)}):"
            f" {', '.join(self.name(h) for h in memory.hotspots) or 'none'}"
        )
        return lines + self.table(
            ("operation", "kind", "count", "MB", "mean MB", "max MB", "share"),
            [
                (
                    self.name(m.name),
                    m.kind,
                    str(m.count),
                    f"{m.bytes / 1e6:.3f}",
                    f"{m.mean_bytes / 1e6:.3f}",
                    f"{m.max_bytes / 1e6:.3f}",
                    _share(m.share),
                )
                for m in memory.operations
            ],
            2,
        )

    def roofline(self, report: Report) -> list[str]:
        if not report.roofline:
            return self.omitted("Roofline", f"no span carries flops or bytes (needs {A.WORK_FLOPS} or {A.WORK_BYTES})")
        return self.title("Roofline (flops and bytes attributes)") + self.table(
            ("operation", "kind", "device", "GFLOP/s", "GB/s", "FLOP/B", "bound", "of roof"),
            [
                (
                    self.name(p.name),
                    p.kind,
                    self.name(f"{p.device} {p.model}".strip() if p.model != "host" else p.device),
                    _rate(p.flops_per_second, 1e9),
                    _rate(p.bytes_per_second, 1e9),
                    "-" if p.arithmetic_intensity is None else f"{p.arithmetic_intensity:.3f}",
                    p.bound or ("-" if p.fraction_of_roof is None else ""),
                    _share(p.fraction_of_roof),
                )
                for p in report.roofline
            ],
            3,
        )

    def throughput(self, report: Report) -> list[str]:
        throughput = report.throughput
        if not throughput.steps:
            return self.omitted("Steps", f"no step spans (needs {_KIND}=step)")
        lines = self.title("Steps")
        text = f"{len(throughput.steps)} steps, mean {_ms(throughput.mean_step_ns)} ms"
        if throughput.mean_step_wall_ns != throughput.mean_step_ns:
            text += f" ({_ms(throughput.mean_step_wall_ns)} ms wall, with brickscope's work at step ends)"
        if throughput.tokens:
            text += f", {throughput.tokens} tokens, {throughput.tokens_per_second:.4g} tokens/s (over wall time)"
        return lines + self.note(text)

    def tiles(self, report: Report) -> list[str]:
        if not report.tiles:
            return []
        rows = [
            (
                self.name(t.name) or "(all)", t.level, str(t.count), _ms(t.total_ns), _us(t.mean_ns),
                str(t.elements), _count_rate(t.elements_per_second),
            )
            for t in report.tiles
        ]  # fmt: skip
        header = ("scope", "level", "tiles", "total ms", "mean us", "elements", "elem/s")
        return self.title("Tiles (bs.tile, host clock)") + self.table(header, rows, 2)

    def critical_paths(self, report: Report) -> list[str]:
        paths = report.critical_paths
        if not paths:
            return []
        shares = sorted(p.path_ns / p.duration_ns for p in paths if p.duration_ns)
        median = shares[max((len(shares) + 1) // 2 - 1, 0)] if shares else None
        title = f"Critical path of the {len(paths)} longest steps (median path share {_share(median)}; most gaps first)"
        if not any(p.parallel for p in paths):
            title += "; one lane: the path is the whole step"
        header = ("rank", "step", "step ms", "path ms", "share", "gaps ms", "spans", "most slack")
        return self.title(title) + self.table(header, _critical_path_rows(self, report), 2)


def _critical_path_rows(writer: _Writer, report: Report) -> list[tuple[str, ...]]:
    """The analysed steps, those whose critical path waits longest (gaps) first."""
    worst = sorted(report.critical_paths, key=lambda p: (-p.gaps_ns, p.rank, -1 if p.step is None else p.step))
    rows = []
    for path in worst:
        most = path.slack[0] if path.slack else None
        if not path.parallel:  # one lane: no span has slack
            slack = "one lane"
        else:
            slack = "-" if most is None else f"{writer.name(most.name)} {_ms(most.slack_ns)} ms"
        rows.append((
            writer.name(path.rank),
            "-" if path.step is None else str(path.step),
            _ms(path.duration_ns),
            _ms(path.path_ns),
            _share(path.path_ns / path.duration_ns if path.duration_ns else None),
            _ms(path.gaps_ns),
            str(len(path.path)),
            slack,
        ))  # fmt: skip
    return rows


def render_comparison(comparison: Comparison, format: str = "text") -> str:
    """A :class:`~brickscope.analysis._diff.Comparison` in one of :data:`FORMATS`."""
    if format not in FORMATS:
        raise ValueError(f"brickscope: unknown report format {format!r}; expected one of {FORMATS}")
    if format == "json":
        data = dataclasses.asdict(comparison)
        data = {"schema": data.pop("schema"), **data}
        data["changes"] = [_finite(change) for change in data["changes"]]
        return json.dumps(data, indent=2)
    writer = _Writer(format == "markdown")
    runs = comparison.run_noise_measured
    head = (
        f"brickscope diff: {_sources(writer, comparison.base_sources, comparison.base_runs)} ->"
        f" {_sources(writer, comparison.new_sources, comparison.new_runs)}: {comparison.method};"
        f" Benjamini-Hochberg q <= {comparison.alpha:g} and change >= {comparison.min_change_pct:g}%"
    )
    lines = [f"**{head}**" if writer.markdown else head]
    if runs:
        lines.append(
            f"intervals: {1 - comparison.alpha:.0%} confidence; run noise: standard deviation of an"
            " operation's run statistic from run to run"
        )
    else:
        lines.append(
            "one run a side: run-to-run noise was not measured, so a verdict says these two runs differ,"
            " not that the code changed; compare several runs a side (--base A1 A2 A3 --new B1 B2 B3)"
        )
    header = (
        ("operation", "kind", "statistic", "base us", "new us", "change", "interval", "run noise", "total", "q")
        if runs
        else ("operation", "kind", "statistic", "base n", "new n", "base us", "new us", "change", "total", "q")
    )
    for verdict, title in (("regression", "Regressions"), ("improvement", "Improvements")):
        rows = [c for c in comparison.changes if c.verdict == verdict]
        lines += writer.title(f"{title} ({len(rows)})")
        if not rows:
            lines += writer.note("none")
            continue
        lines += writer.table(header, [_change_row(writer, c, runs) for c in rows], 3)
    unchanged = sum(1 for c in comparison.changes if c.verdict == "unchanged")
    lines += writer.title("Not significant")
    lines += writer.note(f"{unchanged} operations")
    for what, names in (
        ("Only in the new runs", comparison.added),
        ("Only in the base runs", comparison.removed),
        ("Not compared", comparison.untested),
    ):
        if names:
            lines += writer.title(what)
            lines += writer.note(", ".join(writer.name(n) for n in names))
    return "\n".join(lines).rstrip() + "\n"


def _sources(writer: _Writer, sources: tuple[str, ...], runs: int) -> str:
    """One run: its files; several: how many (the JSON lists their files)."""
    return ", ".join(writer.name(s) for s in sources) if runs == 1 else f"{runs} runs"


def _change_row(writer: _Writer, change: OperationChange, runs: bool) -> tuple[str, ...]:
    """One operation's row: run-level columns, or the one-run-a-side columns."""
    first = (writer.name(change.name), change.kind, change.statistic)
    base, new = _geometric_mean(change.base_runs_ns), _geometric_mean(change.new_runs_ns)
    if runs:
        return (
            *first,
            _us(base),
            _us(new),
            f"{change.change_pct:+.1f}%",
            f"{change.ci_low_pct:+.1f}% .. {change.ci_high_pct:+.1f}%",
            f"{change.run_spread_pct:.1f}%",
            f"{change.total_change_pct:+.1f}%",
            f"{change.q_value:.2g}",
        )
    return (
        *first,
        str(change.base_count),
        str(change.new_count),
        _us(base),
        _us(new),
        f"{change.change_pct:+.1f}%",
        f"{change.total_change_pct:+.1f}%",
        f"{change.q_value:.2g}",
    )


def _geometric_mean(values: tuple[int, ...]) -> float:
    """What the change is the ratio of: the runs' geometric mean (one run: its value)."""
    if len(values) == 1 or min(values) <= 0:
        return sum(values) / len(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _finite(change: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: a change from zero is null."""
    return {
        k: (None if isinstance(v, float) and v in (float("inf"), float("-inf")) else v) for k, v in change.items()
    }
