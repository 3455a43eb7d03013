"""shoal.client.AdminClient against the real broker: every method once, errors per resource."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from e2e_helpers import OP_TIMEOUT
from shoal.client import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    OP_DELETE,
    OP_SET,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    AdminClient,
    CreatedTopic,
    KafkaError,
)

pytestmark = pytest.mark.timeout(60)


def _produce(bootstrap: str, topic: str, n: int, base_ts: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=base_ts + i * 10)
        p.flush(OP_TIMEOUT)
    assert p.flush(OP_TIMEOUT) == 0


async def test_admin_client_methods(broker, topic_name):
    t = topic_name
    async with AdminClient(broker.bootstrap, timeout=15) as c:
        # ApiVersions negotiated: everything used below is offered.
        for key in (2, 3, 19, 20, 21, 32, 33, 37, 44, 60):
            assert c.version_for(key) >= 0

        info = await c.describe_cluster()
        assert info["brokers"] == {1: ("127.0.0.1", broker.port, None)} and info["cluster_id"]

        created = await c.create_topics(
            [{"name": t, "num_partitions": 2, "replication_factor": 1, "configs": {"retention.ms": "3600000"}}]
        )
        assert isinstance(created[t], CreatedTopic) and created[t].num_partitions == 2
        with pytest.raises(KafkaError) as e:
            await c.create_topics([{"name": t, "num_partitions": 2}])
        assert e.value.code_name == "TOPIC_ALREADY_EXISTS" and e.value.code == 36
        # Several resources, one failing: each gets its own outcome.
        mixed = await c.create_topics(
            [{"name": t, "num_partitions": 1}, {"name": t + "-ok", "num_partitions": 1}], raise_errors=False
        )
        assert isinstance(mixed[t], KafkaError) and isinstance(mixed[t + "-ok"], CreatedTopic)

        assert t in await c.list_topics()
        desc = (await c.describe_topics([t]))[t]
        assert [p.partition for p in desc.partitions] == [0, 1] and desc.replication_factor == 1
        assert desc.topic_id is not None

        await c.create_partitions({t: 3})
        assert len((await c.describe_topics([t]))[t].partitions) == 3

        await c.incremental_alter_configs({(RESOURCE_TOPIC, t): [("retention.ms", OP_SET, "1000"), ("cleanup.policy", OP_SET, "compact")]})
        configs = (await c.describe_configs([(RESOURCE_TOPIC, t)]))[(RESOURCE_TOPIC, t)]
        assert configs["retention.ms"].value == "1000" and configs["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
        await c.incremental_alter_configs({(RESOURCE_TOPIC, t): [("cleanup.policy", OP_DELETE, None)]})
        configs = (await c.describe_configs([(RESOURCE_TOPIC, t)], keys=["cleanup.policy", "retention.ms"]))[(RESOURCE_TOPIC, t)]
        assert set(configs) == {"cleanup.policy", "retention.ms"}
        assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].source != "DYNAMIC_TOPIC_CONFIG"

        # Legacy AlterConfigs replaces the whole set of overrides.
        await c.alter_configs({(RESOURCE_TOPIC, t): {"max.message.bytes": "100000"}})
        configs = (await c.describe_configs([(RESOURCE_TOPIC, t)]))[(RESOURCE_TOPIC, t)]
        overrides = {k for k, e in configs.items() if e.source == "DYNAMIC_TOPIC_CONFIG"}
        assert overrides == {"max.message.bytes"}

        broker_cfg = (await c.describe_configs([(RESOURCE_BROKER, "1")]))[(RESOURCE_BROKER, "1")]
        assert "num.partitions" in broker_cfg

        _produce(broker.bootstrap, t, 5, base_ts=1_700_000_000_000)
        offs = await c.list_offsets(
            {(t, 0): EARLIEST, (t, 1): LATEST, (t, 2): 1_700_000_000_015}
        )
        assert offs[(t, 0)][0] == 0 and offs[(t, 1)][0] == 0 and offs[(t, 2)][0] == -1
        offs = await c.list_offsets({(t, 0): LATEST})
        assert offs[(t, 0)][0] == 5
        offs = await c.list_offsets({(t, 0): 1_700_000_000_015})
        assert offs[(t, 0)] == (2, 1_700_000_000_020)
        if c.version_for(2) >= 7:
            offs = await c.list_offsets({(t, 0): MAX_TIMESTAMP})
            assert offs[(t, 0)] == (4, 1_700_000_000_040)

        low = await c.delete_records({(t, 0): 3})
        assert low == {(t, 0): 3}
        offs = await c.list_offsets({(t, 0): EARLIEST})
        assert offs[(t, 0)][0] == 3
        bad = await c.delete_records({(t, 0): 99, ("no-such-topic-x", 0): 1}, raise_errors=False)
        assert bad[(t, 0)].code_name == "OFFSET_OUT_OF_RANGE"
        assert bad[("no-such-topic-x", 0)].code_name == "UNKNOWN_TOPIC_OR_PARTITION"

        assert await c.delete_topics([t, t + "-ok"]) == {t: None, t + "-ok": None}
        gone = await c.delete_topics([t], raise_errors=False)
        assert gone[t].code_name == "UNKNOWN_TOPIC_OR_PARTITION"
        assert t not in await c.list_topics()


async def test_request_with_a_dict_and_with_an_entity(broker):
    from shoal.protocol import codec

    async with AdminClient(broker.bootstrap, timeout=15) as c:
        resp = await c.request(
            3, {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        )
        assert type(resp).__version__ == c.version_for(3) and resp.brokers[0].port == broker.port
        old = codec.build(codec.request_type(3, 1), topics=())
        resp = await c.request(3, old)
        assert type(resp).__version__ == 1 and resp.topics == ()
