# SPDX-License-Identifier: Apache-2.0
"""Tests for the speedscope writer, validated against speedscope's published schema.

``tests/speedscope/file-format-schema.json`` is copied unchanged from the
``speedscope`` npm package 1.25.0 (``dist/release/file-format-schema.json``);
its MIT license is next to it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brickscope.exporter.flamegraph._speedscope import speedscope_document
from brickscope.exporter.flamegraph._stacks import StackAggregator
from brickscope.exporter.flamegraph._weights import Weight

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the speedscope file")

SCHEMA = json.loads((Path(__file__).parent / "speedscope" / "file-format-schema.json").read_text())


def _document(spans, weight="gpu"):
    stacks = StackAggregator(Weight.parse(weight))
    for span in spans:
        stacks.add(span)
    # Through JSON text and back, as a reader of the file would see it.
    return json.loads(json.dumps(speedscope_document(stacks.snapshot()), ensure_ascii=False))


def _two_streams_two_threads(make_span):
    step = make_span("step", host=(0, 10_000), thread=1)
    a = make_span("attn; q k", step, gpu=(100, 1_100), host=(10, 20), stream=0xA, thread=1)
    ka = make_span("kern", a, gpu=(100, 400), host=(11, 12), stream=0xA, thread=1)
    b = make_span("ffn", step, gpu=(600, 2_600), host=(30, 90), stream=0xB, thread=2)
    kb = make_span("", b, gpu=(700, 1_000), host=(31, 32), stream=0xB, thread=2)
    return [ka, a, kb, b, step]


class TestSchema:
    @pytest.mark.parametrize("weight", ["gpu", "host", "brickscope.brick.elements"])
    def test_output_validates_against_the_published_schema(self, make_span, weight):
        """The document validates against speedscope's file-format-schema.json."""
        spans = _two_streams_two_threads(make_span)
        spans[1]._attributes["brickscope.brick.elements"] = 7
        document = _document(spans, weight)
        jsonschema.validate(document, SCHEMA)  # raises ValidationError on any violation
        assert document["profiles"], "the spans must produce at least one profile"

    def test_empty_profile_validates(self):
        """A run without weighted spans still writes a valid (empty) document."""
        document = _document([])
        jsonschema.validate(document, SCHEMA)
        assert document["profiles"] == []

    def test_schema_catches_a_broken_document(self, make_span):
        """The schema copy is strict enough to reject a profile without weights."""
        document = _document(_two_streams_two_threads(make_span))
        del document["profiles"][0]["weights"]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(document, SCHEMA)


class TestContent:
    def test_one_profile_per_gpu_stream(self, make_span):
        """GPU weights give one sampled profile per stream, weights exact in nanoseconds."""
        document = _document(_two_streams_two_threads(make_span))
        profiles = {p["name"]: p for p in document["profiles"]}
        assert set(profiles) == {"svc cuda:0 stream:0xa", "svc cuda:0 stream:0xb"}
        assert all(p["unit"] == "nanoseconds" and p["type"] == "sampled" for p in profiles.values())
        assert sum(profiles["svc cuda:0 stream:0xa"]["weights"]) == 1_000
        assert sum(profiles["svc cuda:0 stream:0xb"]["weights"]) == 2_000

    def test_one_profile_per_thread_for_host_time(self, make_span):
        """Host weights give one profile per thread; the totals are the roots' host time."""
        document = _document(_two_streams_two_threads(make_span), "host")
        totals = {p["name"]: p["endValue"] for p in document["profiles"]}
        assert totals == {"svc thread t1 (1)": 10_000 - 60, "svc thread t2 (2)": 60}
        assert all(sum(p["weights"]) == p["endValue"] for p in document["profiles"])

    def test_samples_are_root_first_stacks_with_exact_names(self, make_span):
        """Samples index shared frames root first; names keep ';' and spaces."""
        document = _document(_two_streams_two_threads(make_span))
        names = [f["name"] for f in document["shared"]["frames"]]
        stacks = {
            tuple(names[i] for i in sample): weight
            for profile in document["profiles"]
            for sample, weight in zip(profile["samples"], profile["weights"], strict=True)
        }
        assert stacks == {
            ("svc", "step", "attn; q k"): 700,
            ("svc", "step", "attn; q k", "kern"): 300,
            ("svc", "step", "ffn"): 1_700,
            ("svc", "step", "ffn", "(unnamed)"): 300,
        }

    def test_samples_follow_time_order(self, make_span):
        """Within a timeline, samples are ordered by the first start of their stack."""
        late = make_span("late", gpu=(500, 600))
        early = make_span("early", gpu=(100, 200))
        document = _document([late, early])
        names = [f["name"] for f in document["shared"]["frames"]]
        (profile,) = document["profiles"]
        assert [names[sample[-1]] for sample in profile["samples"]] == ["early", "late"]

    def test_largest_profile_opens_first(self, make_span):
        """activeProfileIndex points at the profile with the largest total."""
        document = _document(_two_streams_two_threads(make_span))
        totals = [p["endValue"] for p in document["profiles"]]
        assert document["activeProfileIndex"] == totals.index(max(totals))
