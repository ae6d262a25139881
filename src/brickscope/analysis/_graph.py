# SPDX-License-Identifier: Apache-2.0
"""The execution graph of each step, its critical path and every node's slack.

A step's graph is its span tree (step > layer > brick > kernel), read from the
table's ``parent`` column. Timing follows three rules (``docs/analysis.md``,
"Critical path and slack"):

1. work on one lane is sequential: a lane is a CUDA stream for GPU-timed spans, the
   host thread otherwise (a GPU-timed span without a stream, a layer, takes its earliest
   GPU-timed child's); siblings on one lane run one after the other;
2. lanes overlap, but a span waits for the sibling that ended last at or before its
   start (its lane predecessor, or another lane's work: an all-reduce on a second stream
   starts after the compute it reduces);
3. a parent waits for its children: it cannot end before its last child has.

A node's **latest finish** is the latest end that delays neither its parent's end, nor
the start of a sibling that waited for it (observed gaps kept), nor its lane successor's
start; its **slack** is latest finish minus actual end. The **critical path** of a node
is the chain of waits back from the child that ends last (the one the parent waited
for), each of those expanded recursively; its leaves in time order are the path, with the bricks, kernels and
spans of no brickscope kind whose own work (the time their chain of children does not cover) is on it too. Children timed on another clock
than their parent (a host-timed kernel launch under a GPU-timed brick) are not on
the parent's timeline: they are drawn in the tree but have no slack and are never
on the path.

Example::

    from brickscope import analysis

    table = analysis.load("trace.pftrace")
    for graph in analysis.step_graphs(table):
        print(graph.step, graph.path_ns, graph.duration_ns, [n.name for n in graph.path])
    print(analysis.render_tree(analysis.tree_graphs(table, steps=(2, None)), "dot"))
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from brickscope.analysis._load import AnalysisError
from brickscope.analysis._model import SlackEntry, StepCriticalPath
from brickscope.analysis._table import CLOCKS, KIND_STEP, KINDS, Launch, Table
from brickscope.offline import StepRange, describe_steps

#: ``report`` lists spans whose slack is at least this share of their step.
SLACK_FRACTION = 0.1


@dataclass(eq=False, slots=True)
class Node:
    """One span of a step's graph (or a median over steps: figures are then medians)."""

    kind: str
    name: str
    category: str
    start: int  # ns since the step's start
    duration_ns: int
    self_ns: int
    elements: int
    clock: str
    lane: str  # "stream 0x..." / "thread N" / "-"
    launch: Launch | None
    source: int  # kernel source hash, 0: none
    checksum: int  # output checksum, 0: none
    layer: int | None
    children: list[Node] = field(default_factory=list)
    slack_ns: int | None = None  # None: not on the parent's timeline (another clock)
    critical: bool = False
    #: Time the node itself puts on the critical path: all of it for a leaf of the path;
    #: for a brick, kernel or span of no brickscope kind whose children are on it, the part
    #: of it those children do not cover (its own work: host code around its launches,
    #: untimed kernels); 0 for a step or layer (what its children do not cover is a gap)
    #: and off the path.
    path_ns: int = 0
    #: For a median tree: steps the node appeared in, steps it was critical in.
    seen: int = 1
    critical_in: int = 0
    end: int = 0  # start + duration_ns (set after init)

    def __post_init__(self) -> None:
        self.end = self.start + self.duration_ns


@dataclass
class StepGraph:
    """One step of one rank: its tree, critical path and slack; or a median over steps.

    ``path_ns`` and ``gaps_ns`` are computed per step, the same way in both cases: in one
    step, the time the critical path's spans run and the rest of the step (the path
    waiting: launch gaps, untraced host work); over steps, the median (nearest rank) of
    each step's figure, so a stall that lands in a different span every step still
    counts as path, not gap. Medians need not add up to the median step.
    """

    step: int | None  # None: a trace without step scopes (the whole trace is one graph)
    rank: str
    root: Node
    path: list[Node]  # the critical path's spans (leaves, and bricks' own work), in time order
    steps: int = 1  # for a median over steps: how many
    path_ns: int = 0  # time the critical path's spans run (see above)
    gaps_ns: int = 0  # the rest of the step: the path waiting (see above)

    @property
    def duration_ns(self) -> int:
        """The step's length (over steps: the median of their lengths)."""
        return self.root.duration_ns

    @property
    def parallel(self) -> bool:
        """Whether work ran on more than one lane side by side somewhere in the step (some
        node's children on its timeline are on two lanes or more). Without it the step is
        one chain: every span is on the critical path and it says nothing more."""
        return any(on_several_lanes(node) for node in self.nodes())

    def nodes(self) -> list[Node]:
        """Every node, depth first, children in order."""
        out: list[Node] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out

    def slack_above(self, fraction: float) -> list[Node]:
        """Nodes whose slack is at least ``fraction`` of the step's length, most slack first."""
        threshold = max(fraction * self.duration_ns, 1)
        ranked = [
            (-n.slack_ns, i, n) for i, n in enumerate(self.nodes()) if n.slack_ns is not None and n.slack_ns >= threshold
        ]
        return [n for _, _, n in sorted(ranked, key=lambda item: item[:2])]


