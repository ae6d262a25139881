# SPDX-License-Identifier: Apache-2.0
"""The layers of docs/architecture.md hold: tools over the SDK layer over analysis over the
offline readers over the API, no import cycles, the API free of any SDK, exporters on the
core's public modules only.

The first two are import-linter contracts (pyproject.toml, ``[tool.importlinter]``), run
here so ``make test`` enforces them; the last two are what import-linter cannot express.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORTERS = ("brickscope.exporter.perfetto", "brickscope.exporter.flamegraph", "brickscope.exporter.otlp")

#: The API layer: what instrumented code imports. It must run with the OpenTelemetry API alone.
API_MODULES = (
    "brickscope",
    "brickscope._catalog",
    "brickscope._checksum",
    "brickscope._clock",
    "brickscope._gpu",
    "brickscope._kernel_sources",
    "brickscope._otel_context",
    "brickscope._record",
    "brickscope._scope",
    "brickscope._scope_data",
    "brickscope._state",
    "brickscope.environment_variables",
    "brickscope.native",
    "brickscope.propagation",
    "brickscope.torch",
    "brickscope.trace",
    "brickscope.trace.attributes",
    "brickscope.version",
)


def test_the_import_contracts_are_kept():
    """In a process of its own: import-linter reconfigures logging (disabling every logger
    that exists), which would silence brickscope's loggers for the tests that follow."""
    program = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_exporters_import_only_public_core_modules():
    graph = grimp.build_graph("brickscope", *EXPORTERS, exclude_type_checking_imports=True)
    private = []
    for exporter in EXPORTERS:
        for module in graph.find_descendants(exporter) | {exporter}:
            for imported in graph.find_modules_directly_imported_by(module):
                if imported.startswith("brickscope.exporter."):
                    continue
                if any(part.startswith("_") for part in imported.split(".")[1:]):
                    private.append(f"{module} -> {imported}")
    assert private == []


def test_the_api_and_a_recorded_scope_load_no_sdk():
    """Importing every API module and entering scopes (not configured: they record nothing)
    loads neither the OpenTelemetry SDK nor brickscope's SDK layer or offline tools."""
    program = f"""
import importlib, json, sys
for name in {API_MODULES!r}:
    importlib.import_module(name)
import brickscope as bs
with bs.step(0), bs.layer(0), bs.brick("rms_norm"), bs.kernel("k", grid=1, block=1):
    pass
loaded = sorted(m for m in sys.modules
                if m.startswith(("opentelemetry.sdk", "brickscope.sdk", "brickscope.offline", "brickscope.analysis", "brickscope.cli")))
print(json.dumps(loaded))
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout.splitlines()[-1]) == []
