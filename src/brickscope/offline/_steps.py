# SPDX-License-Identifier: Apache-2.0
"""The ``--step`` argument every command reads the same way: ``N``, ``A:B``, ``A:`` or ``:B``.

Example::

    parser.add_argument("--step", type=step_argument, metavar="N|A:B")
    low, high = parse_steps("2:")        # (2, None): step 2 and every later one
    parse_steps("3")                     # (3, 4): step 3 alone
"""

from __future__ import annotations

import argparse

#: Steps ``low <= step < high``; an end that is None is open.
StepRange = tuple[int | None, int | None]

_EXPECTED = "expected a step N, or a range A:B, A: or :B of step numbers >= 0 with A < B"


def parse_steps(text: str) -> StepRange:
    """``N`` is step N alone, ``(N, N + 1)``; ``A:B`` the steps ``A <= step < B``, and
    either end may be left out (``A:``, ``:B``), not both.

    Raises:
        ValueError: anything else (a negative number, ``B <= A``, ``:``, not a number);
            the message is one line naming ``text``.
    """
    low_text, sep, high_text = text.partition(":")
    try:
        low = int(low_text) if low_text.strip() else None
        high = int(high_text) if high_text.strip() else None
    except ValueError:
        raise ValueError(f"{text!r}: {_EXPECTED}") from None
    if not sep:
        low, high = low, None if low is None else low + 1
    bounds = [b for b in (low, high) if b is not None]
    if not bounds or any(b < 0 for b in bounds) or (low is not None and high is not None and high <= low):
        raise ValueError(f"{text!r}: {_EXPECTED}")
    return low, high


def step_argument(text: str) -> StepRange:
    """:func:`parse_steps` as an argparse ``type``: a bad value is argparse's usage error (status 2)."""
    try:
        return parse_steps(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def describe_steps(steps: StepRange) -> str:
    """The range as the user would type it: ``3`` for step 3 alone, else ``A:B`` with open ends empty."""
    low, high = steps
    if low is not None and high == low + 1:
        return str(low)
    return f"{'' if low is None else low}:{'' if high is None else high}"
