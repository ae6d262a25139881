# SPDX-License-Identifier: Apache-2.0
"""Regenerate the golden traces and what Perfetto's trace processor reads in them.

Run from the repository root, with a trace processor built from the perfetto repository::

    PERFETTO_TRACE_PROCESSOR_SHELL=/path/to/trace_processor_shell .venv/bin/python tests/golden/make_golden.py

Writes ``host.pftrace`` (the demo, host clock), ``gpu.pftrace`` (the integration app on
the simulated CUDA driver), ``merged.pftrace`` (the two merged) and, for each,
``<name>.expected.json``: the trace processor's slices, flows, processes and problem
stats. ``tests/integration/test_golden.py`` checks the files against it, with or
without the trace processor. Regenerate only when a format change is intended.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The trace processor's view of a trace, as the tests compare it.
QUERIES = {
    "slices": "SELECT name, ts, dur, depth FROM slice ORDER BY ts, dur DESC, name, depth",
    "flows": (
        "SELECT o.name AS out_name, o.ts AS out_ts, i.name AS in_name, i.ts AS in_ts FROM flow f"
        " JOIN slice o ON f.slice_out = o.id JOIN slice i ON f.slice_in = i.id ORDER BY out_ts, in_ts, out_name"
    ),
    "processes": "SELECT pid, name FROM process WHERE pid != 0 ORDER BY pid",
    "problems": "SELECT name, idx, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0",
}


def query(shell: str, path: Path) -> dict[str, list[list]]:
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    out = {}
    with TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=shell)) as tp:
        for key, sql in QUERIES.items():
            out[key] = [list(row.__dict__.values()) for row in tp.query(sql)]
    return out


def _dump(expected: dict[str, list[list]]) -> str:
    """JSON with one row per line: diffs of a regenerated file stay readable."""
    parts = []
    for key, rows in expected.items():
        body = ",\n".join("  " + json.dumps(row) for row in rows)
        parts.append(f"{json.dumps(key)}: [\n{body}\n]" if rows else f"{json.dumps(key)}: []")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> int:
    shell = os.environ.get("PERFETTO_TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")
    if not shell:
        print("set PERFETTO_TRACE_PROCESSOR_SHELL", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "tests"))
    import simdriver

    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--out", str(work_dir / "demo"), "--steps", "2"],
            check=True, capture_output=True, cwd=work_dir,
        )  # fmt: skip
        shutil.copyfile(work_dir / "demo" / "trace.pftrace", HERE / "host.pftrace")
        lib = simdriver.build_simdriver(work_dir / "simcuda")
        env = simdriver.subprocess_env(lib, base=dict(os.environ))
        env.update(
            BRICKSCOPE_CLOCK="cuda",
            OTEL_TRACES_EXPORTER="perfetto",
            BRICKSCOPE_PERFETTO_PATH=str(HERE / "gpu.pftrace"),
            BRICKSCOPE_PERFETTO_OVERWRITE="true",
            OTEL_METRICS_EXPORTER="none",
            OTEL_SERVICE_NAME="gpu-sim",
        )
        (HERE / "gpu.pftrace").unlink(missing_ok=True)
        app = ROOT / "tests" / "integration" / "apps" / "decoder_app.py"
        subprocess.run(
            [sys.executable, str(app), "--report", str(work_dir / "r.json"), "--steps", "2", "--layers", "2", "--simdriver", str(lib)],
            check=True, capture_output=True, env=env, cwd=work_dir,
        )  # fmt: skip
    from brickscope.exporter.perfetto import merge_traces

    merge_traces([HERE / "host.pftrace", HERE / "gpu.pftrace"], HERE / "merged.pftrace", overwrite=True)
    for name in ("host", "gpu", "merged"):
        expected = query(shell, HERE / f"{name}.pftrace")
        assert expected["problems"] == [], expected["problems"]
        (HERE / f"{name}.expected.json").write_text(_dump(expected))
    return 0


if __name__ == "__main__":
    sys.exit(main())
