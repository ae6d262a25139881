# SPDX-License-Identifier: Apache-2.0
"""Generate a big trace straight into the Parquet span format, partitioned by rank.

No span objects: each row group is a block of numpy columns computed for a batch of
whole steps, turned into Arrow arrays and written, so 100M spans take minutes and the
memory of one row group.

What a step of one rank holds (a decode step of a tensor-parallel LLM), in this order
(pre-order: a parent before its children):

- ``step`` (``brickscope.step.tokens`` = :data:`TOKENS`);
- the ``embedding`` brick;
- ``layers`` ``layer`` spans, each holding the 11 bricks of :data:`LAYER_BRICKS`: two
  ``all_reduce`` bricks (category ``communication``) run on a second stream, each starting
  half its duration before the brick before it ends, so half of it overlaps compute;
- the ``final_norm``, ``lm_head`` and ``sampling`` bricks.

Every brick holds one kernel on its stream (``attention`` two), except ``sampling``,
which is host-timed: no device, no kernel. Everything else is on the device's CUDA clock.
So a step is ``1 + 24 * layers + 7`` spans (32 layers: 776). Kernel names are drawn per
instance from pools (Triton fusions, FlashAttention tiles, cuBLAS GEMM tiles shared by the
GEMM bricks, NCCL protocols): :func:`distinct_names` in all. Durations sit on the CUDA
events' 0.5 µs grid, jittered (log-normal, sigma 0.1); step 0 is a warm-up ten times
slower, one brick in a thousand stalls 5x, and the last rank is 4 % slower (a straggler).
Bricks carry their self time, elements, bytes, flops and dtype; kernels their grid, block
and shared memory. Span ids are distinct by construction yet random-looking (a 64-bit
bijection of a counter) as OpenTelemetry's random ids are; each step is a trace.

Files: ``<root>/rank-<r>/part-<n>.parquet``, one rank per directory, a new part every
``rows_per_file`` rows (whole row groups).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from brickscope.offline import ParquetSpanWriter, parquet_schema
from brickscope.offline._parquet_schema import ROW_GROUP_ROWS

T0 = 1_790_000_000_000_000_000  # ns since the Unix epoch (2026-09)
TICK_NS = 500  # CUDA events' resolution
TOKENS = 256  # tokens a step
HIDDEN, FFN, VOCAB, TP = 4096, 14336, 128256, 8  # model dimensions; tensor-parallel degree
DTYPE = "bfloat16"
MODEL = "NVIDIA H100 80GB HBM3"
GPUS_PER_HOST = 8
STRAGGLER_SLOWDOWN = 1.04
WARMUP_SLOWDOWN = 10
STALL_RATE, STALL_SLOWDOWN = 0.001, 5
MIN_TICKS = 8  # a brick's shortest duration: room for its kernels inside
STEP_GAP_TICKS = (100, 400)  # host time between two steps (50-200 µs)
BRICK_GAP_TICKS = (1, 6)  # between two bricks on a stream (0.5-2.5 µs)

#: Kernel pools: a kernel's name is drawn from its pool per instance.
POOLS: dict[str, list[str]] = {
    "rms": [f"triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_{i}" for i in range(32)],
    "rotary": [f"triton_poi_fused_cat_mul_neg_{i}" for i in range(16)],
    "silu": [f"triton_poi_fused_mul_silu_{i}" for i in range(16)],
    "embedding": [f"triton_poi_fused_embedding_{i}" for i in range(4)],
    "flash": [
        f"flash_fwd_splitkv_kernel<128, {m}, {n}, {s}>" for m in (64, 128) for n in (64, 128) for s in (1, 2, 4, 8)
    ],
    "combine": [f"flash_fwd_splitkv_combine_kernel<128, {s}>" for s in (2, 4, 8, 16, 32, 64, 96, 128)],
    "gemm": [
        f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{m}x{n}x64_cluster{c}x1x1_{k}_kernel__5x_cublas"
        for m in (64, 128, 192, 256)
        for n in (64, 128, 192, 256)
        for c in (1, 2)
        for k in ("execute_segment_k_off", "execute_segment_k_on", "splitk")
    ],
    "nccl": [f"ncclDevKernel_AllReduce_Sum_bf16_{a}_{p}" for a in ("RING", "TREE") for p in ("LL", "LL128", "SIMPLE")],
}
#: A GEMM brick draws from a window of this many names of the shared cuBLAS pool, windows
#: overlapping: one kernel name runs inside several bricks, as cuBLAS's do.
GEMM_WINDOW = 24


@dataclass(frozen=True)
class Brick:
    """One brick of the step: its median GPU duration, its kernels' pools, and, for a
    GEMM, its weight matrix (bytes = k x n x 2, flops = 2 x tokens x k x n)."""

    name: str
    category: str
    base_us: float
    kernels: tuple[str, ...]
    k: int = 0
    n: int = 0
    stream: str = "compute"  # "comm": the communication stream; "host": host-timed


LAYER_BRICKS = (
    Brick("rms_norm", "norm", 6, ("rms",)),
    Brick("qkv_projection", "attention", 30, ("gemm",), HIDDEN, 3 * HIDDEN // TP),
    Brick("rotary_embedding", "attention", 5, ("rotary",)),
    Brick("attention", "attention", 60, ("flash", "combine")),
    Brick("o_proj", "attention", 20, ("gemm",), HIDDEN // TP, HIDDEN),
    Brick("all_reduce", "communication", 25, ("nccl",), stream="comm"),
    Brick("rms_norm", "norm", 6, ("rms",)),
    Brick("ffn_gate_up", "ffn", 70, ("gemm",), HIDDEN, 2 * FFN // TP),
    Brick("silu_mul", "ffn", 8, ("silu",)),
    Brick("ffn_down", "ffn", 40, ("gemm",), FFN // TP, HIDDEN),
    Brick("all_reduce", "communication", 25, ("nccl",), stream="comm"),
)
HEAD_BRICKS = (Brick("embedding", "embedding", 10, ("embedding",)),)
TAIL_BRICKS = (
    Brick("final_norm", "norm", 6, ("rms",)),
    Brick("lm_head", "head", 90, ("gemm",), HIDDEN, VOCAB // TP),
    Brick("sampling", "sampling", 40, (), stream="host"),
)
ALL_BRICKS = (*HEAD_BRICKS, *LAYER_BRICKS, *TAIL_BRICKS)
#: A non-GEMM brick's bytes: its activations in and out (tokens x hidden x 2 bytes, twice).
ACTIVATION_BYTES = TOKENS * HIDDEN * 2 * 2


def spans_per_step(layers: int) -> int:
    """Rows of one step: the step, its layers, their bricks and kernels, the other bricks."""
    per_layer = 1 + len(LAYER_BRICKS) + sum(len(b.kernels) for b in LAYER_BRICKS)
    edges = (*HEAD_BRICKS, *TAIL_BRICKS)
    return 1 + layers * per_layer + len(edges) + sum(len(b.kernels) for b in edges)


def distinct_names() -> int:
    """Distinct span names a long enough trace holds: step, layer, the bricks, every pool entry."""
    pools = {pool for brick in ALL_BRICKS for pool in brick.kernels}
    return 2 + len({b.name for b in ALL_BRICKS}) + sum(len(POOLS[p]) for p in pools)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 (distinct in, distinct out; 0 -> 0)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


class Template:
    """One step's rows as static columns (what does not change from step to step)."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.slots = [*HEAD_BRICKS, *(b for _ in range(layers) for b in LAYER_BRICKS), *TAIL_BRICKS]
        self.names = ["step", "layer", *sorted({b.name for b in ALL_BRICKS})]
        pool_start = {}
        for pool, members in POOLS.items():
            pool_start[pool] = len(self.names)
            self.names.extend(members)
        self.categories = sorted({b.category for b in ALL_BRICKS})
        # a row's interval: 0 the step, then its layers, its bricks (slots), its kernels
        kernel_slot: list[int] = []  # per kernel: its brick
        kernel_part: list[tuple[int, int]] = []  # per kernel: (index in its brick, kernels in it)
        rows: list[dict[str, Any]] = [dict(kind="step", interval=0, parent=-1, name=0, draw=1)]
        slot0 = 1 + layers
        kernel0 = slot0 + len(self.slots)

        def add_brick(slot: int, parent: int, layer: int) -> None:
            brick = self.slots[slot]
            position = ALL_BRICKS.index(brick)
            common = dict(layer=layer, category=self.categories.index(brick.category), slot=slot)
            rows.append(
                dict(
                    kind="brick",
                    interval=slot0 + slot,
                    parent=parent,
                    name=self.names.index(brick.name),
                    draw=1,
                    **common,
                )
            )
            brick_row = len(rows) - 1
            for part, pool in enumerate(brick.kernels):
                first, draw = pool_start[pool], len(POOLS[pool])
                if pool == "gemm":  # a window of the shared pool, by the brick's place in the step
                    first += (position * 17) % (draw - GEMM_WINDOW)
                    draw = GEMM_WINDOW
                rows.append(
                    dict(
                        kind="kernel",
                        interval=kernel0 + len(kernel_slot),
                        parent=brick_row,
                        name=first,
                        draw=draw,
                        **common,
                    )
                )
                kernel_slot.append(slot)
                kernel_part.append((part, len(brick.kernels)))

        for slot in range(len(HEAD_BRICKS)):
            add_brick(slot, 0, -1)
        for layer in range(layers):
            rows.append(dict(kind="layer", interval=1 + layer, parent=0, name=1, draw=1, layer=layer))
            layer_row = len(rows) - 1
            for i in range(len(LAYER_BRICKS)):
                add_brick(len(HEAD_BRICKS) + layer * len(LAYER_BRICKS) + i, layer_row, layer)
        for i in range(len(TAIL_BRICKS)):
            add_brick(len(HEAD_BRICKS) + layers * len(LAYER_BRICKS) + i, 0, -1)
        self.rows = len(rows)

        def column(key: str, default: Any = -1) -> np.ndarray:
            return np.array([row.get(key, default) for row in rows], dtype=np.int64)

        self.kind = np.array([row["kind"] for row in rows])
        self.interval, self.parent = column("interval"), column("parent")
        self.name, self.draw = column("name"), column("draw")
        self.layer, self.category, self.slot = column("layer"), column("category"), column("slot")
        brick_of = np.maximum(self.slot, 0)
        self.is_brick, self.is_kernel = self.kind == "brick", self.kind == "kernel"
        in_brick = self.slot >= 0
        host = np.array([b.stream == "host" for b in self.slots])[brick_of] & in_brick
        self.gpu = ~host
        self.on_comm = np.array([b.stream == "comm" for b in self.slots])[brick_of] & in_brick
        self.in_device = in_brick & ~host  # bricks and kernels on a stream carry device and stream
        k = np.array([b.k for b in self.slots])[brick_of]
        n = np.array([b.n for b in self.slots])[brick_of]
        self.bytes = np.where(k > 0, k * n * 2, ACTIVATION_BYTES)
        self.flops = (2 * TOKENS * k * n).astype(np.float64)
        self.has_flops = self.is_brick & (k > 0)
        self.slot_base_ticks = np.array([b.base_us * 1000 / TICK_NS for b in self.slots])
        self.slot_comm = np.array([b.stream == "comm" for b in self.slots])
        self.kernel_slot = np.array(kernel_slot, dtype=np.int64)
        self.kernel_index = np.array([p for p, _ in kernel_part], dtype=np.int64)
        self.kernel_count = np.array([c for _, c in kernel_part], dtype=np.int64)
        self.brick_name = np.array([self.names.index(self.slots[s].name) for s in brick_of])
        # launch configurations: four per kernel position, (grid, block, shared memory)
        variant = np.where(self.is_kernel, self.interval % 4, 0)
        ones = np.ones(self.rows, dtype=np.int64)
        self.grid = np.stack([66 * (variant + 1), ones, ones], axis=1)
        self.block = np.stack([128 << (variant % 3), ones, ones], axis=1)
        self.shared = 49152 * (variant % 2)


