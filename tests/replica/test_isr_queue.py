"""The ISR change queue (``shoal.replica.isr``, Kafka's AlterPartitionManager) between a leader's
``ReplicaManager`` and a real metadata store (``DecidingStore`` on the memory backend, the
replica manager following its image): many partitions' ISR changes go in few batches, one in
flight at a time; a partition overtaken by another change fails alone and proposes again on its
new epoch; a batch the store could not answer is sent again, its changes pending meanwhile; a
controlled shutdown stops the queue and does not wait behind a batch."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from shoal.clock import ManualClock
from shoal.cluster.controller import controlled_shutdown
from shoal.config import BrokerConfig
from shoal.metadata import BrokerInfo, MetadataError, PartitionInfo, TopicInfo
from shoal.metadata.change import Change, Result
from shoal.metadata.memory import MemoryBackend
from shoal.metadata.rules import topics as topic_rules
from shoal.metadata.store import DecidingStore
from shoal.replica import ReplicaManager
from shoal.storage import LogManager

N = 200


class FetchAt:
    def __init__(self, offset: int) -> None:
        self.fetch_offset = offset


class Gate:
    """The memory backend's ``before_commit``: commits wait while closed; ``fail`` makes the next
    ones fail as an unreachable store does; ``first`` runs once, before the first commit."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.fail = 0
        self.first: Any = None

    async def __call__(self, change: Change) -> None:
        first, self.first = self.first, None
        if first is not None:
            await first()
        await self.open.wait()
        if self.fail:
            self.fail -= 1
            raise MetadataError("REQUEST_TIMED_OUT", "the metadata quorum is unreachable; retry")


class TakingTurns(MemoryBackend):
    """The memory backend with the turn the etcd and embedded backends have: this process's
    writers decide and commit one at a time (``MetadataBackend.turn``)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._turn = asyncio.Lock()

    def turn(self) -> asyncio.Lock:
        return self._turn


@pytest.fixture
async def leader(tmp_path):
    """Broker 1 leading ``t``'s N partitions (replicas 1, 2; ISR 1 alone), on a real store."""
    gate = Gate()
    store = DecidingStore(TakingTurns(before_commit=gate))
    await store.start()
    parts = tuple(PartitionInfo(i, (1, 2), (1,), leader=1) for i in range(N))

    def create(img):
        t = topic_rules.create_topic(img, "t", [(1, 2)] * N, {}, new_uuid=uuid.uuid4).response
        t = TopicInfo("t", t.topic_id, parts)
        return Result(Change(topics={"t": t}), t)

    await store.decide_and_commit(create)
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    cfg = BrokerConfig.load(None, {"replica.lag.time.max.ms": "1000"})
    m = ReplicaManager(1, logs, lambda: store.image, lambda: cfg, clock, alter_isrs=store.alter_isrs)
    m.load()
    m.start()
    store.subscribe(m.on_metadata)
    yield m, store, gate, clock
    await m.stop()
    logs.close()


def caught_up(m: ReplicaManager, store: DecidingStore, clock: ManualClock, indexes: range) -> None:
    """Follower 2 fetches these partitions at their log end (0: nothing written)."""
    m.follower_fetched(2, store.image, [(("t", i), FetchAt(0)) for i in indexes], clock.now_ms())


async def settled(m: ReplicaManager) -> None:
    for _ in range(200):
        await asyncio.sleep(0.01)
        if not m.isr_changes.unsent and all(p.pending_isr is None for p in m.hosted()):
            return
    raise AssertionError("ISR changes still pending")


