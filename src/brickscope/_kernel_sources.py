# SPDX-License-Identifier: Apache-2.0
"""The kernel source registry: which code a kernel name ran, as a stable 64-bit hash.

``register_kernel_source(name, source)`` hashes the source (BLAKE2b, 8-byte digest:
the same bytes give the same hash on every machine, Python version and run) and
remembers it under the kernel's name. Kernel spans of that name carry the hash
(``brickscope.kernel.source.hash``); the registry itself (hash -> kind, name, path)
travels with the trace as one resource attribute, ``brickscope.kernel.sources``, a
JSON string, so it reaches every exporter and every per-rank file, and
``brickscope tree --sources`` can say where each kernel came from.

Why the resource and not a metadata packet: a packet would exist only in ``.pftrace``
files; the resource reaches OTLP, OTLP JSON and Perfetto alike. A source registered
after ``configure()`` updates the provider's resource: spans built afterwards carry
the new registry (spans already exported keep the old one; their hashes still show).

Example::

    digest = bs.register_kernel_source("gemm_fwd", ptx_text, kind="ptx", path="kernels/gemm.ptx")
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

from brickscope.trace.attributes import KERNEL_SOURCES

KINDS = ("ptx", "cubin", "cuda", "triton")

_lock = threading.Lock()
#: kernel name -> (hash, kind, path or "")
_by_name: dict[str, tuple[int, str, str]] = {}
#: Told of every registration (set_listener); the SDK layer's, once it is loaded.
_listener: Callable[[dict[str, str]], None] | None = None


def register_kernel_source(name: str, source: str | bytes, kind: str = "ptx", path: str | os.PathLike[str] | None = None) -> int:
    """Register the source a kernel was built from; returns its stable 64-bit hash.

    Kernel spans named ``name`` recorded afterwards carry the hash. Registering a name
    again (a rebuilt kernel) replaces its entry.

    Args:
        name: the kernel's name, as given to ``bs.kernel(name, ...)``.
        source: the source text (PTX, CUDA C++, Triton) or binary (cubin): ``str`` is
            hashed as UTF-8, bytes-like objects as they are.
        kind: ``"ptx"``, ``"cubin"``, ``"cuda"`` or ``"triton"``.
        path: where the source lives, for people reading the trace (not read).

    Raises:
        TypeError, ValueError: a malformed argument (at the call, never later).

    .. versionadded:: 0.2.0
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"brickscope: kernel name must be a non-empty str, got {name!r}")
    if kind not in KINDS:
        raise ValueError(f"brickscope: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if isinstance(source, str):
        data = source.encode("utf-8")
    else:
        try:
            data = memoryview(source).cast("B")
        except TypeError:
            raise TypeError(f"brickscope: source must be str or bytes-like, got {type(source).__name__}") from None
    digest = source_hash(data)
    with _lock:
        _by_name[name] = (digest, kind, "" if path is None else os.fspath(path))
    if _listener is not None:
        _listener(resource_attributes())
    return digest


def set_listener(listener: Callable[[dict[str, str]], None] | None) -> None:
    """Call ``listener(resource_attributes())`` after every registration (None: nobody).

    The SDK layer listens, to put the new registry on the live session's resource; the
    registry itself never imports the SDK.
    """
    global _listener
    _listener = listener


def source_hash(data: Any) -> int:
    """The 64-bit hash of source bytes (BLAKE2b with an 8-byte digest, big-endian)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def hash_of(name: str) -> int | None:
    """The registered hash of kernel ``name``, or None."""
    entry = _by_name.get(name)
    return entry[0] if entry is not None else None


def resource_attributes() -> dict[str, str]:
    """The registry as the resource attribute (empty when nothing is registered)."""
    with _lock:
        if not _by_name:
            return {}
        entries = {f"{digest:016x}": [kind, name, path] for name, (digest, kind, path) in sorted(_by_name.items())}
    return {KERNEL_SOURCES: json.dumps(entries, sort_keys=True, separators=(",", ":"))}


def reset() -> None:
    """Forget every registration (tests)."""
    with _lock:
        _by_name.clear()
