# SPDX-License-Identifier: Apache-2.0
"""Apache Spark for ``--engine spark``: the session, the Parquet dataset as a view, queries.

Example::

    settings = SparkSettings.from_environment()     # BRICKSCOPE_SPARK_MASTER, BRICKSCOPE_SPARK_CONF
    spark = spark_session(settings)
    dataset = SparkDataset.open(spark, ["s3a://traces/run-42/"])
    rows = dataset.query(f"SELECT name, count(*) FROM {dataset.view} GROUP BY name")

The session is Spark's own: ``SparkSession.builder.getOrCreate()``, so whatever Spark
is configured with already (``spark-submit --master ... --conf ...``,
``PYSPARK_SUBMIT_ARGS``, ``$SPARK_CONF_DIR/spark-defaults.conf``) applies, and an
application that runs brickscope inside its own Spark job shares its session. The two
variables below add to that; without any master set, Spark runs in local mode on every
core (``local[*]``). The dataset is ``spark.read.parquet`` over the inputs (files,
directories read recursively for ``*.parquet``, Hadoop globs, any URI Spark's file
systems take: ``s3a://``, ``gs://``, ``abfss://``, ``hdfs://``), checked file by file
against the Parquet span format before a query runs (docs/deploy.md, "Analysing on
Spark"). pyspark is imported only here, and only when a session is asked for.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brickscope.analysis._load import AnalysisError
from brickscope.offline._errors import one_line
from brickscope.offline._parquet_schema import (
    FLOAT64,
    HASH64,
    ID128,
    INT8,
    INT64,
    INT64_LIST,
    PARQUET_COLUMNS,
    PARQUET_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    STRING,
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
#: The temporary view the dataset is registered as.
VIEW = "brickscope_spans"

#: The Spark SQL type each column type of the format reads as (``DataType.simpleString``).
_SPARK_TYPES = {
    STRING: "string",
    INT64: "bigint",
    HASH64: "bigint",
    INT8: "tinyint",
    FLOAT64: "double",
    INT64_LIST: "array<bigint>",
    ID128: "binary",
}


class SparkSetupError(AnalysisError):
    """Spark cannot be started or configured as asked. ``str()`` is one line saying why.

    .. versionadded:: 0.3.0
    """


@dataclass(frozen=True)
class SparkSettings:
    """How brickscope builds its Spark session; every field adds to Spark's own configuration.

    .. versionadded:: 0.3.0
    """

    # The master URL; None: what spark-submit, PYSPARK_SUBMIT_ARGS or spark-defaults.conf
    # say, else local[*]. Leave it None inside spark-submit, whose --master already decides.
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
            raise SparkSetupError(f"{BRICKSCOPE_SPARK_MASTER} {master!r}: a master URL has no spaces (local[4], spark://host:7077, yarn)")
        return cls(master=master, conf=parse_conf(env.get(BRICKSCOPE_SPARK_CONF, "")))


def parse_conf(text: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs separated by spaces (shell quoting for values with spaces).

    Raises:
        SparkSetupError: a word is not ``key=value`` or the quoting is unbalanced.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SparkSetupError(f"{BRICKSCOPE_SPARK_CONF}: {exc} (expected key=value pairs separated by spaces)") from None
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
        SparkSetupError: pyspark is not installed, no Java is found for a local JVM, or
            Spark fails to start (the line says which, and what Spark said).
    """
    settings = SparkSettings.from_environment() if settings is None else settings
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkSetupError(f"--engine spark needs pyspark: {INSTALL_HINT}") from None
    remote = os.environ.get("SPARK_REMOTE")
    if remote and settings.master:
        raise SparkSetupError(
            f"SPARK_REMOTE={remote} and {BRICKSCOPE_SPARK_MASTER}={settings.master}: Spark Connect or a master, not both"
        )
    if not remote and not _java_found():
        raise SparkSetupError("--engine spark needs Java 17 or later for Spark: none found (set JAVA_HOME or put java on PATH)")
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master:
        builder = builder.master(settings.master)
    for key, value in settings.conf:
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001  (py4j, the JVM and the cluster manager raise many types)
        raise SparkSetupError(f"Spark did not start: {_spark_message(exc)}") from None


def _java_found() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.access(os.path.join(home, "bin", "java"), os.X_OK)
    return shutil.which("java") is not None


def _spark_message(exc: BaseException) -> str:
    """The first line of what Spark said: its error class and message, no Java stack."""
    text = one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    return text


