# SPDX-License-Identifier: Apache-2.0
"""The table's C row maker (brickscope._tablerows): which implementation runs, and that it
makes exactly the rows the pure-Python reference (TableBuilder._row) makes, on the golden
traces, on spans with every kind of odd value, and through add() as through add_records()."""

from __future__ import annotations

import importlib
import importlib.util
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry.sdk.resources import Resource

from brickscope import native
from brickscope.analysis import _table
from brickscope.analysis._table import COLUMNS, TableBuilder
from brickscope.offline import open_records
from brickscope.testing import make_span
from brickscope.trace import attributes as A

NAME = "brickscope._tablerows"
GOLDEN = sorted((Path(__file__).parents[1] / "golden").glob("*.pftrace"))


def test_the_implementation_in_use_is_the_one_asked_for():
    in_use = native.implementations()[NAME].in_use
    if native.PURE_PYTHON:
        assert in_use == "python" and _table._fast is None
    elif native.REQUIRE_NATIVE:
        assert in_use == "c", f"BRICKSCOPE_REQUIRE_NATIVE=1 but {NAME} was not built or does not import"
    assert (_table._fast is not None) == (in_use == "c")


@pytest.fixture(name="fast")
def _fast():
    """The C module, imported directly (also in the pure-Python pass: the comparison needs it)."""
    if importlib.util.find_spec(NAME) is None:
        if native.REQUIRE_NATIVE:
            pytest.fail(f"{NAME} is not built")
        pytest.skip(f"{NAME} is not built here (no C compiler?): nothing to compare")
    module = importlib.import_module(NAME)
    if _table._fast is None:  # the pure-Python pass imported _table without it: set it up
        _table._configure_accelerator(module)
    return module


def _table_of(fast, monkeypatch, fill, max_rows=None):
    """The table ``fill(builder)`` builds with row maker ``fast`` (None: the Python one), as
    plain lists, with what its codes stand for and its counts."""
    monkeypatch.setattr(_table, "_fast", fast)
    builder = TableBuilder(max_rows=max_rows)
    fill(builder)
    table = builder.build(backend=_python_backend())
    columns = {}
    for name in COLUMNS:
        values = list(table[name])
        if COLUMNS[name] == "float64":  # NaN != NaN: compare their text
            values = [repr(v) if math.isnan(v) else v for v in values]
        columns[name] = values
    codes = (table.operations, table.categories, table.ranks, table.devices, table.streams, table.launches)
    return columns, codes, table.rows, table.dropped, table.kernel_sources


def _python_backend():
    from brickscope.analysis._backend import get_backend

    return get_backend("python")


def _outcome(fast, monkeypatch, fill, max_rows):
    """The table, or the error a value the table cannot take raises (type and message)."""
    try:
        return _table_of(fast, monkeypatch, fill, max_rows)
    except Exception as exc:  # compared, not swallowed
        return type(exc), str(exc)


def _assert_same(fast, monkeypatch, fill, max_rows=None):
    expected = _outcome(None, monkeypatch, fill, max_rows)
    assert _outcome(fast, monkeypatch, fill, max_rows) == expected
    return expected


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_traces_make_the_same_rows(fast, monkeypatch, path):
    with open_records(path) as stream:
        records = list(stream)

    def fill(builder):
        builder.add_records(records)

    _, _, rows, _, _ = _assert_same(fast, monkeypatch, fill)
    assert rows == len(records) > 0


