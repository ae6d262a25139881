# SPDX-License-Identifier: Apache-2.0
"""Lane assignment: the per-track nesting rules, against a model of the trace processor."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from brickscope.exporter.perfetto._lanes import Lane, LaneSet


def _replay(batches):
    """Place batches as the writer does and replay BEGIN/END like the trace processor.

    Events of a batch are written in the writer's order: by timestamp, then placement
    order, except that ENDs of slices begun earlier come first at their timestamp,
    innermost (latest placed) first. The trace processor sorts by timestamp, keeping
    file order, and an END closes the most recent open slice of its lane. Returns the
    (lane, start, end) each END closed, keyed by the slice the END belongs to, and the
    same for what was placed: they differ when an END closes another slice.
    """
    lanes = LaneSet()
    events = []  # (lane, ts, file position, kind, interval id)
    placed = []
    position = 0
    for batch_number, batch in enumerate(batches, 1):
        ordered = sorted(batch, key=lambda iv: (iv[0], -iv[1]))
        batch_events = []
        for order, (start, end) in enumerate(ordered):
            lane = lanes.place(start, end, batch_number)
            ident = len(placed)
            placed.append((ident, lane, start, end))
            batch_events.append((start, order, 0, lane, ident))
            batch_events.append((end, order if end == start else -1 - order, 1, lane, ident))
        for ts, _, phase, lane, ident in sorted(batch_events):
            events.append((lane, ts, position, phase, ident))
            position += 1
    rebuilt = []
    for lane in {p[1] for p in placed}:
        stack = []
        for _, ts, _, phase, ident in sorted(e for e in events if e[0] == lane):
            if phase == 0:
                stack.append((ts, ident))
            else:
                start, _ = stack.pop()
                rebuilt.append((ident, lane, start, ts))
        assert not stack
    return sorted(rebuilt), sorted(placed)


class TestLane:
    def test_nested_slices_share_a_lane(self):
        """A slice inside another goes on the same lane."""
        lane = Lane()
        assert lane.try_place(0, 100) and lane.try_place(10, 20) and lane.try_place(20, 30)

    def test_partial_overlap_is_refused(self):
        """A slice that partly overlaps one on the lane is refused."""
        lane = Lane()
        lane.try_place(0, 100)
        assert not lane.try_place(50, 150)
        assert not lane.try_place(-50, 50)

    def test_later_parent_sharing_a_start_is_refused(self):
        """A longer slice starting with an earlier-written one would be closed by its END."""
        lane = Lane()
        lane.try_place(0, 50)
        assert not lane.try_place(0, 100)

    def test_slice_ending_where_another_begins_is_refused(self):
        """A slice ending where a written slice begins would close that slice."""
        lane = Lane()
        lane.try_place(100, 200)
        assert not lane.try_place(50, 100)
        assert lane.try_place(200, 300)

    def test_later_batch_nested_with_the_same_end_is_refused(self):
        """A later batch's slice inside a written one, ending with it: the written END comes
        first in the file and would close it. Batch-mates may share an end."""
        lane = Lane()
        assert lane.try_place(20, 60, batch=1) and lane.try_place(30, 60, batch=1)
        assert not lane.try_place(40, 60, batch=2) and not lane.try_place(20, 60, batch=2)
        assert lane.try_place(40, 59, batch=2)

    def test_zero_length_always_fits(self):
        """Zero-length slices never conflict."""
        lane = Lane()
        lane.try_place(0, 100)
        assert lane.try_place(100, 100) and lane.try_place(0, 0) and lane.size == 1

    def test_shrink_seals_the_forgotten_past(self):
        """After forgetting old slices the lane refuses slices that reach back into them."""
        lane = Lane()
        for i in range(10):
            lane.try_place(10 * i, 10 * i + 5)
        lane.shrink(4)
        assert lane.size == 4 and lane.sealed_until_ns == 55
        assert not lane.try_place(0, 1000)
        assert lane.try_place(55, 58)


_interval = st.tuples(st.integers(0, 60), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1]))


class TestLaneSet:
    def test_overflow_lane_for_a_conflict(self):
        """A slice that fits no lane opens a new one."""
        lanes = LaneSet()
        assert [lanes.place(0, 10), lanes.place(5, 15), lanes.place(7, 20)] == [0, 1, 2]

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.lists(_interval, min_size=1, max_size=8), min_size=1, max_size=6))
    @example([[(20, 60)], [(30, 60)]])  # the writer's cross-batch flow swap (test_writer.TestFlowsOnEqualEnds)
    def test_trace_processor_rebuilds_every_interval(self, batches):
        """Whatever the batches, replaying BEGIN/END per lane rebuilds exactly the placed
        intervals, each closed by its own END (a flow on an END lands on its own slice)."""
        rebuilt, placed = _replay(batches)
        assert rebuilt == placed
