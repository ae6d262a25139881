# SPDX-License-Identifier: Apache-2.0
"""``import brickscope`` stays light: the OpenTelemetry SDK loads on first use (PEP 562)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def modules_after(code: str) -> list[str]:
    script = textwrap.dedent(
        f"""
        import sys
        {code}
        print("\\n".join(sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "torch")))))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_import_brickscope_loads_no_sdk_module():
    assert modules_after("import brickscope") == []


def test_scopes_work_without_the_sdk_until_configure():
    loaded = modules_after(
        """
        import brickscope as bs
        with bs.step(0), bs.layer(1), bs.brick("rms_norm"):
            pass
        bs.exit_scope(bs.enter_scope(bs.brick("ffn_up")))
        """
    )
    assert loaded == []


def test_the_public_names_load_it_when_used():
    loaded = modules_after(
        """
        import brickscope as bs
        from brickscope import GpuSyncSpanProcessor
        assert callable(bs.configure) and bs.Session and bs.CategoryAggregator
        """
    )
    assert "opentelemetry.sdk.trace" in loaded
