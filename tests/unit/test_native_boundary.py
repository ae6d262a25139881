# SPDX-License-Identifier: Apache-2.0
"""The one checked boundary into C: a module built for another ABI is refused, registration
takes named fields only, and the C key tables are checked by name against the Python ones."""

from __future__ import annotations

import logging
import sys
import threading
import types

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from brickscope import native
from brickscope.analysis import _table
from brickscope.sdk.trace import _spans

FAKE = "brickscope._fake_accelerator"


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(FAKE)
    monkeypatch.setitem(sys.modules, FAKE, module)
    monkeypatch.setattr(native, "PURE_PYTHON", False)
    yield module
    native._parts.pop(FAKE, None)


def c_accelerators_not_in_use(parts: dict[str, native.Implementation]) -> list[str]:
    """What a BRICKSCOPE_REQUIRE_NATIVE=1 run reports: every C accelerator loaded or refused
    whose Python fallback runs, with the reason."""
    return [f"{name}: {part.reason}" for name, part in parts.items() if part.in_use == "python"]


class TestAbiVersion:
    def test_a_module_built_for_another_abi_is_refused_with_the_reason(self, fake_module, caplog) -> None:
        """load(name, abi=N) gives None for a module whose ABI_VERSION is another, says why, and warns once."""
        fake_module.ABI_VERSION = 3
        with caplog.at_level(logging.WARNING, logger="brickscope.native"):
            assert native.load(FAKE, abi=4) is None
        assert native.implementations()[FAKE] == native.Implementation(
            in_use="python", reason="built for ABI 3, this Python expects 4"
        )
        assert len([r for r in caplog.records if FAKE in r.getMessage()]) == 1

    def test_a_module_without_an_abi_version_is_refused(self, fake_module, caplog) -> None:
        """A build from before the check (no ABI_VERSION) is a stale one."""
        with caplog.at_level(logging.WARNING, logger="brickscope.native"):
            assert native.load(FAKE, abi=1) is None
        assert native.implementations()[FAKE].reason == "built without an ABI version, this Python expects 1"

    def test_the_abi_asked_for_is_loaded(self, fake_module) -> None:
        """The same version: the module, in use."""
        fake_module.ABI_VERSION = 4
        assert native.load(FAKE, abi=4) is fake_module
        assert native.implementations()[FAKE] == native.Implementation("c", None)

    def test_a_refused_module_is_what_require_native_reports(self, fake_module) -> None:
        """The check BRICKSCOPE_REQUIRE_NATIVE=1 runs (test_native.py) names an ABI-refused module."""
        fake_module.ABI_VERSION = 2
        native.load(FAKE, abi=1)
        assert f"{FAKE}: built for ABI 2, this Python expects 1" in c_accelerators_not_in_use(native.implementations())

    def test_every_c_module_states_its_abi_version(self) -> None:
        """Each built accelerator exports the ABI_VERSION its Python side expects."""
        if native.PURE_PYTHON:
            pytest.skip("pure Python")
        from brickscope import _record

        expected = {
            "brickscope._hotpath": _record.HOTPATH_ABI,
            "brickscope._tablerows": _table._TABLEROWS_ABI,
        }
        for name, abi in expected.items():
            module = sys.modules.get(name)
            if module is None:
                assert not native.REQUIRE_NATIVE, f"{name} is not loaded"
                continue
            assert module.ABI_VERSION == abi


def test_require_native_finds_every_accelerator_in_use() -> None:
    """BRICKSCOPE_REQUIRE_NATIVE=1: no C accelerator asked for so far runs its Python fallback
    (not built, not importable, another ABI, a key table that differs)."""
    if not native.REQUIRE_NATIVE:
        pytest.skip("BRICKSCOPE_REQUIRE_NATIVE is not set")
    assert c_accelerators_not_in_use(native.implementations()) == []


@pytest.fixture
def hotpath():
    from brickscope import _record

    if _record.hotpath is None:
        pytest.skip("no C hot path")
    return _record.hotpath


