"""The leader's side of automatic observer promotion (``ReplicaManager`` + ``Partition.promotion``):
a caught-up observer is proposed into the ISR when it falls below min.insync.replicas (with the
leader's min ISR for the rule), counts for the high watermark once in, and is proposed out when
the sync replica is back. Real logs, the image set by hand, a fake store that records proposals."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import MappingProxyType

from shoal.clock import ManualClock
from shoal.config import BrokerConfig
from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.records import build_batch
from shoal.replica import ReplicaManager
from shoal.storage import LogManager
from test_replica_manager import committed

TOPIC_ID = uuid.uuid4()
V2 = json.dumps({"version": 2, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}],
                 "observers": [{"count": 1, "constraints": {"rack": "dc2"}}]})


def image(isr, epoch, pepoch, placement=V2) -> MetadataImage:
    empty = MappingProxyType({})
    p = PartitionInfo(0, (1, 2, 3), tuple(isr), leader=1, leader_epoch=0, partition_epoch=pepoch, observers=(3,))
    t = TopicInfo("t", TOPIC_ID, (p,), configs={"replica.placement": placement, "min.insync.replicas": "2"})
    return MetadataImage("c", 1, empty, MappingProxyType({"t": t}), MappingProxyType({TOPIC_ID: t}), empty,
                         epoch=epoch)


class FetchAt:
    def __init__(self, offset: int) -> None:
        self.fetch_offset = offset


def batch(n: int) -> bytearray:
    return bytearray(build_batch([(0, None, b"v%d" % i, ()) for i in range(n)]))


async def run(tmp_path, placement):
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    holder = {"image": image((1,), 1, 0, placement)}
    proposals = []

    async def alter_isrs(changes):  # accepted; the test publishes the image that follows
        proposals.extend((c.partition_epoch, c.isr, c.min_isr) for c in changes)
        return [committed(c) for c in changes]

    cfg = BrokerConfig.load(None, {"replica.lag.time.max.ms": "1000"})
    m = ReplicaManager(1, logs, lambda: holder["image"], lambda: cfg, clock, alter_isrs=alter_isrs)
    m.load()
    m.start()

    def publish(isr, pepoch):
        old, holder["image"] = holder["image"], image(isr, pepoch + 1, pepoch, placement)
        m.on_metadata(old, holder["image"])

    return m, logs, clock, holder, proposals, publish


async def test_promoted_while_under_min_isr_then_demoted(tmp_path) -> None:
    m, logs, clock, holder, proposals, publish = await run(tmp_path, V2)
    p = m.partition("t", 0)
    p.append_as_leader(batch(3), clock.now_ms())
    assert p.high_watermark == 3  # the leader alone
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(1))], clock.now_ms())
    await asyncio.sleep(0)
    assert proposals == []  # behind the high watermark: not caught up
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(3))], clock.now_ms())
    await asyncio.sleep(0)
    assert proposals == [(0, (1, 3), 2)]  # ISR 1 < min.insync.replicas 2: the observer joins
    publish((1, 3), 1)
    values = {name: v for name, _help, _labels, v in m.metric_values()}
    assert values["shoal_replica_under_replicated_partitions"] == 1  # the observer stands in for replica 2
    assert values["shoal_replica_under_min_isr_partitions"] == 0
    p.append_as_leader(batch(2), clock.now_ms())
    assert p.high_watermark == 3  # the promoted observer counts for the high watermark
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(5))], clock.now_ms())
    assert p.high_watermark == 5
    # the sync replica comes back: a plain expansion, then the observer leaves
    m.follower_fetched(2, holder["image"], [(("t", 0), FetchAt(5))], clock.now_ms())
    await asyncio.sleep(0)
    assert proposals[-1] == (1, (1, 3, 2), None)
    publish((1, 3, 2), 2)
    clock.sleep(0.6)
    m.shrink_isrs()
    await asyncio.sleep(0)
    assert proposals[-1] == (2, (1, 2), 2)
    publish((1, 2), 3)
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(5))], clock.now_ms())
    m.shrink_isrs()
    await asyncio.sleep(0)
    assert len(proposals) == 3  # min ISR holds: the observer stays out
    logs.close()


async def test_version_1_never_promotes(tmp_path) -> None:
    m, logs, clock, holder, proposals, publish = await run(tmp_path, V2.replace('"version": 2', '"version": 1'))
    p = m.partition("t", 0)
    p.append_as_leader(batch(3), clock.now_ms())
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(3))], clock.now_ms())
    m.shrink_isrs()
    await asyncio.sleep(0)
    assert proposals == []
    logs.close()
