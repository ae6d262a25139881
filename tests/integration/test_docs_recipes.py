# SPDX-License-Identifier: Apache-2.0
"""Recipes of the docs, run exactly as written (extracted from the Markdown)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness import clean_environment

ROOT = Path(__file__).resolve().parents[2]


def _python_block(doc: str, first_line: str) -> str:
    """The ```python block of ``doc`` whose first line is ``first_line``."""
    text = (ROOT / "docs" / doc).read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if block.splitlines()[0] == first_line:
            return block
    raise AssertionError(f"no python block starting {first_line!r} in docs/{doc}")


def test_own_provider_recipe(tmp_path, grpc_receiver):
    """With your own provider, your spans are real and bricks nest under them (they used to be roots)."""
    recipe = _python_block("otel-integration.md", "# 3. Your own provider, configured however you like: brickscope goes in front of it.")
    script = tmp_path / "recipe.py"
    script.write_text(recipe)
    env = clean_environment(OTEL_EXPORTER_OTLP_ENDPOINT=grpc_receiver.endpoint, OTEL_EXPORTER_OTLP_INSECURE="true")
    result = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= 2, timeout_s=30)
    spans = {span.name: span for span in grpc_receiver.spans()}
    generate, brick = spans["generate"], spans["rms_norm"]
    assert (brick.trace_id, brick.parent_span_id) == (generate.trace_id, generate.span_id)
    assert generate.resource["service.name"] == "decoder"
