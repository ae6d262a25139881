# SPDX-License-Identifier: Apache-2.0
"""What the scope hot path reuses or remembers between scopes carries nothing over.

The C accelerator keeps freed records and entries for the next scopes, pops the scope stack
with the token of the push that a scope's close undoes (a ContextVar reset instead of a set), remembers the
globals it reads on every scope (``_state.recorder``, ``_state.compiling``, the recorder's
clock) until their module changes them, remembers the metrics cell of the bricks it folded
last by the identity of their name, and counts unsampled scopes in C until ``stats()``
reads them. Each is checked here through what a user can observe (spans, metrics, stats,
tokens), under both implementations (the pure-Python reference has none of them)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

import brickscope as bs
from brickscope import _record, _scope, _state
from brickscope.sdk.trace import _recorder
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

#: More scopes than the free lists keep, so that later scopes take reused memory.
MANY = 600


def _noisy_brick(number: int) -> None:
    """A brick leaving everything a record can hold: notes, an event, a status, an
    error, a span id asked for by a user span, an out-of-order end around it."""
    tracer = trace.get_tracer("test")
    outer = bs.enter_scope(bs.brick("noisy_outer"))
    try:
        with bs.brick("noisy", elements=number):
            span = trace.get_current_span()
            span.set_attribute("leftover", number)
            span.add_event("leftover_event")
            span.set_status(StatusCode.ERROR, "leftover")
            with tracer.start_as_current_span("user_child"):
                pass
            bs.exit_scope(outer)  # ends below the open brick: a repair
            raise ValueError("leftover error")
    except ValueError:
        pass


class TestReusedRecordsAndEntries:
    def test_scopes_after_many_noisy_ones_carry_nothing_of_them(self, clock):
        """Records and entries freed by noisy scopes come back for plain ones: each plain
        span has exactly its own fields, and an open token has no end time yet."""
        with capture_spans() as captured:
            with bs.step(0):
                for number in range(MANY // 4):
                    _noisy_brick(number)
            captured.session.sync()
            noisy = [s for s in captured.spans if s.name == "noisy"]
            assert len(noisy) == MANY // 4 and all(s.events and s.status.status_code is StatusCode.ERROR for s in noisy)
            captured.exporter.clear()
            with bs.step(1):
                token = bs.enter_scope(bs.brick("held"))  # the noisy records are free now
                assert not hasattr(token, "host_end") and token.error is None and token.notes is None
                assert token.span_id == 0 and token.span_context is None and token.ended is False
                for _ in range(MANY):
                    with bs.brick("plain"):
                        clock.now += 3
                    if _ % 100 == 99:
                        captured.session.sync()  # plain records freed and reused too
                clock.now += 2
                bs.exit_scope(token)
            captured.session.sync()
            plain = [s for s in captured.spans if s.name == "plain"]
            stats = captured.session.stats()
        assert len(plain) == MANY
        held = next(s for s in captured.spans if s.name == "held")
        expected = {
            A.SCOPE_KIND: "brick",
            A.BRICK_NAME: "plain",
            A.HOST_DURATION_NS: 3,
            A.BRICK_SELF_DURATION_NS: 3,
            A.STEP_NUMBER: 1,
        }
        for span in plain:
            assert not span.events and span.status.status_code is StatusCode.UNSET
            assert "leftover" not in span.attributes and A.BRICK_ELEMENTS not in span.attributes
            assert {key: span.attributes.get(key) for key in expected} == expected
            assert span.parent.span_id == held.context.span_id
        assert stats["scope_repairs"] == MANY // 4

    def test_entries_reused_for_new_uses_hold_no_record(self, clock):
        """A fresh entry (brick(name) while recording) has no record until entered, even
        when its memory is an old entry's."""
        with capture_spans() as captured:
            with bs.step(0):
                for _ in range(MANY):
                    with bs.brick("rms_norm"):
                        clock.now += 1
                entry = bs.brick("rms_norm")
                assert not hasattr(entry, "_record")
                with entry:
                    clock.now += 1
            captured.session.sync()
            assert len([s for s in captured.spans if s.name == "rms_norm"]) == MANY + 1

    def test_a_with_statements_methods_reused_stay_bound_to_their_own_scope(self, clock):
        """``__enter__``/``__exit__`` bound by many with-statements (in C from freed bound
        methods): one taken earlier still ends its own brick, and each method behaves as a
        method, here as in the reference (bound, called on the class, arguments checked)."""
        with capture_spans() as captured:
            with bs.step(0):
                held = bs.brick("held")
                exit_held = held.__exit__
                assert held.__enter__.__self__ is held and exit_held.__self__ is held
                held.__enter__()
                for _ in range(MANY):
                    with bs.brick("inner", elements=1):
                        clock.now += 1
                exit_held(None, None, None)
                shared = bs.brick("shared", elements=2)
                type(shared).__enter__(shared)
                clock.now += 1
                type(shared).__exit__(shared, None, None, None)
                with pytest.raises(TypeError):
                    shared.__enter__(1)
            captured.session.sync()
        held_span = next(s for s in captured.spans if s.name == "held")
        assert held_span.end_time - held_span.start_time == MANY
        assert [s.end_time - s.start_time for s in captured.spans if s.name == "shared"] == [1]

    def test_a_cycle_through_a_suspended_with_statement_is_collected(self):
        """A generator paused inside ``with scope:`` holds the bound ``__exit__``; a reference
        cycle through it (the scope refers back to the generator) is still found by the
        garbage collector."""

        class Tagged(bs.Brick):
            pass  # instances get a __dict__

        def paused(scope: Tagged):
            with scope:
                yield

        scope = Tagged("paused")  # brickscope off: nothing else (no open record) holds it
        scope.generator = paused(scope)
        next(scope.generator)
        gone = weakref.ref(scope)
        del scope
        gc.collect()
        assert gone() is None

    def test_bricks_built_per_call_after_other_scopes_are_freed_are_plain_bricks(self):
        """brick(name, category, elements) builds a Brick per call (in C from freed scope
        objects of any kind): each has exactly its own fields and no index."""
        with capture_spans():
            for number in range(MANY):
                _scope.Layer(number, note=number), _scope.Step(number), _scope.Kernel("k", grid=(1,))
                bs.brick("ffn_up", "ffn", number)
            for number in range(MANY):
                brick = bs.brick("rms_norm", elements=number + 1)
                assert type(brick) is _scope.Brick
                fields = (brick._name, brick._category, brick._elements, brick._stream, brick._attributes)
                assert fields == ("rms_norm", None, number + 1, None, None)
                assert not hasattr(brick, "_index")
                assert (brick._kind, brick._host_only, brick._external) == (2, False, False)


