# SPDX-License-Identifier: Apache-2.0
"""enter_scope/exit_scope, the self-repairing scope stack, and ``with`` blocks matched by record."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from opentelemetry import context as otel_context, trace

import brickscope as bs
from brickscope._scope import Brick
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def by_name(spans):
    return {s.name if s.name not in ("step", "layer") else _grouping_key(s): s for s in spans}


def _grouping_key(span):
    if span.name == "step":
        return f"step{span.attributes[A.STEP_NUMBER]}"
    return f"layer{span.attributes[A.LAYER_INDEX]}"


def parent_name(spans, span):
    if span.parent is None:
        return None
    for name, other in spans.items():
        if other.context.span_id == span.parent.span_id:
            return name
    return "?"


class TestEnterExit:
    def test_lifo_enter_exit_builds_the_same_tree_as_with_blocks(self):
        with capture_spans() as captured:
            step = bs.enter_scope(bs.step(0))
            layer = bs.enter_scope(bs.layer(3))
            brick = bs.enter_scope(bs.brick("rms_norm", elements=64))
            bs.exit_scope(brick)
            bs.exit_scope(layer)
            bs.exit_scope(step)
            spans = by_name(captured.spans)
            assert captured.session.stats()["scope_repairs"] == 0
        assert set(spans) == {"step0", "layer3", "rms_norm"}
        assert parent_name(spans, spans["rms_norm"]) == "layer3"
        assert parent_name(spans, spans["layer3"]) == "step0"
        assert spans["rms_norm"].attributes[A.LAYER_INDEX] == 3
        assert spans["rms_norm"].attributes[A.STEP_NUMBER] == 0
        assert spans["rms_norm"].attributes[A.BRICK_ELEMENTS] == 64

    def test_interleaved_exits_emit_every_scope_with_its_parent_and_count_repairs(self):
        """Scopes ended before scopes opened inside them: each ends itself, the ones still
        open keep their parents, later scopes nest under the innermost open one."""
        before = otel_context.get_current()
        with capture_spans() as captured:
            step = bs.enter_scope(bs.step(0))
            layer0 = bs.enter_scope(bs.layer(0))
            attention = bs.enter_scope(bs.brick("attention_score"))
            bs.exit_scope(layer0)  # repair 1: attention_score still open inside it
            with bs.brick("rms_norm"):  # innermost open scope: attention_score
                pass
            bs.exit_scope(step)  # repair 2
            layer1 = bs.enter_scope(bs.layer(1))  # under attention_score, still open
            bs.exit_scope(attention)  # repair 3: layer1 is open inside it
            assert otel_context.get_current() is not before  # layer1 still open
            bs.exit_scope(layer1)
            assert otel_context.get_current() is before
            spans = by_name(captured.spans)
            assert captured.session.stats()["scope_repairs"] == 3
        assert set(spans) == {"step0", "layer0", "attention_score", "rms_norm", "layer1"}
        assert parent_name(spans, spans["step0"]) is None
        assert parent_name(spans, spans["layer0"]) == "step0"
        assert parent_name(spans, spans["attention_score"]) == "layer0"
        assert parent_name(spans, spans["rms_norm"]) == "attention_score"
        assert parent_name(spans, spans["layer1"]) == "attention_score"
        assert spans["layer1"].attributes[A.STEP_NUMBER] == 0
        assert len({s.context.trace_id for s in spans.values()}) == 1

    def test_steps_and_layers_ended_across_each_other_all_come_out(self):
        """Three steps, two layers each, every step ended while its second layer is open
        and every first layer ended while the second is open: 3 steps, 6 layers."""
        before = otel_context.get_current()
        with capture_spans() as captured:
            for number in range(3):
                step = bs.enter_scope(bs.step(number))
                first = bs.enter_scope(bs.layer(2 * number))
                second = bs.enter_scope(bs.layer(2 * number + 1))
                bs.exit_scope(step)
                bs.exit_scope(first)
                bs.exit_scope(second)
                assert otel_context.get_current() is before
            spans = by_name(captured.spans)
            assert captured.session.stats()["scope_repairs"] == 6
        assert sorted(spans) == ["layer0", "layer1", "layer2", "layer3", "layer4", "layer5", "step0", "step1", "step2"]
        for number in range(3):
            assert parent_name(spans, spans[f"layer{2 * number}"]) == f"step{number}"
            assert parent_name(spans, spans[f"layer{2 * number + 1}"]) == f"layer{2 * number}"
            assert spans[f"layer{2 * number + 1}"].attributes[A.STEP_NUMBER] == number
        assert len({s.context.trace_id for s in spans.values()}) == 3

    def test_a_user_span_started_after_an_out_of_order_exit_nests_under_the_open_scope(self):
        tracer = trace.get_tracer("test")
        before = otel_context.get_current()
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("test")
            step = bs.enter_scope(bs.step(0))
            layer = bs.enter_scope(bs.layer(0))
            bs.exit_scope(step)
            with tracer.start_as_current_span("user"):
                pass
            bs.exit_scope(layer)
            assert otel_context.get_current() is before
            spans = by_name(captured.spans)
        assert parent_name(spans, spans["user"]) == "layer0"

    def test_exiting_twice_or_a_foreign_object_is_counted_warned_once_and_ignored(self, caplog):
        with capture_spans() as captured:
            token = bs.enter_scope(bs.brick("rms_norm"))
            bs.exit_scope(token)
            with caplog.at_level(logging.WARNING, logger="brickscope"):
                bs.exit_scope(token)
                bs.exit_scope(token)
                bs.exit_scope("not a token")
                bs.exit_scope(object())
            assert len(captured.spans) == 1
            assert captured.session.stats()["misuse"] == 4
            assert captured.session.stats()["scope_repairs"] == 0
        assert sum("ended twice" in r.message for r in caplog.records) == 1
        assert sum("expects a token" in r.message for r in caplog.records) == 1

    def test_enter_scope_on_something_that_is_not_a_scope_gives_an_inert_token(self, caplog):
        with capture_spans() as captured:
            token = bs.enter_scope("rms_norm")
            assert isinstance(token, bs.ScopeToken)
            bs.exit_scope(token)
            assert captured.spans == ()
            assert captured.session.stats()["misuse"] == 1

    def test_off_gives_an_inert_token_that_exits_quietly(self, caplog):
        token = bs.enter_scope(bs.brick("rms_norm"))  # not configured
        assert token is not None and isinstance(token, bs.ScopeToken)
        with capture_spans(enabled=False) as captured:
            inert = bs.enter_scope(bs.layer(0))
            bs.exit_scope(inert)
            bs.exit_scope(token)
            assert captured.spans == ()
            assert captured.session.stats()["misuse"] == 0
        assert not caplog.records

    def test_error_is_recorded_on_the_exited_scope(self):
        with capture_spans() as captured:
            token = bs.enter_scope(bs.brick("ffn_up"))
            bs.exit_scope(token, ValueError("bad shape"))
            (span,) = captured.spans
        assert span.status.description == "ValueError: bad shape"

    def test_start_and_end_brick_are_tokens_too(self):
        with capture_spans() as captured:
            handle = bs.start_brick("all_reduce")
            layer = bs.enter_scope(bs.layer(0))
            bs.end_brick(handle)
            bs.exit_scope(layer)
            spans = by_name(captured.spans)
            assert captured.session.stats()["scope_repairs"] == 1
        assert parent_name(spans, spans["layer0"]) == "all_reduce"


class TestContextsAndTasks:
    def test_asyncio_tasks_interleaving_tokens_keep_their_own_trees(self):
        before = otel_context.get_current()

        async def request(number, release, done):
            step = bs.enter_scope(bs.step(number))
            layer = bs.enter_scope(bs.layer(number))
            await release.wait()
            bs.exit_scope(step)  # out of order, while the other task is suspended mid-step
            await asyncio.sleep(0)
            bs.exit_scope(layer)
            done.append(otel_context.get_current())

        async def main():
            release, done = asyncio.Event(), []
            tasks = [asyncio.create_task(request(n, release, done)) for n in (1, 2)]
            await asyncio.sleep(0)
            release.set()
            await asyncio.gather(*tasks)
            return done

        with capture_spans() as captured:
            contexts_at_end = asyncio.run(main())
            spans = by_name(captured.spans)
            assert captured.session.stats()["scope_repairs"] == 2
        assert contexts_at_end == [before, before]
        assert otel_context.get_current() is before
        for number in (1, 2):
            assert parent_name(spans, spans[f"layer{number}"]) == f"step{number}"

    def test_threads_interleaving_tokens_keep_their_own_trees(self):
        barrier = threading.Barrier(4)
        leftover = []

        def work(number):
            before = otel_context.get_current()
            barrier.wait()
            for _ in range(50):
                step = bs.enter_scope(bs.step(number))
                layer = bs.enter_scope(bs.layer(number))
                brick = bs.enter_scope(bs.brick("attention_score"))
                bs.exit_scope(layer)
                bs.exit_scope(step)
                bs.exit_scope(brick)
            leftover.append(otel_context.get_current() is not before)

        with capture_spans() as captured:
            threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            spans = captured.spans
            assert captured.session.stats()["scope_repairs"] == 4 * 50 * 2
        assert leftover == [False] * 4
        assert len(spans) == 4 * 50 * 3
        ids = {s.context.span_id: s for s in spans}
        for span in spans:
            if span.name == "attention_score":
                layer = ids[span.parent.span_id]
                step = ids[layer.parent.span_id]
                assert layer.attributes[A.LAYER_INDEX] == step.attributes[A.STEP_NUMBER]
                assert span.attributes[A.THREAD_ID] == layer.attributes[A.THREAD_ID] == step.attributes[A.THREAD_ID]


class TestWithBlocksMatchTheirOwnRecord:
    def test_nested_same_name_bricks_have_exact_durations(self, clock):
        with capture_spans() as captured:
            with bs.brick("rms_norm"):
                clock.now += 10_000
                with bs.brick("rms_norm"):
                    clock.now += 27_000
                clock.now += 33_000
            durations = sorted(s.attributes[A.HOST_DURATION_NS] for s in captured.spans)
        assert durations == [27_000, 70_000]

    def test_inner_brick_entered_while_off_never_closes_the_outer(self, clock):
        with capture_spans() as captured:
            with bs.brick("rms_norm"):
                clock.now += 10_000
                bs.disable()
                with bs.brick("rms_norm"):  # records nothing
                    bs.enable()
                    clock.now += 17_000
                clock.now += 43_000
            (span,) = captured.spans
        assert span.attributes[A.HOST_DURATION_NS] == 70_000

    def test_generators_interleaving_the_same_brick_close_their_own(self, clock):
        def decode(steps):
            for _ in range(steps):
                with bs.brick("attention_score"):
                    yield

        with capture_spans() as captured:
            first, second = decode(1), decode(1)
            next(first)  # first opens at 1.000 ms
            clock.now += 5_000
            next(second)  # second opens at 1.005 ms
            clock.now += 20_000
            next(first, None)  # first closes at 1.025 ms: 25 us
            clock.now += 40_000
            next(second, None)  # second closes at 1.065 ms: 60 us
            durations = [s.attributes[A.HOST_DURATION_NS] for s in captured.spans]
            assert captured.session.stats()["scope_repairs"] == 1
        assert durations == [25_000, 60_000]

    def test_a_held_scope_object_reused_nested_closes_innermost_first(self, clock):
        with capture_spans() as captured:
            norm = bs.brick("rms_norm")
            with norm:
                clock.now += 1_000
                with norm:
                    clock.now += 2_000
                clock.now += 4_000
            with norm:
                clock.now += 8_000
            durations = [s.attributes[A.HOST_DURATION_NS] for s in captured.spans]
        assert durations == [2_000, 7_000, 8_000]

    def test_with_exit_closes_its_brick_even_below_an_open_token(self, clock):
        """A with block whose body left a token open still ends its own brick (a repair),
        and the token's scope ends later on its own."""
        with capture_spans() as captured:
            with bs.brick("attention_score"):
                clock.now += 1_000
                token = bs.enter_scope(bs.brick("all_reduce"))
                clock.now += 2_000
            clock.now += 4_000
            bs.exit_scope(token)
            spans = {s.name: s for s in captured.spans}
            assert captured.session.stats()["scope_repairs"] == 1
        assert spans["attention_score"].attributes[A.HOST_DURATION_NS] == 3_000
        assert spans["all_reduce"].attributes[A.HOST_DURATION_NS] == 6_000
        assert spans["all_reduce"].parent.span_id == spans["attention_score"].context.span_id


