"""DescribeTopicPartitions (KIP-966) through kafka-python's ``KafkaAdminClient.describe_topic_partitions``
(api key 75) against a real broker: every page a real client gets, following ``next_cursor``."""

from __future__ import annotations

from kafka import KafkaAdminClient

TIMEOUT_MS = 30000


def test_kafka_python_pages_through_topics(broker, make_topic, topic_name):
    big, small = make_topic(f"{topic_name}-b", 5), make_topic(f"{topic_name}-a", 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        whole = admin.describe_topic_partitions([big, small, f"{topic_name}-nosuch"])
        assert whole["next_cursor"] is None
        assert [(t["name"], t["error_code"], len(t["partitions"])) for t in whole["topics"]] == [
            (small, 0, 2), (big, 0, 5), (f"{topic_name}-nosuch", 3, 0)]
        t = whole["topics"][1]
        assert t["topic_id"] is not None and not t["is_internal"] and t["topic_authorized_operations"] > 0
        assert all(p["leader_id"] >= 0 and p["replica_nodes"] == [p["leader_id"]] == p["isr_nodes"]
                   for p in t["partitions"])

        seen, cursor, calls = [], None, 0
        while True:
            page = admin.describe_topic_partitions([small, big], response_partition_limit=3, cursor=cursor)
            calls += 1
            seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert calls == 3
        assert seen == [(small, 0), (small, 1), (big, 0), (big, 1), (big, 2), (big, 3), (big, 4)]
    finally:
        admin.close()