class TestRegistration:
    def test_positional_arguments_are_refused(self, hotpath) -> None:
        """The registration calls take named fields only."""
        from brickscope import _record

        with pytest.raises(TypeError, match="keyword arguments only"):
            hotpath.init_stack(_record.TOP, _record.KIND_NAMES)

    def test_a_missing_field_is_named(self, hotpath) -> None:
        """A field the C side needs and the call lacks is a TypeError naming it."""
        from brickscope import _record

        with pytest.raises(TypeError, match="missing field 'kind_names'"):
            hotpath.init_stack(top=_record.TOP)

    def test_an_unknown_field_is_named(self, hotpath) -> None:
        """A field the C side does not know is a TypeError naming it (nothing registered)."""
        from brickscope import _record

        with pytest.raises(TypeError, match="unknown field 'extra'"):
            hotpath.init_stack(top=_record.TOP, kind_names=_record.KIND_NAMES, extra=1)

    def test_the_cuda_marker_takes_named_entry_points(self, hotpath) -> None:
        """CudaMarker names each driver entry point it is given."""
        with pytest.raises(TypeError, match="missing field 'cuEventRecord'"):
            hotpath.CudaMarker(timer=None, marks={}, ids=iter(()), timer_globals={}, host_ns=None, clock_globals={})


SPAN_MAKER_FIELDS = (
    "span_type", "context_type", "key_names", "keys", "fields", "clock_host", "clock_cuda", "epoch",
    "counts", "gpu_interval", "resolved", "resolve", "hash_of", "sampled", "trace_state", "span_kind", "status",
    "scope", "getrandbits", "id_lock", "assign_span_id", "id_generator", "provider", "recorder",
)  # fmt: skip


class TestSpanKeys:
    def test_the_c_key_table_is_the_python_one(self, hotpath) -> None:
        """The span maker's keys, by name, are sdk/trace/_spans.py's, in its order."""
        assert tuple(hotpath.SPAN_KEYS) == _spans._MAKER_KEY_NAMES
        assert _spans._key_mismatch(hotpath.SPAN_KEYS) is None

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda names: (names[1], names[0], *names[2:]), "span key 0 is HOST_START_NS, sdk/trace/_spans.py has SCOPE_KIND"),
            (lambda names: (*names[:3], "THREAD_IDENT", *names[4:]), "span key 3 is THREAD_IDENT"),
            (lambda names: names[:-1], "17 span keys, sdk/trace/_spans.py 18"),
        ],
        ids=["reordered", "renamed", "one-fewer"],
    )
    def test_a_c_key_table_that_differs_is_detected(self, change, message) -> None:
        """A C build whose key table is reordered, renamed or shorter is found at import (and refused)."""
        mismatch = _spans._key_mismatch(change(_spans._MAKER_KEY_NAMES))
        assert mismatch is not None and message in mismatch

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda names: (names[1], names[0], *names[2:]), r"key_names\[0\] is HOST_START_NS, the C table has SCOPE_KIND"),
            (lambda names: (*names[:3], "THREAD_IDENT", *names[4:]), r"key_names\[3\] is THREAD_IDENT, the C table has THREAD_ID"),
        ],
        ids=["reordered", "renamed"],
    )
    def test_the_span_maker_refuses_keys_that_differ(self, hotpath, change, message) -> None:
        """SpanMaker's registration compares the key names with its own table, by name and order."""
        fields = dict.fromkeys(SPAN_MAKER_FIELDS)
        fields["key_names"] = change(_spans._MAKER_KEY_NAMES)
        fields["fields"] = _spans._SPAN_FIELDS
        with pytest.raises(ValueError, match=message):
            hotpath.SpanMaker(**fields)

    def test_the_span_maker_refuses_a_span_type_whose_fields_are_not_slots(self, hotpath, monkeypatch, caplog) -> None:
        """It writes each field with one pointer store into the span type's slots: a type
        without them (a plain ReadableSpan keeps its fields in a dict) is refused at set-up,
        and the spans are built in Python."""
        monkeypatch.setattr(_spans, "SPAN_TYPE", ReadableSpan)
        builder = types.SimpleNamespace(
            _id_generator=RandomIdGenerator(), _counts={}, _gpu_interval=None,
            _provider=TracerProvider(shutdown_on_exit=False), _recorder=None,
        )  # fmt: skip
        with caplog.at_level(logging.WARNING):
            assert _spans._span_maker(builder) is None
        assert "span_type's field '_name' is not a writable slot" in caplog.text
        assert "spans are built in Python" in caplog.text


