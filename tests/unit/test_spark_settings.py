# SPDX-License-Identifier: Apache-2.0
"""The Spark engine's settings from the environment, and what is refused before Spark starts
(no pyspark or Java needed)."""

from __future__ import annotations

import pytest

from brickscope.analysis._spark import (
    BRICKSCOPE_SPARK_CONF,
    BRICKSCOPE_SPARK_MASTER,
    SparkSettings,
    SparkSetupError,
    spark_session,
)
from brickscope.cli import main


class TestSparkSettings:
    def test_nothing_set_leaves_everything_to_spark(self):
        """No master and no options: spark-submit, PYSPARK_SUBMIT_ARGS or spark-defaults.conf decide."""
        assert SparkSettings.from_environment({}) == SparkSettings(master=None, conf=())

    def test_master_and_options(self):
        """Options in order, a value with spaces shell-quoted, a list value with commas kept whole."""
        settings = SparkSettings.from_environment({
            BRICKSCOPE_SPARK_MASTER: " spark://head:7077 ",
            BRICKSCOPE_SPARK_CONF: "spark.executor.memory=8g"
            " spark.jars.packages=org.apache.hadoop:hadoop-aws:3.4.1,com.example:x:1"
            " 'spark.driver.extraJavaOptions=-Da=1 -Db=2' spark.sql.shuffle.partitions=400",
        })  # fmt: skip
        assert settings.master == "spark://head:7077"
        assert settings.conf == (
            ("spark.executor.memory", "8g"),
            ("spark.jars.packages", "org.apache.hadoop:hadoop-aws:3.4.1,com.example:x:1"),
            ("spark.driver.extraJavaOptions", "-Da=1 -Db=2"),
            ("spark.sql.shuffle.partitions", "400"),
        )

    @pytest.mark.parametrize(
        ("text", "line"),
        [
            ("spark.executor.memory", f"{BRICKSCOPE_SPARK_CONF} 'spark.executor.memory': expected key=value pairs"),
            ("=4g", f"{BRICKSCOPE_SPARK_CONF} '=4g': expected key=value pairs"),
            ("'spark.a=1", f"{BRICKSCOPE_SPARK_CONF}: No closing quotation"),
        ],
    )
    def test_a_bad_option_is_refused_in_one_line(self, text, line):
        with pytest.raises(SparkSetupError) as caught:
            SparkSettings.from_environment({BRICKSCOPE_SPARK_CONF: text})
        assert str(caught.value).startswith(line)
        assert "\n" not in str(caught.value)

    def test_a_master_with_spaces_is_refused(self):
        with pytest.raises(SparkSetupError, match=f"^{BRICKSCOPE_SPARK_MASTER} 'local 4': a master URL has no spaces"):
            SparkSettings.from_environment({BRICKSCOPE_SPARK_MASTER: "local 4"})


class TestBeforeSparkStarts:
    def test_spark_connect_is_refused(self, monkeypatch):
        """The files' footers are checked through the driver's JVM, which a Connect client lacks."""
        pytest.importorskip("pyspark")
        monkeypatch.setenv("SPARK_REMOTE", "sc://head:15002")
        with pytest.raises(SparkSetupError, match="^SPARK_REMOTE=sc://head:15002: --engine spark needs a classic"):
            spark_session(SparkSettings())

    def test_no_java_is_said_in_one_line(self, monkeypatch, tmp_path):
        pytest.importorskip("pyspark")
        monkeypatch.delenv("SPARK_REMOTE", raising=False)
        monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # no bin/java there
        with pytest.raises(SparkSetupError, match="^--engine spark needs Java 17 or later for Spark: none found"):
            spark_session(SparkSettings())

    def test_a_bad_setting_fails_the_command_in_one_line(self, monkeypatch, capsys, tmp_path):
        monkeypatch.setenv(BRICKSCOPE_SPARK_CONF, "spark.executor.memory")
        path = tmp_path / "t.parquet"
        path.write_bytes(b"PAR1")
        assert main(["report", str(path), "--engine", "spark"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"brickscope report: {BRICKSCOPE_SPARK_CONF} 'spark.executor.memory': expected key=value")
        assert err.count("\n") == 1

    def test_a_uri_needs_the_spark_engine(self, capsys):
        assert main(["report", "s3a://traces/job-17/", "--engine", "memory"]) == 1
        assert capsys.readouterr().err == (
            "brickscope report: s3a://traces/job-17/: a URI, which --engine spark reads"
            " (the other engines read local files)\n"
        )
