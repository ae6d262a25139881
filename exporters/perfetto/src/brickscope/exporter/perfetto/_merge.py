# SPDX-License-Identifier: Apache-2.0
"""Merge per-process ``.pftrace`` files into one trace on one timeline.

Example::

    merge_traces(["rank0.pftrace", "rank1.pftrace"], "all.pftrace")

Concatenating Perfetto traces makes one trace with one namespace of packet
sequence ids, track uuids and process ids, so two files that happen to share an
id would be mixed up. The merge copies every packet, giving each input's
sequences fresh ids where an earlier input already used them, and remapping its
track uuids the same way (uuid 0, the root track, is shared by design). A process
id an earlier input used (two hosts, or two containers, each with a pid 11) is
given a synthetic one above the Linux range in the input's track descriptors, and
its process track keeps the real one as the label ``process.pid=11``: the two
processes stay two in Perfetto and in ``brickscope report``.

An input in another format brickscope reads (OTLP JSON, Chrome trace JSON such as
torch.profiler's) is converted to a temporary ``.pftrace`` first (the reader's and the
exporter's rules) and merged from there; errors still name the input.

The same input twice would count every span twice, so it is refused: a file given
twice (:class:`UsageError`), an input whose first :data:`FINGERPRINT_SPANS` spans
(span id, name, start and end) hold a span of another input's first spans, or one
whose packets are byte for byte those of an earlier input (:class:`TraceFileError`). Every file written by
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

import hashlib
import os
import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from brickscope.offline import AtomicOutput, TraceFileError, TraceSource, UsageError, open_spans, replay

from ._reader import _SYNTHETIC_ID_BASE, PFTRACE, PacketError, iter_packets
from ._schema import pb
from ._wire import frame

_UUID_MASK = (1 << 63) - 1
_MAX_SEQUENCE_ID = (1 << 32) - 1
_MAX_PID = (1 << 31) - 1
#: Spans read from the start of each input to tell whether two inputs hold the same spans.
FINGERPRINT_SPANS = 256


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
    #: process ids that got a synthetic value because an earlier input used theirs
    renamed_processes: int = 0


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
        inputs: Perfetto protobuf traces (ours or any other producer's; gzip accepted), or
            traces in another format brickscope reads (converted first).
        output: the merged trace; an existing file is an error unless ``overwrite``.
        allow_truncated: copy the packets before the cut of a truncated input
            (listed in ``MergeResult.truncations``) instead of failing.
        progress: called as ``progress(input_path, bytes_read, total_bytes)``.

    Returns:
        Packet counts, how many ids were renamed, and the truncations accepted.

    Raises:
        ValueError: no inputs.
        UsageError: an input is given twice (the same file under any name).
        OutputError: the output exists, is an input, or is not a regular file.
        TraceFileError: an input is empty, not a trace, corrupt, or truncated; or it
            holds the same spans, or the same packets, as another input.
        OSError: a file cannot be read or written.
    """
    if not inputs:
        raise ValueError("merge needs at least one input trace")
    paths = [os.fspath(path) for path in inputs]
    _refuse_same_file(paths)
    with tempfile.TemporaryDirectory(prefix="brickscope-merge-") as scratch:
        readable, truncations = _as_pftrace(paths, allow_truncated, scratch)
        result = _merge(paths, readable, output, overwrite, allow_truncated, progress, force_flag)
    result.truncations[:0] = truncations
    return result


def _merge(
    paths: list[str],
    readable: dict[str, str],
    output: str | os.PathLike[str],
    overwrite: bool,
    allow_truncated: bool,
    progress: Callable[[str, int, int], None] | None,
    force_flag: str,
) -> MergeResult:
    """merge_traces once every input is a .pftrace (``readable[path]``: the file to read)."""
    _refuse_same_spans(paths, readable)
    rng = random.SystemRandom()
    sequences, uuids, pids = _Ids(), _Ids(), _Ids()
    contents: dict[bytes, str] = {}
    counts: list[int] = []
    truncations: list[TraceFileError] = []
    with AtomicOutput(output, overwrite=overwrite, inputs=paths, force_flag=force_flag) as target:
        with target.open() as out:
            for path in paths:
                sequences.start_input()
                uuids.start_input()
                pids.start_input()
                content = hashlib.sha256()

                def fresh_sequence() -> int:
                    return rng.randrange(2, _MAX_SEQUENCE_ID)

                def fresh_uuid() -> int:
                    return rng.getrandbits(63) or 1

                def track(value: int) -> int:
                    return value if value == 0 else uuids.map(value, fresh_uuid)

                def fresh_pid() -> int:
                    return rng.randrange(_SYNTHETIC_ID_BASE, _MAX_PID)

                def pid(value: int) -> int:
                    return value if value <= 0 else pids.map(value, fresh_pid)

                count = 0
                source = _open_input(readable[path], allow_truncated)
                source.path = path  # errors name the input, not its conversion
                try:
                    for offset, data in _packets(source):
                        content.update(data)
                        try:
                            packet = pb.TracePacket.FromString(data)
                        except DecodeError as exc:
                            raise source.error(f"corrupt packet: {exc}", offset=offset) from None
                        if packet.HasField("trusted_packet_sequence_id"):
                            packet.trusted_packet_sequence_id = sequences.map(
                                packet.trusted_packet_sequence_id, fresh_sequence
                            )
                        _remap_tracks(packet, track)
                        _remap_pids(packet, pid)
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
                earlier = contents.setdefault(content.digest(), path)
                if earlier != path:
                    raise TraceFileError(
                        path, f"the same packets as {earlier}: merging both would count every span twice"
                    )
                counts.append(count)
        target.commit()
    return MergeResult(counts, sequences.renamed, uuids.renamed, truncations, pids.renamed)


