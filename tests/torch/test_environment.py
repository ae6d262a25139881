# SPDX-License-Identifier: Apache-2.0
"""torch is an optional extra: the CPU build in the test environment, never imported by the core."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


class TestEnvironment:
    def test_the_cpu_build_is_installed(self):
        """The pinned CPU wheel, not a CUDA one: a CUDA wheel would pull GBs and is never wanted here."""
        assert torch.version.cuda is None
        assert torch.__version__.split("+")[0] == "2.13.0"

    def test_import_brickscope_does_not_import_torch(self):
        """``import brickscope`` (and configuring it) leaves torch unimported."""
        result = run_python("import sys, brickscope; brickscope.configure(); print('torch' in sys.modules)")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "False"

    def test_brickscope_torch_without_torch_says_what_to_install(self):
        """Without torch, importing brickscope.torch raises an ImportError naming the extra."""
        result = run_python(
            "import sys; sys.modules['torch'] = None\n"
            "try:\n    import brickscope.torch\nexcept ImportError as exc:\n    print(exc)"
        )
        assert result.returncode == 0, result.stderr
        assert "pip install 'brickscope[torch]'" in result.stdout
