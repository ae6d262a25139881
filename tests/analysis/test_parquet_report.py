# SPDX-License-Identifier: Apache-2.0
"""A trace's report is the same whether it is read from its .pftrace or from the Parquet file
converted from it: every section of the JSON, the input's name aside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("brickscope.exporter.perfetto")

from brickscope.cli import main
from brickscope.offline import ParquetSpanWriter, open_spans

GOLDEN = sorted((Path(__file__).parents[1] / "golden").glob("*.pftrace"))


def _report(capsys, *inputs: str) -> dict:
    assert main(["report", *inputs, "--format", "json", "--top", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    report.pop("sources")
    return report


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_report_of_parquet_equals_report_of_pftrace(tmp_path, capsys, path):
    converted = tmp_path / f"{path.stem}.parquet"
    with ParquetSpanWriter(converted) as writer, open_spans(path) as spans:
        assert writer.write(spans) > 0
    assert _report(capsys, str(converted)) == _report(capsys, str(path))


def test_a_dataset_directory_reports_as_its_files(tmp_path, capsys):
    """Per-rank part files under a dataset root are found recursively and read as one job."""
    for index, path in enumerate(GOLDEN[:2]):
        (tmp_path / "run" / f"rank-{index}").mkdir(parents=True)
        with ParquetSpanWriter(tmp_path / "run" / f"rank-{index}" / "part-00000.parquet") as writer:
            writer.write(open_spans(path))
    expected = _report(capsys, *map(str, GOLDEN[:2]))
    assert _report(capsys, str(tmp_path / "run")) == expected
    assert _report(capsys, str(tmp_path / "run" / "rank-*" / "*.parquet")) == expected
