# SPDX-License-Identifier: Apache-2.0
"""The layers of docs/architecture.md hold: tools over the SDK layer over analysis over the
offline readers over the API, no import cycles, the API free of any SDK, exporters on the
core's public modules only.

The first two are import-linter contracts (pyproject.toml, ``[tool.importlinter]``), run
here so ``make test`` enforces them; the last two are what import-linter cannot express.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORTERS = (
    "brickscope.exporter.perfetto",
    "brickscope.exporter.flamegraph",
    "brickscope.exporter.otlp",
    "brickscope.exporter.parquet",
)

#: The API layer: what instrumented code imports. It must run with the OpenTelemetry API alone.
API_MODULES = (
    "brickscope",
    "brickscope._catalog",
    "brickscope._checksum",
    "brickscope._clock",
    "brickscope._context_trie",
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
    loads neither the OpenTelemetry SDK nor brickscope's SDK layer or offline tools.
    (brickscope.torch needs PyTorch, which the matrix's environments do not have.)"""
    modules = tuple(m for m in API_MODULES if m != "brickscope.torch" or importlib.util.find_spec("torch") is not None)
    program = f"""
import importlib, json, sys
for name in {modules!r}:
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


#: Where OpenTelemetry's private internals may be used: the SDK boundary, and the API layer's
#: context fast path (it must import without the SDK layer), for the API privates it names.
OTEL_BOUNDARY = "sdk/_otel_internals.py"
API_PRIVATES = {"_otel_context.py": {"_RUNTIME_CONTEXT", "_current_context", "_SPAN_KEY"}}


def otel_private_uses(source: str) -> set[str]:
    """What ``source`` uses of OpenTelemetry's internals: ``_internal`` modules, private names
    imported from ``opentelemetry``, the boundary's private attribute names read, written or
    named in getattr/hasattr/setattr (any receiver but ``self``/``cls``)."""
    import ast

    from brickscope.sdk._otel_internals import PRIVATE_NAMES

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.add(node.module)
            found.update(alias.name for alias in node.names if alias.name.startswith("_"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("opentelemetry") and "._" in a.name)
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr"):
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PRIVATE_NAMES:
                found.add(node.args[1].value)
    return found


def test_only_the_boundary_uses_opentelemetry_internals():
    """No core module but sdk/_otel_internals.py reaches into OpenTelemetry's privates
    (the API layer's context fast path excepted, for the API names it declares)."""
    package = ROOT / "src" / "brickscope"
    outside = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative == OTEL_BOUNDARY:
            continue
        uses = otel_private_uses(path.read_text()) - API_PRIVATES.get(relative, set())
        if uses:
            outside[relative] = sorted(uses)
    assert outside == {}


def test_the_internals_check_catches_a_violation():
    """The scan above sees each kind of private use it is meant to forbid."""
    assert otel_private_uses("from opentelemetry.sdk._shared_internal import BatchProcessor") == {"opentelemetry.sdk._shared_internal"}
    assert otel_private_uses("from opentelemetry.sdk.metrics._internal.aggregation import X") == {"opentelemetry.sdk.metrics._internal.aggregation"}
    assert otel_private_uses("from opentelemetry.sdk._configuration import _get_sampler") == {"opentelemetry.sdk._configuration", "_get_sampler"}
    assert otel_private_uses("p._active_span_processor._span_processors") == {"_active_span_processor", "_span_processors"}
    assert otel_private_uses("getattr(p, '_batch_processor', None)") == {"_batch_processor"}
    assert otel_private_uses("self._batch_processor = None") == set()
