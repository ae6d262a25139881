# SPDX-License-Identifier: Apache-2.0
"""The loaded-trace model: one columnar :class:`Table`, one row per span.

Every analysis reads this table and nothing else, whatever the input was (a
``.pftrace``, OTLP JSON, a directory of per-rank files, a live session). Text
values are interned: a row holds small integer codes into the table's lists
(``operations``, ``categories``, ``ranks``, ``devices``, ``streams``), so a
million spans of forty distinct bricks keep forty strings.

Rows are built by :class:`TableBuilder` from ``ReadableSpan`` objects, a batch
of rows at a time (a batch is transposed into column chunks, so memory holds
columns, not span objects). The span tree is explicit: ``parent`` is the row of
the span's parent (-1 for a root or a parent outside the trace), so walking a
tree, a step or a critical path never needs the span ids again.

Example::

    builder = TableBuilder(get_backend())
    for span in spans:
        builder.add(span)
    table = builder.build()
    durations = table["duration"]
"""

from __future__ import annotations

import array
import json
import re
import threading
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from brickscope import native
from brickscope.offline._parquet_rows import device_names
from brickscope.trace import attributes as A

#: Scope kinds, by code: the ``kind`` column.
KINDS = ("other", "step", "layer", "brick", "kernel", "overhead", "gc")
KIND_OTHER, KIND_STEP, KIND_LAYER, KIND_BRICK, KIND_KERNEL, KIND_OVERHEAD, KIND_GC = range(7)
_KIND_CODES = {name: code for code, name in enumerate(KINDS)}
#: Clocks, by code: the ``clock`` column.
CLOCKS = ("host", "cuda", "gpu")  # "gpu": measured elsewhere (bs.record_gpu)
CLOCK_HOST_CODE, CLOCK_CUDA_CODE, CLOCK_GPU_CODE = 0, 1, 2

#: Column name -> dtype. Codes and "absent" markers: -1 where a row has no value
#: (no step, no device...); 0 for absent amounts (elements, bytes, flops, tokens).
COLUMNS: dict[str, str] = {
    "op": "int64",  # code into Table.operations: (kind, name, category) of the span
    "kind": "int64",  # code into KINDS
    "category": "int64",  # code into Table.categories (-1: none)
    "start": "int64",  # ns since the Unix epoch; the GPU interval for GPU-timed spans
    "end": "int64",
    "self": "int64",  # bricks: duration minus nested bricks; other spans: their duration; either
    # less the brickscope overhead spans directly inside (a brick's own attribute already is)
    "clock": "int64",  # code into CLOCKS
    "device": "int64",  # code into Table.devices (-1: not GPU-timed)
    "stream": "int64",  # code into Table.streams (-1: not GPU-timed)
    "step": "int64",  # brickscope.step.number (-1: none)
    "layer": "int64",  # brickscope.layer.index (-1: none)
    "rank": "int64",  # code into Table.ranks
    "thread": "int64",  # thread.id (0: unknown)
    "span_id": "uint64",
    "parent_id": "uint64",  # 0: a root
    "elements": "int64",
    "bytes": "int64",  # brickscope.work.bytes, else output_shape x dtype size
    "flops": "float64",
    "tokens": "int64",  # brickscope.step.tokens (step spans)
    "launch": "int64",  # code into Table.launches: a kernel's grid, block, shared memory (-1: none)
    "source": "uint64",  # brickscope.kernel.source.hash (0: none)
    "checksum": "uint64",  # brickscope.output.checksum (0: none)
    # bs.tile totals per level (brickscope.tile.<level>.*), on the scope the tiles ran in
    **{f"tile_{level}_{what}": "int64" for level in A.TILE_LEVELS for what in ("count", "ns", "elements")},
}
#: Columns derived when the table is built.
DERIVED = ("duration", "parent", "comm")

