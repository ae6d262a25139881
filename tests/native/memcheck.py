# SPDX-License-Identifier: Apache-2.0
"""Run a program under valgrind memcheck with the C accelerators and with
``BRICKSCOPE_PURE_PYTHON=1``, and fail when the C run shows an error the pure-Python run
does not (``make memcheck``; docs/native.md, "Memory checks").

Both runs use ``PYTHONMALLOC=malloc``, so every object is a malloc block valgrind tracks
(pymalloc's arenas would hide overruns inside them and make its own reads look invalid).
The verdict, from valgrind's XML report of each run:

- **own**: an error (any kind but the leak kinds "possibly lost", "indirectly lost" and
  "still reachable", which the interpreter's objects alive at exit produce by the
  thousand) with a frame in one of brickscope's shared objects (``_hotpath``,
  ``_tablerows``, ``_fastread``), in its stack or in the stack that allocated the
  uninitialised value it used (``--track-origins``), fails the check;
- **beyond**: a non-leak error whose kind and first frames (function names) the C run
  shows more often than the pure-Python run fails it too: a bug in C that shows up as
  an invalid read inside CPython (a freed object handed back) has no frame of ours.

Example::

    python tests/native/memcheck.py                 # the driver, both implementations
    python tests/native/memcheck.py --cuda          # and CudaMarker on the simulated driver
    python tests/native/memcheck.py --self-test     # an injected invalid read must fail it

Exit status: 0 clean, 1 errors found (listed), 2 the check could not run (one line).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DRIVER = HERE / "memcheck_driver.py"
CANARY = HERE / "canary.c"
#: brickscope's shared objects, by the end of their path before the ABI suffix.
OWN_OBJECTS = ("brickscope/_hotpath.", "brickscope/_tablerows.", "brickscope/exporter/perfetto/_fastread.")
#: Leak kinds the interpreter's live objects produce at exit (interior pointers into GC
#: objects, caches never freed); a leak of ours shows as "definitely lost".
IGNORED_KINDS = frozenset({"Leak_PossiblyLost", "Leak_IndirectlyLost", "Leak_StillReachable"})
FRAMES = 4  # frames of a signature: enough to tell two CPython errors apart


class CheckError(Exception):
    """The check could not run (no valgrind, the program failed): one line, exit 2."""


@dataclass(frozen=True)
class Error:
    """One error of valgrind's XML report."""

    kind: str
    frames: tuple[tuple[str, str], ...]  # (function or "?", object file) from the top
    text: str
    origin: tuple[tuple[str, str], ...] = ()  # where an uninitialised value was allocated

    def signature(self) -> tuple[str, ...]:
        return (self.kind, *(fn for fn, _ in self.frames[:FRAMES]))

    def is_leak(self) -> bool:
        return self.kind.startswith("Leak_")


@dataclass
class Run:
    """What one valgrind run of the program gave."""

    mode: str
    errors: list[Error]
    seconds: float
    stdout: str
    own_objects: tuple[str, ...] = OWN_OBJECTS

    def counted(self) -> list[Error]:
        return [e for e in self.errors if e.kind not in IGNORED_KINDS]

    def own(self) -> list[Error]:
        return [e for e in self.counted() if any(o in obj for _, obj in e.frames + e.origin for o in self.own_objects)]

    def kinds(self) -> dict[str, int]:
        return dict(collections.Counter(e.kind for e in self.errors))


@dataclass
class Verdict:
    c: Run
    python: Run
    own: list[Error] = field(default_factory=list)
    beyond: list[tuple[tuple[str, ...], int, int]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.own or self.beyond)


def parse(xml_path: Path) -> list[Error]:
    """The errors of a valgrind ``--xml=yes`` report (read as a stream: a report of the
    interpreter's leaks at exit runs to hundreds of megabytes)."""
    errors = []
    for _, node in ET.iterparse(xml_path):
        if node.tag != "error":
            continue
        # the error's stack, then (with --track-origins) where an uninitialised value came from
        stacks = [tuple((f.findtext("fn") or "?", f.findtext("obj") or "?") for f in stack.findall("frame")) for stack in node.findall("stack")]
        text = node.findtext("what") or node.findtext("xwhat/text") or ""
        errors.append(Error(node.findtext("kind") or "?", stacks[0] if stacks else (), text, tuple(f for stack in stacks[1:] for f in stack)))
        node.clear()
    return errors