def test_a_truncated_trace_makes_the_same_rows(fast, monkeypatch, tmp_path):
    data = GOLDEN[0].read_bytes()
    path = tmp_path / "cut.pftrace"
    path.write_bytes(data[: len(data) * 2 // 3])
    with open_records(path, allow_truncated=True) as stream:
        records = list(stream)
    assert records

    def fill(builder):
        builder.add_records(records)

    _assert_same(fast, monkeypatch, fill)


RESOURCES = [
    Resource({"service.name": "a", A.RANK: 0, A.HOST_NAME: "h", A.GPU_DEVICE_NAMES: ("H100",)}),
    Resource({"service.name": "b", "process.pid": 7}),
]
_ODD = st.one_of(
    st.none(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.sampled_from(["", "3", "x", "0x10", "9f86d081884c7d65", "cuda", "gpu", "host", "brick", "kernel"]),
    st.lists(st.integers(0, 8), max_size=3).map(tuple),
)
_ID_EDGES = [-1, 0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, (1 << 64) + 5, -(1 << 63), -(1 << 64), 1 << 70, True]
_KIND = st.sampled_from([None, "brick", "kernel", "step", "layer", "other", "", 3])
_CLOCK = st.sampled_from([None, A.CLOCK_CUDA, A.CLOCK_GPU, "host", 1])
_TEXT = st.sampled_from([None, "", "attention", "communication", "all_reduce", 5])
_SPAN = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["rms_norm", "all_reduce", "gemm_kernel", "step", ""]),
        "start": st.one_of(st.none(), st.integers(0, 1 << 62)),
        "length": st.integers(0, 1 << 20),
        # the edges of the uint64 id columns: what fits is stored exactly, the rest is cleaned
        "span_id": st.one_of(st.integers(1, (1 << 64) - 1), st.sampled_from(_ID_EDGES)),
        "parent_id": st.one_of(st.integers(0, (1 << 64) - 1), st.sampled_from(_ID_EDGES)),
        "resource": st.integers(0, len(RESOURCES) - 1),
        "attributes": st.fixed_dictionaries(
            {},
            optional={
                A.SCOPE_KIND: _KIND,
                A.BRICK_CATEGORY: _TEXT,
                A.BRICK_NAME: st.sampled_from([None, "", "ffn", "all_reduce"]),
                A.CLOCK: _CLOCK,
                A.GPU_DEVICE_ID: st.one_of(st.integers(0, 2), _ODD),
                A.GPU_STREAM_ID: st.one_of(st.integers(0, 3), _ODD),
                A.BRICK_SELF_DURATION_NS: _ODD,
                A.STEP_NUMBER: _ODD,
                A.LAYER_INDEX: _ODD,
                A.THREAD_ID: _ODD,
                A.BRICK_ELEMENTS: _ODD,
                A.WORK_BYTES: _ODD,
                "bytes": _ODD,
                A.WORK_OUTPUT_SHAPE: st.one_of(st.just((4, 8)), _ODD),
                A.WORK_DTYPE: st.sampled_from(["float16", "torch.float32", "weird", 3]),
                A.WORK_FLOPS: _ODD,
                "tokens": _ODD,
                A.KERNEL_GRID: st.one_of(st.just((4, 1, 1)), st.just("[2, 1, 1]"), _ODD),
                A.KERNEL_SHARED_MEM_BYTES: _ODD,
                A.KERNEL_SOURCE_HASH: _ODD,
                A.OUTPUT_CHECKSUM: _ODD,
                A.TILE_COUNT.format("micro"): _ODD,
            },
        ),
    }
)


def _records(spans):
    out = []
    for span in spans:
        start = span["start"]
        end = None if start is None else start + span["length"]
        resource = RESOURCES[span["resource"]]
        parent = span.get("parent_id", 1)
        out.append((span["name"], start, end, span["span_id"], parent, resource, dict(span["attributes"])))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=st.lists(_SPAN, max_size=30), bound=st.one_of(st.none(), st.integers(0, 20)))
