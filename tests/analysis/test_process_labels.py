# SPDX-License-Identifier: Apache-2.0
"""Processes without a launcher rank: one rank each, named so a table stays readable."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from brickscope import analysis
from brickscope.testing import make_span
from brickscope.trace import attributes as A

BRICK = {A.SCOPE_KIND: "brick", A.BRICK_NAME: "ffn_up", A.BRICK_CATEGORY: "ffn"}


def _ranks(*resources: Resource) -> dict[str, int]:
    spans = [
        make_span(10 * i + j + 1, "ffn_up", 1_000 * j, 1_000 * j + 1_000, attributes=BRICK, resource=resource)
        for i, resource in enumerate(resources)
        for j in range(i + 1)
    ]
    report = analysis.analyse(analysis.load_spans(spans))
    return {rank.name: rank.count for rank in report.ranks}


def test_a_service_instance_id_is_shown_by_its_first_8_characters():
    """The SDK's service.instance.id is a UUID: 36 characters in every row of every table."""
    resource = Resource({"service.name": "train", "service.instance.id": "65dea931-9ad6-4050-b3d6-d29d7d3618aa", "host.name": "vm"})
    assert _ranks(resource) == {"train instance 65dea931 @vm": 1}


def test_two_processes_whose_ids_share_8_characters_stay_two_and_the_second_is_named_in_full():
    first = Resource({"service.name": "train", "service.instance.id": "65dea931-aaaa"})
    second = Resource({"service.name": "train", "service.instance.id": "65dea931-bbbb"})
    assert _ranks(first, second) == {"train instance 65dea931": 1, "train instance 65dea931-bbbb": 2}


def test_one_rank_attribute_is_one_rank_whatever_the_processes():
    first = Resource({A.RANK: 3, "service.instance.id": "a"})
    second = Resource({A.RANK: 3, "service.instance.id": "b"})
    assert _ranks(first, second) == {"3": 3}
