"""Fixtures of the Spark tests: one local SparkSession for the whole session, with the ``shoal``
data source registered, against the session's Shoal broker (``broker`` from tests/conftest.py).

``local[2]``, two shuffle partitions, no UI; Spark's Python workers run this interpreter
(``PYSPARK_PYTHON``) and find this checkout first on their path.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from shoal.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shoal-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.network.timeout", "60s")
        .config("spark.executor.heartbeatInterval", "10s")
        # The tests' jobs are small and short: the JIT's first tier only, one GC thread. Half the
        # JVM's CPU of a session (~25 s -> ~13 s measured), the start-up most of it.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap


@pytest.fixture
def shoal_opts(broker) -> dict[str, str]:
    """Options every Shoal read and write in these tests takes."""
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafkaConsumer.pollTimeoutMs": "20000"}


@pytest.fixture
def uniq(request) -> str:
    """A short name unique to this test (topic names, checkpoint directories)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"