#: A brick is communication when its category is this, or its name holds a word below.
COMMUNICATION_CATEGORY = "communication"
#: The words, matched whole in the name lower-cased with its camelCase split at ``_``
#: (``ncclAllReduce`` reads ``nccl_all_reduce``): a letter may not touch either end, so
#: ``p2p_comm`` and ``all-gather`` match and ``common`` or ``sender`` do not. ``reduce``,
#: ``gather`` and ``scatter`` alone are compute as often (a reduction, an embedding lookup).
COMMUNICATION_NAME = re.compile(
    r"(?<![a-z])(?:nccl|rccl|gloo|p2p|comms?|collectives?|all[_\-. ]?reduce|all[_\-. ]?gather"
    r"|reduce[_\-. ]?scatter|all[_\-. ]?to[_\-. ]?allv?|broadcast|bcast|i?send|i?recv|sendrecv|barrier)(?![a-z])"
)
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")

#: Bytes per element of common dtype names (numpy, torch and CUDA spellings).
DTYPE_BYTES = {
    **dict.fromkeys(("float64", "double", "int64", "uint64", "long", "complex64"), 8),
    **dict.fromkeys(("float32", "float", "int32", "uint32", "int", "tf32"), 4),
    **dict.fromkeys(("float16", "half", "bfloat16", "bf16", "fp16", "int16", "uint16", "short"), 2),
    **dict.fromkeys(("int8", "uint8", "bool", "float8", "fp8", "float8_e4m3fn", "float8_e5m2", "char"), 1),
    "complex128": 16,
}

_BATCH_ROWS = 1 << 14
_EMPTY: dict[str, Any] = {}
#: The attributes a row is made of, in the order :meth:`TableBuilder._row` unpacks them:
#: the semantic-convention name, then the short keyword a scope may have been given.
#: Each by the name of its constant in trace/attributes.py (a short keyword: itself), the
#: names the C row maker checks its key table against (``ROW_KEYS`` in _tablerows.c).
_KEY_NAMES = (
    "SCOPE_KIND", "BRICK_CATEGORY", "BRICK_NAME", "BRICK_SELF_DURATION_NS", "CLOCK", "GPU_DEVICE_ID",
    "GPU_STREAM_ID", "STEP_NUMBER", "LAYER_INDEX", "THREAD_ID", "BRICK_ELEMENTS", "WORK_BYTES", "bytes",
    "WORK_OUTPUT_SHAPE", "output_shape", "WORK_DTYPE", "dtype", "WORK_FLOPS", "flops", "STEP_TOKENS", "tokens",
    "KERNEL_GRID", "KERNEL_BLOCK", "KERNEL_SHARED_MEM_BYTES", "KERNEL_SOURCE_HASH", "OUTPUT_CHECKSUM",
    *(f"{key}.{i}" for i in range(len(A.TILE_LEVELS)) for key in ("TILE_COUNT", "TILE_DURATION_NS", "TILE_ELEMENTS")),
)  # fmt: skip
_KEYS = tuple(
    getattr(A, name.partition(".")[0]).format(A.TILE_LEVELS[int(name.partition(".")[2])])
    if name.startswith("TILE_")
    else getattr(A, name) if name.isupper()
    else name  # a short keyword
    for name in _KEY_NAMES
)
_TILE_VALUES = 3 * len(A.TILE_LEVELS)
_TYPECODES = {"int64": "q", "uint64": "Q", "float64": "d"}


def is_communication(name: str, category: str) -> bool:
    """Category ``communication``, or a word of :data:`COMMUNICATION_NAME` in the name
    (docs/analysis.md, "Communication")."""
    if category == COMMUNICATION_CATEGORY:
        return True
    return COMMUNICATION_NAME.search(_CAMEL.sub("_", name).lower()) is not None


@dataclass(frozen=True)
class Operation:
    """What a row's ``op`` code stands for: a span kind and name (and the brick's category)."""

    kind: str
    name: str
    category: str
    #: communication per :func:`is_communication` (a kernel also by its brick's name)
    communication: bool