def step_graphs(table: Table, slowest: int | None = None) -> list[StepGraph]:
    """The graph of every step of every rank, ordered by rank then step number.

    Steps are the step spans not nested in another step. A trace without step spans
    is one graph whose root stands for the whole trace (kind ``trace``). With
    ``slowest``, only that many steps, the longest (ties: first in the trace): the
    graphs are built in Python, about 10-20 us per span, so ``report`` bounds them.
    """
    be = table.backend
    col = {name: be.to_list(table[name]) for name in ("kind", "start", "end", "rank", "step", "parent")}
    rows = len(col["kind"])
    children: list[list[int]] = [[] for _ in range(rows)]
    roots = []
    for row, parent in enumerate(col["parent"]):
        if parent >= 0:
            children[parent].append(row)
        else:
            roots.append(row)
    starts, ends = col["start"], col["end"]
    for kids in children:
        if len(kids) > 1:
            kids.sort(key=lambda r: (starts[r], -ends[r], r))
    kinds = col["kind"]
    steps = [r for r, kind in enumerate(kinds) if kind == KIND_STEP and not _inside_step(r, col)]
    if slowest is not None and len(steps) > slowest:
        steps = sorted(sorted(steps, key=lambda r: (starts[r] - ends[r], r))[:slowest])
    _fetch_node_columns(table, col, children, steps if steps else roots)
    graphs = []
    if steps:
        for row in steps:
            root = _node(table, col, children, row, starts[row])
            graphs.append(_finish(root, col["step"][row], table.ranks[col["rank"][row]]))
    else:  # no steps: one graph per rank over its roots
        for rank in sorted({col["rank"][r] for r in roots}):
            mine = sorted((r for r in roots if col["rank"][r] == rank), key=lambda r: (starts[r], -ends[r], r))
            origin = min(starts[r] for r in mine)
            kids = [_node(table, col, children, r, origin) for r in mine]
            end = max(k.end for k in kids)
            clock = kids[0].clock if len({k.clock for k in kids}) == 1 else "host"
            root = Node("trace", "trace", "", 0, end, end, 0, clock, "-", None, 0, 0, None, kids)
            graphs.append(_finish(root, None, table.ranks[rank]))
    graphs.sort(key=lambda g: (g.rank, -1 if g.step is None else g.step, g.root.start))
    return graphs


#: The columns a Node is made of, beyond those step_graphs reads for every row.
_NODE_COLUMNS = ("op", "self", "clock", "stream", "thread", "layer", "elements", "launch", "source", "checksum")


def _fetch_node_columns(table: Table, col: dict[str, list[Any]], children: list[list[int]], tops: list[int]) -> None:
    """Add the node columns to ``col`` for the rows under ``tops``: whole columns when that is
    most rows, else only those rows (the rest None), so a report's few slowest steps of a
    large trace do not turn every column of every span into Python objects."""
    rows = len(col["kind"])
    wanted = [r for top in tops for r in _tree_children(children, top)]
    be = table.backend
    for name in _NODE_COLUMNS:
        if 4 * len(wanted) >= rows:
            col[name] = be.to_list(table[name])
            continue
        values: list[Any] = [None] * rows
        for r, value in zip(wanted, be.take(table[name], wanted)):
            values[r] = value
        col[name] = values


