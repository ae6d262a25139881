# SPDX-License-Identifier: Apache-2.0
"""``import brickscope`` stays light: the OpenTelemetry SDK loads on first use (PEP 562)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


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


def test_the_sdk_names_bind_every_lazy_name_and_drop_the_hook():
    loaded = modules_after(
        """
        import brickscope as bs
        bs.register_kernel_source  # a light module's names alone: the hook stays, no SDK
        assert "__getattr__" in vars(bs) and "opentelemetry.sdk" not in sys.modules
        from brickscope import configure
        assert "__getattr__" not in vars(bs)
        assert bs.configure is configure and callable(bs.checksum) and bs.Session
        """
    )
    assert "opentelemetry.sdk.trace" in loaded


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info < (3, 11), reason="CPython's specializing interpreter"
)
def test_attribute_loads_on_the_package_are_specialized_once_configured():
    # A module with a __getattr__ keeps every `bs.name` load generic (no *_MODULE form).
    loaded = modules_after(
        """
        import dis
        import brickscope as bs
        bs.configure
        def loop():
            for _ in range(100):
                bs.is_enabled()
        loop()
        loads = [i.opname for i in dis.get_instructions(loop, adaptive=True) if i.argval == "is_enabled"]
        assert loads and all(op.endswith("_MODULE") for op in loads), loads
        """
    )
    assert "opentelemetry.sdk.trace" in loaded
