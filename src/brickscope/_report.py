# SPDX-License-Identifier: Apache-2.0
"""Rendering a CategoryAggregator as a text table, Markdown or JSON.

The text layout follows trueno's brick_profiler demo: a per-brick section sorted
by total time, then a per-category section, each with count, total, mean, min,
max, share of total and throughput.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brickscope.trace._aggregation import CategoryAggregator, Stat

FORMATS = ("text", "markdown", "json")
_HEADER = ("count", "total ms", "mean us", "min us", "max us", "share", "elements", "elem/s")


def render(aggregator: CategoryAggregator, format: str) -> str:  # noqa: A002
    """Render in one of :data:`FORMATS`; raises ValueError for another."""
    if format not in FORMATS:
        raise ValueError(f"brickscope: unknown report format {format!r}; expected one of {FORMATS}")
    total = aggregator.total_ns()
    clocks = ", ".join(sorted(aggregator.clocks)) or "none"
    bricks = _rows(aggregator.bricks, total, lambda name: aggregator.brick_category[name])
    categories = _rows(aggregator.categories, total, None)
    if format == "json":
        return json.dumps(
            {
                "clocks": sorted(aggregator.clocks),
                "total_ns": total,
                "bricks": [row for _, row in bricks],
                "categories": [row for _, row in categories],
            },
            indent=2,
        )
    if format == "markdown":
        return "\n".join(
            [f"**Self time by brick** (clock: {clocks}, total {total / 1e6:.3f} ms)", ""]
            + _markdown(("brick", "category") + _HEADER, [cells for cells, _ in bricks])
            + ["", "**Self time by category**", ""]
            + _markdown(("category",) + _HEADER, [cells[:1] + cells[2:] for cells, _ in categories])
        )
    return "\n".join(
        [f"Self time by brick (clock: {clocks}, total {total / 1e6:.3f} ms)"]
        + _table(("brick", "category") + _HEADER, [cells for cells, _ in bricks])
        + ["", "Self time by category"]
        + _table(("category",) + _HEADER, [cells[:1] + cells[2:] for cells, _ in categories])
    )


def _rows(stats: dict[str, Stat], total: int, category_of: Any) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    rows = []
    for name, stat in sorted(stats.items(), key=lambda item: (-item[1].total_ns, item[0])):
        share = stat.total_ns / total if total else 0.0
        category = category_of(name) if category_of else ""
        cells = (
            name,
            category,
            str(stat.count),
            f"{stat.total_ns / 1e6:.3f}",
            f"{stat.mean_ns / 1e3:.1f}",
            f"{stat.min_ns / 1e3:.1f}",
            f"{stat.max_ns / 1e3:.1f}",
            f"{share * 100:.1f}%",
            str(stat.elements),
            f"{stat.elements_per_second:.4g}" if stat.elements else "-",
        )
        record: dict[str, Any] = {"name": name}
        if category_of:
            record["category"] = category
        record.update(
            count=stat.count,
            total_ns=stat.total_ns,
            mean_ns=stat.mean_ns,
            min_ns=stat.min_ns,
            max_ns=stat.max_ns,
            share=share,
            elements=stat.elements,
            elements_per_second=stat.elements_per_second,
        )
        rows.append((cells, record))
    return rows


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    text_columns = len(header) - len(_HEADER)  # names left-aligned, numbers right-aligned

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i < text_columns else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _markdown(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    text_columns = len(header) - len(_HEADER)
    align = "| " + " | ".join(":--" if i < text_columns else "--:" for i in range(len(header))) + " |"
    return [line(header), align] + [line(r) for r in rows]