@pytest.fixture
def tablerows():
    if _table._fast is None:
        pytest.skip("no C row maker")
    return _table._fast


def _setup_fields(**changes):
    fields = dict(
        key_names=_table._KEY_NAMES, keys=_table._KEYS, columns=tuple(_table.COLUMNS),
        typecodes="".join(_table._TYPECODES[d] for d in _table.COLUMNS.values()),
        kind_codes=_table._KIND_CODES, clock_cuda="cuda", clock_gpu="gpu", hash=hash, clean=None,
    )  # fmt: skip
    fields.update(changes)
    return fields


class TestRowKeys:
    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"key_names": (_table._KEY_NAMES[1], _table._KEY_NAMES[0], *_table._KEY_NAMES[2:])}, r"key_names\[0\] is BRICK_CATEGORY"),
            ({"key_names": (*_table._KEY_NAMES[:12], "byte_count", *_table._KEY_NAMES[13:])}, r"key_names\[12\] is byte_count, the C table has bytes"),
            ({"key_names": _table._KEY_NAMES[:-1]}, r"key_names\[34\] is \(nothing\)"),
            ({"columns": ("kind", "op", *tuple(_table.COLUMNS)[2:])}, r"columns\[0\] is kind, the C table has op"),
        ],
        ids=["reordered-key", "renamed-key", "missing-key", "reordered-column"],
    )
    def test_the_row_maker_refuses_tables_that_differ(self, tablerows, changes, message) -> None:
        """setup() compares _table.py's key and column names with the C tables, by name and order."""
        with pytest.raises(ValueError, match=message):
            tablerows.setup(**_setup_fields(**changes))

    def test_a_missing_setup_field_is_named(self, tablerows) -> None:
        """setup() takes named fields only; a missing one is named."""
        fields = _setup_fields()
        del fields["clean"]
        with pytest.raises(TypeError, match="missing field 'clean'"):
            tablerows.setup(**fields)


class TestIdLock:
    def test_it_is_the_lock_span_ids_are_assigned_under(self, hotpath) -> None:
        """With the accelerator, assign_span_id and the C span maker share one IdLock."""
        from brickscope import _otel_context

        assert type(_otel_context._id_lock) is hotpath.IdLock

    def test_it_locks_as_a_threading_lock_does(self, hotpath) -> None:
        """acquire/release/locked and ``with``, as threading.Lock; releasing an unlocked one is a RuntimeError."""
        lock = hotpath.IdLock()
        assert lock.locked() is False
        with lock:
            assert lock.locked() is True
        assert lock.acquire() is True and lock.locked() is True
        lock.release()
        assert lock.locked() is False
        with pytest.raises(RuntimeError, match="release unlocked lock"):
            lock.release()

    def test_a_second_thread_waits_for_the_holder(self, hotpath) -> None:
        """A thread asking for a held lock gets it only after the holder releases it (the
        holder keeps running meanwhile: the waiter lets other threads run)."""
        lock = hotpath.IdLock()
        order = []
        started = threading.Event()

        def waiter() -> None:
            started.set()
            with lock:
                order.append("waiter")

        lock.acquire()
        thread = threading.Thread(target=waiter)
        thread.start()
        assert started.wait(10)
        order.append("holder")  # the waiter cannot have taken the lock yet
        lock.release()
        thread.join(10)
        assert order == ["holder", "waiter"]
