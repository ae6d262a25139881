# SPDX-License-Identifier: Apache-2.0
"""bs.record_gpu: GPU intervals measured elsewhere become GPU-timed spans under the current scope."""

from __future__ import annotations

import pytest

import brickscope as bs
from brickscope._clock import host_ns
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def test_span_under_the_current_scope_with_the_given_interval():
    with capture_spans() as captured:
        with bs.step(3), bs.layer(1), bs.brick("attention"):
            start = host_ns()
            bs.record_gpu("vk_attention", start + 100, start + 600, device=1, stream=7, elements=64, queue="compute")
        spans = {s.name: s for s in captured.spans}
    span = spans["vk_attention"]
    assert span.parent.span_id == spans["attention"].context.span_id
    assert (span.start_time, span.end_time) == (start + 100, start + 600)
    attributes = span.attributes
    assert attributes[A.CLOCK] == A.CLOCK_GPU == "gpu"
    assert (attributes[A.GPU_DURATION_NS], attributes[A.GPU_DEVICE_ID], attributes[A.GPU_STREAM_ID]) == (500, 1, 7)
    assert (attributes[A.SCOPE_KIND], attributes[A.STEP_NUMBER], attributes[A.LAYER_INDEX]) == ("brick", 3, 1)
    assert attributes[A.BRICK_ELEMENTS] == 64 and attributes["queue"] == "compute"
    assert attributes[A.BRICK_SELF_DURATION_NS] == 500
    assert attributes[A.HOST_START_NS] >= start  # the call's host time: the launch side
    # the enclosing brick's self time excludes the nested GPU brick
    assert spans["attention"].attributes[A.BRICK_SELF_DURATION_NS] == max(
        spans["attention"].end_time - spans["attention"].start_time - 500, 0
    )


def test_kernel_kind():
    with capture_spans() as captured:
        with bs.brick("gemm"):
            bs.record_gpu("mtl_gemm", 1_000, 3_000, kind="kernel")
        kernel = next(s for s in captured.spans if s.name == "mtl_gemm")
    assert kernel.attributes[A.SCOPE_KIND] == "kernel" and kernel.attributes[A.KERNEL_NAME] == "mtl_gemm"
    assert kernel.attributes[A.BRICK_NAME] == "gemm"


@pytest.mark.parametrize("args, kwargs, error", [
    (("x", 10, 5), {}, ValueError),
    (("x", 0, 5), {}, ValueError),
    (("x", 1.5, 5), {}, TypeError),
    (("x", 1, 5), {"device": -1}, ValueError),
    (("x", 1, 5), {"kind": "layer"}, ValueError),
    (("", 1, 5), {}, ValueError),
])  # fmt: skip
def test_bad_arguments_raise_at_the_call(args, kwargs, error):
    with capture_spans():
        with pytest.raises(error):
            bs.record_gpu(*args, **kwargs)


def test_off_records_nothing():
    bs.record_gpu("x", 1, 5)  # not configured: nothing, no error
    with capture_spans() as captured:
        bs.disable()
        bs.record_gpu("x", 1, 5)
        bs.enable()
        assert captured.spans == ()