async def test_isr_changes_of_many_partitions_go_in_few_batches(leader) -> None:
    """200 expansions: those proposed while a batch is in flight wait for it and go together in
    the next, so 2 batches, 2 commits (one each before: 200)."""
    m, store, gate, clock = leader
    epoch = store.image.epoch
    gate.open.clear()
    caught_up(m, store, clock, range(0, 10))  # the first batch: 10
    await asyncio.sleep(0.01)
    assert m.isr_changes.batches == 1 and all(m.partition("t", i).pending_isr == (1, 2) for i in range(10))
    caught_up(m, store, clock, range(10, N))  # the rest, while it is in flight
    assert m.isr_changes.unsent == N - 10 and m.isr_changes.batches == 1
    gate.open.set()
    await settled(m)
    assert m.isr_changes.batches == 2 and store.image.epoch == epoch + 2
    assert all(p.isr == (1, 2) for p in store.image.topics["t"].partitions)
    assert m.isr_changes.expands == N and m.isr_changes.refused == 0


async def test_a_partition_overtaken_by_another_change_fails_alone_and_proposes_again(leader) -> None:
    """Another writer changes partition 7 between the batch's decision and its commit: the batch
    loses its swap, is decided again, and only partition 7 is refused (stale). Its next fetch
    proposes again on the new epoch, and that commits."""
    m, store, gate, clock = leader

    async def overtake() -> None:  # the controller (say) shrinks partition 7 to (1,) again: epoch 1
        img = store.image
        r = topic_rules.update_partition(img, "t", 7, isr=(1,))
        await store.backend.commit(r.change, img.epoch)  # (gate.first is spent: no recursion)

    gate.first = overtake
    caught_up(m, store, clock, range(N))
    await settled(m)
    isr = {p.partition: p.isr for p in store.image.topics["t"].partitions}
    assert isr[7] == (1,) and all(v == (1, 2) for i, v in isr.items() if i != 7)
    assert m.isr_changes.expands == N - 1 and store.conflicts == 1
    assert m.partition("t", 7).pending_isr is None  # not stuck: free to propose again
    caught_up(m, store, clock, range(7, 8))
    await settled(m)
    p7 = store.image.topics["t"].partitions[7]
    assert p7.isr == (1, 2) and p7.partition_epoch == 2 and m.isr_changes.expands == N


async def test_a_batch_the_store_could_not_answer_is_sent_again_pending_meanwhile(leader) -> None:
    """The store is unreachable for two attempts: the expansions stay pending (the high watermark
    counts the joining replica, as it must for a change that may have landed) and are sent again
    after the backoff until they commit."""
    m, store, gate, clock = leader
    m.isr_changes.retry_backoff_s = 0.05
    gate.fail = 2
    caught_up(m, store, clock, range(N))
    await asyncio.sleep(0.03)
    assert m.isr_changes.batches == 1 and all(p.pending_isr == (1, 2) for p in m.hosted())
    await settled(m)
    assert m.isr_changes.batches == 3 and m.isr_changes.expands == N
    assert all(p.isr == (1, 2) for p in store.image.topics["t"].partitions)


async def test_a_controlled_shutdown_does_not_wait_behind_an_isr_batch(leader) -> None:
    """A batch stuck in its commit (etcd slow: at thousands of partitions a rejoin's batches held
    the store's turn for seconds) holds this process's turn. The controlled shutdown stops the
    queue, the batch with it, and commits its change at once; proposals after it go nowhere."""
    m, store, gate, clock = leader
    await store.register_broker(BrokerInfo(2, "127.0.0.1", 9002))
    caught_up(m, store, clock, range(10))  # partitions 0-9: ISR (1, 2), so 2 can take them over
    await settled(m)
    stuck = asyncio.Event()

    async def slow() -> None:
        stuck.set()
        await asyncio.sleep(3600)

    gate.first = slow
    caught_up(m, store, clock, range(10, N))
    await asyncio.wait_for(stuck.wait(), 5)
    batches = m.isr_changes.batches
    moved = await asyncio.wait_for(controlled_shutdown(store, 1, m), 5)
    parts = store.image.topics["t"].partitions
    assert moved == 10 and all(p.leader == 2 and p.isr == (2,) for p in parts[:10])
    assert all(p.isr == (1,) for p in parts[10:])  # the stuck batch never landed
    caught_up(m, store, clock, range(N))
    await asyncio.sleep(0.05)
    assert m.isr_changes.batches == batches and m.isr_changes.unsent == 0
