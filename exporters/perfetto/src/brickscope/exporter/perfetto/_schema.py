# SPDX-License-Identifier: Apache-2.0
"""Google's Perfetto trace schema, and the conventions this package layers on it.

Example::

    from brickscope.exporter.perfetto._schema import pb
    packet = pb.TracePacket.FromString(data)

Every message is built and parsed with ``perfetto_trace_pb2`` from the
``perfetto`` distribution: this module is the only place that imports it.
"""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

__all__ = ["pb"]

#: ClockSnapshot.Clock id of CLOCK_REALTIME (Unix epoch): the trace's time axis.
CLOCK_REALTIME = pb.BUILTIN_CLOCK_REALTIME
#: Our sequence-scoped clock ([64, 127] are sequence-scoped): REALTIME, delta-encoded.
CLOCK_INCREMENTAL = 64

SEQ_INCREMENTAL_STATE_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS_INCREMENTAL_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE

TYPE_SLICE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
TYPE_SLICE_END = pb.TrackEvent.TYPE_SLICE_END
TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT

#: Tag byte of ``Trace.packet`` (field 1, length-delimited): a trace file is a
#: concatenation of such fields, so packets can be appended one batch at a time.
TRACE_PACKET_TAG = 0x0A

# Debug annotations: span attributes are nested along their dots (Perfetto shows
# ``brickscope.gpu.stream.id`` as ``debug.brickscope.gpu.stream.id``), and the
# span's own identity lives in one dictionary named META. User attributes never
# go inside it: a key starting with ``otel.`` is written flat, under its full name.
META = "otel"
META_SPAN_ID = "span_id"
META_PARENT_SPAN_ID = "parent_span_id"
META_PARENT_REMOTE = "parent_is_remote"
META_KIND = "kind"
META_STATUS_CODE = "status_code"
META_STATUS_DESCRIPTION = "status_description"
META_SCOPE = "scope"
META_SCOPE_VERSION = "scope_version"
META_LINKS = "links"
META_EVENT_OF = "event_of"
# Attributes left out because the slices say them exactly (bit set in META_IMPLIED):
# brickscope.host.start_ns / .duration_ns (the launch slice of a GPU span, the
# slice itself otherwise) and brickscope.gpu.duration_ns (a GPU slice's duration).
META_IMPLIED = "implied"
IMPLIED_HOST_START = 1
IMPLIED_HOST_DURATION = 2
IMPLIED_GPU_DURATION = 4
META_LINK_TRACE_ID = "trace_id"
META_LINK_SPAN_ID = "span_id"
META_LINK_REMOTE = "is_remote"
META_LINK_ATTRIBUTES = "attributes"

