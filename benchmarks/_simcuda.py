# SPDX-License-Identifier: Apache-2.0
"""Load the simulated CUDA driver (tests/simdriver) into a benchmark process."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_simdriver() -> Any:
    """Build the simulator with the system C compiler and load it as this process's libcuda.so.1.

    Call before anything imports cuda-bindings' driver. Returns the ``SimDriver`` hooks.
    """
    spec = importlib.util.spec_from_file_location(
        "simdriver", ROOT / "tests" / "simdriver" / "__init__.py",
        submodule_search_locations=[str(ROOT / "tests" / "simdriver")],
    )  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules["simdriver"] = module
    spec.loader.exec_module(module)
    directory = tempfile.mkdtemp(prefix="simcuda-")
    atexit.register(shutil.rmtree, directory, True)  # the library stays mapped until exit
    lib = module.build_simdriver(Path(directory))
    return module.SimDriver.preload(lib)


def make_stream() -> tuple[Any, Any]:
    """(cuda.bindings.driver, a non-blocking stream on device 0's primary context, made current)."""
    from cuda.bindings import driver as drv

    drv.cuInit(0)
    ctx = drv.cuDevicePrimaryCtxRetain(drv.cuDeviceGet(0)[1])[1]
    drv.cuCtxSetCurrent(ctx)
    return drv, drv.cuStreamCreate(1)[1]
