# SPDX-License-Identifier: Apache-2.0
"""Environment variables read by :class:`ParquetSpanExporter` for arguments left unset.

They configure the exporter when the OpenTelemetry SDK builds it from
``OTEL_TRACES_EXPORTER=parquet`` (no arguments are passed then).

Example::

    $ BRICKSCOPE_PARQUET_PATH=/data/traces/job42/rank-{rank} BRICKSCOPE_PARQUET_RUN=job42 \\
      OTEL_TRACES_EXPORTER=parquet torchrun --nproc-per-node 8 train.py
"""

BRICKSCOPE_PARQUET_PATH = "BRICKSCOPE_PARQUET_PATH"
"""The directory the part files go in. ``{pid}`` becomes the process id and ``{rank}`` the
process's rank (the resource's ``brickscope.rank``, which brickscope reads from the launcher;
the process id when there is none). Default: ``brickscope-parquet/rank-{rank}``."""

BRICKSCOPE_PARQUET_RUN = "BRICKSCOPE_PARQUET_RUN"
"""The ``run`` column of every row: a name for the job, the same on every rank. Default: the
resource's ``service.instance.id`` (one per process)."""

BRICKSCOPE_PARQUET_PART_ROWS = "BRICKSCOPE_PARQUET_PART_ROWS"
"""Spans per part file: a part is closed (and readable) when it holds this many, and on
``force_flush`` and ``shutdown``. Default: 1048576."""

BRICKSCOPE_PARQUET_PART_INTERVAL_MILLIS = "BRICKSCOPE_PARQUET_PART_INTERVAL_MILLIS"
"""The longest a part file stays open, ms: an export that finds it this old closes (and
publishes) it, so a crash loses at most about this long of spans. Default: 60000."""
