"""PySpark data source and sink for Shoal topics: ``spark.read[Stream].format("shoal")``.

A Python data source (PySpark 4's ``pyspark.sql.datasource`` API), so it works right after
``pip install 'shoal[spark]'``, without Spark's Kafka connector jar. Options, schema and offsets
JSON are those of Spark's Kafka source and sink, so existing jobs port by changing the format name::

    from shoal.spark import register
    register(spark)
    df = (spark.readStream.format("shoal")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

Spark's Python workers import this package: install it where the executors run and point
``PYSPARK_PYTHON`` at that interpreter.

Modules: :mod:`~shoal.spark.options` (option parsing), :mod:`~shoal.spark.offsets` (offset
arithmetic), :mod:`~shoal.spark.kafka` (confluent-kafka I/O), :mod:`~shoal.spark.source` (readers),
:mod:`~shoal.spark.sink` (writers).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from shoal.spark.kafka import DataLossError
from shoal.spark.options import OptionError, parse_sink_options, parse_source_options
from shoal.spark.sink import ShoalBatchWriter, ShoalStreamWriter
from shoal.spark.source import ShoalBatchReader, ShoalStreamReader, source_schema

__all__ = ["ShoalDataSource", "register", "spark_session", "DataLossError", "OptionError"]


class ShoalDataSource(DataSource):
    """The ``shoal`` format: batch and streaming reads and writes of Shoal topics."""

    @classmethod
    def name(cls) -> str:
        return "shoal"

    def schema(self) -> StructType:
        value = str(self.options.get("includeHeaders", "false")).strip().lower()
        if value not in ("true", "false"):
            raise OptionError(f"'includeHeaders' must be 'true' or 'false', got {value!r}")
        return source_schema(value == "true")

    def reader(self, schema: StructType) -> ShoalBatchReader:
        return ShoalBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> ShoalStreamReader:
        return ShoalStreamReader(parse_source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> ShoalBatchWriter:
        if overwrite:
            raise OptionError("save mode 'overwrite' is not allowed for Shoal topics; use 'append'")
        return ShoalBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ShoalStreamWriter:
        # Complete mode (overwrite) appends every result row each batch, as Spark's Kafka sink does.
        return ShoalStreamWriter(parse_sink_options(self.options), schema)


def register(spark) -> None:
    """Make ``format("shoal")`` available in this SparkSession."""
    spark.dataSource.register(ShoalDataSource)


def spark_session(app: str = "shoal-metering", master: str | None = None) -> SparkSession:
    """A SparkSession with ``format("shoal")`` registered; Spark's Python workers run this interpreter
    (``shoal metering run``'s: ``local[2]`` unless ``master`` or ``SPARK_MASTER`` says otherwise)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    if master or not os.environ.get("SPARK_MASTER"):
        builder = (builder.master(master or "local[2]").config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
