# SPDX-License-Identifier: Apache-2.0
"""Step graphs as a text tree (CI logs), Graphviz DOT, or JSON: ``brickscope tree``.

The output depends only on the trace: no span ids, no wall-clock dates, children
in start order (ties broken by file order), so the same trace gives the same
bytes and users can snapshot-test it.

Example::

    graphs = tree_graphs(table)             # per rank, the median over steps
    print(render_tree(graphs, "text", sources=table.kernel_sources))
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from brickscope.analysis._graph import SLACK_FRACTION, Node, StepGraph, on_several_lanes

TREE_FORMATS = ("text", "dot", "json")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RED = ', color="red", penwidth=2'


def render_tree(
    graphs: Sequence[StepGraph],
    format: str = "text",  # the CLI's word
    *,
    sources: Mapping[int, Any] | None = None,
    show_sources: bool = False,
    slack_fraction: float = SLACK_FRACTION,
) -> str:
    """``graphs`` in one of :data:`TREE_FORMATS`: a deterministic text tree, Graphviz DOT,
    or JSON (schema 1); the same graphs give the same bytes.

    Args:
        sources: kernel source hash -> :class:`~brickscope.analysis._table.KernelSource`.
        show_sources: say where each kernel came from (kind, name, path), and list the registry.
        slack_fraction: list nodes whose slack is at least this share of their step.
    """
    if format not in TREE_FORMATS:
        raise ValueError(f"brickscope: unknown tree format {format!r}; expected one of {TREE_FORMATS}")
    sources = sources or {}
    if format == "json":
        document = {"schema": 1, "trees": [_json_graph(g, sources, slack_fraction) for g in graphs]}
        return json.dumps(document, indent=2, sort_keys=True) + "\n"
    if format == "dot":
        return _dot(graphs, sources if show_sources else {})
    lines: list[str] = []
    for graph in graphs:
        if lines:
            lines.append("")
        lines += _text_graph(graph, sources if show_sources else {}, slack_fraction)
    if show_sources:
        used = sorted({n.source for g in graphs for n in g.nodes() if n.source})
        lines += ["", "kernel sources:"]
        for digest in used:
            lines.append(f"  {digest:016x}  {_source_text(sources.get(digest))}")
        if not used:
            lines.append("  (no kernel carries a source hash)")
    return "\n".join(lines) + "\n"


def _clean(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _title(graph: StepGraph) -> str:
    what = f"median of {graph.steps} steps" if graph.steps > 1 else (
        "whole trace (no step scopes)" if graph.step is None else f"step {graph.step}"
    )
    return f"{what}, rank {_clean(graph.rank)}"


def _summary(graph: StepGraph) -> str:
    """The path against the step; on one lane there is no choice of path to show, only the gaps."""
    step, path = graph.duration_ns, graph.path_ns
    if not graph.parallel:
        return f"one lane: the path is the whole step; spans ran {_ms(path)} of {_ms(step)}, gaps {_ms(graph.gaps_ns)}"
    share = f"{100 * path / step:.1f}%" if step else "-"
    return f"critical path {_ms(path)} of {_ms(step)} ({share}), gaps {_ms(graph.gaps_ns)}, {len(graph.path)} spans"


def _marked(graph: StepGraph) -> set[int]:
    """The ids of the nodes to mark critical: only where their parent's work ran on several
    lanes, the one place where being on the path sets a span apart from its siblings."""
    marked: set[int] = set()
    for node in graph.nodes():
        if on_several_lanes(node):
            marked.update(id(child) for child in node.children if child.critical)
    return marked


def _label(node: Node, sources: Mapping[int, Any]) -> str:
    parts = [_clean(node.name)]
    if node.kind == "brick" and node.category:
        parts.append(f"[{_clean(node.category)}]")
    if node.launch is not None and node.launch.label():
        parts.append(node.launch.label())
    if node.source:
        text = f"src={node.source:016x}"
        if sources:
            text += f" ({_source_text(sources.get(node.source))})"
        parts.append(text)
    return " ".join(parts)


def _source_text(source: Any) -> str:
    if source is None:
        return "not in the trace's registry"
    return f"{_clean(source.kind)} {_clean(source.name)}" + (f" {_clean(source.path)}" if source.path else "")


def _figures(node: Node, parent: Node | None, steps: int, marked: bool) -> str:
    parts = [_ms(node.duration_ns)]
    if node.self_ns != node.duration_ns:
        parts.append(f"self {_ms(node.self_ns)}")
    if node.elements:
        parts.append(f"{node.elements} el")
    if parent is not None and (node.clock == "host") != (parent.clock == "host"):
        parts.append(f"{node.clock} clock, off the timeline")
    elif node.slack_ns:
        parts.append(f"slack {_ms(node.slack_ns)}")
    if marked:
        parts.append("critical" if steps == 1 else f"critical {node.critical_in}/{steps}")
    if steps > 1 and node.seen != steps:
        parts.append(f"in {node.seen}/{steps} steps")
    return "  ".join(parts)


def _text_graph(graph: StepGraph, sources: Mapping[int, Any], slack_fraction: float) -> list[str]:
    lines = [f"{_title(graph)}: {_summary(graph)}"]
    marked = _marked(graph)
    stack: list[tuple[Node, Node | None, str, str]] = [(graph.root, None, "", "")]
    while stack:
        node, parent, lead, prefix = stack.pop()
        figures = _figures(node, parent, graph.steps, id(node) in marked)
        lines.append(f"{lead}{_label(node, sources)}  {figures}")
        kids = node.children
        for i in range(len(kids) - 1, -1, -1):
            last = i == len(kids) - 1
            stack.append((kids[i], node, prefix + ("└─ " if last else "├─ "), prefix + ("   " if last else "│  ")))
    if not graph.parallel:  # one chain: no span has slack
        return lines
    slack = graph.slack_above(slack_fraction)
    lines.append(f"slack >= {100 * slack_fraction:g}% of the step:" + ("" if slack else " none"))
    for node in slack:
        where = f" (layer {node.layer})" if node.layer is not None and node.kind != "layer" else ""
        lines.append(f"  {_clean(node.name)}{where}  {_ms(node.slack_ns or 0)}")
    return lines


def _json_node(node: Node, sources: Mapping[int, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": node.kind,
        "name": node.name,
        "category": node.category,
        "start_ns": node.start,
        "duration_ns": node.duration_ns,
        "self_ns": node.self_ns,
        "elements": node.elements,
        "clock": node.clock,
        "lane": node.lane,
        "slack_ns": node.slack_ns,
        "critical": node.critical,
        "seen": node.seen,
        "critical_in": node.critical_in,
        "children": [_json_node(c, sources) for c in node.children],
    }
    if node.launch is not None:
        data["launch"] = {
            "grid": node.launch.grid, "block": node.launch.block, "shared_mem_bytes": node.launch.shared_mem_bytes
        }
    if node.source:
        source = sources.get(node.source)
        data["source"] = {"hash": f"{node.source:016x}"} | (
            {"kind": source.kind, "name": source.name, "path": source.path} if source is not None else {}
        )
    if node.checksum:
        data["checksum"] = f"{node.checksum:016x}"
    return data


def _json_graph(graph: StepGraph, sources: Mapping[int, Any], slack_fraction: float) -> dict[str, Any]:
    return {
        "step": graph.step,
        "rank": graph.rank,
        "steps": graph.steps,
        "duration_ns": graph.duration_ns,
        "parallel": graph.parallel,
        "critical_path": {
            "length_ns": graph.path_ns,
            "gaps_ns": graph.gaps_ns,
            "spans": [n.name for n in graph.path],
        },
        "slack_fraction": slack_fraction,
        "slack": [{"name": n.name, "kind": n.kind, "layer": n.layer, "slack_ns": n.slack_ns} for n in graph.slack_above(slack_fraction)],
        "root": _json_node(graph.root, sources),
    }


def _dot_text(text: str) -> str:
    return _clean(text).replace("\\", "\\\\").replace('"', '\\"')


def _dot(graphs: Sequence[StepGraph], sources: Mapping[int, Any]) -> str:
    """One digraph; per graph a cluster, in it a cluster per layer; edges parent -> child;
    the critical path's nodes and edges in red where work ran on several lanes (see
    :func:`_marked`): a one-lane step has no red at all."""
    lines = [
        "digraph brickscope {",
        '  graph [rankdir=TB, fontname="monospace", fontsize=10];',
        '  node [shape=box, fontname="monospace", fontsize=10];',
        "  edge [arrowsize=0.6];",
    ]
    edges: list[str] = []
    counter = 0
    for g, graph in enumerate(graphs):
        lines.append(f"  subgraph cluster_g{g} {{")
        lines.append(f'    label="{_dot_text(_title(graph))}: {_dot_text(_summary(graph))}";')
        ids: dict[int, str] = {}
        marked = _marked(graph)
        # (node, parent, indent); a layer opens a cluster closed after its subtree
        stack: list[Any] = [(graph.root, None, 2)]
        while stack:
            node, parent, indent = stack.pop()
            pad = "  " * indent
            if node is None:  # the end of a layer's cluster
                lines.append(f"{pad}}}")
                continue
            if node.kind == "layer":
                lines.append(f"{pad}subgraph cluster_g{g}_n{counter} {{")
                lines.append(f'{pad}  label="{_dot_text(node.name)}"; style=rounded;')
                stack.append((None, None, indent))
                pad += "  "
            ident = ids[id(node)] = f"n{counter}"
            counter += 1
            red = id(node) in marked
            label = _dot_text(_label(node, sources)) + "\\n" + _dot_text(_figures(node, parent, graph.steps, red))
            lines.append(f'{pad}{ident} [label="{label}"{_RED if red else ""}];')
            if parent is not None:
                style = f" [{_RED[2:]}]" if red else ""
                edges.append(f"  {ids[id(parent)]} -> {ident}{style};")
            inner = indent + 1 if node.kind == "layer" else indent
            for child in reversed(node.children):
                stack.append((child, node, inner))
        lines.append("  }")
    return "\n".join(lines + edges + ["}"]) + "\n"
