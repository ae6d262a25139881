# SPDX-License-Identifier: Apache-2.0
"""The OpenTelemetry releases whose internals the fast encoding was read against and tested on.

The HTTP and gRPC exporters reach into private parts of the official exporters
(opentelemetry-exporter-otlp-proto-http and -grpc) and the encoder writes what the SDK's
spans hold. pyproject.toml pins the official exporters and the SDK with ``~=`` to the minor
releases below, as OpenTelemetry's own exporters pin their siblings, so an ordinary install
cannot pair them with another release. Where one is there anyway (installed with
``--no-deps``, or a newer SDK forced in), the exporter does not guess at a layout nobody
read: it says so in one warning and sends the official encoding (slower, never wrong).

Example::

    from brickscope.exporter.otlp import _checked

    _checked.outside({"opentelemetry-sdk": "1.46.0"})
    # 'opentelemetry-sdk 1.46.0 is outside the releases checked (1.45)'
"""

from __future__ import annotations

from collections.abc import Mapping

#: (oldest, newest) minor release checked, both ends included; pyproject.toml pins the same.
CHECKED = ((1, 45), (1, 45))


def _minor(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def outside(versions: Mapping[str, str]) -> str | None:
    """Why the fast encoding must not run: the first distribution of ``versions`` (name ->
    installed version) whose minor release is outside :data:`CHECKED`; None where every one
    is inside."""
    (lo, hi) = CHECKED
    checked = f"{lo[0]}.{lo[1]}" if lo == hi else f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"
    for name, version in versions.items():
        release = _minor(version)
        if release is None or not lo <= release <= hi:
            return f"{name} {version} is outside the releases checked ({checked})"
    return None