def test_generated_spans_make_the_same_rows(fast, monkeypatch, spans, bound):
    """Values of every type in every attribute (strings for numbers, floats, huge and
    negative ints, booleans, NaN, shapes, launch configurations, hashes), never-ended spans,
    new and known codes: the C rows are the Python rows, values cleaned the same way."""
    records = _records(spans)

    def fill(builder):
        builder.add_records(records[: len(records) // 2])
        builder.add_records(iter(records[len(records) // 2 :]))

    _assert_same(fast, monkeypatch, fill, max_rows=bound)


def test_add_and_add_records_make_the_same_rows(fast, monkeypatch):
    """A live session's add() (its pending spans become rows a batch later) and a loader's
    add_records(), mixed: same rows in the order the spans came, with either row maker."""
    resource = RESOURCES[0]
    attributes = {A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "ffn", A.CLOCK: A.CLOCK_CUDA, A.GPU_DEVICE_ID: 0,
                  A.GPU_STREAM_ID: 7, A.STEP_NUMBER: 1, A.BRICK_SELF_DURATION_NS: 30}  # fmt: skip
    spans = [make_span(10 + i, f"b{i % 3}", 1000 * i, 1000 * i + 50, None, attributes=attributes, resource=resource)
             for i in range(6)]  # fmt: skip
    records = [(s.name, s.start_time, s.end_time, s.context.span_id, 0, resource, dict(s.attributes)) for s in spans]

    def fill(builder):
        builder.add(spans[0])
        builder.add_records(records[1:3])
        builder.add_all(spans[3:5])
        builder.add_records(records[5:])

    columns, codes, rows, dropped, _ = _assert_same(fast, monkeypatch, fill)
    assert rows == 6 and dropped == 0
    assert columns["span_id"] == [10, 11, 12, 13, 14, 15]
    assert columns["self"] == [30] * 6 and columns["device"] == [0] * 6 and columns["stream"] == [0] * 6
    assert [op.name for op in codes[0]] == ["b0", "b1", "b2"]


def test_a_bound_counts_what_it_leaves_out(fast, monkeypatch):
    records = _records([{"name": "x", "start": 5, "length": 1, "span_id": i + 1, "resource": 0,
                         "attributes": {A.SCOPE_KIND: "brick"}} for i in range(10)])  # fmt: skip

    def fill(builder):
        builder.add_records(records[:4])
        builder.add_records(records[4:])

    columns, _, rows, dropped, _ = _assert_same(fast, monkeypatch, fill, max_rows=7)
    assert (rows, dropped) == (7, 3)
    assert columns["span_id"] == [1, 2, 3, 4, 5, 6, 7]


def test_dicts_that_share_key_objects_in_changing_orders_make_the_same_rows(fast, monkeypatch):
    """The C row maker finds a key by identity when the previous dict had that very key
    object at that position (a brickscope span's dict repeats the previous one's): dicts
    with the same key objects in another order, a position holding another key, extra and
    missing keys, a key that is not a table key, and an equal key that is another object
    all make the rows the Python one makes."""
    resource = RESOURCES[0]
    brick = {A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "ffn", A.CLOCK: A.CLOCK_CUDA, A.GPU_DEVICE_ID: 0,
             A.GPU_STREAM_ID: 7, A.STEP_NUMBER: 1, A.LAYER_INDEX: 2, A.BRICK_SELF_DURATION_NS: 30}  # fmt: skip
    reordered = dict(reversed(list(brick.items())))
    layer = {A.SCOPE_KIND: "layer", A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: 1, A.LAYER_INDEX: 2}
    other_keys = {A.SCOPE_KIND: "brick", "user.key": 5, A.CLOCK: A.CLOCK_CUDA, A.BRICK_SELF_DURATION_NS: 40}
    copied_key = {"".join(A.SCOPE_KIND): "kernel", A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: 3}  # equal, not identical
    dicts = [brick, brick, reordered, layer, brick, other_keys, brick, copied_key, layer, reordered]
    records = [(f"op{i % 4}", 100 * i, 100 * i + 50, i + 1, 0, resource, dict(d)) for i, d in enumerate(dicts)]

    def fill(builder):
        builder.add_records(records)

    columns, _, rows, _, _ = _assert_same(fast, monkeypatch, fill)
    assert rows == len(dicts)


def test_many_operations_interleaved_in_one_batch_make_the_same_rows(fast, monkeypatch):
    """The C row maker keeps a batch's operation codes in a 64-entry cache by name object:
    300 operations (more than its entries, so names share entries and evict each other),
    equal names of different kinds and categories, and names that are equal but other
    objects, interleaved in one batch, make the Python rows; each row names its own
    operation."""
    resource = RESOURCES[0]
    names = [f"op{i}" for i in range(100)]
    records = []
    for i in range(900):
        name = names[(i * 37) % 100] if i % 5 else "".join(names[i % 100])  # an equal copy every fifth row
        kind, category = [("brick", "ffn"), ("brick", "attention"), ("kernel", "ffn")][i % 3]
        attributes = {A.SCOPE_KIND: kind, A.BRICK_CATEGORY: category, A.CLOCK: A.CLOCK_HOST}
        records.append((name, 10 * i, 10 * i + 5, i + 1, 0, resource, attributes))

    def fill(builder):
        builder.add_records(records)

    columns, codes, rows, _, _ = _assert_same(fast, monkeypatch, fill)
    assert rows == 900
    operations = codes[0]
    for i, record in enumerate(records):
        op = operations[columns["op"][i]]
        assert (op.name, op.category) == (record[0], record[6][A.BRICK_CATEGORY])
