# SPDX-License-Identifier: Apache-2.0
"""``opentelemetry-instrument python train.py``: module bricks with nothing changed in train.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")
pytest.importorskip("opentelemetry.instrumentation", reason="opentelemetry-instrumentation is not installed")
perfetto = pytest.importorskip("brickscope.exporter.perfetto")

APP = Path(__file__).resolve().parent / "apps" / "train.py"
INSTRUMENT = ("opentelemetry-instrument", "--traces_exporter", "perfetto", "--metrics_exporter", "none", "--logs_exporter", "none")


def run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    """Run apps/train.py under opentelemetry-instrument; its spans, read back from the Perfetto file."""
    trace = tmp_path / "train.pftrace"
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BRICKSCOPE_"))}
    environment["BRICKSCOPE_HOST_INTERVALS"] = "false"  # the scopes' own spans are counted
    environment["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")])
    environment.update(BRICKSCOPE_CLOCK="host", BRICKSCOPE_PERFETTO_PATH=str(trace), **env)
    result = subprocess.run(
        [*INSTRUMENT, "python", str(APP), *args], env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    spans = list(perfetto.read_spans(str(trace))) if trace.exists() else []
    return result, spans


def tree(spans) -> list:
    children: dict = {}
    for span in sorted(spans, key=lambda s: (s.start_time, -s.end_time)):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def build(span):
        return (span.name, [build(c) for c in children.get(span.context.span_id, [])])

    return [build(root) for root in children.get(None, [])]


def layer(mlp_children: list) -> tuple:
    return ("layer", [("norm", []), ("mlp", mlp_children)])


FULL_STEP = [
    ("Net", [("emb", []), layer([("mlp.up", []), ("mlp.down", [])]), layer([("mlp.up", []), ("mlp.down", [])]), ("head", [])]),
    ("CrossEntropyLoss", []),
]


class TestZeroCode:
    def test_every_model_call_becomes_module_bricks(self, tmp_path):
        """Two training steps: per step the model's module tree, then the loss module as its own root."""
        result, spans = run(tmp_path)
        assert "ok True" in result.stdout
        assert tree(spans) == FULL_STEP * 2
        loss = next(s for s in spans if s.name == "CrossEntropyLoss")
        assert loss.attributes["brickscope.brick.category"] == "loss"

    def test_environment_variables_restrict_it(self, tmp_path):
        """Excluded globs drop whole subtrees, max depth cuts deeper modules, layers=none drops layer scopes."""
        _, spans = run(
            tmp_path,
            OTEL_PYTHON_TORCH_EXCLUDED_MODULES="emb, layers.1",
            OTEL_PYTHON_TORCH_MAX_DEPTH="3",
            OTEL_PYTHON_TORCH_LAYERS="none",
        )
        step = [("Net", [("layers.0.norm", []), ("layers.0.mlp", []), ("head", [])]), ("CrossEntropyLoss", [])]
        assert tree(spans) == step * 2

    def test_backward_bricks_on_request(self, tmp_path):
        """OTEL_PYTHON_TORCH_BACKWARD=true: each brick module's backward pass is a brick too, the loss's included."""
        _, spans = run(tmp_path, OTEL_PYTHON_TORCH_BACKWARD="true", OTEL_PYTHON_TORCH_EXCLUDED_MODULES="layers.1")
        backward = sorted(s.name for s in spans if s.attributes.get("brickscope.torch.pass") == "backward")
        # The model itself (Net) has none: its backward is the whole backward pass.
        per_step = ["CrossEntropyLoss.backward", "head.backward", "mlp.backward", "mlp.down.backward",
                    "mlp.up.backward", "norm.backward"]  # fmt: skip
        assert backward == sorted(per_step * 2)

    def test_disabled_instrumentations_turns_it_off(self, tmp_path):
        """OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=torch: the script runs, no module brick is recorded."""
        result, spans = run(tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="torch")
        assert "ok True" in result.stdout
        assert spans == []

    def test_a_bad_setting_is_one_error_naming_it(self, tmp_path):
        """A malformed variable: one error line naming it; the script runs uninstrumented."""
        result, spans = run(tmp_path, OTEL_PYTHON_TORCH_MAX_DEPTH="deep")
        assert "ok True" in result.stdout
        assert result.stderr.count("OTEL_PYTHON_TORCH_MAX_DEPTH") == 1, result.stderr
        assert spans == []

    def test_torch_is_not_imported_for_a_program_that_does_not(self, tmp_path):
        """The instrumentor waits for the program to import torch: a program without torch never loads it."""
        result, _ = run(tmp_path, "--no-torch")
        assert "torch imported: False" in result.stdout
