# SPDX-License-Identifier: Apache-2.0
"""What a matrix leg (.ci/matrix) must have run, checked after its suite passed.

- the OpenTelemetry releases its constraints file pins, and none other (a leg that
  silently resolved another release would test a stack nobody declared);
- every C accelerator in use, built for this interpreter: on CPython 3.12+ that is the
  build whose module-globals cache runs on dict watchers, and on 3.13+ the one whose free
  lists revive objects with Py_SET_REFCNT (src/brickscope/_hotpath_c/compat.h), so those
  branches ran the suite.

Usage: python .ci/leg_check.py CONSTRAINTS_FILE; prints one line, exits 1 on a mismatch.
"""

from __future__ import annotations

import sys
from importlib import metadata


def pinned(constraints: str) -> dict[str, str]:
    """name -> version of every ``name==version`` line of a constraints file."""
    pins = {}
    with open(constraints, encoding="utf-8") as file:
        for line in file:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip().lower()] = version.strip()
    return pins


def main(constraints: str) -> int:
    problems = []
    for name, version in pinned(constraints).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # pinned for the legs that install it (the otlp exporter's siblings)
        if installed != version:
            problems.append(f"{name} {installed} installed, {version} pinned")

    import brickscope as bs
    from brickscope.analysis import _table  # noqa: F401 - loads brickscope._tablerows
    from brickscope.exporter.perfetto import _annotations  # noqa: F401 - loads _fastread

    accelerators = {part: impl for part, impl in bs.implementations().items() if not part.startswith("sdk.")}
    problems += [f"{part} runs {impl.in_use} ({impl.reason})" for part, impl in accelerators.items() if impl.in_use != "c"]
    if len(accelerators) != 3:
        problems.append(f"expected 3 accelerators, found {sorted(accelerators)}")
    version = sys.version_info[:2]
    branches = ["dict watchers" if version >= (3, 12) else "dict version tags"]
    branches.append("Py_SET_REFCNT free lists" if version >= (3, 13) else "_Py_NewReference free lists")
    if problems:
        print("leg check FAILED: " + "; ".join(problems))
        return 1
    sdk = metadata.version("opentelemetry-sdk")
    print(f"leg check: CPython {sys.version.split()[0]}, opentelemetry-sdk {sdk}, C accelerators in use ({', '.join(branches)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
