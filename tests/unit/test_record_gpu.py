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


def test_passes_laid_back_to_back_from_the_submit_time():
    with capture_spans() as captured:
        with bs.brick("frame"):
            submit = bs.now_ns()
            bs.record_gpu([("shadow", 120), ("gbuffer", 340), ("empty", 0)], submit, device=1, stream=2, pass_kind="vk")
        spans = {s.name: s for s in captured.spans}
    frame = spans["frame"].context.span_id
    assert [(spans[n].start_time - submit, spans[n].end_time - submit) for n in ("shadow", "gbuffer", "empty")] == [
        (0, 120), (120, 460), (460, 460)
    ]  # fmt: skip
    for name in ("shadow", "gbuffer", "empty"):
        attributes = spans[name].attributes
        assert spans[name].parent.span_id == frame
        assert (attributes[A.CLOCK], attributes[A.GPU_DEVICE_ID], attributes[A.GPU_STREAM_ID]) == ("gpu", 1, 2)
        assert attributes["pass_kind"] == "vk"


@pytest.mark.parametrize("args, error", [
    (([("a", 10), ("b", -1)], 100), ValueError),          # a negative duration
    (([("a", 10), ("b", 1.5)], 100), TypeError),          # a float duration
    (([("a", 10), "b"], 100), TypeError),                 # not a pair
    (([], 100), TypeError),                               # nothing to lay out
    (([("a", 10)], 100, 200), TypeError),                 # an end with passes
    (([("a", 10)], 0), ValueError),                       # no submit time
    (("a", 100), TypeError),                              # one name without an end
])  # fmt: skip
def test_bad_passes_raise_and_record_none(args, error):
    with capture_spans() as captured:
        with pytest.raises(error):
            bs.record_gpu(*args)
        assert captured.spans == ()


def test_now_ns_is_the_clock_spans_are_stamped_with():
    with capture_spans() as captured:
        before = bs.now_ns()
        with bs.brick("b"):
            pass
        after = bs.now_ns()
        (span,) = captured.spans
    assert before <= span.start_time <= span.end_time <= after


def test_is_enabled_follows_configure_disable_enable_shutdown():
    assert not bs.is_enabled()  # not configured
    with capture_spans() as captured:
        assert bs.is_enabled()
        bs.disable()
        assert not bs.is_enabled()
        bs.enable()
        assert bs.is_enabled()
        captured.session.shutdown()
        assert not bs.is_enabled()
