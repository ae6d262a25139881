# SPDX-License-Identifier: Apache-2.0
"""What an analysis returns: plain frozen dataclasses, one per section of the report.

Field names are the keys of the JSON output (schema 1, ``docs/analysis.md``):
times are integers in nanoseconds (``_ns``), rates per second, shares in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Version of the JSON document; bumped when a key changes meaning or disappears.
SCHEMA = 1


@dataclass(frozen=True)
class OperationStats:
    """One brick or kernel name (``kind``), or one category (``kind="category"``)."""

    name: str
    kind: str
    category: str
    count: int
    total_ns: int  # sum of durations (inclusive of nested bricks)
    self_ns: int  # sum of self times (bricks: nested bricks excluded)
    share: float  # self_ns over the self time of all operations of this kind
    mean_ns: float  # this and the percentiles below: of the instances' self times
    p50_ns: int
    p90_ns: int
    p99_ns: int
    min_ns: int
    max_ns: int
    elements: int
    elements_per_second: float  # elements / self seconds (0 without elements)
    bytes: int
    bytes_per_second: float  # bytes / self seconds (0 without bytes)
    stalls: int = 0  # instances above the stall threshold (docs/analysis.md, "Stalls")
    stall_ns: int = 0  # their self time, counted in self_ns
    stall_share: float = 0.0  # stall_ns / self_ns


@dataclass(frozen=True)
class Instance:
    """One span: where it ran and how long it took."""

    name: str
    kind: str
    duration_ns: int
    self_ns: int
    start_ns: int
    step: int | None
    layer: int | None
    rank: str
    device: str | None
    stream: str | None
    span_id: str


@dataclass(frozen=True)
class Outlier:
    """An instance far above its operation's median (the rule: ``docs/analysis.md``)."""

    instance: Instance
    median_ns: int
    ratio: float  # duration / median


@dataclass(frozen=True)
class Overlap:
    """Something that ran on a stall's rank during it."""

    name: str  # the span's name ("gc", "brickscope.resolve", a span of another thread)
    kind: str  # "gc", "overhead", or the other span's kind ("other" for a user span)
    thread: int  # thread.id of the span (0: unknown)
    overlap_ns: int  # how much of the stall it covered


@dataclass(frozen=True)
class Stall:
    """An instance above its operation's stall threshold, and what overlapped it."""

    instance: Instance
    median_ns: int  # the operation's median self time
    threshold_ns: int  # max(5 x median, median + 5 x MAD)
    ratio: float  # self / median
    excess_ns: int  # self - median: what the stall added to the totals
    overlaps: tuple[Overlap, ...]  # GC pauses and brickscope's work, then other threads' spans


@dataclass(frozen=True)
class HostTime:
    """What took the application's time besides its own work: brickscope's overhead spans
    and GC pauses, against the wall time of the steps (each step from its start to the end
    of brickscope's work at its end), or without steps the traces' extent per rank."""

    wall_ns: int
    steps: bool  # wall_ns is the steps' (else the extent of the trace on each rank)
    brickscope_count: int  # overhead spans within the wall time
    brickscope_ns: int
    brickscope_share: float  # brickscope_ns / wall_ns
    brickscope_outside_ns: int  # overhead spans outside every step (not in the share)
    gc_count: int  # GC pauses recorded inside scopes
    gc_ns: int
    gc_share: float  # gc_ns / wall_ns


@dataclass(frozen=True)
class LaneStats:
    """A device, a stream or a rank: busy = length of the union of its work intervals."""

    name: str
    count: int
    busy_ns: int
    idle_in_steps_ns: int
    streams: tuple[LaneStats, ...] = ()
    model: str = ""


@dataclass(frozen=True)
class Balance:
    """Load balance of per-lane busy times: (max - mean) / mean, and who is the straggler."""

    imbalance_ratio: float
    mean_busy_ns: float
    max_busy_ns: int
    straggler: str | None
    busy_ns: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CommunicationOp:
    name: str
    kind: str
    count: int
    total_ns: int
    self_ns: int
    share: float  # self_ns over the self time of all bricks (kernels: of all kernels)


@dataclass(frozen=True)
class Exposure:
    """Communication on one device: union length, overlapped by compute, exposed."""

    device: str
    communication_ns: int
    overlapped_ns: int
    exposed_ns: int


@dataclass(frozen=True)
class Communication:
    total_ns: int  # self time of communication bricks
    share: float
    count: int
    operations: tuple[CommunicationOp, ...]
    devices: tuple[Exposure, ...]
    exposed_ns: int
    overlapped_ns: int
    bottlenecks: tuple[str, ...] = ()  # operations holding at least bottleneck_ratio of their kind's self time
    bottleneck_ratio: float = 0.10


