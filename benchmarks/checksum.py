# SPDX-License-Identifier: Apache-2.0
"""What an output checksum costs: brickscope's lane-parallel FNV-1a 64 against zlib.crc32 and
BLAKE2b (C implementations in the standard library) on the same buffers, in one run.

Usage::

    .venv/bin/python benchmarks/checksum.py [--mb 16]

Prints MB/s for each and ours as a fraction of crc32's; results go in docs/benchmarks.md.
Device buffers add a cuMemcpyDtoH and a stream synchronisation, which only real hardware
can cost.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import zlib

import numpy as np

from brickscope._checksum import _lanes_python, fnv1a64_lanes


def rate(function, data: bytes, repeat: int = 5) -> float:
    """MB/s of the best of ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function(data)
        best = min(best, time.perf_counter() - start)
    return len(data) / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=16)
    args = parser.parse_args()
    data = np.random.default_rng(0).integers(0, 256, args.mb << 20, dtype=np.uint8).tobytes()
    small = data[: 1 << 20]
    ours = rate(fnv1a64_lanes, data)
    crc = rate(zlib.crc32, data)
    blake = rate(lambda d: hashlib.blake2b(d, digest_size=8).digest(), data)
    python = rate(lambda d: _lanes_python(memoryview(d), len(d)), small, repeat=1)
    print(f"buffer {args.mb} MiB")
    print(f"  brickscope lanes FNV-1a 64 (numpy)   {ours:9.1f} MB/s  ({ours / crc:.2f}x crc32)")
    print(f"  zlib.crc32                           {crc:9.1f} MB/s")
    print(f"  blake2b-64                           {blake:9.1f} MB/s")
    print(f"  brickscope lanes, no numpy (1 MiB)   {python:9.1f} MB/s")
    for size in (4 << 10, 64 << 10):
        chunk = data[:size]
        start = time.perf_counter()
        for _ in range(200):
            fnv1a64_lanes(chunk)
        print(f"  {size >> 10:3d} KiB buffer: {(time.perf_counter() - start) / 200 * 1e6:7.1f} us per checksum")


if __name__ == "__main__":
    main()