class TestFactoryForms:
    @pytest.mark.parametrize(
        ("make", "fields"),
        [
            (lambda: bs.brick("rms_norm", elements=4096), ("rms_norm", None, 4096)),
            (lambda: bs.brick("rms_norm", "norm"), ("rms_norm", "norm", 0)),
            (lambda: bs.brick("ffn_up", "ffn", 7), ("ffn_up", "ffn", 7)),
            (lambda: bs.brick("ffn_up", category="ffn", elements=1 << 70), ("ffn_up", "ffn", 1 << 70)),
            (lambda: bs.brick("ffn_up", elements=3, category="ffn"), ("ffn_up", "ffn", 3)),
        ],
    )
    def test_a_brick_with_category_or_elements_is_a_brick_of_its_own(self, clock, make, fields):
        """brick(name, category, elements) (built in C where the accelerator is) is a new Brick
        with exactly those fields, on and off, and its span carries them."""
        off = make()
        with capture_spans() as captured:
            on, again = make(), make()
            with on:
                clock.now += 5
        assert type(off) is type(on) is Brick and on is not again
        for scope in (off, on):
            assert (scope._name, scope._category, scope._elements, scope._stream, scope._attributes) == (*fields, None, None)
        (span,) = captured.spans
        assert span.name == fields[0]
        assert span.end_time - span.start_time == 5
        assert span.attributes.get(A.BRICK_ELEMENTS, 0) == fields[2]
        assert span.attributes[A.BRICK_CATEGORY] == fields[1] or fields[1] is None
