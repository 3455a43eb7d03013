"""Fixtures of the Spark tests: one local SparkSession for the whole session, with the ``shoal``
data source registered, against the session's Shoal broker (``broker`` from tests/conftest.py).

``local[2]``, two shuffle partitions, no UI; Spark's Python workers run this interpreter
(``PYSPARK_PYTHON``) and find this checkout first on their path.
"""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(scope="session")
def spark():
    from spark_helpers import local_spark

    session = local_spark("shoal-spark-tests")
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
