# SPDX-License-Identifier: Apache-2.0
"""NVTX mirror: the same names in Nsight Systems as in brickscope's spans.

The ``nvtx`` package (``pip install nvtx``) is optional. Its domain and each
module's event attributes are built once at ``instrument()``, so a call pays one
``push_range``/``pop_range`` pair (~50 ns with no tool attached); without the
package the instrumented call has no NVTX code at all.
"""

from __future__ import annotations

import importlib
from typing import Any

DOMAIN = "brickscope"
# One colour per category, so Nsight's timeline reads like the category table.
_COLOURS = {
    "attention": "blue",
    "ffn": "green",
    "norm": "yellow",
    "embedding": "purple",
    "linear": "cyan",
    "loss": "red",
    "layer": "grey",
}


def load_domain(mode: Any) -> Any:
    """The ``brickscope`` NVTX domain, or None.

    Args:
        mode: ``"auto"`` (the domain when ``nvtx`` imports), True (required) or False.

    Raises:
        ValueError: ``mode`` is not one of those, or True and ``nvtx`` is not installed.
    """
    if mode is False:
        return None
    if mode != "auto" and mode is not True:
        raise ValueError(f"brickscope.torch: nvtx must be 'auto', True or False, got {mode!r}")
    try:
        nvtx = importlib.import_module("nvtx")
    except ImportError:
        if mode is True:
            raise ValueError("brickscope.torch: nvtx=True but the nvtx package is not installed (pip install nvtx)") from None
        return None
    return nvtx.get_domain(DOMAIN)


def range_for(domain: Any, name: str, category: str | None) -> tuple[Any, Any, Any]:
    """``(push_range, pop_range, attributes)`` for one module's range, built once."""
    colour = _COLOURS.get(category or "layer", "white")
    return domain.push_range, domain.pop_range, domain.get_event_attributes(message=name, color=colour)
