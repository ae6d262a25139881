# SPDX-License-Identifier: Apache-2.0
"""The documented API (docs/api.md, README.md) as a type checker sees it: type-checked, never run.

Each ``assert_type`` fails the check when a public name's type drifts from what the docs say;
the lazily loaded names (``configure``, ``Session``...) must type as their real objects too.
pytest does not collect this file (its name does not match ``test_*.py``);
tests/unit/test_typing.py runs the check, the same as::

    .venv/bin/python -m mypy --strict tests/typing/api_usage.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from typing_extensions import assert_type

import brickscope as bs
from brickscope.native import Implementation

# Configuration: the lazily loaded names are their real objects.
session = bs.configure(
    TracerProvider(),
    sync_mode="deferred",
    clock="host",
    max_pending=16384,
    step_sampling="every=100",
    resolver="inline",
    duration_histogram="sampled",
)
assert_type(session, bs.Session)
assert_type(bs.StepSampling.parse("wait=5,warmup=1,active=3,repeat=2"), bs.StepSampling)
assert_type(session.aggregator, "bs.CategoryAggregator | None")
assert_type(session.sync_processor, bs.GpuSyncSpanProcessor)
assert_type(session.clock, str)

# Scopes as context managers: every factory returns a Scope, and so does entering one.
with bs.step(0), bs.layer(3):
    with bs.brick("attention_score", elements=4096, stream=None, heads=32) as b:
        assert_type(b, bs.Scope)
        with bs.kernel("flash_fwd", grid=(32, 8), block=128, shared_mem_bytes=65536) as k:
            reveal_type(k)  # noqa: F821 - Scope (mypy knows reveal_type; this file is never run)
        with bs.tile("macro", elements=1024):
            pass
        bs.event("eos", token=2)
        bs.record_gpu("vk_composite", 1_000, 2_000, device=0, stream=1, elements=64)
        submit_ns = bs.now_ns()
        assert_type(submit_ns, int)
        bs.record_gpu([("shadow", 120_000), ("gbuffer", 340_000)], submit_ns, stream=1)
        assert_type(bs.is_enabled(), bool)
assert_type(bs.brick("rms_norm"), bs.Scope)

# The scope classes are exported and are scopes themselves.
norm: bs.Scope = bs.Brick("rms_norm", category="norm", elements=4096)
with norm as entered:
    assert_type(entered, bs.Scope)
scopes: list[bs.Scope] = [bs.Kernel("k", grid=1, block=1), bs.Layer(0), bs.Step(1)]


# Scopes as decorators keep the decorated function's type (sync and async).
@bs.brick("ffn_down")
def ffn_down(x: list[float]) -> list[float]:
    return x


@bs.brick("sampling")
async def sample(logits: list[float]) -> int:
    return 0


assert_type(ffn_down([1.0]), list[float])
assert_type(asyncio.run(sample([0.5])), int)

# Callback-style frameworks: tokens.
token = bs.enter_scope(bs.brick("attention", elements=8))
assert_type(token, bs.ScopeToken)
bs.exit_scope(token)
bs.exit_scope(bs.enter_scope(bs.layer(1)), error=ValueError("bad tile"))

# Non-lexical regions: handles.
handle = bs.start_brick("all_reduce", elements=8)
assert_type(handle, bs.BrickHandle)
bs.end_brick(handle, error=None)

# Kernel sources, output checksums, the brick catalogue.
assert_type(bs.register_kernel_source("gemm_fwd", "// ptx", kind="ptx", path="kernels/gemm.ptx"), int)
assert_type(bs.checksum(b"output bytes"), "int | None")
bs.register_brick("my_norm", "norm")

# Sync points, reports, on and off, shutdown.
assert_type(bs.sync(), bool)
assert_type(bs.sync(timeout_millis=100), bool)
assert_type(session.sync(), bool)
assert_type(session.report(), str)
assert_type(session.report("json"), str)
assert_type(session.stats(), dict[str, int])
assert_type(session.force_flush(timeout_millis=1000), bool)
bs.disable()
bs.enable()
session.shutdown()
bs.shutdown(timeout_millis=1000)

# Which implementations run.
assert_type(bs.implementations(), dict[str, Implementation])
assert_type(bs.__version__, str)
unused: Any = bs.CATEGORIES

# Offline analysis in-process: what each brickscope command prints is one call.
from brickscope import analysis  # noqa: E402
from brickscope.offline import StepRange, parse_steps  # noqa: E402

steps: StepRange = parse_steps("2:")
table = analysis.load("trace.pftrace", allow_truncated=True)
assert_type(table, analysis.Table)
assert_type(analysis.load_spans([], backend="python"), analysis.Table)
assert_type(analysis.select(table, steps=steps, ranks=["0"])[0], analysis.Table)
report = analysis.analyse(table, top=5, steps=steps)
assert_type(report, analysis.Report)
assert_type(analysis.render(report, "markdown"), str)
assert_type(analysis.to_json(report), dict[str, Any])
comparison = analysis.compare(table, analysis.load("new.pftrace"))
assert_type(comparison, analysis.Comparison)
assert_type(analysis.render_comparison(comparison, "json"), str)
graphs = analysis.step_graphs(table)
assert_type(graphs, list[analysis.StepGraph])
assert_type(analysis.median_graph(graphs), analysis.StepGraph)
trees = analysis.tree_graphs(table, steps)
assert_type(trees[0].path, list[analysis.Node])
assert_type(trees[0].parallel, bool)
assert_type(trees[0].gaps_ns, int)
assert_type(analysis.render_tree(trees, "dot", sources=table.kernel_sources, show_sources=True), str)
