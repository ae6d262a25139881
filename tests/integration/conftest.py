# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the integration tests: OTLP receivers on 127.0.0.1 and the test app in a subprocess.

Test modules import the helpers loaded here: ``otlp_receiver`` (the receivers and
decoded spans/points) and ``harness`` (the app runner and environments).

Example::

    from harness import otlp_env

    def test_spans_arrive(grpc_receiver, app):
        result = app.run(otlp_env(grpc_receiver), "--steps", "2")
        assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= 31, timeout_s=10)

Fixtures:
    grpc_receiver / http_receiver: a started receiver on an ephemeral port, stopped after.
    app: runs ``apps/decoder_app.py`` (or any command) in a subprocess with a clean
        environment: no ``OTEL_*``, ``BRICKSCOPE_*``, launcher or ``TRACEPARENT``
        variables from the test runner leak in; short export intervals keep it fast.
    simdriver_lib: the simulated CUDA driver, built once per session.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
_SIMDRIVER_DIR = HERE.parent / "simdriver"


def _load(name: str, path: Path, package: bool = False) -> Any:
    """Import a helper next to the tests as a top-level module (tests are not a package)."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            name, path, submodule_search_locations=[str(path.parent)] if package else None
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


otlp_receiver = _load("otlp_receiver", HERE / "otlp_receiver.py")
harness = _load("harness", HERE / "harness.py")


@pytest.fixture(autouse=True)
def _clean_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests see none of the runner's OTEL_*, BRICKSCOPE_*, launcher or TRACEPARENT variables;
    overhead and gc spans are off, as for the apps (harness.FAST_EXPORT)."""
    for key in list(os.environ):
        if harness.leaky(key):
            monkeypatch.delenv(key)
    monkeypatch.setenv("BRICKSCOPE_HOST_INTERVALS", harness.FAST_EXPORT["BRICKSCOPE_HOST_INTERVALS"])


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Any]:
    runner = harness.AppRunner(tmp_path)
    yield runner
    runner.close()


@pytest.fixture
def grpc_receiver() -> Iterator[Any]:
    with otlp_receiver.GrpcReceiver() as receiver:
        yield receiver


@pytest.fixture
def http_receiver() -> Iterator[Any]:
    with otlp_receiver.HttpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def simdriver_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated CUDA driver (``libcuda.so.1``), built once; skip without a C compiler or cuda-bindings."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler to build the simulated CUDA driver")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda-bindings) is not installed")
    simdriver = _load("simdriver", _SIMDRIVER_DIR / "__init__.py", package=True)
    return simdriver.build_simdriver(tmp_path_factory.mktemp("simcuda"))