class SparkDataset:
    """Parquet span files registered as the temporary view :data:`VIEW` of a Spark session.

    .. versionadded:: 0.3.0
    """

    def __init__(self, spark: Any, frame: Any, files: Sequence[str]) -> None:
        self.spark = spark
        #: The DataFrame over every file (``spark.read.parquet``).
        self.frame = frame
        #: The files read, as Spark names them (URIs).
        self.files = tuple(files)
        self.view = VIEW

    @classmethod
    def open(cls, spark: Any, inputs: Sequence[str], *, check_files: bool = True) -> SparkDataset:
        """Read ``inputs`` (files, directories, globs, URIs) and register them as :data:`VIEW`.

        Args:
            check_files: read every file's footer on the driver to check the schema version
                and the columns (a few round trips a file; off only for files known good).

        Raises:
            AnalysisError: an input matches nothing, holds no Parquet file, or a file is not
                of the Parquet span format or is of a newer version (the line names the file).
        """
        if not inputs:
            raise AnalysisError("brickscope: nothing to analyse (no input given)")
        for item in inputs:
            if "://" not in item and not _has_glob(item) and not os.path.exists(item):
                raise AnalysisError(f"{item}: no such file or directory")
        reader = spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet")
        try:
            frame = reader.parquet(*inputs)
            files = frame.inputFiles()
        except Exception as exc:  # noqa: BLE001  (pyspark's AnalysisException and the JVM's)
            raise AnalysisError(_input_message(inputs, exc)) from None
        if not files:
            raise AnalysisError(f"{', '.join(inputs)}: no .parquet file found")
        if check_files:
            for path in sorted(files):
                check_footer(spark, path)
        _check_types(frame, inputs)
        frame.createOrReplaceTempView(VIEW)
        return cls(spark, frame, sorted(files))

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of one Spark SQL query, collected to the driver as tuples."""
        return [tuple(row) for row in self.spark.sql(sql).collect()]


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[{")


def _input_message(inputs: Sequence[str], exc: BaseException) -> str:
    text = _spark_message(exc)
    if "PATH_NOT_FOUND" in text or "Path does not exist" in text:
        missing = text.split("Path does not exist:", 1)[-1].split(" SQLSTATE:")[0].strip().rstrip(".")
        return f"{display(missing) if missing else ', '.join(inputs)}: no such file or directory"
    if "UNABLE_TO_INFER_SCHEMA" in text:
        return f"{', '.join(inputs)}: no .parquet file found"
    return f"{', '.join(inputs)}: {text}"


def display(path: str) -> str:
    """A file as a user named it: a local path without Spark's ``file:`` scheme."""
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:/"):
        return path[len("file:"):]
    return path


def check_footer(spark: Any, path: str) -> None:
    """Check one file's footer through Spark's Hadoop file systems (so an ``s3a://`` file is
    read with the session's credentials): the schema version and every column's presence.

    Raises:
        AnalysisError: not a Parquet file, no or a newer schema version, or a missing column.
    """
    name = display(path)
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    try:
        source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
        try:
            meta = reader.getFooter().getFileMetaData()
            version = meta.getKeyValueMetaData().get(SCHEMA_VERSION_KEY)
            names = {field.getName() for field in meta.getSchema().getFields()}
        finally:
            reader.close()
    except Exception as exc:  # noqa: BLE001  (a Java IOException through py4j)
        raise AnalysisError(f"{name}: not a Parquet file ({_spark_message(exc)})") from None
    if version is None:
        raise AnalysisError(f"{name}: not a brickscope Parquet span file (no {SCHEMA_VERSION_KEY} in its metadata)")
    if not version.isdigit():
        raise AnalysisError(f"{name}: schema version {version!r} is not a number")
    if int(version) > PARQUET_SCHEMA_VERSION:
        raise AnalysisError(
            f"{name}: schema version {version} is newer than this brickscope reads"
            f" ({PARQUET_SCHEMA_VERSION}): upgrade brickscope"
        )
    missing = [column.name for column in PARQUET_COLUMNS if column.name not in names]
    if missing:
        raise AnalysisError(f"{name}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")


def _check_types(frame: Any, inputs: Sequence[str]) -> None:
    """Each column of the dataset's schema has the type of the format (Spark takes the
    schema of one file; a file that disagrees fails when read, naming itself)."""
    types = {field.name: field.dataType.simpleString() for field in frame.schema.fields}
    for column in PARQUET_COLUMNS:
        expected = _SPARK_TYPES[column.type]
        found = types.get(column.name)
        if found is not None and found != expected:
            raise AnalysisError(
                f"{', '.join(inputs)}: column {column.name} is {found}, the Parquet span format has {expected}"
            )