@dataclass(frozen=True)
class Device:
    """A GPU: the host it is on, its ordinal there, and its model name when the resource says."""

    host: str
    ordinal: int
    model: str

    def label(self, hosts: int) -> str:
        return f"gpu {self.ordinal}" if hosts <= 1 else f"{self.host} gpu {self.ordinal}"


@dataclass(frozen=True)
class Stream:
    """A CUDA stream of one device (``device`` is a code into Table.devices)."""

    device: int
    handle: int


@dataclass(frozen=True)
class Launch:
    """A kernel's launch configuration: grid and block as (x, y, z), dynamic shared memory bytes
    (None where the span did not say)."""

    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    shared_mem_bytes: int | None

    def label(self) -> str:
        """``<<<(4,1,1),(128,1,1)>>> smem=0``; what the span did not say is left out
        (``grid=(4,1,1)`` when the block is unknown, no ``smem=`` without its size)."""
        grid, block = ("(" + ",".join(map(str, d)) + ")" if d is not None else "" for d in (self.grid, self.block))
        if grid and block:
            parts = [f"<<<{grid},{block}>>>"]
        else:
            parts = [f"{what}={dims}" for what, dims in (("grid", grid), ("block", block)) if dims]
        if self.shared_mem_bytes is not None:
            parts.append(f"smem={self.shared_mem_bytes}")
        return " ".join(parts)


@dataclass(frozen=True)
class KernelSource:
    """Where a kernel came from: an entry of the registry a trace's resource carries."""

    kind: str  # ptx, cubin, cuda, triton
    name: str
    path: str  # "" when not given


@dataclass
class Table:
    """Columns (see :data:`COLUMNS` and :data:`DERIVED`) and the lists their codes point into."""

    backend: Any
    columns: dict[str, Any]
    operations: list[Operation]
    categories: list[str]
    ranks: list[str]
    devices: list[Device]
    streams: list[Stream]
    #: Spans that reached the table, spans left out because a bound was reached.
    rows: int = 0
    dropped: int = 0
    #: Spans the readers left out as impossible, by reason (brickscope.offline.impossible).
    impossible: dict[str, int] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    #: What the reader wants said about the input (a truncated file read up to its cut).
    notes: list[str] = field(default_factory=list)
    #: A selection not applied yet: (the table selected from, its row mask). Columns are
    #: compressed on first use, so a selection costs only the columns an analysis reads.
    _pending: tuple[Table, Any] | None = field(default=None, repr=False)
    #: What the ``launch`` column's codes stand for.
    launches: list[Launch] = field(default_factory=list)
    #: Kernel source hash -> where it came from (the resources' brickscope.kernel.sources).
    kernel_sources: dict[int, KernelSource] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        column = self.columns.get(name)
        if column is None:
            column = self.columns[name] = self._column(name)
        return column

    def _column(self, name: str) -> Any:
        be = self.backend
        if name == "parent":  # re-pointed to this table's rows; -1 when the parent was cut
            return be.index_of(self["span_id"], self["parent_id"])
        if self._pending is None:
            raise KeyError(name)
        source, mask = self._pending
        return be.compress(source[name], mask)

    @property
    def hosts(self) -> int:
        return len({device.host for device in self.devices})

    def device_label(self, code: int) -> str:
        return self.devices[code].label(self.hosts) if code >= 0 else "-"

    def stream_label(self, code: int) -> str:
        if code < 0:
            return "-"
        stream = self.streams[code]
        return f"{self.device_label(stream.device)} stream {stream.handle:#x}"

    def children(self) -> tuple[Any, list[int]]:
        """The span tree as adjacency lists: ``(rows, offsets)``, where the children of row
        ``r`` are ``rows[offsets[r + 1]:offsets[r + 2]]`` and the roots (no parent in this
        table) are ``rows[offsets[0]:offsets[1]]``, each in row order. One sort, for any
        number of walks (a step's tree, a critical path)."""
        be = self.backend
        size = self.rows
        codes = be.combine(self["parent"], be.full(size, 1, "int64"), 1)  # parent + 1: roots are group 0
        return be.sorted_within_groups(codes, size + 1, be.column(range(size), "int64"))

    def select(self, mask: Any) -> Table:
        """The rows where ``mask`` is true, same code lists (parents re-pointed, or -1 when cut)."""
        be = self.backend
        return Table(
            be,
            {},
            self.operations,
            self.categories,
            self.ranks,
            self.devices,
            self.streams,
            rows=be.count_true(mask),
            dropped=self.dropped,
            impossible=self.impossible,
            sources=self.sources,
            notes=self.notes,
            _pending=(self, mask),
            launches=self.launches,
            kernel_sources=self.kernel_sources,
        )


