# SPDX-License-Identifier: Apache-2.0
"""What the callgrind benchmarks share: running a child under callgrind with a dump at each
region marker, and loading examples/torch_gpt.py as a module.

Example::

    totals, stdout = run_callgrind("call_cost", [sys.executable, __file__, "--child"])
    ordered = [totals[part] for part in sorted(totals)]   # part 1: up to the first marker
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def run_callgrind(who: str, command: list[str]) -> tuple[dict[int, int], str]:
    """Run ``command`` under ``valgrind --tool=callgrind``, a dump cut at each ``os.getppid()``
    (the region markers); return each dump's instructions by part number, and the child's
    standard output."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit(f"{who}: valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        wrapped = [valgrind, "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out}", *command]
        done = subprocess.run(wrapped, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        totals = {}
        for dump in Path(tmp).glob("callgrind.out*"):
            text = dump.read_text(errors="replace")
            part = re.search(r"^part: (\d+)", text, re.M)
            total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
            if part and total:
                totals[int(part.group(1))] = int(total.group(1))
    return totals, done.stdout


def load_example() -> Any:
    """examples/torch_gpt.py as a module (its GPT model and its batches)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "torch_gpt.py"
    spec = importlib.util.spec_from_file_location("torch_gpt", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example
