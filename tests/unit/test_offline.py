# SPDX-License-Identifier: Apache-2.0
"""brickscope.offline.open_spans on OTLP JSON: sniffing, truncation, bounds, the one error type."""

from __future__ import annotations

import gzip
import json
import pickle

import pytest

from brickscope.offline import SpanStream, TraceFileError, _source, open_spans


def _request(*names: str) -> dict:
    spans = [
        {
            "traceId": "0" * 31 + "1",
            "spanId": f"{i + 1:016x}",
            "name": name,
            "startTimeUnixNano": str(1_000 + i),
            "endTimeUnixNano": str(2_000 + i),
        }
        for i, name in enumerate(names)
    ]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def _jsonl(*requests: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in requests)


class TestOpenSpans:
    def test_json_lines_and_document_and_gzip_read_alike(self, tmp_path):
        """The three spellings of one trace give the same spans, and say their format."""
        lines = tmp_path / "a.jsonl"
        lines.write_bytes(_jsonl(_request("a", "b"), _request("c")))
        document = tmp_path / "a.json"
        document.write_text(json.dumps([_request("a", "b"), _request("c")], indent=2))
        packed = tmp_path / "a.jsonl.gz"
        packed.write_bytes(gzip.compress(lines.read_bytes()))
        for path in (lines, document, packed):
            with open_spans(path) as spans:
                assert isinstance(spans, SpanStream)
                assert [s.name for s in spans] == ["a", "b", "c"]
                assert (spans.format, spans.spans_read, spans.truncation) == ("otlp-json", 3, None)

    def test_progress_ends_at_the_size_on_disk(self, tmp_path):
        path = tmp_path / "a.jsonl.gz"
        path.write_bytes(gzip.compress(_jsonl(*[_request("x")] * 100)))
        calls: list[tuple[int, int]] = []
        assert len(list(open_spans(path, progress=lambda done, total: calls.append((done, total))))) == 100
        size = path.stat().st_size
        assert calls[-1] == (size, size)

    def test_format_is_refused_when_opened_not_when_iterated(self, tmp_path):
        """A file in no known format fails at open_spans(), before any iteration."""
        path = tmp_path / "notes.txt"
        path.write_text("hello, world\n")
        with pytest.raises(TraceFileError, match=r"notes\.txt: not a trace brickscope can read.*starts with 68 65"):
            open_spans(path)

    def test_a_pipe_is_read_too(self, tmp_path):
        """Process substitution (``brickscope report <(zcat run.jsonl.gz)``) gives a pipe: no seeking."""
        import os
        import threading

        data = gzip.compress(_jsonl(_request("a", "b")))
        pipe = tmp_path / "pipe"
        os.mkfifo(pipe)
        writer = threading.Thread(target=lambda: pipe.write_bytes(data))
        writer.start()
        try:
            assert [s.name for s in open_spans(pipe)] == ["a", "b"]
        finally:
            writer.join(timeout=30)

    def test_empty_file(self, tmp_path):
        path = tmp_path / "empty.jsonl"
        path.write_bytes(b"")
        with pytest.raises(TraceFileError, match=r"empty\.jsonl: empty file$"):
            open_spans(path)

    def test_zstd_names_the_command(self, tmp_path):
        path = tmp_path / "s.jsonl.zst"
        path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
        with pytest.raises(TraceFileError, match=r"zstd -d"):
            open_spans(path)


