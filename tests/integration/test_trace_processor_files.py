# SPDX-License-Identifier: Apache-2.0
"""Every kind of trace brickscope writes, loaded by Perfetto's real trace processor: no import error, no data loss.

The demo's trace, a GPU run on the simulated driver, their merge, and a converted OTLP
JSON file. Needs ``trace_processor_shell`` built from the perfetto repository (set
``PERFETTO_TRACE_PROCESSOR_SHELL``); no package registry ships it, so elsewhere these
tests skip (the rules our writer could break are also checked without it, by
``pftrace_testlib.decode_trace`` in the Perfetto exporter's tests).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brickscope import cli

ROOT = Path(__file__).resolve().parents[2]
SHELL = os.environ.get("PERFETTO_TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        SHELL is None, reason="no trace_processor_shell (set PERFETTO_TRACE_PROCESSOR_SHELL); it cannot be downloaded here"
    ),
]

_PROBLEMS = "SELECT name, idx, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0"


def _query(path: Path, sql: str) -> list:
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    with TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=SHELL)) as tp:
        return list(tp.query(sql))


def _checked(path: Path) -> dict[str, int]:
    """Zero error and data-loss stats; what the trace processor made of the file."""
    assert [(r.name, r.idx, r.value) for r in _query(path, _PROBLEMS)] == []
    (row,) = _query(
        path,
        "SELECT (SELECT count(*) FROM slice) AS slices, (SELECT count(*) FROM flow) AS flows,"
        " (SELECT count(*) FROM clock_snapshot) AS clock_rows",
    )
    return {"slices": row.slices, "flows": row.flows, "clock_rows": row.clock_rows}


@pytest.fixture(scope="module")
def traces(tmp_path_factory, simdriver_lib) -> dict[str, Path]:
    import simdriver

    out = tmp_path_factory.mktemp("written")
    demo = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--out", str(out / "demo"), "--steps", "3"],
        capture_output=True, text=True, timeout=300, cwd=out,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    env = simdriver.subprocess_env(simdriver_lib, base=dict(os.environ))
    env.update(
        BRICKSCOPE_CLOCK="cuda",
        OTEL_TRACES_EXPORTER="perfetto",
        BRICKSCOPE_PERFETTO_PATH=str(out / "gpu.pftrace"),
        OTEL_METRICS_EXPORTER="none",
        OTEL_SERVICE_NAME="gpu-sim",
    )
    app = ROOT / "tests" / "integration" / "apps" / "decoder_app.py"
    gpu = subprocess.run(
        [sys.executable, str(app), "--report", str(out / "gpu.json"), "--steps", "3", "--layers", "2", "--simdriver", str(simdriver_lib)],
        env=env, capture_output=True, text=True, timeout=300, cwd=out,
    )  # fmt: skip
    assert gpu.returncode == 0, gpu.stderr
    paths = {"demo": out / "demo" / "trace.pftrace", "gpu": out / "gpu.pftrace"}
    assert cli.main(["merge", str(paths["demo"]), str(paths["gpu"]), "-o", str(out / "merged.pftrace"), "-q"]) == 0
    paths["merged"] = out / "merged.pftrace"
    source = ROOT / "tests" / "corpus" / "files" / "otlp-complete.jsonl"
    assert cli.main(["convert", str(source), "-o", str(out / "converted.pftrace"), "-q"]) == 0
    paths["converted"] = out / "converted.pftrace"
    return paths


@pytest.mark.gpu
class TestEveryWrittenTrace:
    def test_demo(self, traces):
        assert _checked(traces["demo"])["slices"] > 0

    def test_gpu_run_on_the_simulator_draws_every_launch_flow(self, traces):
        sys.path.insert(0, str(ROOT / "exporters" / "perfetto" / "tests"))
        from pftrace_testlib import decode_trace

        decoded = decode_trace(traces["gpu"])
        assert decoded.errors == [] and decoded.flows_expected > 0
        found = _checked(traces["gpu"])
        assert found["flows"] == decoded.flows_expected == decoded.flows_drawn
        assert found["slices"] == len(decoded.slices) + len(decoded.instants)

    def test_merged(self, traces):
        found = _checked(traces["merged"])
        parts = [_checked(traces[name]) for name in ("demo", "gpu")]
        assert found["slices"] == sum(p["slices"] for p in parts)
        assert found["flows"] == sum(p["flows"] for p in parts)

    def test_converted(self, traces):
        assert _checked(traces["converted"])["slices"] == 5  # 4 spans and the GPU span's launch
