# SPDX-License-Identifier: Apache-2.0
"""Seeded traces for the engine comparison tests, and a writer of spans as Parquet span files
(imported as ``analysis_engine_cases``).

The generator covers what the engines must agree on: ranks with and without a launcher rank
(processes told apart by service, instance, host and pid), devices and streams, steps, layers,
bricks with recorded self times, kernels with launch configurations inside bricks,
communication by category and by name, overhead and GC spans, host-timed user spans of other
threads, work amounts, tiles, and impossible spans of every reason.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource

from brickscope.testing import make_span
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
US = 1_000


def write_parquet(spans: Iterable[Any], path: Path, *, row_group_rows: int = 50) -> Path:
    """Write ``spans`` as a Parquet span file (the format's own writer)."""
    from brickscope.offline import ParquetSpanWriter

    with ParquetSpanWriter(path, row_group_rows=row_group_rows) as writer:
        writer.write(spans)
    return path


def write_rank_dataset(spans: list[Any], root: Path) -> Path:
    """A Parquet dataset of one file a rank: the first rank's file in ``root`` itself, each
    other's in ``root/rank-<rank>/`` (a dataset read recursively, files beside directories)."""
    ranks = sorted({span.resource.attributes.get("brickscope.rank") for span in spans}, key=str)
    for index, rank in enumerate(ranks):
        mine = [span for span in spans if span.resource.attributes.get("brickscope.rank") == rank]
        where = root / (f"rank-{rank}" if index else "")
        where.mkdir(parents=True, exist_ok=True)
        write_parquet(mine, where / f"part-{index}.parquet")
    return root


def _resource(rng: random.Random, index: int, launcher: bool) -> Resource:
    attributes: dict[str, Any] = {
        "service.name": rng.choice(["train", "serve"]),
        A.HOST_NAME: f"node{index % 2}",
        A.GPU_DEVICE_NAMES: ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"),
    }
    if launcher:
        attributes[A.RANK] = index
    else:  # a process without a launcher rank: its identity is its label
        attributes["service.instance.id"] = f"{rng.getrandbits(32):08x}abcdef{index}"
        attributes["process.pid"] = 1000 + index
    return Resource(attributes)


_BRICKS = [
    ("rms_norm", "norm"), ("qkv_projection", "matmul"), ("attention_score", "attention"),
    ("all_reduce", "communication"), ("ffn_down", "matmul"), ("ncclAllGather", "other"), ("embed", None),
]  # fmt: skip
_KERNELS = ["gemm", "softmax", "ncclKernel_AllReduce", "copy"]


def generate(seed: int, *, steps: int = 3, ranks: int = 2) -> list[Any]:
    """A seeded trace of ``ranks`` ranks and ``steps`` steps each (with some impossible spans)."""
    rng = random.Random(seed)
    others = random.Random(~seed)  # its own stream: the spans of no brickscope kind leave rng's draws as they were
    launcher = rng.random() < 0.5
    spans: list[Any] = []
    next_id = iter(range(rng.getrandbits(62) | (1 << 63), 1 << 64)).__next__  # ids above 2^63: signed in Parquet

    def add(name: str, start: int, end: int, parent: int | None, resource: Resource, **attributes: Any) -> int:
        span_id = next_id()
        spans.append(make_span(span_id, name, start, end, parent, attributes=attributes, resource=resource))
        return span_id

    for index in range(ranks):
        resource = _resource(rng, index, launcher)
        gpu = rng.random() < 0.8
        device = index % 2 if gpu else None
        clock = "cuda" if gpu else "host"
        t = T0 + rng.randrange(0, 50) * US
        for step in range(steps):
            step_start = t
            step_id = add("step", step_start, step_start, None, resource, **{
                A.SCOPE_KIND: "step", A.STEP_NUMBER: step, A.CLOCK: "host", A.THREAD_ID: 1,
                A.STEP_TOKENS: rng.choice([0, 512, 1024]),
            })  # fmt: skip
            for layer in range(2):
                layer_id = add("layer", t, t, step_id, resource, **{
                    A.SCOPE_KIND: "layer", A.LAYER_INDEX: layer, A.STEP_NUMBER: step, A.CLOCK: "host",
                    A.THREAD_ID: 1,
                })  # fmt: skip
                for _ in range(rng.randrange(2, 6)):
                    name, category = rng.choice(_BRICKS)
                    duration = rng.choice([20, 30, 40, 45, 60, 400]) * US + rng.randrange(0, 3) * US
                    attributes: dict[str, Any] = {
                        A.SCOPE_KIND: "brick", A.CLOCK: clock, A.STEP_NUMBER: step, A.LAYER_INDEX: layer,
                        A.THREAD_ID: 1,
                    }  # fmt: skip
                    if category is not None:
                        attributes[A.BRICK_CATEGORY] = category
                    if gpu:
                        attributes.update({
                            A.GPU_DEVICE_ID: device, A.GPU_STREAM_ID: rng.choice([7, 9]),
                            A.GPU_DURATION_NS: duration,
                        })  # fmt: skip
                    if rng.random() < 0.5:
                        attributes[A.WORK_BYTES if rng.random() < 0.5 else "bytes"] = rng.randrange(0, 1 << 20)
                    elif rng.random() < 0.3:
                        attributes[A.WORK_OUTPUT_SHAPE] = (rng.randrange(1, 64), 128)
                        attributes[A.WORK_DTYPE] = rng.choice(["float16", "torch.bfloat16", "float32", "mystery"])
                    if rng.random() < 0.4:
                        # whole flops sum exactly in any order; fractional ones only in row order
                        attributes[A.WORK_FLOPS] = rng.randrange(1, 1 << 30) / (1 if seed % 3 else 7)
                    if rng.random() < 0.3:
                        attributes[A.BRICK_ELEMENTS] = rng.randrange(1, 10_000)
                    if rng.random() < 0.2:
                        level = rng.choice(A.TILE_LEVELS)
                        attributes[A.TILE_COUNT.format(level)] = rng.randrange(1, 9)
                        attributes[A.TILE_DURATION_NS.format(level)] = rng.randrange(1, duration)
                        attributes[A.TILE_ELEMENTS.format(level)] = rng.randrange(0, 999)
                    kernels = []
                    k = t + US
                    for _ in range(rng.randrange(0, 3)):
                        kernel_duration = rng.randrange(1, 8) * US
                        kernels.append((rng.choice(_KERNELS), k, k + kernel_duration))
                        k += kernel_duration + US
                    nested = 0
                    if rng.random() < 0.2:  # a nested brick
                        nested = 5 * US
                    attributes[A.BRICK_SELF_DURATION_NS] = duration - nested
                    brick_id = add(name, t, t + duration, layer_id, resource, **attributes)
                    if nested:
                        add("rms_norm", t + 2 * US, t + 2 * US + nested, brick_id, resource, **{
                            **{key: value for key, value in attributes.items() if key not in (
                                A.BRICK_SELF_DURATION_NS, A.WORK_BYTES, "bytes", A.WORK_FLOPS)},
                            A.BRICK_CATEGORY: "norm", A.BRICK_SELF_DURATION_NS: nested,
                            A.GPU_DURATION_NS: nested,
                        })  # fmt: skip
                    for kernel, start, end in kernels:
                        kernel_attributes = {
                            A.SCOPE_KIND: "kernel", A.CLOCK: clock, A.BRICK_NAME: name, A.STEP_NUMBER: step,
                            A.THREAD_ID: 1, A.KERNEL_GRID: (rng.choice([4, 8]), 1, 1), A.KERNEL_BLOCK: (128, 1, 1),
                        }  # fmt: skip
                        if rng.random() < 0.5:
                            kernel_attributes[A.KERNEL_SHARED_MEM_BYTES] = 0
                        if category is not None and rng.random() < 0.3:
                            kernel_attributes[A.BRICK_CATEGORY] = category
                        if gpu:
                            kernel_attributes.update({
                                A.GPU_DEVICE_ID: device, A.GPU_STREAM_ID: 7, A.GPU_DURATION_NS: end - start,
                            })  # fmt: skip
                        if rng.random() < 0.3:
                            kernel_attributes[A.KERNEL_SOURCE_HASH] = f"{rng.getrandbits(64):016x}"
                            kernel_attributes[A.OUTPUT_CHECKSUM] = f"{rng.getrandbits(64):016x}"
                        kernel_id = add(kernel, start, end, brick_id, resource, **kernel_attributes)
                        if rng.random() < 0.4:  # brickscope's work inside a kernel (clipped to it)
                            add("brickscope.sync", end - US // 2, end + rng.choice([0, US]), kernel_id, resource, **{
                                A.SCOPE_KIND: "overhead", A.STEP_NUMBER: step, A.CLOCK: "host", A.THREAD_ID: 1,
                            })  # fmt: skip
                    t += duration + rng.choice([0, 2, 5]) * US
                # the layer span ends after its bricks
                spans[[s.context.span_id for s in spans].index(layer_id)]._end_time = t
            loader = add("data_loader", step_start, t, None, resource, **{A.CLOCK: "host", A.THREAD_ID: 2})
            if others.random() < 0.6:  # another instrumentation's spans inside: overlapping, one past its end
                middle = (step_start + t) // 2
                add("read_batch", step_start + US, middle + 2 * US, loader, resource, **{A.THREAD_ID: 2})
                add("decode", middle, t + 3 * US, loader, resource, **{A.THREAD_ID: 2})
            if rng.random() < 0.7:
                add("brickscope.resolve", t - 3 * US, t + 4 * US, step_id, resource, **{
                    A.SCOPE_KIND: "overhead", A.STEP_NUMBER: step, A.CLOCK: "host", A.THREAD_ID: 1,
                })  # fmt: skip
            if rng.random() < 0.4:
                add("gc", t - 10 * US, t - 8 * US, step_id, resource, **{
                    A.SCOPE_KIND: "gc", A.CLOCK: "host", A.THREAD_ID: 1,
                })  # fmt: skip
            spans[[s.context.span_id for s in spans].index(step_id)]._end_time = t + rng.choice([0, 1]) * US
            t += 10 * US
    # impossible spans, one of each reason where the seed says
    resource = _resource(rng, 0, launcher)
    for reason in range(5):
        if rng.random() < 0.5:
            continue
        attributes = {A.SCOPE_KIND: "brick", A.CLOCK: "host", A.BRICK_CATEGORY: "bad"}
        start, end = T0, T0 + 10 * US
        if reason == 0:
            start, end = T0 + 10 * US, T0
        elif reason == 1:
            attributes[A.WORK_BYTES] = -5
        elif reason == 2:
            attributes[A.BRICK_SELF_DURATION_NS] = 20 * US
        elif reason == 3:
            attributes[A.GPU_DURATION_NS] = 3 * US
        else:
            start = 0
        add("impossible", start, end, None, resource, **attributes)
    order = list(range(len(spans)))
    rng.shuffle(order) if rng.random() < 0.3 else None
    return [spans[i] for i in order]
