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
are left alone: brickscope derives them from random 64-bit span ids, and its reader
finds a GPU span's launch by that id. Inputs whose span ids collide (every rank with
the same deterministic id generator, or one file merged twice) therefore get their
flow arrows joined across inputs in the Perfetto UI (the trace processor reports no
error for it), and the reader may pair a GPU span with another input's launch (its
host start and duration); the slices themselves are unaffected. Not fixed: renaming
flow ids needs the reader to find launches by flow id instead of span id.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from brickscope.offline import AtomicOutput, TraceFileError, TraceSource

from ._reader import PFTRACE, PacketError, iter_packets
from ._schema import pb
from ._wire import frame

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
    #: inputs cut short whose packets before the cut were copied (``allow_truncated``)
    truncations: list[TraceFileError] = field(default_factory=list)


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
    allow_truncated: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    force_flag: str = "overwrite=True",
) -> MergeResult:
    """Write one trace holding every packet of ``inputs``, with no id collisions.

    The output is checked before anything is opened (never one of the inputs,
    only a regular file replaced) and written atomically: on any error nothing
    is left at ``output``.

    Args:
        inputs: Perfetto protobuf traces (ours or any other producer's; gzip accepted).
        output: the merged trace; an existing file is an error unless ``overwrite``.
        allow_truncated: copy the packets before the cut of a truncated input
            (listed in ``MergeResult.truncations``) instead of failing.
        progress: called as ``progress(input_path, bytes_read, total_bytes)``.

    Returns:
        Packet counts, how many ids were renamed, and the truncations accepted.

    Raises:
        ValueError: no inputs.
        OutputError: the output exists, is an input, or is not a regular file.
        TraceFileError: an input is empty, not a trace, corrupt, or truncated.
        OSError: a file cannot be read or written.
    """
    if not inputs:
        raise ValueError("merge needs at least one input trace")
    rng = random.SystemRandom()
    sequences, uuids = _Ids(), _Ids()
    counts: list[int] = []
    truncations: list[TraceFileError] = []
    with AtomicOutput(output, overwrite=overwrite, inputs=inputs, force_flag=force_flag) as target:
        with target.open() as out:
            for path in inputs:
                sequences.start_input()
                uuids.start_input()

                def fresh_sequence() -> int:
                    return rng.randrange(2, _MAX_SEQUENCE_ID)

                def fresh_uuid() -> int:
                    return rng.getrandbits(63) or 1

                def track(value: int) -> int:
                    return value if value == 0 else uuids.map(value, fresh_uuid)

                count = 0
                source = _open_input(os.fspath(path), allow_truncated)
                try:
                    for offset, data in _packets(source):
                        try:
                            packet = pb.TracePacket.FromString(data)
                        except DecodeError as exc:
                            raise source.error(f"corrupt packet: {exc}", offset=offset) from None
                        if packet.HasField("trusted_packet_sequence_id"):
                            packet.trusted_packet_sequence_id = sequences.map(
                                packet.trusted_packet_sequence_id, fresh_sequence
                            )
                        _remap_tracks(packet, track)
                        out.write(frame(packet.SerializeToString()))
                        count += 1
                        if progress is not None and count % 65536 == 0:
                            progress(source.path, source.bytes_read, source.total)
                finally:
                    source.close()
                if progress is not None:
                    progress(source.path, source.total, source.total)
                if source.truncation is not None:
                    truncations.append(source.truncation)
                counts.append(count)
        target.commit()
    return MergeResult(counts, sequences.renamed, uuids.renamed, truncations)


def _open_input(path: str, allow_truncated: bool) -> TraceSource:
    source = TraceSource(path, allow_truncated=allow_truncated)
    try:
        head = source.stream.peek(64)[:64]
        if not head:
            raise source.truncation or source.error("empty file")
        if not PFTRACE.matches(head):
            raise source.error(f"not a Perfetto trace: it starts with {head[:8].hex(' ')}")
    except BaseException:
        source.close()
        raise
    return source


def _packets(source: TraceSource) -> Iterator[tuple[int, bytes]]:
    try:
        yield from iter_packets(source.stream)
    except PacketError as exc:
        error = source.error(exc.what, offset=exc.offset)
        if not exc.truncated:
            raise error from None
        source.truncated(error)


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
