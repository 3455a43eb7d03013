"""DescribeTopicPartitions (KIP-966) on three brokers on etcd, through kafka-python: every broker
describes a topic the same way, with its leaders spread over the brokers as the planner placed them,
and pages it the same way."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from cluster_harness import until

TIMEOUT_MS = 30000


def describe(bootstrap: str, topic: str, limit: int = 2000) -> dict:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        return admin.describe_topic_partitions([topic], response_partition_limit=limit)
    finally:
        admin.close()


def test_every_broker_describes_the_same_spread_topic(cluster3):
    admin = KafkaAdminClient(bootstrap_servers=cluster3.bootstrap(1), request_timeout_ms=TIMEOUT_MS)
    try:
        admin.create_topics([NewTopic("dtp-spread", 6, 1)])
    finally:
        admin.close()

    def same_everywhere():
        got = [describe(cluster3.bootstrap(n), "dtp-spread") for n in (1, 2, 3)]
        return got[0] if all(g == got[0] and g["topics"][0]["error_code"] == 0 for g in got) else None

    d = until(same_everywhere, what="the same description from every broker")
    (t,) = d["topics"]
    parts = t["partitions"]
    assert [p["partition_index"] for p in parts] == list(range(6)) and d["next_cursor"] is None
    leaders = [p["leader_id"] for p in parts]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3], leaders  # RF 1 over three brokers: two leaders each
    assert all(p["replica_nodes"] == [p["leader_id"]] == p["isr_nodes"] and p["offline_replicas"] == []
               for p in parts)
    # paged through broker 3: the same partitions, two by two
    page = describe(cluster3.bootstrap(3), "dtp-spread", limit=2)
    assert [p["partition_index"] for p in page["topics"][0]["partitions"]] == [0, 1]
    assert page["next_cursor"] == {"topic_name": "dtp-spread", "partition_index": 2}
