# SPDX-License-Identifier: Apache-2.0
"""Frame names that cannot break the folded or the speedscope format.

Example::

    >>> folded_frame("attn; q k")
    'attn:_q_k'
    >>> speedscope_frame("")
    '(unnamed)'

The folded format (``frame;frame;frame weight``) has no escape syntax that the
tools understand, so the rule is a substitution, applied to every frame:

- ``;`` becomes ``:`` (``;`` separates frames; ``:`` reads the same way in
  names like ``ns::op``).
- Whitespace of any kind (space, tab, newline, carriage return, the Unicode line
  and paragraph separators, no-break spaces...) and other control characters
  become ``_``: the weight is the last whitespace-separated field, a second
  numeric field turns a line into a differential one in flamegraph.pl, and a
  line break would cut the line.
- Lone surrogates (possible in a Python ``str``, not encodable as UTF-8) become
  U+FFFD; every other non-ASCII character is kept and the file is UTF-8, which
  flamegraph.pl, inferno and speedscope all read.
- An empty name becomes ``(unnamed)``: an empty frame would be dropped or shown
  as nothing.

The speedscope JSON format quotes names, so there only empty names and lone
surrogates are replaced; everything else is kept as it was.
"""

from __future__ import annotations

import unicodedata

__all__ = ["UNNAMED", "folded_frame", "speedscope_frame"]

#: The frame name that stands for an empty span name.
UNNAMED = "(unnamed)"
_REPLACEMENT_CHARACTER = "\ufffd"


def folded_frame(name: str) -> str:
    """``name`` as a frame of the folded format (see the module docstring)."""
    if not name:
        return UNNAMED
    if name.isascii() and name.isprintable() and " " not in name and ";" not in name:
        return name  # the common case, decided without a per-character loop
    return "".join(_folded_char(char) for char in name)


def speedscope_frame(name: str) -> str:
    """``name`` as a speedscope frame name: empty and unencodable names fixed."""
    if not name:
        return UNNAMED
    if name.isascii():
        return name
    return "".join(_REPLACEMENT_CHARACTER if _is_surrogate(c) else c for c in name)


def _folded_char(char: str) -> str:
    if char == ";":
        return ":"
    if char.isspace() or unicodedata.category(char) == "Cc":
        return "_"
    if _is_surrogate(char):
        return _REPLACEMENT_CHARACTER
    return char


def _is_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"
