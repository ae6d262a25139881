# SPDX-License-Identifier: Apache-2.0
"""Fixtures for GPU tests: the simulated CUDA driver, built once per session.

Example::

    pytestmark = pytest.mark.gpu

    def test_kernel_time(simdriver, cuda_timer):
        ref = cuda_timer.stream_ref(None)
        start = cuda_timer.mark(ref)
        simdriver.enqueue_kernel(ref.handle, 2_000_000)

Fixtures:
    simdriver_lib: session; the built ``libcuda.so.1`` (a temporary directory).
    simdriver: the simulator loaded in this process (RTLD_GLOBAL pre-load, so the
        real cuda-bindings use it), reset before each test.
    simdriver_env: environment for a subprocess that should load the simulator
        through ``LD_LIBRARY_PATH``.
    cuda_timer: a ``CudaTimer`` on the simulator, closed after the test.

Once loaded, the simulator stays this process's CUDA driver. Outside a test
that uses ``simdriver`` it reports zero devices, so other in-process code sees
"no CUDA device" (cuInit: CUDA_ERROR_NO_DEVICE); tests that need "no driver
library at all" must run in a subprocess.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_SIMDRIVER_DIR = Path(__file__).resolve().parents[1] / "simdriver"


def import_simdriver() -> ModuleType:
    """Import tests/simdriver as the module ``simdriver`` (tests are not a package)."""
    module = sys.modules.get("simdriver")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "simdriver", _SIMDRIVER_DIR / "__init__.py", submodule_search_locations=[str(_SIMDRIVER_DIR)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["simdriver"] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def simdriver_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the simulated driver once per session; skip if there is no C compiler."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler to build the simulated CUDA driver")
    return import_simdriver().build_simdriver(tmp_path_factory.mktemp("simcuda"))


@pytest.fixture(scope="session")
def _simdriver_loaded(simdriver_lib: Path) -> Iterator[Any]:
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda-bindings) is not installed")
    sim = import_simdriver().SimDriver.preload(simdriver_lib)
    from cuda.bindings import driver

    before = sim.calls("cuDriverGetVersion")
    driver.cuDriverGetVersion()
    if sim.calls("cuDriverGetVersion") == before:
        pytest.skip("another libcuda.so.1 was loaded before the simulator; run the GPU tests in a fresh process")
    yield sim
    sim.reset()
    sim.set_device_count(0)


@pytest.fixture
def simdriver(_simdriver_loaded: Any) -> Iterator[Any]:
    """The in-process simulator, reset before the test; it has no device between tests.

    Between tests the simulator reports zero devices, so code that runs later in
    this process without the fixture (CPU tests of ``clock="auto"``) sees "no CUDA
    device", as it would on a machine without a GPU.
    """
    _simdriver_loaded.reset()
    yield _simdriver_loaded
    _simdriver_loaded.reset()
    _simdriver_loaded.set_device_count(0)


@pytest.fixture
def simdriver_env(simdriver_lib: Path) -> dict[str, str]:
    """Environment that makes a subprocess load the simulator (LD_LIBRARY_PATH)."""
    return import_simdriver().subprocess_env(simdriver_lib)


@pytest.fixture
def cuda_timer(simdriver: Any) -> Iterator[Any]:
    """A CudaTimer on the freshly reset simulator; closed after the test."""
    from brickscope._gpu import CudaTimer

    timer = CudaTimer()
    yield timer
    timer.close()
