# SPDX-License-Identifier: Apache-2.0
"""CUDA-timed scopes on the simulated driver, run by test_native_gpu.py once per
implementation of the hot path (``BRICKSCOPE_PURE_PYTHON`` set by the test, the simulator
found through ``LD_LIBRARY_PATH``): prints the spans' structure as JSON. GPU times come from
the simulator's real clock, so they are left out; what is compared is which scopes were
GPU-timed, on which device and stream, which failed and why, the tree and the attributes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

import brickscope as bs
from brickscope import native
from brickscope.testing import SequentialIdGenerator, capture_spans
from brickscope.trace import attributes as A

TIMES = {A.HOST_START_NS, A.HOST_DURATION_NS, A.GPU_DURATION_NS, A.BRICK_SELF_DURATION_NS, A.THREAD_ID}



def simulator() -> object:
    root = Path(__file__).resolve().parents[1] / "simdriver"
    spec = importlib.util.spec_from_file_location("simdriver", root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["simdriver"] = module
    spec.loader.exec_module(module)
    lib = Path(os.environ["LD_LIBRARY_PATH"].split(":")[0]) / "libcuda.so.1"
    return module.SimDriver(lib)


def main() -> None:
    from cuda.bindings import driver as drv

    sim = simulator()
    drv.cuInit(0)
    drv.cuCtxSetCurrent(drv.cuDevicePrimaryCtxRetain(drv.cuDeviceGet(0)[1])[1])  # as torch has it
    stream = drv.cuStreamCreate(1)[1]
    handle = int(stream)
    provider = TracerProvider(id_generator=SequentialIdGenerator())
    with capture_spans(provider, clock="cuda", time_kernels=True, step_sampling="every=2") as captured:
        for number in range(3):  # step 1 is not traced: metrics only, still GPU-timed
            with bs.step(number), bs.layer(0):
                with bs.brick("attention_score", stream=handle):
                    sim.enqueue_kernel(handle, 20_000)
                    with bs.kernel("softmax_kernel", grid=8, block=128):  # the brick's stream
                        sim.enqueue_kernel(handle, 5_000)
                    with bs.brick("nested"):  # no stream of its own: the enclosing brick's
                        pass
                with bs.brick("rms_norm"):  # the legacy default stream
                    pass
                sim.inject_invalid_handle(1)  # the next event record fails
                with bs.brick("record_fails", stream=handle):
                    pass
                try:
                    with bs.brick("raises", stream=handle):
                        raise RuntimeError("in the brick")
                except RuntimeError:
                    pass
                token = bs.enter_scope(bs.brick("token", stream=handle))
                bs.exit_scope(token)
        bs.sync()
        stats = {k: v for k, v in captured.session.stats().items() if "cpu_ns" not in k}
        spans = captured.spans
    out = {
        "implementation": {part: found.in_use for part, found in native.implementations().items()},
        "stats": stats,
        "spans": [
            {
                "name": span.name,
                "span_id": span.context.span_id,
                "parent": None if span.parent is None else span.parent.span_id,
                "attributes": {k: v for k, v in sorted(span.attributes.items()) if k not in TIMES},
                "events": [e.name for e in span.events],
                "status": span.status.status_code.name,
            }
            for span in spans
        ],
    }
    print(json.dumps(out, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
