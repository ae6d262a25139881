# SPDX-License-Identifier: Apache-2.0
"""The Spark engine (``--engine spark``): Parquet span files into the analysis table, by Spark SQL.

Example::

    spark = spark_session(SparkSettings.from_environment())  # BRICKSCOPE_SPARK_MASTER, _CONF
    table = load_spark("s3a://traces/job-17/", spark=spark)  # files, directories, globs, URIs
    report = analyse(table)

The session is Spark's own: ``SparkSession.builder.getOrCreate()``, so whatever Spark
is configured with already (``PYSPARK_SUBMIT_ARGS``, ``$SPARK_CONF_DIR/spark-defaults.conf``,
the ``spark-submit`` of an application that calls brickscope in its own session) applies. The two
variables below add to that; without any master set, Spark runs in local mode on every
core (``local[*]``). The dataset is ``spark.read.parquet`` over the inputs (files,
directories read recursively for ``*.parquet``, Hadoop globs, any URI Spark's file
systems take: ``s3a://``, ``gs://``, ``abfss://``, ``hdfs://``), checked file by file
against the Parquet span format before a query runs. The queries are the DuckDB engine's
(:mod:`._sql` with the Spark dialect, :class:`._duckdb._Load` run on a Spark session), so
the table, and every figure of the report, is the in-memory engine's (docs/deploy.md,
"Analysing on Spark"). pyspark is imported only when a session is asked for.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brickscope.analysis._backend import get_backend
from brickscope.analysis._duckdb import _NAMES, _ORD_SHIFT, _Session
from brickscope.analysis._load import AnalysisError
from brickscope.analysis._model import Report
from brickscope.analysis._sql import SOURCE_COLUMNS, SPARK, impossible_reason, spans_query, unions_query
from brickscope.analysis._table import Table
from brickscope.offline._errors import one_line
from brickscope.offline._parquet_schema import (
    PARQUET_COLUMNS,
    PARQUET_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    import_pyarrow,
)

#: The master URL (``local[4]``, ``spark://host:7077``, ``yarn``, ``k8s://https://...``).
#: Unset: Spark's own configuration decides, and ``local[*]`` when it names none.
BRICKSCOPE_SPARK_MASTER = "BRICKSCOPE_SPARK_MASTER"
#: Session options as ``key=value`` pairs separated by spaces, shell-quoted where a value
#: holds one: ``spark.executor.memory=8g spark.sql.shuffle.partitions=400``. They win over
#: Spark's configuration files.
BRICKSCOPE_SPARK_CONF = "BRICKSCOPE_SPARK_CONF"
#: What to install for ``--engine spark`` (the one line printed when pyspark is missing).
INSTALL_HINT = "pip install 'brickscope[spark]'"


class SparkSetupError(AnalysisError):
    """Spark cannot be started or configured as asked. ``str()`` is one line saying why.

    .. versionadded:: 0.3.0
    """


@dataclass(frozen=True)
class SparkSettings:
    """How brickscope builds its Spark session; every field adds to Spark's own configuration.

    .. versionadded:: 0.3.0
    """

    # The master URL; None: what PYSPARK_SUBMIT_ARGS, spark-defaults.conf or an application's
    # spark-submit say, else local[*].
    master: str | None = None
    # Session options in the order given (a key given twice: the last wins), as
    # SparkSession.builder.config(key, value).
    conf: tuple[tuple[str, str], ...] = ()
    # The application name the cluster manager and Spark's UI show.
    app_name: str = "brickscope"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SparkSettings:
        """The settings :data:`BRICKSCOPE_SPARK_MASTER` and :data:`BRICKSCOPE_SPARK_CONF` give.

        Raises:
            SparkSetupError: a variable cannot be read (the line names it and the problem).
        """
        env = os.environ if environ is None else environ
        master = env.get(BRICKSCOPE_SPARK_MASTER, "").strip() or None
        if master is not None and any(ch.isspace() for ch in master):
            raise SparkSetupError(
                f"{BRICKSCOPE_SPARK_MASTER} {master!r}: a master URL has no spaces (local[4], spark://host:7077, yarn)"
            )
        return cls(master=master, conf=parse_conf(env.get(BRICKSCOPE_SPARK_CONF, "")))


def parse_conf(text: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs separated by spaces (shell quoting for values with spaces).

    Raises:
        SparkSetupError: a word is not ``key=value`` or the quoting is unbalanced.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SparkSetupError(
            f"{BRICKSCOPE_SPARK_CONF}: {exc} (expected key=value pairs separated by spaces)"
        ) from None
    pairs = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key.strip() or key != key.strip():
            raise SparkSetupError(
                f"{BRICKSCOPE_SPARK_CONF} {word!r}: expected key=value pairs separated by spaces,"
                " such as spark.executor.memory=8g"
            )
        pairs.append((key, value))
    return tuple(pairs)


def spark_session(settings: SparkSettings | None = None) -> Any:
    """Spark's session with ``settings`` applied (``getOrCreate``: an active one is reused).

    Raises:
        SparkSetupError: pyspark is not installed, ``SPARK_REMOTE`` asks for Spark Connect,
            no Java is found, or Spark fails to start (the line says which, and what Spark said).
    """
    settings = SparkSettings.from_environment() if settings is None else settings
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkSetupError(f"--engine spark needs pyspark: {INSTALL_HINT}") from None
    remote = os.environ.get("SPARK_REMOTE")
    if remote:  # the footers are read through the driver's JVM, which a Connect client lacks
        raise SparkSetupError(
            f"SPARK_REMOTE={remote}: --engine spark needs a classic Spark session, not Spark Connect"
            f" (unset SPARK_REMOTE; give a master URL in {BRICKSCOPE_SPARK_MASTER} or PYSPARK_SUBMIT_ARGS)"
        )
    if not _java_found():
        raise SparkSetupError(
            "--engine spark needs Java 17 or later for Spark: none found (set JAVA_HOME or put java on PATH)"
        )
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master:
        builder = builder.master(settings.master)
    for key, value in settings.conf:
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # py4j, the JVM and the cluster manager raise many types
        raise SparkSetupError(f"Spark did not start: {_spark_message(exc)}") from None


def _java_found() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.access(os.path.join(home, "bin", "java"), os.X_OK)
    return shutil.which("java") is not None


def _spark_message(exc: BaseException) -> str:
    """The first line of what Spark said: its error class and message, no Java stack."""
    return one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def load_spark(*inputs: str, backend: str | None = None, spark: Any = None) -> Table:
    """The analysis table of Parquet span files, computed by Spark and brought to the driver
    (what ``diff --divergence`` reads; ``report`` and ``diff`` bring only figures:
    :func:`report_spark`, :func:`summarise_spark`).

    Args:
        inputs: files, directories (every ``*.parquet`` below) or Hadoop globs, local paths
            or URIs of any file system the session reads (``s3a://``, ``gs://``, ``hdfs://``).
        backend: the table's backend, ``"numpy"`` or ``"python"`` (default numpy when installed).
        spark: the session to use; default :func:`spark_session` from the environment.

    Raises:
        AnalysisError: Spark cannot start (:class:`SparkSetupError`); an input is missing,
            not a Parquet span file, of a newer schema version, lacks a column, or holds no
            valid span.
    """
    with _session(inputs, backend, spark) as session:
        return session.pull("true", source="bs_t", whole=True)


def report_spark(*inputs: str, backend: str | None = None, spark: Any = None, **options: Any) -> Report:
    """The report of Parquet span files, every section computed by Spark SQL on the cluster
    (:mod:`._sqlreport`, the DuckDB engine's SQL in the Spark dialect): the figures of
    :func:`~brickscope.analysis.analyse` on the same spans.

    Args:
        inputs, backend, spark: as :func:`load_spark`.
        options: :func:`~brickscope.analysis.analyse`'s (``top``, ``steps``, ``ranks``...).

    Raises:
        AnalysisError: as :func:`load_spark`, and as :func:`~brickscope.analysis.analyse`.
    """
    from brickscope.analysis._sqlreport import SqlAnalysis

    with _session(inputs, backend, spark) as session:
        return SqlAnalysis(session, session.table).report(**options)


def summarise_spark(
    *inputs: str, backend: str | None = None, spark: Any = None, **filters: Any
) -> tuple[Any, list[str]]:
    """One run's :class:`~brickscope.analysis._diff.RunSummary` (what ``diff`` compares),
    computed by Spark SQL, and the notes on its input (impossible spans left out, per file).

    Args:
        inputs, backend, spark: as :func:`load_spark`.
        filters: ``steps``, ``ranks``, ``devices``, as :func:`~brickscope.analysis.select`'s.

    Raises:
        AnalysisError: as :func:`load_spark`, and as :func:`~brickscope.analysis.select`.
    """
    from brickscope.analysis._sqlreport import SqlAnalysis

    with _session(inputs, backend, spark) as session:
        return SqlAnalysis(session, session.table).summary(**filters), list(session.table.notes)


#: Session SQL settings while brickscope's queries run, restored after (an application's
#: session may be shared): the queries quote the column ``end`` as ``"end"`` (standard SQL,
#: DuckDB's spelling), which Spark reads so only in ANSI mode with double-quoted identifiers.
_SQL_SETTINGS = {"spark.sql.ansi.enabled": "true", "spark.sql.ansi.doubleQuotedIdentifiers": "true"}


def _local_defaults(spark: Any) -> dict[str, str]:
    """In local mode, the SQL options brickscope sets where nobody has set them: one shuffle
    partition a core (Spark's default of 200 makes every GROUP BY and window of the report
    200 tasks, each with its own start, for a few cores to run)."""
    if not spark.sparkContext.master.startswith("local"):
        return {}
    defaults = {"spark.sql.shuffle.partitions": str(spark.sparkContext.defaultParallelism)}
    return {key: value for key, value in defaults.items() if spark.conf.get(key, None) is None}


@contextlib.contextmanager
def _session(inputs: Sequence[str], backend: str | None, spark: Any) -> Iterator[_SparkSession]:
    """A Spark session with the spans table ``bs_t`` of ``inputs`` built (cached on the
    executors), its settings restored and its views dropped after."""
    if not inputs:
        raise AnalysisError("brickscope: nothing to analyse (no input given)")
    spark = spark if spark is not None else spark_session()
    settings = {**_local_defaults(spark), **_SQL_SETTINGS}
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield _SparkSession(spark, [os.fspath(item) for item in inputs], get_backend(backend))
    except AnalysisError:
        raise
    except Exception as exc:  # Spark's AnalysisException, the JVM's through py4j
        raise AnalysisError(f"{', '.join(map(str, inputs))}: {_spark_message(exc)}") from None
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS bs_t")
        for table in spark.catalog.listTables():  # the session's views and tables are all bs_*
            if table.isTemporary and table.name.startswith("bs_"):
                spark.catalog.dropTempView(table.name)
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


class _SparkSession(_Session):
    """The DuckDB engine's session (:class:`._duckdb._Session`: the same views, code lists
    and spans table, what :mod:`._sqlreport` asks of it) run by Spark: ``self.con`` is the
    Spark session, ``bs_t`` a cached table."""

    dialect = SPARK

    def __init__(self, spark: Any, inputs: list[str], be: Any) -> None:
        self.frame = _read(spark, inputs)
        #: The files as Spark names them (URIs); ``files``: as the user does, for the lines.
        self.uris = sorted(row[0] for row in self.frame.select("bs_path").distinct().collect())
        if not self.uris:
            raise AnalysisError(f"{', '.join(inputs)}: no spans in these files")
        for uri in self.uris:
            check_footer(spark, uri)
        super().__init__(spark, [display(uri) for uri in self.uris], be, None)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of ``sql``, collected to the driver."""
        return [tuple(row) for row in self.con.sql(sql).collect()]

    def upload(self, name: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
        """The temporary view ``name`` (``columns``: the SQL of the DuckDB engine) of ``rows``,
        sent as Arrow: the JVM reads it, no Python runs on the executors."""
        pa = import_pyarrow()
        names, kinds = zip(*(column.strip().replace('"', "").rsplit(" ", 1) for column in columns.split(", ")))
        types = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
                 "BIGINT[]": pa.list_(pa.int64())}  # fmt: skip
        values = list(zip(*rows)) if rows else [() for _ in names]
        arrays = [pa.array(list(column), types[kind]) for column, kind in zip(values, kinds)]
        self.con.createDataFrame(pa.Table.from_arrays(arrays, names=list(names))).createOrReplaceTempView(name)

    def _views(self) -> None:
        spark = self.con
        self.upload("bs_files", "idx BIGINT, path VARCHAR", list(enumerate(self.uris)))
        self.frame.createOrReplaceTempView("bs_parquet")
        columns = ", ".join(f"s.{name}" for name in SOURCE_COLUMNS)
        spark.sql(f"""
            CREATE OR REPLACE TEMP VIEW bs_source AS
            SELECT {columns}, f.idx AS file, shiftleft(f.idx, {_ORD_SHIFT}) + s.bs_row AS ord
            FROM bs_parquet s JOIN bs_files f ON f.path = s.bs_path""")
        spark.sql(
            f"CREATE OR REPLACE TEMP VIEW bs_reasoned AS SELECT *, {impossible_reason()} AS reason FROM bs_source"
        )
        spark.sql("CREATE OR REPLACE TEMP VIEW bs_valid AS SELECT * FROM bs_reasoned WHERE reason IS NULL")

    def _spans_table(self) -> None:
        # cached on the executors (memory, then their disks): the sections read it many times;
        # a cached table cannot be updated, so the overhead spans come off in the same query
        names = ", ".join(f'"{name}"' for name in _NAMES)
        self.con.sql(f"CACHE TABLE bs_t AS SELECT ord, {names} FROM ({spans_query(SPARK)})")

    def _fetch(self, sql: str) -> dict[str, Any]:
        table = self.con.sql(sql).toArrow()
        return {name: table.column(name).to_numpy() for name in table.column_names}

    def unions(self, intervals: str) -> dict[int, tuple[int, int, int]]:
        """As the DuckDB session's, in SQL on the executors (a window's running maximum): no
        interval is brought to the driver."""
        rows = self.query(unions_query(intervals))
        return {g: (int(count), int(work), int(total)) for g, count, work, total in rows}

    def _batches(self, sql: str) -> Iterator[dict[str, Any]]:
        yield self._fetch(sql)  # Arrow to the driver: one batch


def _read(spark: Any, inputs: list[str]) -> Any:
    """The inputs' rows with each one's file (``bs_path``) and row in the file (``bs_row``)."""
    for item in inputs:
        if "://" not in item and not _has_glob(item) and not os.path.exists(item):
            raise AnalysisError(f"{item}: no such file or directory")
    reader = spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet")
    try:
        frame = reader.parquet(*inputs)
    except Exception as exc:  # pyspark's AnalysisException and the JVM's
        raise AnalysisError(_input_message(inputs, exc)) from None
    missing = [name for name in SOURCE_COLUMNS if name not in frame.columns]
    if missing:  # the first file read has none: each file's footer is checked later, by name
        raise AnalysisError(f"{', '.join(inputs)}: not brickscope span files: no column {', '.join(missing)}")
    return frame.select(
        *SOURCE_COLUMNS, frame["_metadata.file_path"].alias("bs_path"), frame["_metadata.row_index"].alias("bs_row")
    )


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[{")


def _input_message(inputs: Sequence[str], exc: BaseException) -> str:
    text = _spark_message(exc)
    if "PATH_NOT_FOUND" in text or "Path does not exist" in text:
        missing = text.split("Path does not exist:", 1)[-1].split(" SQLSTATE:")[0].strip().rstrip(".")
        return f"{display(missing) if missing else ', '.join(inputs)}: no such file or directory"
    if "UNABLE_TO_INFER_SCHEMA" in text:
        return f"{', '.join(inputs)}: no Parquet files (*.parquet)"
    return f"{', '.join(inputs)}: {text}"


def display(path: str) -> str:
    """A file as a user named it: a local path without Spark's ``file:`` scheme."""
    if path.startswith("file:"):
        return urllib.parse.unquote(urllib.parse.urlsplit(path).path)
    return path


def check_footer(spark: Any, uri: str) -> None:
    """Check one file's footer, read through the session's Hadoop file systems (an ``s3a://``
    file with the session's credentials, on the driver): the schema version and the columns,
    refused in the lines of the Parquet reader (``brickscope.offline.check_parquet_schema``;
    a column of another type fails when Spark reads it, naming the file).

    Raises:
        AnalysisError: not a Parquet file, no or a newer schema version, or a missing column.
    """
    name = display(uri)
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    try:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI(uri))
        source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
        try:
            meta = reader.getFooter().getFileMetaData()
            version = meta.getKeyValueMetaData().get(SCHEMA_VERSION_KEY)
            present = {field.getName() for field in meta.getSchema().getFields()}
        finally:
            reader.close()
    except Exception as exc:  # a Java IOException through py4j
        raise AnalysisError(
            f"{name}: not a complete Parquet file (a writer killed before its footer?): {_spark_message(exc)}"
        ) from None
    if version is None:
        raise AnalysisError(
            f"{name}: not a brickscope span file: no {SCHEMA_VERSION_KEY} in its metadata (a Parquet file of another schema)"
        )
    try:
        number = int(version)
    except ValueError:
        raise AnalysisError(f"{name}: {SCHEMA_VERSION_KEY} is {version!r}, not a number") from None
    if number > PARQUET_SCHEMA_VERSION:
        raise AnalysisError(
            f"{name}: schema version {number} is newer than this brickscope reads ({PARQUET_SCHEMA_VERSION}):"
            " upgrade brickscope"
        )
    missing = [column.name for column in PARQUET_COLUMNS if column.name not in present]
    if missing:
        raise AnalysisError(f"{name}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
