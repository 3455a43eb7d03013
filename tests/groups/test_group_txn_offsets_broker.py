"""TxnOffsetCommit (28) v0-v4 on an in-process broker (no sockets; requests and responses through
the codec both ways) with its transaction coordinator: InitProducerId and AddOffsetsToTxn first,
the handler's checks (KIP-890 verification: a partition not added to the transaction is refused),
the transactional batch in the real ``__consumer_offsets`` log (an ongoing transaction of the
producer there), EndTxn whose markers reach the group coordinator (``on_txn_completed``), and the
replay of pending offsets after a broker restart on the same log directory."""

from __future__ import annotations

import asyncio

import pytest

from group_helpers import handler_call
from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.groups import OFFSETS_TOPIC
from shoal.handlers.metadata import auto_create_topic
from shoal.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(60)

INIT, ADD_OFFSETS, END, TXN_COMMIT, FETCH = 22, 25, 26, 28, 9
RETRIABLE = (E.coordinator_not_available, E.coordinator_load_in_progress, E.concurrent_transactions, E.not_coordinator)


def config(tmp_path) -> BrokerConfig:
    return BrokerConfig.load(None, {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
    })


async def started(tmp_path) -> Broker:
    b = Broker(config(tmp_path))
    await b.start()
    return b


async def begin(b: Broker, txn: str, group: str, *, add: bool = True) -> tuple[int, int]:
    """InitProducerId for ``txn``, and AddOffsetsToTxn of ``group`` (unless not ``add``)."""
    await handler_call(b, 10, 4, key_type=1, coordinator_keys=[txn])  # creates __transaction_state
    for _ in range(200):  # until it is created and loaded, and a fenced transaction is aborted
        r = await handler_call(b, INIT, 4, transactional_id=txn, transaction_timeout=60000, producer_id=-1,
                               producer_epoch=-1)
        if r.error_code not in RETRIABLE:
            break
        await asyncio.sleep(0.05)
    assert r.error_code == E.none
    if add:
        a = await handler_call(b, ADD_OFFSETS, 3, transactional_id=txn, producer_id=r.producer_id,
                               producer_epoch=r.producer_epoch, group_id=group)
        assert a.error_code == E.none
    return r.producer_id, r.producer_epoch


async def end(b: Broker, txn: str, pid: int, epoch: int, commit: bool) -> None:
    for _ in range(200):  # a restarted broker's transaction coordinator loads first
        r = await handler_call(b, END, 3, transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                               committed=commit)
        if r.error_code not in RETRIABLE:
            break
        await asyncio.sleep(0.05)
    assert r.error_code == E.none


def txn_commit_fields(txn: str, group: str, offsets: dict[tuple[str, int], int], pid: int, epoch: int):
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"})
    return dict(transactional_id=txn, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
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


async def settled(broker: Broker, group: str, parts: list[int]):
    """The stable offsets once no partition is UNSTABLE_OFFSET_COMMIT any more (markers are
    written after EndTxn answers, as in Kafka)."""
    for _ in range(200):
        got = await fetched(broker, group, parts)
        if all(code == E.none for _, code in got.values()):
            return {p: o for p, (o, _) in got.items()}
        await asyncio.sleep(0.05)
    raise AssertionError(f"still unstable: {got}")


def offsets_partition(broker: Broker):
    part = broker.services.replicas.partition(OFFSETS_TOPIC, 0)
    assert part is not None
    return part


@pytest.mark.parametrize("version", range(0, 5))
async def test_txn_offset_commit_at_every_version(tmp_path, version):
    b = await started(tmp_path)
    try:
        await auto_create_topic(b.services, "t")
        group, txn = f"g{version}", f"tx{version}"
        pid, epoch = await begin(b, txn, group, add=False)
        # KIP-890: not added to the transaction (no AddOffsetsToTxn): refused, nothing appended
        r = await handler_call(b, TXN_COMMIT, version, **txn_commit_fields(txn, group, {("t", 0): 5}, pid, epoch))
        assert errors(r) == {("t", 0): E.invalid_txn_state}
        assert offsets_partition(b).log.ongoing_transactions() == []
        await begin(b, txn, group)  # epoch + 1
        epoch += 1
        fields = txn_commit_fields(txn, group, {("t", 0): 5, ("t", 99): 1, ("nope", 0): 1}, pid, epoch)
        r = await handler_call(b, TXN_COMMIT, version, **fields)
        assert errors(r) == {("t", 0): E.none, ("t", 99): E.unknown_topic_or_partition,
                             ("nope", 0): E.unknown_topic_or_partition}
        assert await fetched(b, group, [0]) == {0: (-1, E.unstable_offset_commit)}
        assert await fetched(b, group, [0], stable=False) == {0: (-1, E.none)}
        if version >= 3:  # the group's generation is checked from v3 (KIP-447)
            r = await handler_call(b, TXN_COMMIT, version, **{
                **txn_commit_fields(txn, "unknown", {("t", 0): 5}, pid, epoch), "generation_id": 1, "member_id": "m"})
            assert errors(r) == {("t", 0): E.illegal_generation}
        await end(b, txn, pid, epoch, True)
        assert await settled(b, group, [0]) == {0: 5}
    finally:
        await b.stop()


async def test_commit_abort_fence_and_restart_with_the_real_log(tmp_path):
    b = await started(tmp_path)
    try:
        await auto_create_topic(b.services, "t")
        txns = {}
        for name, offsets in (("committed", {("t", 0): 10, ("t", 1): 11}), ("aborted", {("t", 2): 12}),
                              ("open", {("t", 3): 13})):
            pid, epoch = await begin(b, name, "g")
            txns[name] = (pid, epoch)
            r = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields(name, "g", offsets, pid, epoch))
            assert set(errors(r).values()) == {E.none}
        part = offsets_partition(b)
        # the log took them as ongoing transactions of the producers (coordinator-origin appends)
        assert sorted(pid for pid, _epoch, _first in part.log.ongoing_transactions()) == sorted(
            pid for pid, _ in txns.values())
        assert part.last_stable_offset < part.high_watermark
        await end(b, "committed", *txns["committed"], True)
        await end(b, "aborted", *txns["aborted"], False)
        want = {0: (10, E.none), 1: (11, E.none), 2: (-1, E.none), 3: (-1, E.unstable_offset_commit)}
        for _ in range(200):
            if await fetched(b, "g", [0, 1, 2, 3]) == want:
                break
            await asyncio.sleep(0.05)
        assert await fetched(b, "g", [0, 1, 2, 3]) == want

        # a zombie: a new instance of "aborted" bumps the epoch; the old epoch is refused
        pid, old = txns["aborted"]
        await begin(b, "aborted", "g")
        r = await handler_call(b, TXN_COMMIT, 3, **txn_commit_fields("aborted", "g", {("t", 2): 99}, pid, old))
        assert errors(r) == {("t", 2): E.invalid_producer_epoch}
    finally:
        await b.stop()

    b = await started(tmp_path)  # the load replays the transactional batches and the markers
    try:
        assert await fetched(b, "g", [0, 1, 2, 3]) == want
        await end(b, "open", *txns["open"], True)
        assert await settled(b, "g", [3]) == {3: 13}
    finally:
        await b.stop()