def _inside_step(row: int, col: dict[str, list[Any]]) -> bool:
    """Whether a step is nested in another step. A loop of parent ids (impossible input) ends
    the walk: a step whose ancestors loop without another step is not nested."""
    seen = {row}
    parent = col["parent"][row]
    while parent >= 0 and parent not in seen:
        if col["kind"][parent] == KIND_STEP:
            return True
        seen.add(parent)
        parent = col["parent"][parent]
    return False


def _node(table: Table, col: dict[str, list[Any]], children: list[list[int]], row: int, origin: int) -> Node:
    """Row ``row`` and its descendants as Nodes, times relative to ``origin`` (iterative: no depth limit)."""
    made: dict[int, Node] = {}
    lanes: dict[int, str] = {}
    tree = _tree_children(children, row)
    for r in reversed(tree):  # children before parents
        operation = table.operations[col["op"][r]]
        kind = KINDS[col["kind"][r]]
        name = operation.name
        if kind == "step" and col["step"][r] >= 0:
            name = f"step {col['step'][r]}"
        elif kind == "layer" and col["layer"][r] >= 0:
            name = f"layer {col['layer'][r]}"
        stream = col["stream"][r]
        lane_key = stream if stream >= 0 else -1 - col["thread"][r]
        lane = lanes.get(lane_key)
        if lane is None:
            lane = lanes[lane_key] = table.stream_label(stream) if stream >= 0 else f"thread {col['thread'][r]}"
        launch = col["launch"][r]
        kids = [made.pop(c) for c in tree[r]]
        clock = CLOCKS[col["clock"][r]]
        if stream < 0 and _timeline(clock) == "gpu":
            lane = _earliest_lane(kids) or lane
        made[r] = Node(
            kind=kind,
            name=name,
            category=operation.category,
            start=col["start"][r] - origin,
            duration_ns=col["end"][r] - col["start"][r],
            self_ns=col["self"][r],
            elements=col["elements"][r],
            clock=clock,
            lane=lane,
            launch=table.launches[launch] if launch >= 0 else None,
            source=col["source"][r],
            checksum=col["checksum"][r],
            layer=col["layer"][r] if col["layer"][r] >= 0 else None,
            children=kids,
        )
    return made[row]


def _earliest_lane(children: Sequence[Node]) -> str | None:
    """The lane of a GPU-timed span that names no stream (a layer or step: brickscope records
    their CUDA events on the stream current when they begin, and writes no stream): the
    lane of its earliest GPU-timed child, the work it began with. None: no such child."""
    timed = [c for c in children if _timeline(c.clock) == "gpu"]
    return min(timed, key=lambda c: c.start).lane if timed else None


def _tree_children(children: list[list[int]], top: int) -> dict[int, list[int]]:
    """The rows under ``top``, each with its children, in depth-first order (parents first):
    each row once, so a loop of parent ids (impossible input) cannot make the walk endless."""
    tree: dict[int, list[int]] = {}
    seen = {top}
    stack = [top]
    while stack:
        r = stack.pop()
        fresh = [c for c in children[r] if c not in seen]
        seen.update(fresh)
        tree[r] = fresh
        stack.extend(fresh)
    return tree


def _finish(root: Node, step: int | None, rank: str) -> StepGraph:
    """Slack and the critical path of a tree whose times are set."""
    root.slack_ns = 0
    _assign_slack(root)
    path: list[Node] = []
    _mark_path(root, path)
    path_ns = sum(node.path_ns for node in path)
    return StepGraph(
        step if step is None or step >= 0 else None, rank, root, path,
        path_ns=path_ns, gaps_ns=max(root.duration_ns - path_ns, 0),
    )


def _timeline(clock: str) -> str:
    """GPU clocks (CUDA events, ``record_gpu``) share the GPU timeline; the host clock has its own."""
    return "host" if clock == "host" else "gpu"


def _timed_children(node: Node) -> list[Node]:
    """The children on the node's own timeline."""
    own = _timeline(node.clock)
    return [c for c in node.children if _timeline(c.clock) == own]


def on_several_lanes(node: Node) -> bool:
    """Whether the node's children on its timeline ran on more than one lane."""
    kids = _timed_children(node)
    return len(kids) > 1 and any(k.lane != kids[0].lane for k in kids)