class TableBuilder:
    """Turns spans into table rows, a batch at a time. Thread-safe.

    Args:
        backend: the backend of the tables built (default: chosen at :meth:`build`).
        max_rows: spans beyond this many are counted in ``dropped``, not kept
            (None: no bound). A live session's report uses a bound.
    """

    def __init__(self, backend: Any = None, max_rows: int | None = None) -> None:
        self.backend = backend
        self.max_rows = max_rows
        self.rows = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[Any, ...]] = []
        # one growing array.array per column: compact (8 bytes a value), and numpy can
        # adopt it without a copy
        self._columns = [array.array(_TYPECODES[dtype]) for dtype in COLUMNS.values()]
        self._op_codes: dict[tuple[int, str, str, str | None], int] = {}
        self._operation_codes: dict[Operation, int] = {}
        self._operations: list[Operation] = []
        self._category_codes: dict[str, int] = {}
        self._categories: list[str] = []
        self._rank_codes: dict[tuple[str, ...], int] = {}  # rank or process identity -> code
        self._rank_labels: dict[str, tuple[str, ...]] = {}  # label -> the identity it names
        self._ranks: list[str] = []
        self._device_codes: dict[tuple[str, int], int] = {}
        self._devices: list[Device] = []
        self._stream_codes: dict[tuple[int, int], int] = {}
        self._lanes: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._streams: list[Stream] = []
        self._launch_codes: dict[Launch, int] = {}
        self._launches: list[Launch] = []
        self._kernel_sources: dict[int, KernelSource] = {}
        # id(resource) -> (resource, rank code, host, device model names): resources are shared by many spans
        self._resources: dict[int, tuple[Any, int, str, tuple[str, ...]]] = {}
        self.sources: list[str] = []
        self.notes: list[str] = []
        self.impossible: dict[str, int] = {}

    def add(self, span: Any, attributes: Any = None) -> None:
        """Add one ended span (``attributes``: its attributes, when the caller already holds them).

        A live session calls this for every span it resolves, so it only copies out the
        raw values (the attributes in one ``map`` over :data:`_KEYS`, in C); making them
        a row happens a batch at a time.
        """
        if self.max_rows is not None and self.rows >= self.max_rows:  # full: only count
            with self._lock:
                self.dropped += 1
            return
        if attributes is None:
            attributes = span.attributes or _EMPTY
        parent = span.parent
        raw = (
            span.name, span.start_time, span.end_time, span.context.span_id,
            parent.span_id if parent is not None else 0, span.resource, *map(attributes.get, _KEYS),
        )  # fmt: skip
        with self._lock:
            if self.max_rows is not None and self.rows >= self.max_rows:
                self.dropped += 1
                return
            self.rows += 1
            self._pending.append(raw)
            if len(self._pending) >= _BATCH_ROWS:
                self._flush()

    def add_all(self, spans: Any) -> None:
        """Add every span of an iterable."""
        for span in spans:
            self.add(span)

    def add_records(self, records: Any) -> None:
        """Add every span of an iterable of :data:`brickscope.offline.SpanRecord` tuples
        (what :func:`brickscope.offline.open_records` yields: no ``ReadableSpan`` needed).

        A batch of :data:`_BATCH_ROWS` records at a time becomes rows under one acquisition
        of the lock (after the spans :meth:`add` left pending, so rows keep their order).
        """
        iterator = iter(records)
        while batch := list(islice(iterator, _BATCH_ROWS)):
            with self._lock:
                if self.max_rows is not None:
                    room = max(self.max_rows - self.rows, 0)
                    if len(batch) > room:  # full: the rest are only counted
                        self.dropped += len(batch) - room
                        del batch[room:]
                if batch:
                    self._flush()
                    if _fast is not None:
                        self._store_buffers(_fast.records(self, batch))
                    else:
                        self._store([
                            self._row((name, start, end, span_id, parent_id, resource, *map(attributes.get, _KEYS)))
                            for name, start, end, span_id, parent_id, resource, attributes in batch
                        ])  # fmt: skip
                    self.rows += len(batch)

    def build(self, *, release: bool = False, backend: Any = None) -> Table:
        """The table of every span added so far.

        Args:
            backend: the table's backend (default: the builder's, else numpy when installed).
            release: hand the columns over without a copy; the builder is then
                empty (a loader's last call). Otherwise they are copied and the
                builder can go on adding (a live session).
        """
        be = backend or self.backend
        if be is None:
            from brickscope.analysis._backend import get_backend

            be = get_backend()
        with self._lock:
            self._flush()
            columns = {
                name: be.from_array(column, dtype, copy=not release)
                for (name, dtype), column in zip(COLUMNS.items(), self._columns)
            }
            if release:
                self._columns = [array.array(_TYPECODES[dtype]) for dtype in COLUMNS.values()]
            columns["duration"] = be.subtract(columns["end"], columns["start"])
            _exclude_overhead(be, columns, self.rows)
            comm = [op.communication for op in self._operations]
            columns["comm"] = be.lookup(comm, columns["op"], "bool")
            return Table(
                be,
                columns,
                list(self._operations),
                list(self._categories),
                list(self._ranks),
                list(self._devices),
                list(self._streams),
                rows=self.rows,
                dropped=self.dropped,
                impossible=dict(self.impossible),
                sources=list(self.sources),
                notes=list(self.notes),
                launches=list(self._launches),
                kernel_sources=dict(self._kernel_sources),
            )

    def _flush(self) -> None:
        """Make the rows of the spans :meth:`add` left pending."""
        if not self._pending:
            return
        if _fast is not None:
            self._store_buffers(_fast.raws(self, self._pending))
        else:
            self._store([self._row(raw) for raw in self._pending])
        self._pending = []

    def _store(self, rows: list[tuple[Any, ...]]) -> None:
        """Append rows (tuples in COLUMNS order) to the columns, cleaning a batch whose
        values do not fit their column."""
        for index, (column, values) in enumerate(zip(self._columns, zip(*rows))):
            before = len(column)
            try:
                column.extend(values)
            except (TypeError, OverflowError):  # a value of the wrong type: cleaned, not fatal
                del column[before:]  # extend keeps what it took before the bad value
                column.extend(_clean(values, column.typecode, _DEFAULTS[index]))

    def _store_buffers(self, buffers: tuple[bytes, ...]) -> None:
        """Append the C accelerator's rows: one buffer of native values per column."""
        for column, buffer in zip(self._columns, buffers):
            column.frombytes(buffer)

    def _row(self, raw: tuple[Any, ...]) -> tuple[Any, ...]:
        """One span's raw values (see :meth:`add`) as a tuple in COLUMNS order.

        Values go into the tuple as the span held them; :meth:`_flush` cleans a batch
        whose values do not fit their columns (a string step number, say).
        """
        (
            name, start, end, span_id, parent_id, resource,
            kind_name, category_name, brick_name, self_ns, clock_name, ordinal, handle, step, layer, thread,
            elements, nbytes, short_bytes, shape, short_shape, dtype, short_dtype, flops, short_flops,
            tokens, short_tokens, grid, block, smem, source, checksum,
        ) = raw[:-_TILE_VALUES]  # fmt: skip
        tiles = raw[-_TILE_VALUES:]
        kind = _KIND_CODES.get(kind_name, KIND_OTHER)
        if kind == KIND_BRICK:
            category_name = category_name or "other"
            brick_name = None
        elif kind == KIND_KERNEL:
            category_name = category_name or ""
        else:
            category_name = ""
            brick_name = None
        op = self._op_codes.get((kind, name, category_name, brick_name))
        if op is None:
            op = self._new_op((kind, name, category_name, brick_name))
        category = self._category_codes.get(category_name, -1)
        if category < 0 and category_name:
            category = self._category_codes[category_name] = len(self._categories)
            self._categories.append(category_name)
        if start is None or end is None:  # never ended: zero length at whatever is known
            start = end = start or end or 0
        if kind != KIND_BRICK or self_ns is None:
            self_ns = end - start
        entry = self._resources.get(id(resource))
        if entry is None or entry[0] is not resource:
            entry = self._resource_entry(resource)
        device = stream = -1
        clock = CLOCK_HOST_CODE
        if clock_name == A.CLOCK_CUDA or clock_name == A.CLOCK_GPU:
            clock = CLOCK_CUDA_CODE if clock_name == A.CLOCK_CUDA else CLOCK_GPU_CODE
            if ordinal is not None:
                lane = (entry[1], entry[2], ordinal, handle or 0)
                codes = self._lanes.get(lane)
                if codes is None:
                    codes = self._lane_codes(entry, lane)
                device, stream = codes
        if nbytes is None:
            nbytes = short_bytes
            if nbytes is None:
                nbytes = _output_bytes(shape if shape is not None else short_shape, dtype or short_dtype)
        if flops is None:
            flops = short_flops if short_flops is not None else 0.0
        if tokens is None:
            tokens = short_tokens if short_tokens is not None else 0
        return (
            op, kind, category, start, end, self_ns, clock, device, stream,
            -1 if step is None else step, -1 if layer is None else layer, entry[1], thread or 0,
            span_id, parent_id, elements or 0, nbytes, flops, tokens,
            self._launch_code(grid, block, smem) if kind == KIND_KERNEL else -1,
            0 if source is None else _hash(source), 0 if checksum is None else _hash(checksum),
            *(value or 0 for value in tiles),
        )  # fmt: skip

    def _lane_codes(self, entry: tuple[Any, int, str, tuple[str, ...]], lane: tuple[Any, ...]) -> tuple[int, int]:
        """(device code, stream code) of a (rank, host, ordinal, stream handle) seen for the first time."""
        ordinal, handle = _int(lane[2], 0), _int(lane[3], 0)
        device = self._device_code(entry, ordinal)
        stream = self._stream_codes.get((device, handle), -1)
        if stream < 0:
            stream = self._stream_codes[(device, handle)] = len(self._streams)
            self._streams.append(Stream(device, handle))
        codes = self._lanes[lane] = (device, stream)
        return codes

    def _launch_code(self, grid: Any, block: Any, smem: Any) -> int:
        if grid is None and block is None and smem is None:
            return -1
        launch = Launch(_dims(grid), _dims(block), None if smem is None else _int(smem, 0))
        code = self._launch_codes.get(launch)
        if code is None:
            code = self._launch_codes[launch] = len(self._launches)
            self._launches.append(launch)
        return code

    def _new_op(self, key: tuple[int, str, str, str | None]) -> int:
        """The code of (kind, name, category, enclosing brick): kernels of one name share an
        Operation across bricks unless the brick makes them communication."""
        kind, name, category, brick_name = key
        communication = kind in (KIND_BRICK, KIND_KERNEL) and (
            is_communication(name, category) or (brick_name is not None and is_communication(brick_name, ""))
        )
        operation = Operation(KINDS[kind], name, category, communication)
        code = self._operation_codes.get(operation)
        if code is None:
            code = self._operation_codes[operation] = len(self._operations)
            self._operations.append(operation)
        self._op_codes[key] = code
        return code

    def _resource_entry(self, resource: Any) -> tuple[Any, int, str, tuple[str, ...]]:
        attributes = getattr(resource, "attributes", None) or {}
        host = str(attributes.get(A.HOST_NAME, ""))
        rank = attributes.get(A.RANK)
        if rank is not None and str(rank) != "":
            key: tuple[str, ...] = (str(rank),)
            label = str(rank)
        else:  # no launcher rank: each process is its own rank
            service = str(attributes.get("service.name", ""))
            instance = str(attributes.get("service.instance.id") or "")
            pid = str(attributes.get("process.pid") or "")
            key = ("", service, instance, host, pid)
            label = _process_label(service, instance[:8], host, pid)
            if label in self._rank_labels and self._rank_labels[label] != key:
                label = _process_label(service, instance, host, pid)  # two processes, one short name
        code = self._rank_codes.get(key)
        if code is None:
            code = self._rank_codes[key] = len(self._ranks)
            self._rank_labels.setdefault(label, key)
            self._ranks.append(label)
        self._kernel_sources.update(_kernel_sources(attributes.get(A.KERNEL_SOURCES)))
        entry = (resource, code, host, device_names(attributes.get(A.GPU_DEVICE_NAMES)))
        self._resources[id(resource)] = entry
        return entry

    def _device_code(self, entry: tuple[Any, int, str, tuple[str, ...]], ordinal: int) -> int:
        key = (entry[2], ordinal)
        code = self._device_codes.get(key)
        if code is None:
            models = entry[3]
            model = models[ordinal] if 0 <= ordinal < len(models) else ""
            code = self._device_codes[key] = len(self._devices)
            self._devices.append(Device(entry[2], ordinal, model))
        return code