class TestHostTimes:
    def test_the_host_clock_times_of_a_token_read_as_ints(self):
        """On the real clock (read in C, kept as C integers until read), an open token has
        a start and no end; a closed one both, as ints; both can be set and read back."""
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF)):
            with bs.step(0):
                for _ in range(MANY):
                    with bs.brick("rms_norm"):  # folded and freed with both times
                        pass
                token = bs.enter_scope(bs.brick("rms_norm"))
                assert type(token.host_start) is int and not hasattr(token, "host_end")
                bs.exit_scope(token)  # unsampled: folded where it ends
                assert type(token.host_end) is int and token.host_end >= token.host_start
                start = token.host_start
                token.host_end = start + 7
                assert token.host_end - token.host_start == 7
                del token.host_end
                assert not hasattr(token, "host_end")
                with pytest.raises(AttributeError):
                    del token.host_end


class TestGlobalsReadOnEveryScope:
    def test_switching_off_and_on_between_scopes_is_seen_at_once(self, clock):
        with capture_spans() as captured:
            for number in range(6):
                if number % 2:
                    bs.disable()
                else:
                    bs.enable()
                with bs.step(number), bs.brick("rms_norm"):
                    clock.now += 1
            bs.enable()
            captured.session.sync()
            steps = sorted(s.attributes[A.STEP_NUMBER] for s in captured.spans if s.name == "step")
        assert steps == [0, 2, 4]

    def test_a_clock_replaced_after_scopes_ran_is_the_one_read(self, monkeypatch):
        with capture_spans() as captured:
            for _ in range(10):
                with bs.step(0), bs.brick("warm"):
                    pass
            readings = iter([1_000, 1_010, 1_040, 1_100])
            monkeypatch.setattr(_recorder, "perf_counter_ns", lambda: next(readings))
            with bs.step(1), bs.brick("driven"):
                pass
            captured.session.sync()
            spans = {s.name: s for s in captured.spans if s.name != "warm"}
        assert spans["driven"].attributes[A.HOST_DURATION_NS] == 30
        assert spans["step"].attributes[A.HOST_DURATION_NS] == 100

    def test_a_compiling_hook_set_after_scopes_ran_is_asked(self, clock, monkeypatch):
        with capture_spans() as captured:
            with bs.step(0), bs.brick("before"):
                clock.now += 1
            monkeypatch.setattr(_state, "compiling", lambda: True)
            with bs.step(1), bs.brick("while_compiling"):
                clock.now += 1
            monkeypatch.setattr(_state, "compiling", None)
            with bs.step(2), bs.brick("after"):
                clock.now += 1
            captured.session.sync()
            names = sorted(s.name for s in captured.spans if s.name != "step")
        assert names == ["after", "before"]


