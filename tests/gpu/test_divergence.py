# SPDX-License-Identifier: Apache-2.0
"""Output checksums of device buffers through the simulated driver, and
``brickscope diff --divergence`` naming a kernel whose output was altered mid-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import brickscope as bs
from brickscope._checksum import fnv1a64_lanes
from brickscope.cli import main
from brickscope.trace import attributes as A

pytestmark = pytest.mark.gpu
np = pytest.importorskip("numpy")
pytest.importorskip("brickscope.exporter.perfetto")

STEPS, LAYERS = 3, 2
BRICKS = (("rms_norm", "rms_fwd"), ("attention", "attn_fwd"), ("ffn", "gemm"))
ELEMENTS = 1024  # float32 outputs of 4 KiB


class DeviceArray:
    """A device buffer the way CuPy or PyTorch expose one."""

    def __init__(self, pointer: int, elements: int, stream: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (elements,), "typestr": "<f4", "data": (pointer, False), "version": 3, "strides": None,
            "stream": stream,
        }  # fmt: skip


def ok(result: Any) -> Any:
    assert int(result[0]) == 0, result
    return result[1] if len(result) == 2 else None


def output_values(step: int, layer: int, brick: int) -> Any:
    return np.arange(ELEMENTS, dtype=np.float32) * (1 + step) + 100 * layer + 10_000 * brick


def run(path: Path, simdriver: Any, *, alter: tuple[int, int, str] | None = None) -> None:
    """One run: every kernel writes its output (HtoD after simulated work on a non-blocking
    stream) and checksums it from the device. ``alter``: (step, layer, kernel) whose output
    gets one value changed."""
    from cuda.bindings import driver as drv

    from brickscope.exporter.perfetto import PerfettoSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(path)))
    session = bs.configure(provider, clock="cuda", max_delay_millis=60_000)
    assert session.clock == "cuda"
    ok(drv.cuCtxPushCurrent(ok(drv.cuDevicePrimaryCtxRetain(0))))
    stream = int(ok(drv.cuStreamCreate(0x1)))
    buffer = ok(drv.cuMemAlloc(ELEMENTS * 4))
    try:
        for step in range(STEPS):
            with bs.step(step):
                for layer in range(LAYERS):
                    with bs.layer(layer):
                        for index, (brick, kernel) in enumerate(BRICKS):
                            with bs.brick(brick, stream=stream), bs.kernel(kernel, grid=4, block=256):
                                simdriver.enqueue_kernel(stream, 20_000)
                                values = output_values(step, layer, index)
                                if alter == (step, layer, kernel):
                                    values[517] += 1.0
                                ok(drv.cuMemcpyHtoD(buffer, values.tobytes(), values.nbytes))
                                assert bs.checksum(DeviceArray(int(buffer), ELEMENTS, stream)) == fnv1a64_lanes(values)
        bs.shutdown()
    finally:
        ok(drv.cuMemFree(buffer))
        ok(drv.cuStreamDestroy(stream))
        ok(drv.cuCtxPopCurrent())


@pytest.fixture(name="runs")
def _runs(tmp_path, simdriver):
    from cuda.bindings import driver as drv

    assert int(drv.cuInit(0)[0]) == 0
    paths = {name: tmp_path / f"{name}.pftrace" for name in ("base", "again", "altered")}
    run(paths["base"], simdriver)
    run(paths["again"], simdriver)
    run(paths["altered"], simdriver, alter=(1, 1, "attn_fwd"))
    return paths


def test_checksums_reach_the_kernel_spans(runs):
    from brickscope.offline import open_spans

    with open_spans(runs["base"]) as spans:
        kernels = [s for s in spans if s.attributes.get(A.SCOPE_KIND) == "kernel"]
    assert len(kernels) == STEPS * LAYERS * len(BRICKS)
    first = next(k for k in kernels if k.name == "gemm" and k.attributes[A.STEP_NUMBER] == 2 and k.attributes[A.LAYER_INDEX] == 1)
    assert first.attributes[A.OUTPUT_CHECKSUM] == f"{fnv1a64_lanes(output_values(2, 1, 2)):016x}"
    assert first.attributes[A.OUTPUT_CHECKSUM_BYTES] == ELEMENTS * 4


def test_identical_runs_agree(runs, capsys):
    assert main(["diff", "--divergence", str(runs["base"]), str(runs["again"]), "-q"]) == 0
    out, err = capsys.readouterr()
    assert out == f"the runs agree: {STEPS * LAYERS * len(BRICKS)} checksummed outputs compared\n"
    assert err == ""


def test_the_altered_kernel_is_named(runs, capsys):
    """Step 1, layer 1, attn_fwd: 6 outputs of step 0 and 3 + 1 of step 1 agree before it."""
    assert main(["diff", "--divergence", str(runs["base"]), str(runs["altered"]), "-q"]) == 1
    out, err = capsys.readouterr()
    base = f"{fnv1a64_lanes(output_values(1, 1, 1)):016x}"
    altered_values = output_values(1, 1, 1)
    altered_values[517] += 1.0
    altered = f"{fnv1a64_lanes(altered_values):016x}"
    assert out == (
        f"first divergence: step 1, layer 1, brick attention, kernel attn_fwd (occurrence 0): BASE {base} NEW {altered}\n"
        "10 outputs agreed before it; 1 of 18 compared differ\n"
    )
    assert err == "brickscope diff: outputs diverge at step 1, layer 1, brick attention, kernel attn_fwd (occurrence 0)\n"


def test_json_and_a_run_without_checksums(runs, tmp_path, capsys):
    import json

    assert main(["diff", "--divergence", str(runs["base"]), str(runs["altered"]), "--format", "json", "-q"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (data["compared"], data["diverged"], data["first"]["kernel"], data["first"]["step"]) == (18, 1, "attn_fwd", 1)

    from brickscope.exporter.perfetto import PerfettoSpanExporter
    from brickscope.testing import capture_spans

    plain = tmp_path / "plain.pftrace"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(plain)))
    with capture_spans(provider), bs.step(0), bs.brick("rms_norm"):
        pass
    assert main(["diff", "--divergence", str(runs["base"]), str(plain), "-q"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"NEW ({plain}): no checksummed output (bs.checksum)" in err