@dataclass(frozen=True)
class MemoryOp:
    name: str
    kind: str
    count: int
    bytes: int
    mean_bytes: float
    max_bytes: int
    share: float  # bytes over all bytes of this kind


@dataclass(frozen=True)
class Memory:
    total_bytes: int
    peak: Instance | None
    peak_bytes: int
    operations: tuple[MemoryOp, ...]
    hotspots: tuple[str, ...]  # operations holding at least hotspot_share of the bytes
    hotspot_share: float


@dataclass(frozen=True)
class RooflinePoint:
    """One operation on one device: achieved rates against the device's roof."""

    name: str
    kind: str
    device: str
    model: str
    flops: float
    bytes: int
    time_ns: int
    flops_per_second: float
    bytes_per_second: float
    arithmetic_intensity: float | None  # flops per byte (None without bytes)
    peak_flops_per_second: float | None
    peak_bytes_per_second: float | None
    bound: str | None  # "memory" or "compute" (None without a known peak)
    fraction_of_roof: float | None


@dataclass(frozen=True)
class StepStats:
    step: int | None  # None: a step span without brickscope.step.number
    rank: str
    duration_ns: int
    tokens: int
    tokens_per_second: float  # tokens over wall_ns
    wall_ns: int = 0  # the step and brickscope's work at its end (HostTime)


@dataclass(frozen=True)
class Throughput:
    steps: tuple[StepStats, ...]
    mean_step_ns: float
    tokens: int
    tokens_per_second: float  # tokens over the summed step wall times
    mean_step_wall_ns: float = 0.0


@dataclass(frozen=True)
class TileStats:
    """The tiles of one level (``bs.tile``), over all scopes or one brick (``name``)."""

    level: str
    name: str  # the brick (or other scope) the tiles ran in; "" for all of them
    count: int
    total_ns: int  # summed host-clock durations
    mean_ns: float
    elements: int
    elements_per_second: float  # elements / total seconds (0 without elements)


@dataclass(frozen=True)
class SlackEntry:
    """A span that could take this much longer without delaying its step."""

    name: str
    kind: str
    layer: int | None
    slack_ns: int


@dataclass(frozen=True)
class StepCriticalPath:
    """One step's critical path (the rules: docs/analysis.md, "Critical path and slack")."""

    step: int | None  # None: a trace without step scopes
    rank: str
    duration_ns: int
    path_ns: int  # time the path's spans run
    gaps_ns: int  # duration - path: the path waiting (launch gaps, untraced host work)
    path: tuple[str, ...]  # the path's spans (leaves, and bricks with own work on it), in time order
    slack: tuple[SlackEntry, ...]  # spans with slack >= 10% of the step, most first
    #: False: the step ran on one lane (one thread or stream): the path is the whole step.
    parallel: bool


@dataclass(frozen=True)
class Report:
    """Everything ``brickscope report`` prints, for one set of inputs and filters."""

    sources: tuple[str, ...]
    spans: int  # rows analysed (after filters)
    dropped: int  # spans left out: beyond a live session's bound, or impossible
    clocks: tuple[str, ...]  # clocks that timed the bricks
    filters: dict[str, str]
    operations: tuple[OperationStats, ...]  # bricks, then kernels, each by self time
    categories: tuple[OperationStats, ...]
    slowest: tuple[Instance, ...]
    outliers: tuple[Outlier, ...]
    devices: tuple[LaneStats, ...]
    ranks: tuple[LaneStats, ...]
    load_balance: dict[str, Balance]
    communication: Communication
    memory: Memory
    roofline: tuple[RooflinePoint, ...]
    throughput: Throughput
    notes: tuple[str, ...] = ()  # about the input: a truncated file analysed up to its cut
    tiles: tuple[TileStats, ...] = ()  # per level, then per (brick, level)
    critical_paths: tuple[StepCriticalPath, ...] = ()  # of the `top` longest steps, by rank and step
    host: HostTime | None = None  # None: no overhead or gc span in the trace
    stalls: tuple[Stall, ...] = ()  # the `top` stalls that cost most
    #: spans of no brickscope kind (other producers' slices), by name and self time
    others: tuple[OperationStats, ...] = ()
    #: ``dropped`` by reason: ``bound`` (a live session's), or a reason of brickscope.offline.impossible
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    schema: int = SCHEMA
