"""The group and offset handlers at every version: a real in-process broker (no sockets), requests
and responses through the codec both ways, so each version's response is valid on the wire."""

from __future__ import annotations

import uuid

import pytest

from shoal.broker import Broker
from shoal.client import build_entity
from shoal.config import BrokerConfig
from shoal.handlers.context import RequestContext
from shoal.handlers.metadata import auto_create_topic
from shoal.protocol.codec import decode_request, decode_response, encode_request, encode_response, request_type
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(30)

FIND, COMMIT, FETCH, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 10, 8, 9, 11, 12, 13, 14, 15, 16, 42, 47


async def call(broker: Broker, api_key: int, version: int, /, **values):
    key = api_key
    req = build_entity(request_type(key, version), values)
    frame = encode_request(key, version, 7, "handler-test", req)
    header, decoded = decode_request(key, version, memoryview(frame)[4:])
    spec = broker.registry.lookup(key)
    assert spec is not None and spec.min_version <= version <= spec.max_version
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:5555")
    resp = await spec.handler(ctx, decoded)
    out = encode_response(7, key, version, resp)
    _, back = decode_response(key, version, memoryview(out)[4:])
    return back


@pytest.fixture
async def broker(tmp_path):
    cfg = BrokerConfig.load(
        None,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    b = Broker(cfg)
    await b.start()
    await auto_create_topic(b.services, "t")
    yield b
    await b.stop()


@pytest.mark.parametrize("version", range(0, 7))
async def test_find_coordinator(broker, version):
    port = broker.listeners[0].port
    if version >= 4:
        r = await call(broker, FIND, version, key_type=0, coordinator_keys=["a", "b"])
        assert [(c.key, c.node_id, c.port, c.error_code) for c in r.coordinators] == [("a", 1, port, E.none), ("b", 1, port, E.none)]
        r = await call(broker, FIND, version, key_type=1, coordinator_keys=["txn"])
        assert r.coordinators[0].error_code == E.coordinator_not_available
    else:
        r = await call(broker, FIND, version, key="a", key_type=0)
        assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 1, "127.0.0.1", port)


@pytest.mark.parametrize("version", range(0, 10))
async def test_join_sync_heartbeat_leave_at_every_join_version(broker, version):
    group = f"g{version}"
    join = dict(
        group_id=group, session_timeout=6000, rebalance_timeout=6000, protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b"m"}], group_instance_id=None, reason="test",
    )
    r = await call(broker, JOIN, version, member_id="", **join)
    if version >= 4:
        assert r.error_code == E.member_id_required and r.member_id.startswith("handler-test-")
        r = await call(broker, JOIN, version, member_id=r.member_id, **join)
    member = r.member_id
    assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (E.none, 1, member, "range")
    assert [(m.member_id, m.metadata) for m in r.members] == [(member, b"m")]
    sync_v = min(version, 5)
    s = await call(broker, SYNC, sync_v, group_id=group, generation_id=1, member_id=member,
                   protocol_type="consumer", protocol_name="range", assignments=[{"member_id": member, "assignment": b"A"}])
    assert (s.error_code, s.assignment) == (E.none, b"A")
    h = await call(broker, HEARTBEAT, min(version, 4), group_id=group, generation_id=1, member_id=member)
    assert h.error_code == E.none
    h = await call(broker, HEARTBEAT, min(version, 4), group_id=group, generation_id=0, member_id=member)
    assert h.error_code == E.illegal_generation
    leave_v = min(version, 5)
    if leave_v >= 3:
        lv = await call(broker, LEAVE, leave_v, group_id=group, members=[{"member_id": member}, {"member_id": "x"}])
        assert (lv.error_code, [m.error_code for m in lv.members]) == (E.none, [E.none, E.unknown_member_id])
    else:
        lv = await call(broker, LEAVE, leave_v, group_id=group, member_id=member)
        assert lv.error_code == E.none
    assert broker.groups.groups[group].state_name == "Empty"


@pytest.mark.parametrize("version", range(2, 11))
async def test_offset_commit_and_fetch(broker, version):
    topic_id = broker.metadata.image.topic("t").topic_id
    group = f"c{version}"
    t = {"name": "t", "topic_id": topic_id}
    r = await call(broker, COMMIT, version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   topics=[{**t, "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2,
                                                 "committed_metadata": "meta"},
                                                {"partition_index": 9, "committed_offset": 1}]},
                           {"name": "nope", "topic_id": uuid.uuid4(), "partitions": [{"partition_index": 0, "committed_offset": 1}]}])
    missing = E.unknown_topic_id if version >= 10 else E.unknown_topic_or_partition
    assert [[p.error_code for p in x.partitions] for x in r.topics] == [[E.none, E.unknown_topic_or_partition], [missing]]
    fetch_v = min(version, 10)
    if fetch_v >= 8:
        f = await call(broker, FETCH, fetch_v, require_stable=True, groups=[
            {"group_id": group, "topics": [{**t, "partition_indexes": [0, 1]}]},
            {"group_id": group, "topics": None},
            {"group_id": "nobody", "topics": None},
        ])
        g0, g1, g2 = f.groups
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in g0.topics[0].partitions] == [(0, 5, "meta"), (1, -1, "")]
        assert [(p.partition_index, p.committed_offset) for x in g1.topics for p in x.partitions] == [(0, 5)]
        assert g2.topics == () and g2.error_code == E.none
        if fetch_v >= 10:
            assert g1.topics[0].topic_id == topic_id
    else:
        f = await call(broker, FETCH, fetch_v, group_id=group, topics=[{"name": "t", "partition_indexes": [0, 1]}])
        parts = f.topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in parts] == [(0, 5, "meta"), (1, -1, "")]
        if version >= 6:  # OffsetCommit v6+ carries the leader epoch, OffsetFetch v5+ returns it
            assert parts[0].committed_leader_epoch == 2


