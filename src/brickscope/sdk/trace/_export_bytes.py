# SPDX-License-Identifier: Apache-2.0
"""Bytes an export pipeline sends or writes, where the exporter makes them knowable.

- brickscope's file exporters (Perfetto, flamegraph) say so themselves: an int
  ``bytes_written`` (the core never imports them; this is the whole protocol);
- the official OTLP/HTTP exporter, or a subclass of it (brickscope-exporter-otlp's): the
  request bodies it hands its HTTP transport
  (compressed if it compresses; retries count again: bytes put on the wire), counted by
  wrapping that transport (a private attribute of opentelemetry-exporter-otlp-proto-http,
  reached through :func:`brickscope.sdk._otel_internals.otlp_http_transport`);
- anything else (OTLP/gRPC, console, in-memory): not knowable, not reported.

Example::

    read = byte_reader(exporter)      # None: this exporter's bytes are not knowable
    sent = read() if read else None
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from brickscope.sdk._otel_internals import otlp_http_transport


class CountingTransport:
    """An HTTP transport that counts the request bodies it sends, then sends them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.bytes_sent = 0

    def request(self, method: str, url: str, *, data: bytes | None = None, **kwargs: Any) -> Any:
        if data is not None:
            self.bytes_sent += len(data)
        return self.inner.request(method, url, data=data, **kwargs)

    def __getattr__(self, name: str) -> Any:  # close, is_connection_error, ...
        return getattr(self.inner, name)


def byte_reader(exporter: Any) -> Callable[[], int] | None:
    """How to read the bytes ``exporter`` has written or sent so far, or None."""
    if isinstance(getattr(exporter, "bytes_written", None), int):
        return lambda: exporter.bytes_written
    transport = _otlp_http_transport(exporter)
    if transport is None:
        return None
    return lambda: transport.bytes_sent


def _otlp_http_transport(exporter: Any) -> CountingTransport | None:
    """The transport of the official OTLP/HTTP exporter (or a subclass), wrapped once in a
    CountingTransport."""
    return otlp_http_transport(exporter, lambda t: t if isinstance(t, CountingTransport) else CountingTransport(t))