def _refuse_same_file(paths: list[str]) -> None:
    """Raise UsageError when one file is given twice (by any name: a link, ``./a`` and ``a``)."""
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:  # opening it says why, in order
            continue
        first = seen.setdefault((status.st_dev, status.st_ino), path)
        if first != path or paths.count(path) > 1:
            same = "given twice" if first == path else f"the same file as {first}"
            raise UsageError(f"{path}: {same}: each input is merged once")


def _as_pftrace(paths: list[str], allow_truncated: bool, scratch: str) -> tuple[dict[str, str], list[TraceFileError]]:
    """The .pftrace to read for each input: itself, or its conversion into ``scratch`` when it
    is in another format brickscope reads; and the cuts of truncated inputs so converted."""
    from ._exporter import PerfettoSpanExporter

    readable: dict[str, str] = {}
    truncations: list[TraceFileError] = []
    for number, path in enumerate(paths):
        readable[path] = path
        try:
            source = TraceSource(path)
        except OSError:  # opening it again says why, in order
            continue
        try:
            head = source.stream.peek(64)[:64]
        finally:
            source.close()
        if not head or PFTRACE.matches(head):
            continue
        converted = os.path.join(scratch, f"{number}.pftrace")
        with open_spans(path, allow_truncated=allow_truncated) as spans, PerfettoSpanExporter(converted) as exporter:
            if not replay(spans, exporter):
                raise TraceFileError(path, "no spans in this file")
        if spans.truncation is not None:
            truncations.append(spans.truncation)
        readable[path] = converted
    return readable, truncations


def _refuse_same_spans(paths: list[str], readable: dict[str, str]) -> None:
    """Raise TraceFileError when an input's first spans include a span of another input's
    (same span id, name, start and end): the same run written twice, or a merge of it."""
    owners: dict[tuple[int, int, int, str], str] = {}
    for path in paths:
        spans = _first_spans(readable[path])
        for key in spans:
            other = owners.get(key)
            if other is not None:
                raise TraceFileError(
                    path,
                    f"holds the same spans as {other} (span {key[3]!r} {key[0]:016x}):"
                    " merging both would count them twice",
                )
        owners.update(dict.fromkeys(spans, path))


def _first_spans(path: str) -> list[tuple[int, int, int, str]]:
    """(span id, start, end, name) of the first FINGERPRINT_SPANS spans of a trace, in file
    order; none when it cannot be read as spans (a trace of another producer: its packets are
    copied all the same)."""
    try:
        source = _open_input(path, allow_truncated=True)
    except (TraceFileError, OSError):  # copying it says why
        return []
    try:
        records = PFTRACE.read_records(source)
        return [(r[3], r[1], r[2], r[0]) for _, r in zip(range(FINGERPRINT_SPANS), records)]
    except (TraceFileError, OSError):
        return []
    finally:
        source.close()


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


def _remap_pids(packet: pb.TracePacket, pid: Callable[[int], int]) -> None:
    """Rewrite the process ids of a track descriptor; a renamed real pid stays a label."""
    if not packet.HasField("track_descriptor"):
        return
    descriptor = packet.track_descriptor
    if descriptor.HasField("process"):
        process = descriptor.process
        new = pid(process.pid)
        if new != process.pid:
            if process.pid < _SYNTHETIC_ID_BASE and not any(
                label.startswith("process.pid=") for label in process.process_labels
            ):
                process.process_labels.append(f"process.pid={process.pid}")
            process.pid = new
    if descriptor.HasField("thread"):
        descriptor.thread.pid = pid(descriptor.thread.pid)


def _remap_event(event: Any, track: Callable[[int], int]) -> None:
    if event.HasField("track_uuid"):
        event.track_uuid = track(event.track_uuid)
    for name in ("extra_counter_track_uuids", "extra_double_counter_track_uuids"):
        values = getattr(event, name)
        if values:
            values[:] = [track(v) for v in values]