class TestFoldsByName:
    def test_equal_names_built_apart_and_categories_fold_into_their_own_sums(self, clock, counters):
        """Brick names that are equal but distinct objects, and one name under several
        categories, interleaved: each (brick, category) gets exactly its bricks."""
        reader = InMemoryMetricReader()
        provider = TracerProvider(sampler=ALWAYS_OFF)
        with capture_spans(provider, meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            with bs.step(0), bs.layer(0):
                for number in range(300):
                    name = "".join(["ffn", "_up"])  # a new str object each time
                    with bs.brick(name, elements=1):
                        clock.now += 1
                    with bs.brick("ffn_up", category=("custom", "other")[number % 2], elements=2):
                        clock.now += 2
                    with bs.brick("rms_norm"):
                        clock.now += 3
            captured.session.sync()
            assert counters(reader) == {
                ("ffn_up", "ffn"): (300, pytest.approx(300e-9), 300),
                ("ffn_up", "custom"): (150, pytest.approx(300e-9), 300),
                ("ffn_up", "other"): (150, pytest.approx(300e-9), 300),
                ("rms_norm", "norm"): (300, pytest.approx(900e-9), None),
            }


class TestUnsampledCount:
    def test_stats_count_every_unsampled_scope_when_read(self, clock):
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF)) as captured:
            with bs.step(0), bs.layer(0):
                for _ in range(7):
                    with bs.brick("rms_norm"):
                        clock.now += 1
                assert captured.session.stats()["scopes_unsampled"] == 7
            assert captured.session.stats()["scopes_unsampled"] == 9
            assert captured.session.stats()["scopes_unsampled"] == 9  # read twice: counted once


class TestStackPopsWhereTheyPushed:
    def test_a_close_in_a_copied_context_leaves_the_original_stack_alone(self, clock):
        """The innermost scope closed from a copy of the context it opened in (its push
        cannot be undone there by the token): each context keeps its own stack."""
        with capture_spans() as captured:
            with bs.step(0):
                outer = bs.enter_scope(bs.brick("outer"))
                inner = bs.enter_scope(bs.brick("inner"))
                copy = contextvars.copy_context()
                copy.run(bs.exit_scope, inner)
                assert copy.run(_record.TOP.get) is outer
                assert _record.TOP.get() is inner and inner.ended
                with bs.brick("after"):
                    clock.now += 1
                assert _record.TOP.get() is outer
                bs.exit_scope(outer)
            captured.session.sync()
            spans = {s.name: s for s in captured.spans}
        assert spans["inner"].parent.span_id == spans["outer"].context.span_id
        assert spans["after"].parent.span_id == spans["inner"].context.span_id
        assert _record.TOP.get() is None

    def test_tasks_started_inside_a_brick_nest_under_it_after_it_ended(self, clock):
        """A task copies the stack when it is created: its scopes nest under the brick open
        then, even once the brick has ended; when they end, the ended brick leaves the
        task's stack too."""

        async def child():
            await asyncio.sleep(0)
            with bs.brick("in_task"):
                clock.now += 1
            return _record.TOP.get()

        async def main():
            with bs.step(0), bs.layer(0):
                with bs.brick("spawner"):
                    task = asyncio.create_task(child())
                    clock.now += 1
                top_after = _record.TOP.get()
                task_top = await task
                return top_after, task_top

        with capture_spans() as captured:
            top_after, task_top = asyncio.run(main())
            spans = {s.name: s for s in captured.spans}
        assert top_after.owner._name == "layer" and task_top is top_after  # the ended spawner surfaced
        assert spans["in_task"].parent.span_id == spans["spawner"].context.span_id