def _process_label(service: str, instance: str, host: str, pid: str) -> str:
    """A process without a launcher rank, as tables print it: service, instance id (its first
    8 characters while they tell the processes apart), host and pid, whichever are known."""
    parts = (service, instance and f"instance {instance}", host and f"@{host}", pid and f"pid {pid}")
    return " ".join(part for part in parts if part) or "process"


def _exclude_overhead(be: Any, columns: dict[str, Any], rows: int) -> None:
    """brickscope's own work is not its parent's: each overhead span's interval, clipped to
    its parent's, comes off that parent's self time (never below 0). A brick parent is left
    as it is: brickscope credited the interval to it like a nested brick when it recorded it,
    so its ``brickscope.brick.self_duration_ns`` already leaves it out; so is a GPU-timed
    parent, whose interval is GPU time the host's work is no part of."""
    overhead = be.mask_in(columns["kind"], (KIND_OVERHEAD,))
    if not be.count_true(overhead):
        return
    parents = be.to_list(be.index_of(columns["span_id"], be.compress(columns["parent_id"], overhead)))
    starts, ends = be.to_list(be.compress(columns["start"], overhead)), be.to_list(be.compress(columns["end"], overhead))
    deduct: dict[int, int] = {}
    for parent, start, end in zip(parents, starts, ends):
        if parent < 0 or be.item(columns["kind"], parent) == KIND_BRICK:
            continue
        if be.item(columns["clock"], parent) != CLOCK_HOST_CODE:  # a GPU interval: host work is not in it
            continue
        inside = min(end, be.item(columns["end"], parent)) - max(start, be.item(columns["start"], parent))
        if inside > 0:
            deduct[parent] = deduct.get(parent, 0) + inside
    if deduct:
        self_ns = be.to_list(columns["self"])
        for parent, amount in deduct.items():
            self_ns[parent] = max(0, self_ns[parent] - amount)
        columns["self"] = be.column(self_ns, "int64")


