# SPDX-License-Identifier: Apache-2.0
"""``--step``: the one parser every command reads it with (brickscope.offline.parse_steps)."""

from __future__ import annotations

import argparse

import pytest

from brickscope.offline import describe_steps, parse_steps, step_argument


class TestParseSteps:
    @pytest.mark.parametrize(
        ("text", "steps"),
        [("3", (3, 4)), ("0", (0, 1)), ("2:5", (2, 5)), ("2:", (2, None)), (":5", (None, 5)), (" 2 : 5 ", (2, 5))],
    )
    def test_the_forms_a_user_types(self, text, steps):
        """N is step N alone, [N, N + 1); A:B is A <= step < B; an end left out is open."""
        assert parse_steps(text) == steps

    @pytest.mark.parametrize("text", ["", ":", "-1", "-1:3", "2:-1", "3:3", "4:2", "x", "1:y", "1.5", "1:2:3"])
    def test_anything_else_is_refused_naming_the_value(self, text):
        with pytest.raises(ValueError) as info:
            parse_steps(text)
        assert str(info.value).startswith(f"{text!r}: expected a step N, or a range A:B")
        assert "\n" not in str(info.value)

    def test_as_an_argparse_type_it_is_a_usage_error(self):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a step N"):
            step_argument("4:2")
        assert step_argument("7") == (7, 8)

    @pytest.mark.parametrize(("steps", "text"), [((3, 4), "3"), ((2, 5), "2:5"), ((2, None), "2:"), ((None, 5), ":5")])
    def test_described_as_typed(self, steps, text):
        """What a report's header says of the filter reads back to the same range."""
        assert describe_steps(steps) == text
        assert parse_steps(text) == steps
