# SPDX-License-Identifier: Apache-2.0
"""tests/torch: the PyTorch integration. Each module starts with ``pytest.importorskip("torch")``,
so without torch the run reports these tests as skipped, with the reason.

``make test`` installs the CPU build pinned by the ``torch`` extra (see the Makefile);
``test_environment.py`` checks that no CUDA wheel slipped in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TORCH_MISSING = "PyTorch is not installed (make test installs the CPU build: pip install torch==2.13.0 --only-binary=:all:)"


def _load_models() -> None:
    """Make tests/torch/models.py importable as ``models`` (tests are not a package)."""
    if "models" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    path = Path(__file__).resolve().parent / "models.py"
    spec = importlib.util.spec_from_file_location("models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["models"] = module
    spec.loader.exec_module(module)


_load_models()


@pytest.fixture
def no_nvtx(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instrument as on a machine without the nvtx package."""
    monkeypatch.setitem(sys.modules, "nvtx", None)
