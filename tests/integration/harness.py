# SPDX-License-Identifier: Apache-2.0
"""Running the test app in a subprocess with a clean environment, and driving its phases.

Example::

    from harness import AppRunner, otlp_env
    result = AppRunner(tmp_path).run(otlp_env(receiver), "--steps", "2")
    assert result.returncode == 0 and result.report["trace_id"]
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

APP = Path(__file__).resolve().parent / "apps" / "decoder_app.py"

#: Variables of the test runner's own environment that would change what the app does.
_LEAKY_PREFIXES = ("OTEL_", "BRICKSCOPE_", "OMPI_", "PMI_", "PMIX_", "MV2_", "SLURM_")
_LEAKY_NAMES = ("TRACEPARENT", "TRACESTATE", "BAGGAGE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MPI_LOCALRANKID")

#: Short intervals so a test does not wait for the SDK's 5 s / 60 s defaults.
FAST_EXPORT = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_METRIC_EXPORT_INTERVAL": "300",
    "OTEL_LOGS_EXPORTER": "none",
    "BRICKSCOPE_CLOCK": "host",
    # the apps' span counts and trees are their scopes' (overhead and gc spans: tests/analysis)
    "BRICKSCOPE_HOST_INTERVALS": "false",
}


def leaky(variable: str) -> bool:
    """Whether a variable of the runner's environment would change what brickscope does."""
    return variable.startswith(_LEAKY_PREFIXES) or variable in _LEAKY_NAMES


def clean_environment(**overrides: str) -> dict[str, str]:
    """The runner's environment without OpenTelemetry/brickscope/launcher variables, plus ``overrides``."""
    env = {key: value for key, value in os.environ.items() if not leaky(key)}
    # opentelemetry-instrument runs `python` from PATH: make it this interpreter.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(FAST_EXPORT)
    env.update(overrides)
    return env


def otlp_env(receiver: Any, protocol: str = "grpc", **overrides: str) -> dict[str, str]:
    """Environment that sends traces and metrics to ``receiver`` over OTLP."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "decoder-test",
        **overrides,
    }


@dataclass
class AppResult:
    """A finished app: its exit code, output, report and wall time."""

    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    seconds: float


class AppRunner:
    """Runs the test app (or another command) in a subprocess, in a temporary directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self._running: list[subprocess.Popen] = []
        self._count = 0

    def _command(self, args: tuple[str, ...], prefix: tuple[str, ...]) -> tuple[list[str], Path]:
        self._count += 1
        report = self.tmp_path / f"report{self._count}.json"
        python = ("python",) if prefix else (sys.executable,)
        return [*prefix, *python, str(APP), "--report", str(report), *args], report

    def run(self, env: dict[str, str], *args: str, prefix: tuple[str, ...] = (), timeout_s: float = 60) -> AppResult:
        """Run to completion; ``prefix`` wraps the command (``opentelemetry-instrument``)."""
        command, report = self._command(args, prefix)
        started = time.monotonic()
        proc = subprocess.run(
            command, env=clean_environment(**env), cwd=self.tmp_path, capture_output=True, text=True, timeout=timeout_s
        )
        return self._result(proc.returncode, proc.stdout, proc.stderr, report, time.monotonic() - started)

    def start(self, env: dict[str, str], *args: str) -> PhasedApp:
        """Start the app with ``--phases``; drive it with :meth:`PhasedApp.wait_phase` and ``go_on``."""
        command, report = self._command(args, ())
        proc = subprocess.Popen(
            command,
            env=clean_environment(**env),
            cwd=self.tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._running.append(proc)
        return PhasedApp(self, proc, report)

    def _result(self, returncode: int, stdout: str, stderr: str, report: Path, seconds: float) -> AppResult:
        data = json.loads(report.read_text()) if report.exists() else {}
        return AppResult(returncode, stdout, stderr, data, seconds)

    def close(self) -> None:
        """Kill what is still running and close its pipes."""
        for proc in self._running:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None and not pipe.closed:
                    pipe.close()


class PhasedApp:
    """A running app that stops between phases until told to go on.

    Its stdout and stderr are drained by two threads, so a chatty app never blocks
    on a full pipe and every wait here has a deadline.
    """

    def __init__(self, runner: AppRunner, proc: subprocess.Popen, report: Path) -> None:
        self._runner = runner
        self.proc = proc
        self._report = report
        self._stdout: queue.Queue[str] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(proc.stdout, self._stdout.put), daemon=True),
            threading.Thread(target=self._drain, args=(proc.stderr, self._stderr.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream: Any, sink: Any) -> None:
        for line in stream:
            sink(line)

    def wait_phase(self, timeout_s: float = 30) -> float:
        """Wait for the end of the current phase; returns the seconds the phase took in the app."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._stdout.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                stderr = "".join(self._stderr)
                raise AssertionError(f"the app did not finish its phase in {timeout_s} s: {stderr}") from None
            if line.startswith("PHASE"):
                return float(line.split()[2])

    def wait_stderr(self, text: str, timeout_s: float = 60) -> None:
        """Wait until the app has written a line containing ``text`` to stderr (a log of an event it saw).

        ``timeout_s`` only guards against a hang: the test moves on as soon as the line is there.
        """
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in list(self._stderr)):
            if time.monotonic() >= deadline or self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                stderr = "".join(self._stderr)
                raise AssertionError(f"the app never wrote {text!r} to stderr in {timeout_s} s: {stderr}")
            time.sleep(0.02)

    def go_on(self) -> float:
        """Let the app start its next phase; returns the monotonic time it was told to."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return time.monotonic()

    def finish(self, timeout_s: float = 60) -> AppResult:
        """Wait for the app to exit (after its last phase and shutdown); kill it after ``timeout_s``."""
        started = time.monotonic()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            for reader in self._readers:
                reader.join(5)
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
        stdout = "".join(self._stdout.queue)
        seconds = time.monotonic() - started
        return self._runner._result(self.proc.returncode, stdout, "".join(self._stderr), self._report, seconds)