#: Each column's value when a span's attribute cannot be one (the "absent" markers above).
_DEFAULTS = tuple(-1 if name in ("category", "device", "stream", "step", "layer", "launch") else 0 for name in COLUMNS)


def _clean_one(value: Any, index: int) -> Any:
    """One value made to fit column ``index`` as :func:`_clean` makes it (the C accelerator's
    way to store what does not fit)."""
    return _clean((value,), _TYPECODES[tuple(COLUMNS.values())[index]], _DEFAULTS[index])[0]


def _clean(values: tuple[Any, ...], typecode: str, default: Any) -> list[Any]:
    """A batch of one column's values, each made to fit (an int, a float) or the default."""
    limit = (1 << 64) if typecode == "Q" else (1 << 63)
    floor = 0 if typecode == "Q" else -(1 << 63)
    if typecode == "d":
        return [_float(v) for v in values]
    out = []
    for value in values:
        number = _int(value, default)
        out.append(number if floor <= number < limit else default)
    return out


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return default


def _hash(value: Any) -> int:
    """A 64-bit hash written as hex text (``"9f86d081884c7d65"``, OTel has no unsigned
    64-bit integer), or an int; 0 when absent or malformed."""
    if value is None:
        return 0
    try:
        number = int(value, 16) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if 0 <= number < 1 << 64 else 0


