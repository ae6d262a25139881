# SPDX-License-Identifier: Apache-2.0
"""Merge per-process ``.pftrace`` files into one trace on one timeline.

Example::

    merge_traces(["rank0.pftrace", "rank1.pftrace"], "all.pftrace")

Concatenating Perfetto traces makes one trace with one namespace of packet
sequence ids and track uuids, so two files that happen to share an id would be
mixed up. The merge copies every packet, giving each input's sequences fresh
ids where an earlier input already used them, and remapping its track uuids the
same way (uuid 0, the root track, is shared by design). Every file written by
this package declares ``CLOCK_REALTIME`` its primary clock and carries its own
sequence-scoped clock, so the inputs land on one wall-clock timeline. Flow ids
are left alone: brickscope derives them from random 64-bit span ids.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from brickscope.offline import TraceFileError

from ._reader import PacketError, iter_packets
from ._schema import frame, pb

_UUID_MASK = (1 << 63) - 1
_MAX_SEQUENCE_ID = (1 << 32) - 1


@dataclass
class MergeResult:
    """What a merge did."""

    #: packets copied, per input file, in input order
    packets: list[int]
    #: sequences that got a new id because an earlier input used theirs
    renamed_sequences: int
    #: track uuids that got a new value because an earlier input used theirs
    renamed_tracks: int


class _Ids:
    """Ids used so far in the output, and this input's renames."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.renames: dict[int, int] = {}
        self.renamed = 0

    def start_input(self) -> None:
        self.renames = {}

    def map(self, value: int, fresh: Callable[[], int]) -> int:
        new = self.renames.get(value)
        if new is not None:
            return new
        if value in self.used:
            new = fresh()
            while new in self.used:
                new = fresh()
            self.renamed += 1
        else:
            new = value
        self.renames[value] = new
        self.used.add(new)
        return new


def merge_traces(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> MergeResult:
    """Write one trace holding every packet of ``inputs``, with no id collisions.

    Args:
        inputs: Perfetto protobuf traces (ours or any other producer's).
        output: the merged trace; an existing file is an error unless ``overwrite``.
        progress: called as ``progress(input_path, bytes_read, total_bytes)``.

    Returns:
        Packet counts and how many ids were renamed.

    Raises:
        ValueError: no inputs, the output exists, or an input is not a trace.
        OSError: a file cannot be read or written.
    """
    if not inputs:
        raise ValueError("merge needs at least one input trace")
    rng = random.SystemRandom()
    sequences, uuids = _Ids(), _Ids()
    counts: list[int] = []
    try:
        out = open(output, "wb" if overwrite else "xb")  # noqa: SIM115
    except FileExistsError:
        raise ValueError(f"{os.fspath(output)!r} already exists; pass --force (overwrite=True)") from None
    with out:
        for path in inputs:
            total = os.path.getsize(path)
            sequences.start_input()
            uuids.start_input()

            def fresh_sequence() -> int:
                return rng.randrange(2, _MAX_SEQUENCE_ID)

            def fresh_uuid() -> int:
                return rng.getrandbits(63) or 1

            def track(value: int) -> int:
                return value if value == 0 else uuids.map(value, fresh_uuid)

            count = 0
            with open(path, "rb") as stream:
                for data in _packets(path, stream):
                    packet = pb.TracePacket.FromString(data)
                    if packet.HasField("trusted_packet_sequence_id"):
                        packet.trusted_packet_sequence_id = sequences.map(
                            packet.trusted_packet_sequence_id, fresh_sequence
                        )
                    _remap_tracks(packet, track)
                    out.write(frame(packet.SerializeToString()))
                    count += 1
                    if progress is not None and count % 65536 == 0:
                        progress(os.fspath(path), stream.tell(), total)
            if progress is not None:
                progress(os.fspath(path), total, total)
            counts.append(count)
    return MergeResult(counts, sequences.renamed, uuids.renamed)


def _packets(path: str | os.PathLike[str], stream: Any) -> Any:
    try:
        for _, data in iter_packets(stream):
            yield data
    except PacketError as exc:
        raise TraceFileError(path, exc.what, offset=exc.offset) from None


def _remap_tracks(packet: pb.TracePacket, track: Callable[[int], int]) -> None:
    """Rewrite every track uuid a packet refers to."""
    if packet.HasField("track_descriptor"):
        descriptor = packet.track_descriptor
        descriptor.uuid = track(descriptor.uuid)
        if descriptor.HasField("parent_uuid"):
            descriptor.parent_uuid = track(descriptor.parent_uuid)
    if packet.HasField("track_event"):
        _remap_event(packet.track_event, track)
    if packet.HasField("trace_packet_defaults") and packet.trace_packet_defaults.HasField("track_event_defaults"):
        _remap_event(packet.trace_packet_defaults.track_event_defaults, track)


def _remap_event(event: Any, track: Callable[[int], int]) -> None:
    if event.HasField("track_uuid"):
        event.track_uuid = track(event.track_uuid)
    for name in ("extra_counter_track_uuids", "extra_double_counter_track_uuids"):
        values = getattr(event, name)
        if values:
            values[:] = [track(v) for v in values]