async def test_offset_fetch_group_errors_per_version(broker):
    broker.groups.unload_partition(broker.groups.partition_for("moved"))  # as if leadership moved
    f = await call(broker, FETCH, 1, group_id="moved", topics=[{"name": "t", "partition_indexes": [0]}])
    assert f.topics[0].partitions[0].error_code == E.not_coordinator
    f = await call(broker, FETCH, 7, group_id="moved", topics=None)
    assert (f.error_code, f.topics) == (E.not_coordinator, ())
    f = await call(broker, FETCH, 8, groups=[{"group_id": "moved", "topics": None}])
    assert f.groups[0].error_code == E.not_coordinator


@pytest.mark.parametrize("version", range(0, 7))
async def test_describe_groups(broker, version):
    r = await call(broker, JOIN, 3, group_id="d", member_id="", session_timeout=6000, rebalance_timeout=6000,
                   protocol_type="consumer", protocols=[{"name": "range", "metadata": b"meta"}])
    member = r.member_id
    await call(broker, SYNC, 3, group_id="d", generation_id=1, member_id=member,
               assignments=[{"member_id": member, "assignment": b"A"}])
    d = await call(broker, DESCRIBE, version, groups=["d", "missing"], include_authorized_operations=True)
    g, missing = d.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (E.none, "Stable", "consumer", "range")
    [m] = g.members
    assert (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment) == (
        member, "handler-test", "/127.0.0.1", b"meta", b"A"
    )
    assert missing.group_state == "Dead"
    assert missing.error_code == (E.group_id_not_found if version >= 6 else E.none)
    if version >= 3:
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)


@pytest.mark.parametrize("version", range(0, 6))
async def test_list_groups(broker, version):
    await call(broker, COMMIT, 9, group_id="simple", generation_id_or_member_epoch=-1, member_id="",
               topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}])
    r = await call(broker, LIST, version, states_filter=["empty"], types_filter=["classic"])
    assert r.error_code == E.none
    assert [(g.group_id, g.protocol_type) for g in r.groups] == [("simple", "")]
    if version >= 4:
        assert r.groups[0].group_state == "Empty"
        r = await call(broker, LIST, version, states_filter=["Stable"])
        assert r.groups == ()
    if version >= 5:
        assert r.groups == () and (await call(broker, LIST, version, types_filter=["consumer"])).groups == ()


@pytest.mark.parametrize("version", range(0, 3))
async def test_delete_groups_and_offsets(broker, version):
    await call(broker, COMMIT, 9, group_id="x", generation_id_or_member_epoch=-1, member_id="",
               topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}])
    od = await call(broker, OFFSET_DELETE, 0, group_id="x", topics=[{"name": "t", "partitions": [{"partition_index": 0}]},
                                                                     {"name": "gone", "partitions": [{"partition_index": 0}]}])
    assert od.error_code == E.none
    assert [(x.name, [p.error_code for p in x.partitions]) for x in od.topics] == [("t", [E.none]), ("gone", [E.unknown_topic_or_partition])]
    r = await call(broker, DELETE, version, groups_names=["x", "x", "nope"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("x", E.none), ("nope", E.group_id_not_found)]


async def test_coordinator_not_serving_answers_coordinator_not_available(broker):
    """The broker's own group coordinator, stopped (as at shutdown): not active, so every group
    is answered COORDINATOR_NOT_AVAILABLE and the client looks for the coordinator again."""
    await broker.services.groups.stop()
    r = await call(broker, JOIN, 9, group_id="g", member_id="", session_timeout=6000, rebalance_timeout=6000,
                   protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}])
    assert r.error_code == E.coordinator_not_available
    r = await call(broker, COMMIT, 9, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                   topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}])
    assert r.topics[0].partitions[0].error_code == E.coordinator_not_available


async def test_restart_reloads_offsets_and_groups(tmp_path):
    cfg = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                                   "offsets.topic.num.partitions": "5"})
    b = Broker(cfg)
    await b.start()
    await auto_create_topic(b.services, "t")
    r = await call(b, COMMIT, 9, group_id="keep", generation_id_or_member_epoch=-1, member_id="",
                   topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 77}]}])
    assert r.topics[0].partitions[0].error_code == E.none
    await b.stop()
    b = Broker(cfg)
    await b.start()
    try:
        f = await call(b, FETCH, 8, groups=[{"group_id": "keep", "topics": None}])
        assert [(p.partition_index, p.committed_offset) for x in f.groups[0].topics for p in x.partitions] == [(0, 77)]
        assert len(b.metadata.image.topic("__consumer_offsets").partitions) == 5
        assert b.metadata.image.topic("__consumer_offsets").internal
        assert dict(b.metadata.image.topic("__consumer_offsets").configs)["cleanup.policy"] == "compact"
    finally:
        await b.stop()


