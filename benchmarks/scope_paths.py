# SPDX-License-Identifier: Apache-2.0
"""The scope paths one by one, for comparing source trees in interleaved rounds.

Cases (ns per scope, best of 7 x 20,000 in each round; records dropped between rounds):
``factory`` is ``with bs.brick("attention_score")`` inside an open layer (a fresh entry per
call while recording), ``shared`` enters one scope object again and again, ``token`` is
``exit_scope(enter_scope(scope))``, ``disabled`` the factory form after ``bs.disable()``,
``empty_with`` a ``with`` on an empty slotted object. Host clock, no sync point.

Usage::

    python benchmarks/scope_paths.py                          # this tree, one round
    python benchmarks/scope_paths.py --rounds 8 A/src B/src   # trees alternately, min and median
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit


def measure() -> dict[str, float]:
    from opentelemetry.sdk.trace import TracerProvider

    import brickscope as bs

    session = bs.configure(TracerProvider(), clock="host", max_pending=1 << 22, max_delay_millis=1e9, aggregate=False)
    processor = session.sync_processor
    pending = processor.recorder.pending if hasattr(processor, "recorder") else processor._pending
    brick = bs.brick
    bs.brick("attention_score")
    shared = bs.brick("attention_score", elements=1)

    def factory(n: int) -> None:
        with bs.layer(0):
            for _ in range(n):
                with brick("attention_score"):
                    pass
        pending.clear()

    def reused(n: int) -> None:
        with bs.layer(0):
            for _ in range(n):
                with shared:
                    pass
        pending.clear()

    def token(n: int) -> None:
        with bs.layer(0):
            for _ in range(n):
                bs.exit_scope(bs.enter_scope(shared))
        pending.clear()

    class Empty:
        __slots__ = ()

        def __enter__(self) -> Empty:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    empty = Empty()

    def empty_with(n: int) -> None:
        for _ in range(n):
            with empty:
                pass

    cases = {"factory": factory, "shared": reused, "empty_with": empty_with}
    if hasattr(bs, "enter_scope"):
        cases["token"] = token
    results = {name: min(timeit.repeat(lambda f=f: f(1000), number=20, repeat=7)) / 20_000 * 1e9 for name, f in cases.items()}
    bs.disable()
    results["disabled"] = min(timeit.repeat(lambda: factory(1000), number=20, repeat=7)) / 20_000 * 1e9
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", help="src/ directories to compare (default: this one)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child or not args.trees:
        print(json.dumps(measure()))
        return 0
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
            runs[tree].append(json.loads(out.stdout))
    for tree, results in runs.items():
        summary = {case: (round(min(r[case] for r in results)), round(statistics.median(r[case] for r in results))) for case in results[0]}
        print(tree, json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
