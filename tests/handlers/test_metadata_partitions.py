"""Metadata's partition entities are built once per state of a topic (``PartitionEntities``):
a full Metadata of an unchanged image builds none, a change builds only the topics it touched,
a registration rebuilds them all (leader errors and offline replicas follow the live brokers),
and every answer is the one built from scratch. Called directly, through the wire codec, on a
real EmbeddedMetadataStore (tests/handlers/test_admin.py's broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from test_admin import FakeBroker, make_broker, req_mod

from shoal.handlers import metadata as md
from shoal.handlers.context import RequestContext
from shoal.metadata import BrokerInfo
from shoal.protocol.codec import build, decode_request, decode_response, encode_request, encode_response
from shoal.protocol.errors import ErrorCode


@dataclass
class MetadataBroker(FakeBroker):
    metadata_partitions: md.PartitionEntities = field(default_factory=md.PartitionEntities)
    controller_id: int = 1


async def full_metadata(broker: MetadataBroker, version: int, cache: bool = True):
    """A Metadata naming no topic (all of them), as a client sends it; without ``cache``, the
    same request answered by a broker whose cache is new (everything built from scratch)."""
    req = build(req_mod(md.METADATA, version).MetadataRequest, topics=None, allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    frame = encode_request(md.METADATA, version, 7, "test", req)
    header, decoded = decode_request(md.METADATA, version, memoryview(frame)[4:])
    services = broker if cache else MetadataBroker(broker.metadata, broker.static_config)
    resp = await md.handle_metadata(RequestContext(services=services, header=header, client_address="127.0.0.1:1"),
                                    decoded)
    cid, back = decode_response(md.METADATA, version, memoryview(encode_response(7, md.METADATA, version, resp))[4:])
    assert cid == 7 and back == resp
    return resp


async def cluster(tmp_path) -> MetadataBroker:
    base = await make_broker(tmp_path, brokers=[(1, None), (2, None), (3, None)])
    broker = MetadataBroker(base.metadata, base.static_config)
    for i in range(4):
        await broker.metadata.create_topic(f"t{i}", [(1, 2, 3), (2, 3, 1), (3, 1, 2)], {})
    return broker


async def test_an_unchanged_image_builds_no_partition(tmp_path):
    broker = await cluster(tmp_path)
    try:
        first = await full_metadata(broker, 12)
        assert broker.metadata_partitions.built == 4
        again = await full_metadata(broker, 12)
        assert broker.metadata_partitions.built == 4  # every topic's entities from the cache
        assert again == first == await full_metadata(broker, 12, cache=False)
        assert all(a.partitions is b.partitions for a, b in zip(first.topics, again.topics))
        # another version has entities of its own classes
        old = await full_metadata(broker, 1)
        assert broker.metadata_partitions.built == 8
        assert old == await full_metadata(broker, 1, cache=False)
    finally:
        await broker.metadata.close()


async def test_a_change_builds_only_what_it_touched(tmp_path):
    broker = await cluster(tmp_path)
    try:
        await full_metadata(broker, 12)
        await broker.metadata.update_partition("t2", 1, isr=(2, 3))
        resp = await full_metadata(broker, 12)
        assert broker.metadata_partitions.built == 5  # t2 only
        t2 = next(t for t in resp.topics if t.name == "t2")
        assert t2.partitions[1].isr_nodes == (2, 3)
        assert resp == await full_metadata(broker, 12, cache=False)
        await broker.metadata.delete_topic("t0")
        resp = await full_metadata(broker, 12)
        assert broker.metadata_partitions.built == 5 and [t.name for t in resp.topics] == ["t1", "t2", "t3"]
    finally:
        await broker.metadata.close()


async def test_a_registration_rebuilds_leaders_and_offline_replicas(tmp_path):
    """A broker gone (here: broker 3 never registered in a second store over the same topics) or
    come: the leader it held is LEADER_NOT_AVAILABLE and it is an offline replica, from the
    cache as from scratch."""
    broker = await cluster(tmp_path)
    try:
        await full_metadata(broker, 12)
        await broker.metadata.register_broker(BrokerInfo(4, "127.0.0.1", 9096, None))
        resp = await full_metadata(broker, 12)
        assert broker.metadata_partitions.built == 8  # the brokers changed: every topic again
        assert resp == await full_metadata(broker, 12, cache=False)
    finally:
        await broker.metadata.close()
    # the same directory opened again: only broker 1 registers; 2 and 3 are not live
    again = await make_broker(tmp_path)
    broker = MetadataBroker(again.metadata, again.static_config, metadata_partitions=broker.metadata_partitions)
    try:
        resp = await full_metadata(broker, 12)
        p = next(t for t in resp.topics if t.name == "t1").partitions
        assert p[1].error_code == ErrorCode.leader_not_available and p[1].leader_id == -1
        assert p[0].leader_id == 1 and p[0].offline_replicas == (2, 3)
        assert resp == await full_metadata(broker, 12, cache=False)
    finally:
        await broker.metadata.close()
