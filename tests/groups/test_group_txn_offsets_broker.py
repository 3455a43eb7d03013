"""TxnOffsetCommit (28) v0-v4 on an in-process broker (no sockets; requests and responses through
the codec both ways): the handler's checks, the transactional batch in the real
``__consumer_offsets`` log (an ongoing transaction of the producer there), the end-transaction
marker through ``Partition.append_marker`` + ``on_txn_completed``, and the replay of both after a
broker restart on the same log directory."""

from __future__ import annotations

import pytest

from group_helpers import handler_call
from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.groups import OFFSETS_TOPIC
from shoal.handlers.metadata import auto_create_topic
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(60)

TXN_COMMIT, FETCH = 28, 9
PID = 7000


def config(tmp_path) -> BrokerConfig:
    return BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "offsets.topic.num.partitions": "1",
        "num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
    })


async def started(tmp_path) -> Broker:
    b = Broker(config(tmp_path))
    await b.start()
    return b


def txn_commit_fields(group: str, offsets: dict[tuple[str, int], int], *, pid: int = PID, epoch: int = 0):
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"})
    return dict(transactional_id="tx", group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
                member_id="", group_instance_id=None,
                topics=[{"name": t, "partitions": parts} for t, parts in topics.items()])


def errors(resp) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def fetched(broker: Broker, group: str, parts: list[int], *, stable: bool = True):
    r = await handler_call(broker, FETCH, 8, group_id=group, require_stable=stable, groups=[
        {"group_id": group, "topics": [{"name": "t", "partition_indexes": parts}]}])
    [g] = r.groups
    assert g.error_code == E.none
    return {p.partition_index: (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions}


def offsets_partition(broker: Broker):
    part = broker.services.replicas.partition(OFFSETS_TOPIC, 0)
    assert part is not None
    return part


@pytest.mark.parametrize("version", range(0, 5))
async def test_txn_offset_commit_at_every_version(tmp_path, version):
    b = await started(tmp_path)
    try:
        await auto_create_topic(b.services, "t")
        group = f"g{version}"
        fields = txn_commit_fields(group, {("t", 0): 5, ("t", 99): 1, ("nope", 0): 1})
        r = await handler_call(b, TXN_COMMIT, version, **fields)
        assert errors(r) == {("t", 0): E.none, ("t", 99): E.unknown_topic_or_partition,
                             ("nope", 0): E.unknown_topic_or_partition}
        assert await fetched(b, group, [0]) == {0: (-1, E.unstable_offset_commit)}
        assert await fetched(b, group, [0], stable=False) == {0: (-1, E.none)}
        if version >= 3:  # the group's generation is checked from v3 (KIP-447)
            r = await handler_call(b, TXN_COMMIT, version, **{
                **txn_commit_fields("unknown", {("t", 0): 5}), "generation_id": 1, "member_id": "m"})
            assert errors(r) == {("t", 0): E.illegal_generation}
    finally:
        await b.stop()


async def test_commit_abort_and_restart_with_the_real_log(tmp_path):
    b = await started(tmp_path)
    try:
        await auto_create_topic(b.services, "t")
        ok = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("g", {("t", 0): 10, ("t", 1): 11}))
        assert errors(ok) == {("t", 0): E.none, ("t", 1): E.none}
        aborted = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("g", {("t", 2): 12}, pid=PID + 1))
        assert errors(aborted) == {("t", 2): E.none}
        open_ = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("g", {("t", 3): 13}, pid=PID + 2))
        assert errors(open_) == {("t", 3): E.none}
        part = offsets_partition(b)
        # the log took them as ongoing transactions of the producers (coordinator-origin appends)
        assert sorted(pid for pid, _epoch, _first in part.log.ongoing_transactions()) == [PID, PID + 1, PID + 2]
        assert part.last_stable_offset < part.high_watermark
        # a zombie's commit with an older epoch is fenced by the log
        fenced = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("g", {("t", 0): 99}, epoch=0, pid=PID + 3))
        assert errors(fenced) == {("t", 0): E.none}
        part.append_marker(PID + 3, 1, 0, False, b.services.clock.now_ms())  # epoch 1 now
        b.services.groups.on_txn_completed(PID + 3, [0], False)
        fenced = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("g", {("t", 0): 99}, epoch=0, pid=PID + 3))
        assert errors(fenced) == {("t", 0): E.invalid_producer_epoch}

        for pid, commit in ((PID, True), (PID + 1, False)):
            part.append_marker(pid, 0, 0, commit, b.services.clock.now_ms())
            b.services.groups.on_txn_completed(pid, [0], commit)
        want = {0: (10, E.none), 1: (11, E.none), 2: (-1, E.none), 3: (-1, E.unstable_offset_commit)}
        assert await fetched(b, "g", [0, 1, 2, 3]) == want
    finally:
        await b.stop()

    b = await started(tmp_path)  # the load replays the transactional batches and the markers
    try:
        assert await fetched(b, "g", [0, 1, 2, 3]) == want
        offsets_partition(b).append_marker(PID + 2, 0, 0, True, b.services.clock.now_ms())
        b.services.groups.on_txn_completed(PID + 2, [0], True)
        assert await fetched(b, "g", [3]) == {3: (13, E.none)}
    finally:
        await b.stop()


async def test_acls_and_tenancy_order(tmp_path):
    """WRITE on the transactional id first, then READ on the group, then READ on each topic."""
    from shoal.tenancy.acl import Operation, ResourceType
    from shoal.tenancy.scope import Scope

    b = await started(tmp_path)
    try:
        await auto_create_topic(b.services, "t")
        denied: set[tuple[int, int]] = set()
        real = Scope.allowed

        def allowed(self, operation, resource_type, name):
            return (operation, resource_type) not in denied and real(self, operation, resource_type, name)

        Scope.allowed = allowed
        try:
            fields = txn_commit_fields("g", {("t", 0): 1, ("u", 0): 1})
            denied.update({(Operation.WRITE, ResourceType.TRANSACTIONAL_ID), (Operation.READ, ResourceType.GROUP),
                           (Operation.READ, ResourceType.TOPIC)})
            r = await handler_call(b, TXN_COMMIT, 3, **fields)
            assert set(errors(r).values()) == {E.transactional_id_authorization_failed}
            denied.discard((Operation.WRITE, ResourceType.TRANSACTIONAL_ID))
            r = await handler_call(b, TXN_COMMIT, 3, **fields)
            assert set(errors(r).values()) == {E.group_authorization_failed}
            denied.discard((Operation.READ, ResourceType.GROUP))
            r = await handler_call(b, TXN_COMMIT, 3, **fields)
            assert errors(r) == {("t", 0): E.topic_authorization_failed, ("u", 0): E.topic_authorization_failed}
            denied.clear()
            r = await handler_call(b, TXN_COMMIT, 3, **fields)
            assert errors(r) == {("t", 0): E.none, ("u", 0): E.unknown_topic_or_partition}
        finally:
            Scope.allowed = real
    finally:
        await b.stop()
