# SPDX-License-Identifier: Apache-2.0
"""Threads, asyncio tasks, recursion and non-lexical bricks each keep their own tree."""

from __future__ import annotations

import asyncio
import threading
import time

import brickscope as bs
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def children_of(spans, parent):
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


class TestThreads:
    def test_each_thread_builds_its_own_tree(self):
        """Four threads nesting layer -> brick concurrently give four separate, correct trees."""
        barrier = threading.Barrier(4)

        def work(index):
            barrier.wait()
            with bs.layer(index):
                for _ in range(20):
                    with bs.brick("attention_score"):
                        time.sleep(0)

        with capture_spans() as captured:
            threads = [threading.Thread(target=work, args=(i,), name=f"worker-{i}") for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            spans = captured.spans
        layers = [s for s in spans if s.name == "layer"]
        assert len(layers) == 4
        for layer in layers:
            bricks = children_of(spans, layer)
            assert len(bricks) == 20
            thread_names = {b.attributes[A.THREAD_NAME] for b in bricks}
            assert thread_names == {layer.attributes[A.THREAD_NAME]}
            assert {b.attributes[A.LAYER_INDEX] for b in bricks} == {layer.attributes[A.LAYER_INDEX]}
            assert {b.context.trace_id for b in bricks} == {layer.context.trace_id}
        assert len({layer.context.trace_id for layer in layers}) == 4

    def test_decorator_called_from_several_threads(self):
        """One decorated function called from 8 threads at once yields one correct span per call."""

        @bs.brick("ffn_down")
        def ffn(x):
            time.sleep(0.001)
            return x * 2

        results = []
        with capture_spans() as captured:
            threads = [threading.Thread(target=lambda i=i: results.append(ffn(i))) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            bricks = captured.bricks()
        assert sorted(results) == [i * 2 for i in range(8)]
        assert len(bricks) == 8
        assert all(b.parent is None for b in bricks)
        assert all(b.end_time - b.start_time >= 1_000_000 for b in bricks)


class TestRecursion:
    def test_decorator_on_a_recursive_function(self):
        """Each recursion level is one span, parented to the level above."""

        @bs.brick("residual")
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)

        with capture_spans() as captured:
            assert depth(5) == 5
            spans = captured.bricks()
        assert len(spans) == 6
        roots = [s for s in spans if s.parent is None]
        assert len(roots) == 1
        chain, node = [], roots[0]
        while node is not None:
            chain.append(node)
            kids = children_of(spans, node)
            assert len(kids) <= 1
            node = kids[0] if kids else None
        assert len(chain) == 6
        assert all(outer.start_time <= inner.start_time and inner.end_time <= outer.end_time
                   for outer, inner in zip(chain, chain[1:]))

    def test_reused_scope_object_nests(self):
        """One brick object used in nested with-statements makes two nested spans."""
        scope = bs.brick("rms_norm")
        with capture_spans() as captured:
            with scope:
                with scope:
                    pass
            outer, inner = sorted(captured.bricks(), key=lambda s: s.start_time)
        assert inner.parent.span_id == outer.context.span_id


class TestAsyncio:
    def test_async_decorator_times_the_coroutine(self):
        """Decorating an async def times the awaited body, not the coroutine's creation."""

        @bs.brick("sampling")
        async def sample():
            await asyncio.sleep(0.02)
            return 7

        with capture_spans() as captured:
            assert asyncio.run(sample()) == 7
            (span,) = captured.bricks()
        assert span.end_time - span.start_time >= 20_000_000

    def test_interleaved_tasks_do_not_adopt_each_others_bricks(self):
        """Two tasks interleaving on one thread each get their own step with their own bricks."""

        async def request(number):
            with bs.step(number):
                for _ in range(5):
                    with bs.brick("attention_score"):
                        await asyncio.sleep(0.001)

        async def main():
            await asyncio.gather(request(1), request(2))

        with capture_spans() as captured:
            asyncio.run(main())
            spans = captured.spans
        steps = {s.attributes[A.STEP_NUMBER]: s for s in spans if s.name == "step"}
        assert set(steps) == {1, 2}
        for number, step in steps.items():
            bricks = children_of(spans, step)
            assert len(bricks) == 5
            assert {b.attributes[A.STEP_NUMBER] for b in bricks} == {number}


class TestHandles:
    def test_start_and_end_brick_across_calls(self):
        """start_brick/end_brick make one span; scopes opened meanwhile nest under it."""
        with capture_spans() as captured:
            handle = bs.start_brick("all_reduce", elements=1024)
            with bs.kernel("nccl_allreduce"):
                pass
            bs.end_brick(handle)
            spans = {s.name: s for s in captured.spans}
        assert spans["nccl_allreduce"].parent.span_id == spans["all_reduce"].context.span_id
        assert spans["all_reduce"].attributes[A.BRICK_CATEGORY] == "communication"
        assert spans["all_reduce"].attributes[A.BRICK_ELEMENTS] == 1024

    def test_overlapping_handles_end_out_of_order(self):
        """Two handle bricks ended out of order both become spans, and later scopes nest correctly."""
        with capture_spans() as captured:
            first = bs.start_brick("memcpy_h2d")
            second = bs.start_brick("all_gather")
            bs.end_brick(first)
            with bs.brick("rms_norm"):
                pass
            bs.end_brick(second)
            with bs.brick("ffn_up"):
                pass
            spans = {s.name: s for s in captured.spans}
        assert set(spans) == {"memcpy_h2d", "all_gather", "rms_norm", "ffn_up"}
        assert spans["rms_norm"].parent.span_id == spans["all_gather"].context.span_id
        assert spans["ffn_up"].parent is None

    def test_ending_a_handle_twice_warns_once_and_is_ignored(self, caplog):
        """A second end_brick on the same handle logs one warning, counts misuse, emits nothing more."""
        with capture_spans() as captured:
            handle = bs.start_brick("rms_norm")
            bs.end_brick(handle)
            bs.end_brick(handle)
            bs.end_brick(handle)
            assert len(captured.spans) == 1
            assert captured.session.stats()["misuse"] == 2
        assert sum("ended twice" in r.message for r in caplog.records) == 1
