# SPDX-License-Identifier: Apache-2.0
"""bs.checksum: the lane-parallel FNV-1a 64 against its definition written out in the test,
host buffers of every kind, and failures counted rather than raised."""

from __future__ import annotations

import array

import pytest

import brickscope as bs
from brickscope import _checksum
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

OFFSET, PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def reference(data: bytes) -> int:
    """The definition of docs/api.md, literally: pad, 256 lanes of 64-bit words, fold with the length."""
    padded = data + bytes(-len(data) % 2048)
    lanes = [OFFSET] * 256
    for k in range(len(padded) // 8):
        word = int.from_bytes(padded[8 * k : 8 * k + 8], "little")
        lanes[k % 256] = ((lanes[k % 256] ^ word) * PRIME) & MASK
    h = OFFSET
    for word in (*lanes, len(data)):
        h = ((h ^ word) * PRIME) & MASK
    return h


@pytest.mark.parametrize("size", [0, 1, 7, 8, 2047, 2048, 2049, 5000])
def test_matches_the_definition(size):
    data = bytes((i * 131 + 7) % 256 for i in range(size))
    assert _checksum.fnv1a64_lanes(data) == reference(data)
    assert _checksum._lanes_python(memoryview(data), size) == reference(data)  # the no-numpy path


def test_every_byte_counts():
    """Changing any one byte changes the checksum; trailing zeros are not padding."""
    data = bytearray(3000)
    base = _checksum.fnv1a64_lanes(data)
    for index in (0, 1, 2047, 2048, 2999):
        data[index] ^= 1
        assert _checksum.fnv1a64_lanes(data) != base
        data[index] ^= 1
    assert _checksum.fnv1a64_lanes(bytes(3000)) != _checksum.fnv1a64_lanes(bytes(3001))


def test_buffers_of_every_kind_give_the_same_checksum():
    np = pytest.importorskip("numpy")
    values = np.arange(600, dtype=np.float32)
    expected = reference(values.tobytes())
    with capture_spans() as captured:
        with bs.brick("a"):
            assert bs.checksum(values) == expected
        with bs.brick("b"):
            assert bs.checksum(array.array("f", values.tolist())) == expected
        with bs.brick("c"):
            assert bs.checksum(values.tobytes()) == expected
        with bs.brick("d"):  # not contiguous: its elements, in C order
            doubled = np.repeat(values, 2)[::2]
            assert bs.checksum(doubled) == expected
        spans = {s.name: s for s in captured.spans}
    assert {s.attributes[A.OUTPUT_CHECKSUM] for s in spans.values()} == {f"{expected:016x}"}
    assert spans["a"].attributes[A.OUTPUT_CHECKSUM_BYTES] == 2400


def test_two_outputs_of_one_scope_fold_in_call_order():
    with capture_spans() as captured:
        with bs.kernel("k"):
            bs.checksum(b"first")
            bs.checksum(b"second")
        (span,) = captured.spans
    folded = _checksum.combine(reference(b"first"), reference(b"second"))
    assert span.attributes[A.OUTPUT_CHECKSUM] == f"{folded:016x}"
    assert span.attributes[A.OUTPUT_CHECKSUM_BYTES] == 11


def test_failures_are_counted_never_raised():
    with capture_spans() as captured:
        assert bs.checksum(b"outside any scope") is None
        with bs.kernel("k"):
            assert bs.checksum(object()) is None
        (span,) = captured.spans
        assert captured.session.stats()["scope_data_dropped"] == 2
    assert A.OUTPUT_CHECKSUM not in span.attributes


def test_off_means_nothing_computed():
    assert bs.checksum(b"x") is None  # brickscope not configured
