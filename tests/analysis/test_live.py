# SPDX-License-Identifier: Apache-2.0
"""A live session's report is the analysis engine's report of the spans it recorded: the same
figures as the analysis of those spans read back from a file, within a counted bound."""

from __future__ import annotations

import dataclasses
import json

import pytest
from analysis_synthetic import write_otlp_json

import brickscope as bs
from brickscope import environment_variables as env
from brickscope.analysis import AnalysisError, Peak, analyse, load, render, to_json
from brickscope.testing import capture_spans


def _decode(steps: int = 3) -> None:
    for number in range(steps):
        with bs.step(number, tokens=4):
            for layer in range(2):
                with bs.layer(layer):
                    with bs.brick("rms_norm", elements=64, bytes=256):
                        pass
                    with bs.brick("ffn_up", flops=2_000_000, bytes=4096):
                        with bs.kernel("gemm", grid=(4,), block=(128,)):
                            pass
                        with bs.brick("activation"):
                            pass


class TestLiveSession:
    def test_session_report_is_the_engine_report_of_its_spans(self, tmp_path, backend):
        """Same spans, two routes (live table, OTLP JSON file): the same figures in every section."""
        with capture_spans() as captured:
            _decode()
            live = analyse(load(captured.session, backend=backend))
            offline = analyse(load(write_otlp_json(tmp_path / "run.jsonl", list(captured.spans)), backend=backend))
            text = captured.session.report()
        assert to_json(dataclasses.replace(live, sources=())) == to_json(dataclasses.replace(offline, sources=()))
        assert text == render(live, "text")
        counts = {op.name: op.count for op in live.operations}
        assert counts == {"rms_norm": 6, "ffn_up": 6, "activation": 6, "gemm": 6}

    def test_scope_keywords_reach_memory_roofline_and_throughput(self, backend):
        """bytes=, flops= on bricks and tokens= on steps: 6 x (256 + 4096) bytes, 12 MFLOP, 12 tokens."""
        with capture_spans() as captured:
            _decode()
            report = analyse(load(captured.session, backend=backend), peaks={"*": Peak(1e12, 1e11)})
        assert report.memory.total_bytes == 6 * (256 + 4096)
        (ffn,) = [p for p in report.roofline if p.name == "ffn_up"]
        assert ffn.flops == 6 * 2_000_000 and ffn.bytes == 6 * 4096
        assert ffn.arithmetic_intensity == pytest.approx(2_000_000 / 4096)
        assert report.throughput.tokens == 12 and len(report.throughput.steps) == 3

    def test_bound_is_counted_and_reported(self, monkeypatch):
        """With room for 5 spans, 20 recorded: 5 kept + 15 dropped = 20, and the report says so."""
        monkeypatch.setenv(env.BRICKSCOPE_REPORT_MAX_SPANS, "5")
        with capture_spans() as captured:
            for _ in range(20):
                with bs.brick("rms_norm"):
                    pass
            data = json.loads(captured.session.report("json"))
            aggregator = captured.session.aggregator
            assert len(captured.spans) == 20
        assert (data["spans"], data["dropped"]) == (5, 15)
        assert aggregator.bricks["rms_norm"].count == 5 and aggregator.dropped == 15

    def test_zero_bound_keeps_nothing_and_counts_everything(self, monkeypatch):
        """BRICKSCOPE_REPORT_MAX_SPANS=0 turns the table off: every span counted, the report says so."""
        monkeypatch.setenv(env.BRICKSCOPE_REPORT_MAX_SPANS, "0")
        with capture_spans() as captured:
            for _ in range(3):
                with bs.brick("rms_norm"):
                    pass
            text = captured.session.report()
            assert captured.session.aggregator.dropped == 3
        assert "0 spans" in text.splitlines()[0] and "3 spans beyond the session's bound" in text

    def test_bad_bound_is_a_setup_error(self, monkeypatch):
        """A non-integer bound fails at configure time, naming the variable."""
        monkeypatch.setenv(env.BRICKSCOPE_REPORT_MAX_SPANS, "lots")
        with pytest.raises(ValueError, match=env.BRICKSCOPE_REPORT_MAX_SPANS):
            with capture_spans():
                pass

    def test_session_without_aggregator(self):
        """aggregate=False keeps nothing to analyse: said plainly."""
        with capture_spans(aggregate=False) as captured:
            with pytest.raises(AnalysisError, match="aggregate=False"):
                load(captured.session)


def test_report_without_numpy():
    """A core install without the analysis extra: the same engine runs in pure Python."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['numpy'] = None\n"  # import numpy now raises ImportError
        "import brickscope as bs\n"
        "from brickscope.analysis import get_backend\n"
        "from brickscope.testing import capture_spans\n"
        "with capture_spans() as captured:\n"
        "    for _ in range(3):\n"
        "        with bs.brick('rms_norm'):\n"
        "            pass\n"
        "    print(get_backend().name)\n"
        "    print(captured.session.report('json'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    backend, document = run.stdout.split("\n", 1)
    assert backend == "python"
    (rms_norm,) = json.loads(document)["operations"]
    assert (rms_norm["name"], rms_norm["count"]) == ("rms_norm", 3)
