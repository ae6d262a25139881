# SPDX-License-Identifier: Apache-2.0
"""The ``brickscope`` command (also ``python -m brickscope``).

Subcommands come from installed distributions through the ``brickscope.commands``
entry-point group: each entry point names a function ``register(subparsers)``
that adds its subcommand with ``subparsers.add_parser(...)`` and sets
``func=<callable(args) -> int>`` as the parser default. The Perfetto exporter adds
``convert`` and ``merge``; the flamegraph exporter adds ``flamegraph``.

Example::

    $ brickscope merge rank0.pftrace rank1.pftrace -o all.pftrace

Exit status, the same for every subcommand: 0 done, 1 bad input (a file that
cannot be read, is corrupt, truncated or holds no spans), 2 usage (bad
arguments, an output that exists without ``--force``, is an input, or is not a
regular file), 130 interrupted. Errors are one line on stderr naming the file;
never a traceback (``BRICKSCOPE_DEBUG=1`` shows one for an internal error).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import NoReturn

from brickscope.offline._errors import UsageError
from brickscope.version import __version__

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Subcommands other distributions provide, and what to install for them.
#: The exporters' commands: command -> (distribution, its path in the brickscope repository).
_OPTIONAL = {
    "convert": ("brickscope-exporter-perfetto", "./exporters/perfetto"),
    "merge": ("brickscope-exporter-perfetto", "./exporters/perfetto"),
    "flamegraph": ("brickscope-exporter-flamegraph", "./exporters/flamegraph"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as every brickscope error is: one line
    (``brickscope tree: argument --step: '2:1': expected ...``), status 2. Subcommands'
    parsers are of the same class, so they answer the same way."""

    def error(self, message: str) -> NoReturn:
        from brickscope.offline import one_line

        self.exit(EXIT_USAGE, one_line(f"{self.prog}: {message} (--help for usage)") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, with every installed subcommand registered."""
    parser = _Parser(
        prog="brickscope",
        description="Measured GPU time as OpenTelemetry spans: offline tools.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"brickscope {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    broken = []
    for entry_point in sorted(entry_points(group="brickscope.commands"), key=lambda ep: ep.name):
        try:
            entry_point.load()(subparsers)
        except Exception as error:  # a broken plugin must not take the other commands down
            broken.append(f"{entry_point.name} ({entry_point.value}): {type(error).__name__}: {error}")
    missing: dict[tuple[str, str], list[str]] = {}
    for command, distribution in _OPTIONAL.items():
        if command not in subparsers.choices:
            missing.setdefault(distribution, []).append(command)
    if missing:
        lines = [
            f"  pip install {path:<24} # {dist}: {', '.join(commands)}" for (dist, path), commands in missing.items()
        ]
        first = "no subcommand is installed" if not subparsers.choices else "more subcommands"
        parser.epilog = f"{first}: they come with the exporters (paths in the brickscope repository):\n" + "\n".join(
            lines
        )
    if broken:
        parser.epilog = ((parser.epilog or "") + "\nsubcommands that failed to load: " + "; ".join(broken)).strip()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the process exit status."""
    from brickscope.offline import OutputError, TraceFileError

    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on bad arguments
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    name = f"brickscope {args.command}"
    try:
        return int(args.func(args) or 0)
    except (UsageError, OutputError) as error:
        return _fail(name, str(error), EXIT_USAGE)
    except TraceFileError as error:
        return _fail(name, str(error), EXIT_BAD_INPUT)
    except OSError as error:
        return _fail(name, _os_error(error), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return _fail(name, "interrupted", EXIT_INTERRUPTED)
    except Exception as error:  # a bug: still one line, the traceback on request
        if os.environ.get("BRICKSCOPE_DEBUG"):
            raise
        return _fail(
            name,
            f"internal error: {type(error).__name__}: {error} (BRICKSCOPE_DEBUG=1 shows the traceback)",
            EXIT_BAD_INPUT,
        )


def _os_error(error: OSError) -> str:
    if error.filename is not None and error.strerror:
        return f"{os.fspath(error.filename)}: {error.strerror}"
    return str(error)


def _fail(name: str, message: str, status: int) -> int:
    from brickscope.offline import one_line

    print(one_line(f"{name}: {message}"), file=sys.stderr)
    return status
