# SPDX-License-Identifier: Apache-2.0
"""Spans carry the name of the thread that recorded them, even when the OS gives a finished
thread's id to a new thread (it does: sequential threads on Linux usually share one id)."""

from __future__ import annotations

import threading

import brickscope as bs
from brickscope import _state
from brickscope.sdk.trace import _recorder
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def _run(name: str, body) -> int:
    """Run ``body`` in a thread called ``name``, to its end; its id."""
    thread = threading.Thread(target=body, name=name)
    thread.start()
    thread.join()
    return thread.ident


def _layer(index: int) -> None:
    with bs.layer(index):
        pass


def _names_by_layer(spans) -> dict[int, tuple[str, int]]:
    return {s.attributes[A.LAYER_INDEX]: (s.attributes[A.THREAD_NAME], s.attributes[A.THREAD_ID]) for s in spans}


def test_threads_run_one_after_another_each_carry_their_own_name():
    """Twenty threads, each started after the previous one ended: every span names its own
    thread (the ids repeat in practice; the names must not)."""
    with capture_spans() as captured:
        idents = [_run(f"worker-{i}", lambda i=i: _layer(i)) for i in range(20)]
        spans = captured.spans
    assert _names_by_layer(spans) == {i: (f"worker-{i}", idents[i]) for i in range(20)}


def test_a_thread_is_forgotten_when_it_ends():
    """The name is kept while the thread runs and dropped when it ends, so whatever thread
    gets its id next is named afresh (deterministic: no id reuse needed)."""
    seen = {}

    def body():
        _layer(0)
        seen["names"] = dict(_state.recorder.thread_names)

    with capture_spans() as captured:
        ident = _run("first", body)
        recorder = _state.recorder
        assert seen["names"][ident] == "first"
        assert ident not in recorder.thread_names
        spans = captured.spans
    assert _names_by_layer(spans) == {0: ("first", ident)}


def test_forgetting_a_thread_names_it_afresh_at_its_next_scope():
    """The recorder's cache of the last thread (the C one keeps it outside the dict) is
    dropped with the name: the same thread id, opening again after forget_thread, is
    named as it is now, not as it was."""
    main = threading.current_thread()
    old_name = main.name
    with capture_spans() as captured:
        _layer(0)
        main.name = "renamed"
        try:
            _layer(1)  # still cached: the name a thread had at its first scope stays
            _state.recorder.forget_thread(threading.get_ident())
            _layer(2)
        finally:
            main.name = old_name
        spans = captured.spans
    ident = threading.get_ident()
    assert _names_by_layer(spans) == {0: (old_name, ident), 1: (old_name, ident), 2: ("renamed", ident)}


def test_a_reused_id_gets_the_new_threads_name(monkeypatch):
    """Two threads made to share one id (the pure-Python recorder reads it through
    ``_get_ident``; the C one is covered by the tests above): each span names its thread,
    also when the first thread's span is built after the second thread opened."""
    monkeypatch.setattr(_recorder, "_get_ident", lambda: 4242)
    with capture_spans() as captured:
        _run("first", lambda: _layer(0))
        _run("second", lambda: _layer(1))
        spans = captured.spans
    names = {i: name for i, (name, _) in _names_by_layer(spans).items()}
    assert names == {0: "first", 1: "second"}