def _kernel_sources(value: Any) -> dict[int, KernelSource]:
    """The registry from its resource attribute: JSON ``{"<hash>": [kind, name, path]}``;
    malformed entries are skipped (the hashes on the spans still show)."""
    if not isinstance(value, str):
        return {}
    try:
        entries = json.loads(value)
    except ValueError:
        return {}
    out = {}
    if isinstance(entries, dict):
        for digest, entry in entries.items():
            if _hash(digest) and isinstance(entry, list) and len(entry) == 3 and all(isinstance(e, str) for e in entry):
                out[_hash(digest)] = KernelSource(*entry)
    return out


def _dims(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):  # a label read back from a .pftrace: "[4, 1, 1]"
        value = value.strip("[]() ").split(",")
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError, OverflowError):
        return None


def _float(value: Any) -> float:
    if value is None:
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _output_bytes(shape: Any, dtype: Any) -> int:
    """Bytes of an output tensor from its shape and dtype name; 0 when either is unknown."""
    if shape is None or dtype is None:
        return 0
    size = DTYPE_BYTES.get(str(dtype).lower().removeprefix("torch.").removeprefix("np."))
    if size is None:
        return 0
    try:
        count = 1
        for extent in shape:
            count *= int(extent)
    except (TypeError, ValueError, OverflowError):
        return 0
    return count * size


#: The C row maker (``brickscope._tablerows``), or None: :meth:`TableBuilder._row` and
#: :meth:`TableBuilder._store` make every row (the reference; see ``brickscope.native``).
#: The ``ABI_VERSION`` of ``brickscope._tablerows`` this code was written for.
_TABLEROWS_ABI = 2
_fast = native.load("brickscope._tablerows", abi=_TABLEROWS_ABI)


def _configure_accelerator(fast: Any) -> None:
    """Give the C row maker what the rows are made of (at import; tests that import the C
    module directly call it too). Raises when its key or column table is not this module's."""
    fast.setup(
        key_names=_KEY_NAMES, keys=_KEYS, columns=tuple(COLUMNS),
        typecodes="".join(_TYPECODES[d] for d in COLUMNS.values()), kind_codes=_KIND_CODES,
        clock_cuda=A.CLOCK_CUDA, clock_gpu=A.CLOCK_GPU, hash=_hash, clean=_clean_one,
    )  # fmt: skip


if _fast is not None:
    try:
        _configure_accelerator(_fast)
    except (TypeError, ValueError) as exc:  # a build whose tables are not this code's: the Python rows
        native.refuse("brickscope._tablerows", str(exc))
        _fast = None
