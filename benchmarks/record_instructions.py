# SPDX-License-Identifier: Apache-2.0
"""What an unsampled brick's record costs on each CPython, in instructions (callgrind) and ns.

The workload is ``paced_record.py``'s tight token: a step of 32 layers x 10
``bs.brick(name, elements=1)``, host clock, metrics only (the sampler keeps no trace, every
brick is folded into the metrics), tokens back to back after 20 of warm-up. Under
``valgrind --tool=callgrind``, the instructions of ``--tokens`` tokens minus those of the
same loop without brickscope, over its bricks, are a brick's record (its share of its layer
and step included). Regions are cut by a marker (``os.getppid()``) that callgrind dumps its
counters before. Outside valgrind, the thread CPU a brick of the same loop, the loop without
brickscope subtracted, best of ``--repeats`` (``paced_record.py``'s ``tight``, best instead
of median).

The scope stack and OpenTelemetry's context are two ContextVars, kept by CPython in one
hash trie whose first level is 5 bits of their hashes (randomized per process). Where the two
share a first-level slot, every push and pop copies a second-level node; brickscope makes its
variable until the slot is its own (``brickscope._context_trie``), and ``shared_slot`` checks
that it is (a run where it is not would not be comparable with the others).

Usage::

    python benchmarks/record_instructions.py                 # this interpreter
    python benchmarks/record_instructions.py --python A/bin/python --python B/bin/python --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from _callgrind import run_callgrind

WARMUP_TOKENS = 20


def setup() -> Any:
    """brickscope as ``paced_record.py`` configures it; returns the session."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    import brickscope as bs

    return bs.configure(
        TracerProvider(sampler=ALWAYS_OFF), clock="host", meter_provider=MeterProvider(), resolver="thread"
    )


def facts() -> dict[str, Any]:
    """The interpreter, the implementation in use, and whether the context's two variables
    share the trie's first-level slot (inside a step, where both are set)."""
    import contextvars
    import platform

    import brickscope as bs
    from brickscope import native
    from brickscope._context_trie import trie_slot

    with bs.step(0):
        slots = [trie_slot(var) for var in contextvars.copy_context()]
    return {
        "python": platform.python_version(),
        "hotpath": native.implementations()["brickscope._hotpath"].in_use,
        "shared_slot": len(slots) != len(set(slots)),
    }


def child(tokens: int) -> None:
    """Under callgrind: warm-up, marker, the tokens, marker, the bare loop, marker."""
    from paced_record import bare, token

    import brickscope as bs

    session = setup()
    for number in range(WARMUP_TOKENS):
        token(bs, number)
    found = facts()
    os.getppid()
    for number in range(tokens):
        token(bs, number)
    os.getppid()
    for number in range(tokens):
        bare(number)
    os.getppid()
    session.shutdown()
    print(json.dumps(found))


def timed(tokens: int, repeats: int) -> None:
    """Outside valgrind: the best thread CPU ns a brick, the bare loop subtracted."""
    from paced_record import bare, cpu_per_brick, token

    import brickscope as bs

    session = setup()
    cpu_per_brick(lambda n: token(bs, n), WARMUP_TOKENS, "none")
    best = min(
        cpu_per_brick(lambda n: token(bs, n), tokens, "none") - cpu_per_brick(bare, tokens, "none")
        for _ in range(repeats)
    )
    session.shutdown()
    print(json.dumps({"ns_per_brick": round(best, 1)}))


def measure(python: str, tokens: int, repeats: int) -> dict[str, Any]:
    """One interpreter's figures (its brickscope is the one it imports)."""
    from paced_record import BRICKS

    script = os.path.abspath(__file__)
    totals, out = run_callgrind("record_instructions", [python, script, "--child", "--tokens", str(tokens)])
    parts = [totals[k] for k in sorted(totals)]
    if len(parts) < 4:
        raise SystemExit(f"record_instructions: callgrind wrote {len(parts)} dumps for {python}, expected 4")
    result = json.loads(out.strip().splitlines()[-1])
    bricks = tokens * BRICKS
    result["instructions_per_brick"] = round((parts[1] - parts[2]) / bricks)
    ns = subprocess.run(
        [python, script, "--timed", "--tokens", str(tokens * 5), "--repeats", str(repeats)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    result.update(json.loads(ns.stdout.strip().splitlines()[-1]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--python", action="append", help="an interpreter to measure (repeatable; default: this one)")
    parser.add_argument("--tokens", type=int, default=20, help="tokens of 320 bricks under callgrind (default 20)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats outside valgrind (default 7)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for option, value in (("--tokens", args.tokens), ("--repeats", args.repeats)):
        if value < 1:
            print(f"record_instructions: {option} must be at least 1, got {value}", file=sys.stderr)
            return 2
    if args.child:
        child(args.tokens)
        return 0
    if args.timed:
        timed(args.tokens, args.repeats)
        return 0
    results = [measure(python, args.tokens, args.repeats) for python in args.python or [sys.executable]]
    if args.json:
        print(json.dumps(results))
        return 0
    print("an unsampled brick's record (paced_record's tight token), the loop without brickscope subtracted:")
    for r in results:
        note = "  (context variables share a trie slot: not comparable)" if r["shared_slot"] else ""
        print(
            f"  CPython {r['python']:<8} {r['hotpath']:<6} {r['instructions_per_brick']:6d} instructions"
            f"  {r['ns_per_brick']:6.0f} ns{note}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
