# SPDX-License-Identifier: Apache-2.0
"""brickscope.offline.impossible: the one rule the readers apply to every span."""

from __future__ import annotations

import pytest

from brickscope.offline import describe_impossible, impossible
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
GPU = A.GPU_DURATION_NS
SELF = A.BRICK_SELF_DURATION_NS


@pytest.mark.parametrize(
    ("start", "end", "attributes", "reason"),
    [
        (T0, T0 + 100, {}, None),
        (T0, T0, {SELF: 0, GPU: 0}, None),  # zero length is possible
        (T0, 0, {}, "no_end_time"),
        (T0, None, {}, "no_end_time"),
        (0, T0, {}, "no_start_time"),  # a duration of 54 years
        (0, 10**18 - 1, {}, None),  # both times small: a span near the clock's origin
        (0, 0, {}, None),
        (0, 0, {SELF: -1}, "negative_duration"),
        (T0 + 1, T0, {}, "end_before_start"),
        (T0 + 1, T0, {SELF: -1}, "end_before_start"),  # times first
        (T0, T0 + 100, {SELF: -1}, "negative_duration"),
        (T0, T0 + 100, {A.HOST_DURATION_NS: -1}, "negative_duration"),
        (T0, T0 + 100, {A.TILE_DURATION_NS.format("midi"): -0.5}, "negative_duration"),
        (T0, T0 + 100, {GPU: -1}, "negative_duration"),
        (T0, T0 + 100, {SELF: 101}, "inconsistent_duration"),
        (T0, T0 + 100, {SELF: 100}, None),
        (T0, T0 + 100, {GPU: 1_100}, None),  # 1000 ns off: within the tolerance
        (T0, T0 + 100, {GPU: 1_101}, "inconsistent_duration"),
        (T0, T0 + 5_000, {GPU: 3_999}, "inconsistent_duration"),
        (T0, T0 + 100, {SELF: -1, GPU: 5_000}, "negative_duration"),  # negative before inconsistent
        (T0, T0 + 100, {SELF: "-1", GPU: True, A.HOST_DURATION_NS: None}, None),  # not numbers: not judged
    ],
)
def test_the_rule(start, end, attributes, reason):
    """Each case's reason, by the documented order of precedence."""
    assert impossible(start, end, attributes) == reason


def test_describe_lists_reasons_in_their_order():
    """The words follow IMPOSSIBLE_REASONS' order, whatever the dict's, and skip zero counts."""
    counts = {"inconsistent_duration": 1, "no_end_time": 1_234, "end_before_start": 0}
    assert describe_impossible(counts) == (
        "1,234 with no end time, 1 with duration attribute disagreeing with end - start"
    )


def test_the_otlp_json_wrapper_warns_of_what_it_left_out(tmp_path, caplog):
    """brickscope.otlp_json.read_spans yields the possible spans and logs one line for the rest."""
    import json

    from brickscope.otlp_json import read_spans

    spans = [
        {"traceId": "0" * 31 + "1", "spanId": f"{i:016x}", "name": f"s{i}", "startTimeUnixNano": str(T0), **end}
        for i, end in ((1, {"endTimeUnixNano": str(T0 + 5)}), (2, {}))
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    assert [span.name for span in read_spans(path)] == ["s1"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{path}: 1 impossible span left out (1 with no end time)"
    ]