def run(program: list[str], mode: str, env: dict[str, str], workdir: Path, own_objects: tuple[str, ...]) -> Run:
    """Run ``program`` under memcheck in ``mode`` ("c" or "python")."""
    xml_path = workdir / f"memcheck-{mode}.xml"
    environment = dict(os.environ, **env, PYTHONMALLOC="malloc", BRICKSCOPE_PURE_PYTHON="1" if mode == "python" else "0")
    command = [
        "valgrind", "--tool=memcheck", "--xml=yes", f"--xml-file={xml_path}", "--leak-check=full",
        "--track-origins=yes", "--num-callers=24", *program,
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckError(f"{' '.join(program)} failed under valgrind ({mode}, exit {proc.returncode}): {last}")
    return Run(mode, parse(xml_path), seconds, proc.stdout, own_objects)


def compare(c: Run, python: Run) -> Verdict:
    """The C run's errors that the pure-Python run does not explain."""
    verdict = Verdict(c, python, own=c.own())
    ours = collections.Counter(e.signature() for e in c.counted() if not e.is_leak())
    theirs = collections.Counter(e.signature() for e in python.counted() if not e.is_leak())
    verdict.beyond = sorted((sig, n, theirs[sig]) for sig, n in ours.items() if n > theirs[sig])
    return verdict


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise CheckError("valgrind is not installed (Debian: apt-get install -y valgrind)")


def check(program: list[str], env: dict[str, str] | None = None, own_objects: tuple[str, ...] = OWN_OBJECTS) -> Verdict:
    """Run ``program`` under memcheck in both modes and compare."""
    require_valgrind()
    with tempfile.TemporaryDirectory(prefix="memcheck-") as tmp:
        runs = {mode: run(program, mode, env or {}, Path(tmp), own_objects) for mode in ("c", "python")}
    return compare(runs["c"], runs["python"])


def describe(verdict: Verdict) -> str:
    lines = []
    for one in (verdict.c, verdict.python):
        counted = len(one.counted())
        lines.append(
            f"{one.mode:>6}: {len(one.errors)} errors in valgrind's report ({counted} counted: not leaks the "
            f"interpreter leaves at exit), {len(one.own())} in the checked shared objects, {one.seconds:.0f} s; kinds {one.kinds()}"
        )
    for error in verdict.own:
        where = " <- ".join(f"{fn} ({Path(obj).name})" for fn, obj in error.frames[:6])
        lines.append(f"OWN {error.kind}: {error.text}\n    {where}")
    for signature, ours, theirs in verdict.beyond:
        lines.append(f"BEYOND {signature[0]} x{ours} with C, x{theirs} pure Python: {' <- '.join(signature[1:])}")
    lines.append("memcheck: FAILED" if verdict.failed else "memcheck: no error beyond the pure-Python run's")
    return "\n".join(lines)


def build_canary(out_dir: Path) -> Path:
    """Compile ``canary.c``, an extension with a deliberate invalid read and leak, into ``out_dir``."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise CheckError("no C compiler to build the self-test's canary extension")
    target = out_dir / f"_memcheck_canary{sysconfig.get_config_var('EXT_SUFFIX')}"
    command = [compiler, "-O0", "-g", "-shared", "-fPIC", f"-I{sysconfig.get_path('include')}", "-o", str(target), str(CANARY)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CheckError(f"building {CANARY.name} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return target


#: The self-test's program: like an accelerator, the canary runs only without BRICKSCOPE_PURE_PYTHON.
CANARY_PROGRAM = (
    "import os\n"
    "if os.environ['BRICKSCOPE_PURE_PYTHON'] != '1':\n"
    "    import _memcheck_canary\n"
    "    assert _memcheck_canary.read_past_end(4) >= 0\n"
)


def self_test() -> int:
    """The check must fail on a program whose C side reads past a buffer and leaks one."""
    with tempfile.TemporaryDirectory(prefix="memcheck-canary-") as tmp:
        build_canary(Path(tmp))
        verdict = check([sys.executable, "-c", CANARY_PROGRAM], {"PYTHONPATH": tmp}, own_objects=("_memcheck_canary.",))
    print(describe(verdict))
    kinds = collections.Counter(e.kind for e in verdict.own)
    beyond = {signature[0] for signature, _, _ in verdict.beyond}
    if kinds != {"InvalidRead": 1, "Leak_DefinitelyLost": 1} or "InvalidRead" not in beyond:
        print(f"self-test: FAILED: the injected invalid read and leak were not both reported (own {dict(kinds)}, beyond {beyond})")
        return 1
    print("self-test: the checker reports the injected invalid read and leak, and fails")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="steps of the driver's workload (default 4)")
    parser.add_argument("--cuda", action="store_true", help="also time scopes on the simulated CUDA driver (built here)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on an extension with an injected bug")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    try:
        require_valgrind()
        if args.self_test:
            return self_test()
        with tempfile.TemporaryDirectory(prefix="memcheck-driver-") as tmp:
            env = {}
            program = [sys.executable, str(DRIVER), "--steps", str(args.steps), "--out", tmp]
            if args.cuda:
                sys.path.insert(0, str(ROOT / "tests"))
                from simdriver.build import build_simdriver

                env["LD_LIBRARY_PATH"] = str(build_simdriver(Path(tmp) / "simcuda").parent)
                program.append("--cuda")
            # the large trace the driver reads is written here, at full speed, not under valgrind
            prepared = subprocess.run([*program, "--prepare"], env=dict(os.environ, **env), capture_output=True, text=True, check=False)
            if prepared.returncode != 0:
                raise CheckError(f"{DRIVER.name} --prepare failed: {(prepared.stderr.strip().splitlines() or ['no output'])[-1]}")
            verdict = check(program, env)
    except CheckError as exc:
        print(f"memcheck: {exc}", file=sys.stderr)
        return 2
    print(describe(verdict))
    for one in (verdict.c, verdict.python):
        used = set(json.loads(one.stdout.strip().splitlines()[-1])["implementation"].values())
        if used != {one.mode}:
            print(f"memcheck: the {one.mode} run used {sorted(used)}: not the implementation it checks", file=sys.stderr)
            return 2
    return 1 if verdict.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