def _waits(kids: Sequence[Node]) -> list[int]:
    """For each child (in order), the sibling it waited for (-1: none): of the siblings
    before it, the one that ended last at or before its start (its lane predecessor on a
    tie). A span that starts after its lane predecessor has ended was held back by
    something; the latest end before its start is what it waited for (another stream's
    work behind an event wait, the GPU result a host thread synchronised on)."""
    ends: list[int] = []  # the ends of the children so far, sorted
    owners: list[int] = []  # the child of each end
    lane_last: dict[str, int] = {}
    waited = []
    for i, kid in enumerate(kids):
        at = bisect_right(ends, kid.start)
        found = owners[at - 1] if at else -1
        previous = lane_last.get(kid.lane)
        if found >= 0 and previous is not None and kids[previous].end == kids[found].end:
            found = previous
        waited.append(found)
        at = bisect_right(ends, kid.end)
        ends.insert(at, kid.end)
        owners.insert(at, i)
        lane_last[kid.lane] = i
    return waited


def _assign_slack(root: Node) -> None:
    """Latest finish, top down: a child may end as late as its parent's latest finish minus
    the parent's tail after its last child; no later than the latest start, less the gap
    observed between them, of each sibling that waited for it (:func:`_waits`); and no
    later than its lane successor's latest start (the lane runs one thing at a time)."""
    stack = [root]
    while stack:
        node = stack.pop()
        kids = _timed_children(node)
        if not kids:
            continue
        latest_node_end = node.end + (node.slack_ns or 0)
        tail = max(node.end - max(k.end for k in kids), 0)
        bound = latest_node_end - tail
        waiters: list[list[int]] = [[] for _ in kids]
        for waiter, waited in enumerate(_waits(kids)):
            if waited >= 0:
                waiters[waited].append(waiter)
        lane_next = [-1] * len(kids)
        lane_last: dict[str, int] = {}
        for i, kid in enumerate(kids):
            previous = lane_last.get(kid.lane)
            if previous is not None:
                lane_next[previous] = i
            lane_last[kid.lane] = i
        latest_start = [0] * len(kids)
        for i in reversed(range(len(kids))):
            child = kids[i]
            latest = bound
            for after in waiters[i]:
                gap = max(kids[after].start - child.end, 0)
                latest = min(latest, latest_start[after] - gap)
            if lane_next[i] >= 0:
                latest = min(latest, latest_start[lane_next[i]])
            child.slack_ns = max(latest - child.end, 0)
            latest_start[i] = latest - child.duration_ns
            stack.append(child)


def _mark_path(root: Node, path: list[Node]) -> None:
    """Mark the critical chain under ``root`` and append its spans to ``path`` in time order:
    the leaves, and before its children a brick, kernel or other span whose own work is on the path."""
    root.critical = True
    root.critical_in = 1
    kids = _timed_children(root)
    if not kids:
        root.path_ns = root.duration_ns
        path.append(root)
        return
    # the child the parent waited for: last to end; ties: earliest start, then first in order
    last = max(kids, key=lambda k: (k.end, -k.start))
    waited = _waits(kids)
    chain: list[Node] = []
    at = kids.index(last)
    while at >= 0:  # back through what each waited for
        chain.append(kids[at])
        at = waited[at]
    chain.reverse()
    if root.kind in ("brick", "kernel", "other"):  # a step's or layer's uncovered time is a gap
        root.path_ns = max(root.duration_ns - _covered(chain, root.start, root.end), 0)
        if root.path_ns:
            path.append(root)
    for child in chain:
        _mark_path(child, path)


def _covered(nodes: Sequence[Node], start: int, end: int) -> int:
    """Time of [start, end] that the nodes' intervals cover (overlaps counted once)."""
    covered, reached = 0, start
    for node in sorted(nodes, key=lambda n: n.start):
        lo, hi = max(node.start, reached), min(node.end, end)
        if hi > lo:
            covered += hi - lo
            reached = hi
    return covered


def critical_paths(
    table: Table, slowest: int | None = None, slack_fraction: float = SLACK_FRACTION
) -> tuple[StepCriticalPath, ...]:
    """The report's section: the critical path and the spans with slack of every step, or
    of the ``slowest`` longest steps."""
    out = []
    for graph in step_graphs(table, slowest):
        out.append(
            StepCriticalPath(
                step=graph.step,
                rank=graph.rank,
                duration_ns=graph.duration_ns,
                path_ns=graph.path_ns,
                gaps_ns=graph.gaps_ns,
                path=tuple(node.name for node in graph.path),
                slack=tuple(
                    SlackEntry(n.name, n.kind, n.layer, n.slack_ns or 0) for n in graph.slack_above(slack_fraction)
                ),
                parallel=graph.parallel,
            )
        )
    return tuple(out)


