"""Every topic-creation path of a real broker goes through the one planner: with defaults above
the broker count (default.replication.factor=2, offsets.topic.replication.factor=2 on one node)
CreateTopics, auto-creation and ``__consumer_offsets`` are all refused with Kafka's
INVALID_REPLICATION_FACTOR instead of being silently shrunk to RF 1 (as auto-creation and the
offsets topic were before), while explicit RF 1 keeps working."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from broker_process import BrokerProcess
from raw_client import RawClient
from shoal.client import build_entity
from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(120)

TOO_FEW = ("Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be "
           "reached because only 1 broker(s) are registered.")


@pytest.fixture(scope="module")
def node():
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="shoal-planner-")),  # replication defaults above the one broker
                      overrides={"default.replication.factor": "2", "offsets.topic.replication.factor": "2"})
    b.start()
    yield b
    b.stop()
    shutil.rmtree(b.workdir, ignore_errors=True)


def metadata(b: BrokerProcess, topics, auto: bool):
    return call(b, 3, 9, {"topics": topics, "allow_auto_topic_creation": auto,
                          "include_cluster_authorized_operations": False,
                          "include_topic_authorized_operations": False})


def call(b: BrokerProcess, key: int, version: int, values: dict):
    with RawClient(b.bootstrap, client_id="planner-test", timeout=15) as r:
        req = build_entity(codec.request_type(key, version), values)
        r.sock.sendall(codec.encode_request(key, version, 1, r.client_id, req))
        return r.recv(key, version)


def create(b: BrokerProcess, name: str, partitions: int, rf: int):
    resp = call(b, 19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf}],
                           "timeout_ms": 5000, "validate_only": False})
    return resp.topics[0]


def test_create_topics_rf1_works_rf2_and_default_refused(node):
    ok = create(node, "planner-rf1", 3, 1)
    assert ok.error_code == ErrorCode.none and (ok.num_partitions, ok.replication_factor) == (3, 1)
    for rf in (2, -1):  # explicit, and the default of 2
        t = create(node, f"planner-rf{rf}", 1, rf)
        assert (t.error_code, t.error_message) == (ErrorCode.invalid_replication_factor, TOO_FEW)


def test_auto_create_refused_not_shrunk(node):
    resp = metadata(node, [{"name": "planner-auto"}], True)
    assert resp.topics[0].error_code == ErrorCode.invalid_replication_factor
    assert "planner-auto" not in {t.name for t in metadata(node, None, False).topics}


def test_offsets_topic_waits_for_enough_brokers(node):
    resp = call(node, 10, 3, {"key": "g", "key_type": 0})
    assert resp.error_code == ErrorCode.coordinator_not_available
    assert "__consumer_offsets" not in {t.name for t in metadata(node, None, False).topics}
    lines = [ln for ln in node.log_text().splitlines() if "cannot create __consumer_offsets" in ln]
    assert len(lines) == 1 and "offsets.topic.replication.factor=2" in lines[0] and TOO_FEW in lines[0]
    assert node.running