class TestTruncation:
    def test_cut_last_line_is_an_error_naming_the_line(self, tmp_path):
        data = _jsonl(_request("a"), _request("b"))
        path = tmp_path / "cut.jsonl"
        path.write_bytes(data[:-20])
        spans = open_spans(path)
        assert next(spans).name == "a"
        with pytest.raises(TraceFileError, match=r"cut\.jsonl:2: truncated: the last line is incomplete") as info:
            next(spans)
        assert info.value.line == 2

    def test_cut_last_line_with_allow_truncated_gives_the_prefix(self, tmp_path):
        data = _jsonl(_request("a", "b"), _request("c"))
        path = tmp_path / "cut.jsonl"
        path.write_bytes(data[:-5])
        spans = open_spans(path, allow_truncated=True)
        assert [s.name for s in spans] == ["a", "b"]
        assert spans.truncation is not None and spans.truncation.line == 2
        assert spans.bytes_read == spans.total_bytes == len(data) - 5

    def test_last_line_without_newline_that_parses_is_complete(self, tmp_path):
        path = tmp_path / "ok.jsonl"
        path.write_bytes(_jsonl(_request("a"), _request("b"))[:-1])
        spans = open_spans(path)
        assert [s.name for s in spans] == ["a", "b"] and spans.truncation is None

    def test_gzip_cut_anywhere_gives_a_prefix_only_when_asked(self, tmp_path):
        """A gzip file cut at every 50th byte: an error naming it, or with allow_truncated the whole requests before the cut."""
        raw = _jsonl(*[_request(f"s{i}") for i in range(300)])
        packed = gzip.compress(raw, compresslevel=1)
        path = tmp_path / "cut.jsonl.gz"
        prefixes = []
        for cut in range(20, len(packed) - 1, 50):
            path.write_bytes(packed[:cut])
            with pytest.raises(TraceFileError, match=r"cut\.jsonl\.gz(:\d+|: offset \d+): truncated"):
                list(open_spans(path))
            if cut < 30:  # cut inside the gzip header: nothing decompresses at all
                with pytest.raises(TraceFileError, match="truncated"):
                    open_spans(path, allow_truncated=True)
                continue
            spans = open_spans(path, allow_truncated=True)
            try:
                names = [s.name for s in spans]
            except TraceFileError as error:  # cut inside the first line: no prefix to read
                assert "truncated" in str(error) and not prefixes
                continue
            assert names == [f"s{i}" for i in range(len(names))]
            assert spans.truncation is not None
            prefixes.append(len(names))
        assert prefixes == sorted(prefixes) and prefixes[-1] > 250

    def test_corrupt_gzip(self, tmp_path):
        packed = bytearray(gzip.compress(_jsonl(*[_request("x")] * 50)))
        packed[30] ^= 0xFF
        path = tmp_path / "bad.jsonl.gz"
        path.write_bytes(bytes(packed))
        with pytest.raises(TraceFileError, match=r"bad\.jsonl\.gz: offset \d+: corrupt gzip data"):
            list(open_spans(path, allow_truncated=True))

    def test_concatenated_gzip_members_are_one_stream(self, tmp_path):
        path = tmp_path / "two.jsonl.gz"
        path.write_bytes(gzip.compress(_jsonl(_request("a"))) + gzip.compress(_jsonl(_request("b"))))
        assert [s.name for s in open_spans(path)] == ["a", "b"]


class TestBounds:
    def test_gzip_bomb_is_refused(self, tmp_path, monkeypatch):
        """Past the decompression bound (200 times the size; the floor lowered to 1 MiB) reading stops."""
        monkeypatch.setattr(_source, "MIN_GZIP_LIMIT_BYTES", 1 << 20)
        path = tmp_path / "bomb.jsonl.gz"
        path.write_bytes(gzip.compress(b"\n" * (64 << 20), compresslevel=9))  # about 64 KiB
        limit = max(1 << 20, path.stat().st_size * _source.MAX_GZIP_RATIO)  # 200 times 64 KiB
        assert limit < 64 << 20
        with pytest.raises(TraceFileError, match=rf"bomb\.jsonl\.gz: decompresses to more than {limit >> 20} MiB"):
            list(open_spans(path))

    def test_deep_json_nesting_is_one_error(self, tmp_path):
        path = tmp_path / "deep.json"
        path.write_text("[" * 100_000 + "]" * 100_000)
        with pytest.raises(TraceFileError, match=r"deep\.json:1: JSON nested too deeply"):
            list(open_spans(path))

    def test_deep_attribute_nesting_is_one_error(self, tmp_path):
        depth = 5_000
        value = '{"arrayValue": {"values": [' * depth + '{"stringValue": "leaf"}' + "]}}" * depth
        line = json.dumps(_request("a")).replace('"name": "a"', f'"name": "a", "attributes": [{{"key": "k", "value": {value}}}]')
        path = tmp_path / "deep.jsonl"
        path.write_text(line + "\n")
        with pytest.raises(TraceFileError, match=r"deep\.jsonl:1: .*nested too deeply"):
            list(open_spans(path))


class TestTraceFileError:
    def test_one_line_whatever_the_name(self, tmp_path):
        """Control characters of a file name or a message never break the line (or the terminal)."""
        error = TraceFileError("a\nb.json", "bad name '\x1b[31mred'", line=3)
        assert str(error) == "a\\nb.json:3: bad name '\\x1b[31mred'"
        assert "\n" not in str(error) and "\x1b" not in str(error)

    def test_is_a_value_error_and_pickles(self):
        error = TraceFileError("t.pftrace", "truncated", offset=12)
        again = pickle.loads(pickle.dumps(error))
        assert isinstance(again, ValueError)
        assert (str(again), again.path, again.offset, again.line) == ("t.pftrace: offset 12: truncated", "t.pftrace", 12, None)
