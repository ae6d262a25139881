# SPDX-License-Identifier: Apache-2.0
"""The ``brickscope`` command.

Subcommands come from installed distributions through the ``brickscope.commands``
entry-point group: each entry point names a function ``register(subparsers)``
that adds its subcommand with ``subparsers.add_parser(...)`` and sets
``func=<callable(args) -> int>`` as the parser default. The Perfetto exporter adds
``convert`` and ``merge``; the flamegraph exporter adds ``flamegraph``.

Example::

    $ brickscope merge rank0.pftrace rank1.pftrace -o all.pftrace
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Sequence

from brickscope.version import __version__


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, with every installed subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="brickscope", description="Measured GPU time as OpenTelemetry spans: offline tools."
    )
    parser.add_argument("--version", action="version", version=f"brickscope {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for entry_point in sorted(entry_points(group="brickscope.commands"), key=lambda ep: ep.name):
        entry_point.load()(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