def tree_graphs(table: Table, steps: StepRange | None = None) -> list[StepGraph]:
    """What ``brickscope tree`` draws: per rank, the median over its steps in ``steps``
    (``low <= step < high``, an end None: open; None: every step); a range holding one
    step gives that step's own graph. A trace without step scopes is one graph per rank.

    Raises:
        AnalysisError: ``steps`` holds no step of the trace.
    """
    graphs = step_graphs(table)
    if steps is not None:
        low, high = steps
        chosen = [
            g for g in graphs if g.step is not None and (low is None or g.step >= low) and (high is None or g.step < high)
        ]
        if not chosen:
            numbers = sorted({g.step for g in graphs if g.step is not None})
            known = f"steps {numbers[0]} to {numbers[-1]}" if numbers else "no step scopes"
            raise AnalysisError(f"no step {describe_steps(steps)} in the trace ({known})")
        graphs = chosen
    by_rank: dict[str, list[StepGraph]] = {}
    for graph in graphs:
        by_rank.setdefault(graph.rank, []).append(graph)
    return [median_graph(group) for group in by_rank.values()]


def median_graph(graphs: Sequence[StepGraph]) -> StepGraph:
    """One graph standing for several steps of one rank: nodes aligned by their place in the
    tree (kind, name, and occurrence among same-named siblings), each figure the median
    (nearest rank, as the report's p50) over the steps the node appears in; a node is
    critical when it was on the critical path in more than half of the steps. The path's
    length and the gaps are the medians of each step's (see :class:`StepGraph`)."""
    steps = len(graphs)
    root = _merge([g.root for g in graphs], steps)
    root.name = f"median of {steps} steps" if steps > 1 else graphs[0].root.name
    path = [n for n in _walk(root) if n.critical and (n.path_ns or not any(c.critical for c in n.children))]
    return StepGraph(
        graphs[0].step if steps == 1 else None, graphs[0].rank, root, path, steps,
        path_ns=_median([g.path_ns for g in graphs]), gaps_ns=_median([g.gaps_ns for g in graphs]),
    )


def _walk(root: Node) -> list[Node]:
    out: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[max(math.ceil(0.5 * len(ordered)) - 1, 0)]


def _most_common(values: Sequence[Any]) -> Any:
    return Counter(values).most_common(1)[0][0]


def _merge(nodes: Sequence[Node], steps: int) -> Node:
    first = nodes[0]
    slacks = [n.slack_ns for n in nodes if n.slack_ns is not None]
    critical_in = sum(n.critical_in for n in nodes)
    on_path = [n.path_ns for n in nodes if n.critical_in]
    merged = Node(
        kind=first.kind,
        name=first.name,
        category=first.category,
        start=_median([n.start for n in nodes]),
        duration_ns=_median([n.duration_ns for n in nodes]),
        self_ns=_median([n.self_ns for n in nodes]),
        elements=_median([n.elements for n in nodes]),
        clock=_most_common([n.clock for n in nodes]),
        lane=_most_common([n.lane for n in nodes]),
        launch=_most_common([n.launch for n in nodes]),
        source=_most_common([n.source for n in nodes]),
        checksum=first.checksum if all(n.checksum == first.checksum for n in nodes) else 0,
        layer=first.layer,
        slack_ns=_median(slacks) if slacks else None,
        critical=2 * critical_in > steps,
        path_ns=_median(on_path) if 2 * critical_in > steps else 0,
        seen=len(nodes),
        critical_in=critical_in,
    )
    groups: dict[tuple[str, str, int], list[Node]] = {}
    for node in nodes:
        occurrences: Counter[tuple[str, str]] = Counter()
        for child in node.children:
            key = (child.kind, child.name)
            groups.setdefault((*key, occurrences[key]), []).append(child)
            occurrences[key] += 1
    order = {key: i for i, key in enumerate(groups)}
    kids = [(_merge(group, steps), order[key]) for key, group in groups.items()]
    merged.children = [k for k, _ in sorted(kids, key=lambda pair: (pair[0].start, pair[1]))]
    return merged