def lay_out(
    t: Template, rng: np.random.Generator, steps: int, first_step: int, slowdown: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and end ticks of every row of ``steps`` consecutive steps, shape (steps, rows),
    from the first step's start; and each step's length up to the next step's start."""
    n_slots = len(t.slots)
    ticks = t.slot_base_ticks * slowdown * rng.lognormal(0.0, 0.1, (steps, n_slots))
    ticks[rng.random((steps, n_slots)) < STALL_RATE] *= STALL_SLOWDOWN
    if first_step == 0:
        ticks[0] *= WARMUP_SLOWDOWN
    duration = np.maximum(ticks.astype(np.int64), MIN_TICKS)
    # a communication brick starts half its duration early (overlapping the brick before);
    # the next brick waits for its end
    shift = np.where(t.slot_comm, -(duration // 2), 0)
    advance = duration + shift + rng.integers(*BRICK_GAP_TICKS, (steps, n_slots))
    slot_start = np.cumsum(advance, axis=1) - advance + shift
    slot_end = slot_start + duration
    per_layer = (steps, t.layers, len(LAYER_BRICKS))
    in_layers = slice(len(HEAD_BRICKS), len(HEAD_BRICKS) + t.layers * len(LAYER_BRICKS))
    layer_start = slot_start[:, in_layers].reshape(per_layer).min(axis=2)
    layer_end = slot_end[:, in_layers].reshape(per_layer).max(axis=2)
    # kernels: one fills its brick but for the launch (1 µs) and tail (0.5 µs); of two,
    # the first takes the brick's first 70 %
    k_start, k_end = slot_start[:, t.kernel_slot], slot_end[:, t.kernel_slot]
    split = k_start + (k_end - k_start) * 7 // 10
    kernel_start = np.where(t.kernel_index == 0, k_start + 2, split + 1)
    kernel_end = np.where(t.kernel_index == t.kernel_count - 1, k_end - 1, split)
    step_end = slot_end.max(axis=1)
    starts = np.concatenate([np.zeros((steps, 1), np.int64), layer_start, slot_start, kernel_start], axis=1)
    ends = np.concatenate([step_end[:, None], layer_end, slot_end, kernel_end], axis=1)
    length = step_end + rng.integers(*STEP_GAP_TICKS, steps)
    offset = (np.cumsum(length) - length)[:, None]
    return starts[:, t.interval] + offset, ends[:, t.interval] + offset, length


@dataclass(frozen=True)
class Process:
    """One rank's process: what its resource says."""

    rank: int
    ranks: int

    @property
    def host(self) -> str:
        return f"gpu-node-{self.rank // GPUS_PER_HOST:02d}"

    @property
    def device(self) -> int:
        return self.rank % GPUS_PER_HOST

    @property
    def pid(self) -> int:
        return 4100 + self.rank

    @property
    def instance(self) -> str:
        return f"{int(mix64(np.array([self.rank + 7]))[0]):016x}-{self.rank:04d}"

    @property
    def slowdown(self) -> float:
        return STRAGGLER_SLOWDOWN if self.rank == self.ranks - 1 and self.ranks > 1 else 1.0

    @property
    def streams(self) -> tuple[int, int]:
        """Compute and communication stream handles (pointers, as CUDA's are)."""
        base = 0x55D0_C8A3_0000 + (self.rank << 20)
        return base + 0x1F0, base + 0x9A0

    def resource(self) -> dict[str, Any]:
        return {
            "service.name": "llm-serve",
            "service.instance.id": self.instance,
            "host.name": self.host,
            "process.pid": self.pid,
            "brickscope.rank": self.rank,
            "brickscope.local_rank": self.device,
            "brickscope.world_size": self.ranks,
            "brickscope.gpu.device.names": [MODEL] * GPUS_PER_HOST,
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
        }


def _strings(codes: np.ndarray, values: list[str], mask: np.ndarray | None = None) -> pa.Array:
    """A string column from codes into ``values`` (built as a dictionary, decoded by Arrow)."""
    indices = pa.array(codes.astype(np.int32), mask=mask)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, pa.string())).cast(pa.string())


def _ints(values: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    return pa.array(values.astype(np.int64), mask=mask)


def _triples(values: np.ndarray, present: np.ndarray) -> pa.Array:
    """list<int64> of three values on the rows ``present``, null elsewhere."""
    offsets = np.concatenate([[0], np.cumsum(np.where(present, 3, 0))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[present].ravel()), mask=pa.array(~present))


def _repeat(value: str | int | None, type_: pa.DataType, rows: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), rows)


class RankWriter:
    """Writes one rank's steps, a row group at a time."""

    def __init__(self, template: Template, process: Process, seed: int, run: str, scope_version: str) -> None:
        self.t, self.p, self.run, self.scope_version = template, process, run, scope_version
        self.rng = np.random.default_rng([seed, process.rank])
        self.step = 0  # the next step's number
        self.row = 0  # rows written: the span id counter
        self.cursor = 0  # ticks from the rank's first step to the next step's start
        self.anchor = T0 + process.rank * 1_000_003  # the device's timeline: ns at tick 0
        self.resource_json = json.dumps(process.resource(), separators=(",", ":"))

    def batch(self, steps: int, schema: pa.Schema) -> pa.RecordBatch:
        """The next ``steps`` steps as one record batch of ``schema``."""
        t, p, rng = self.t, self.p, self.rng
        start_t, end_t, length = lay_out(t, rng, steps, self.step, p.slowdown)
        start = (self.anchor + (start_t + self.cursor) * TICK_NS).ravel()
        end = (self.anchor + (end_t + self.cursor) * TICK_NS).ravel()
        rows = steps * t.rows
        step_numbers = np.arange(self.step, self.step + steps, dtype=np.int64)
        counters = (np.uint64(p.rank + 1) << np.uint64(40)) + np.arange(
            self.row + 1, self.row + rows + 1, dtype=np.uint64
        )
        ids = mix64(counters).view(np.int64).reshape(steps, t.rows)
        parent_ids = np.where(t.parent >= 0, ids[:, np.maximum(t.parent, 0)], 0).ravel()
        trace_hi = mix64((np.uint64(p.rank + 1) << np.uint64(32)) + step_numbers.astype(np.uint64))
        trace_lo = mix64(trace_hi ^ np.uint64(0x9E3779B97F4A7C15))
        trace_bytes = np.stack([trace_hi, trace_lo], axis=1).astype(">u8").view(np.uint8).reshape(steps, 16)
        trace_buffer = np.repeat(trace_bytes, t.rows, axis=0).tobytes()

        def tile(column: np.ndarray) -> np.ndarray:
            return np.tile(column, (steps,) + (1,) * (column.ndim - 1))

        kernel, brick, gpu, in_device = tile(t.is_kernel), tile(t.is_brick), tile(t.gpu), tile(t.in_device)
        # a kernel keeps its (layer, brick) name nine times in ten, else another of its pool
        stable = tile((np.maximum(t.layer, 0) * 7 + np.arange(t.rows)) % t.draw)
        drawn = rng.integers(0, 1 << 30, rows) % tile(t.draw)
        names = tile(t.name) + np.where(rng.random(rows) < 0.9, stable, drawn)
        duration = end - start
        host_start = np.where(gpu, start - rng.integers(20_000, 400_000, rows), start)
        host_duration = np.where(brick | kernel, rng.integers(3_000, 30_000, rows), duration)
        host_duration = np.where(gpu, host_duration, duration)
        compute, comm = p.streams
        layer, category = tile(t.layer), tile(t.category)
        row_kind = tile(np.searchsorted(("brick", "kernel", "layer", "step"), t.kind))
        columns: dict[str, pa.Array] = {
            "run": _repeat(self.run, pa.string(), rows),
            "trace_id": pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), rows, [None, pa.py_buffer(trace_buffer)]),
            "span_id": pa.array(ids.ravel()),
            "parent_span_id": pa.array(parent_ids),
            "name": _strings(names, t.names),
            "kind": _strings(row_kind, ["brick", "kernel", "layer", "step"]),
            "category": _strings(category, t.categories, category < 0),
            "start_ns": pa.array(start),
            "end_ns": pa.array(end),
            "clock": _strings(gpu.astype(np.int64), ["host", "cuda"]),
            "self_ns": _ints(duration, ~brick),
            "step": pa.array(np.repeat(step_numbers, t.rows)),
            "layer": _ints(layer, layer < 0),
            "thread_id": _repeat(139_870_000_000_000 + p.rank, pa.int64(), rows),
            "service_name": _repeat("llm-serve", pa.string(), rows),
            "service_instance_id": _repeat(p.instance, pa.string(), rows),
            "host_name": _repeat(p.host, pa.string(), rows),
            "pid": _repeat(p.pid, pa.int64(), rows),
            "rank": _repeat(str(p.rank), pa.string(), rows),
            "device_ordinal": _ints(np.full(rows, p.device), ~in_device),
            "device_model": _strings(np.zeros(rows), [MODEL], ~in_device),
            "stream": _ints(np.where(tile(t.on_comm), comm, compute), ~in_device),
            "elements": _ints(np.full(rows, TOKENS * HIDDEN), ~brick),
            "bytes": _ints(tile(t.bytes), ~brick),
            "dtype": _strings(np.zeros(rows), [DTYPE], ~brick),
            "flops": pa.array(tile(t.flops), mask=~tile(t.has_flops)),
            "tokens": _ints(np.full(rows, TOKENS), tile(t.kind != "step")),
            "kernel_grid": _triples(tile(t.grid), kernel),
            "kernel_block": _triples(tile(t.block), kernel),
            "kernel_shared_mem_bytes": _ints(tile(t.shared), ~kernel),
            "host_start_ns": pa.array(host_start),
            "host_duration_ns": pa.array(host_duration),
            "gpu_duration_ns": _ints(duration, ~gpu),
            "brick_name": _strings(tile(t.brick_name), t.names, ~(brick | kernel)),
            "kernel_name": _strings(names, t.names, ~kernel),
            "thread_name": _repeat("MainThread", pa.string(), rows),
            "span_kind": _repeat(0, pa.int8(), rows),
            "status_code": _repeat(0, pa.int8(), rows),
            "scope_name": _repeat("brickscope", pa.string(), rows),
            "scope_version": _repeat(self.scope_version, pa.string(), rows),
            "resource": _repeat(self.resource_json, pa.string(), rows),
        }
        self.step += steps
        self.row += rows
        self.cursor += int(length.sum())
        arrays = [columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in schema]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def write_dataset(
    root: str,
    spans: int,
    *,
    ranks: int = 8,
    layers: int = 32,
    seed: int = 1,
    run: str = "bench",
    row_group_rows: int = ROW_GROUP_ROWS,
    rows_per_file: int = 8 << 20,
) -> dict[str, Any]:
    """Write at least ``spans`` spans (whole steps, the same number on every rank) under
    ``root``; return what was written: spans, steps per rank, files, bytes.

    Each file is written by the Arrow writer of a :class:`ParquetSpanWriter` (so with the
    format's encodings, compression and footer), a record batch of whole steps, about
    ``row_group_rows`` rows, a row group at a time."""
    from importlib.metadata import version

    schema = parquet_schema()
    template = Template(layers)
    steps_per_rank = -(-spans // (ranks * template.rows))
    steps_per_group = max(1, row_group_rows // template.rows)
    files: list[str] = []
    for rank in range(ranks):
        out = RankWriter(template, Process(rank, ranks), seed, run, version("brickscope"))
        directory = os.path.join(root, f"rank-{rank:03d}")
        os.makedirs(directory, exist_ok=True)
        writer: ParquetSpanWriter | None = None
        in_file = parts = 0
        while out.step < steps_per_rank:
            if writer is None or in_file >= rows_per_file:
                if writer is not None:
                    writer.close()
                files.append(os.path.join(directory, f"part-{parts:05d}.parquet"))
                writer, in_file, parts = ParquetSpanWriter(files[-1], run=run), 0, parts + 1
            batch = out.batch(min(steps_per_group, steps_per_rank - out.step), schema)
            writer._writer.write_batch(batch, row_group_size=batch.num_rows)
            in_file += batch.num_rows
        if writer is not None:
            writer.close()
    return {
        "spans": ranks * steps_per_rank * template.rows,
        "steps_per_rank": steps_per_rank,
        "spans_per_step": template.rows,
        "files": len(files),
        "bytes": sum(os.path.getsize(f) for f in files),
    }
