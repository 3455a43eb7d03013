"""``min.insync.racks`` (``shoal.replica.racks`` and ``ReplicaManager.enough_racks``): the rule
exactly, and acks=all waiting on a real log answered NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
holding the batch spans fewer racks than the topic asks."""

from __future__ import annotations

import asyncio
import uuid
from types import MappingProxyType

from shoal.clock import ManualClock
from shoal.config import BrokerConfig, log_config
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from shoal.replica import ReplicaManager
from shoal.replica.racks import enough_racks, racks_spanned
from shoal.storage import LogManager

RACKS = {1: "dc1", 2: "dc1", 3: "dc2", 4: None}


def test_racks_spanned_counts_known_racks_only():
    assert racks_spanned((1, 2), RACKS) == 1
    assert racks_spanned((1, 3), RACKS) == 2
    assert racks_spanned((1, 4), RACKS) == 1  # no broker.rack: no rack
    assert racks_spanned((1, 9), RACKS) == 1  # unregistered: no rack
    assert racks_spanned((), RACKS) == 0


def test_enough_racks():
    assert enough_racks((1, 2), RACKS, 1)  # the default: off
    assert enough_racks((4,), {}, 1)
    assert not enough_racks((1, 2), RACKS, 2)
    assert enough_racks((1, 2, 3), RACKS, 2)
    assert not enough_racks((1, 2, 3), RACKS, 3)


def test_config_broker_default_and_topic_override():
    cfg = BrokerConfig.load(None, {"min.insync.racks": "2"})
    assert log_config(cfg, {}).min_insync_racks == 2
    assert log_config(cfg, {"min.insync.racks": "3"}).min_insync_racks == 3
    assert log_config(BrokerConfig.load(None, {}), {}).min_insync_racks == 1


TOPIC_ID = uuid.uuid4()


def image(isr, pepoch, epoch, racks=2) -> MetadataImage:
    brokers = {b: BrokerInfo(b, "h", 9000 + b, rack=r) for b, r in RACKS.items()}
    p = PartitionInfo(0, (1, 2, 3), tuple(isr), leader=1, leader_epoch=0, partition_epoch=pepoch)
    t = TopicInfo("t", TOPIC_ID, (p,), configs={"min.insync.racks": str(racks)})
    empty = MappingProxyType({})
    return MetadataImage("c", 1, MappingProxyType(brokers), MappingProxyType({"t": t}),
                         MappingProxyType({TOPIC_ID: t}), empty, epoch=epoch)


class FetchAt:
    def __init__(self, offset: int) -> None:
        self.fetch_offset = offset


async def test_acks_all_waits_for_the_racks(tmp_path) -> None:
    clock = ManualClock()
    logs = LogManager(tmp_path, clock=clock)
    holder = {"image": image((1, 2, 3), 0, 1)}
    m = ReplicaManager(1, logs, lambda: holder["image"], lambda: BrokerConfig.load(None, {}), clock)
    m.load()
    m.start()

    def publish(new):
        old, holder["image"] = holder["image"], new
        m.on_metadata(old, new)

    p = m.partition("t", 0)
    assert m.enough_racks(p)  # dc1 + dc2
    p.append_as_leader(bytearray(build_batch([(0, None, b"a", ())])), 0)
    waiter = asyncio.ensure_future(m.wait_committed([("t", 0, 1, 2)], 5))
    await asyncio.sleep(0)
    # the dc2 replica leaves the ISR before it fetched: the batch is committed by 1 and 2 (min ISR 2
    # holds) but they are one rack
    publish(image((1, 2), 1, 2))
    assert not m.enough_racks(p)
    m.follower_fetched(2, holder["image"], [(("t", 0), FetchAt(1))], 0)
    assert p.high_watermark == 1
    assert await asyncio.wait_for(waiter, 2) == {("t", 0): ErrorCode.not_enough_replicas_after_append}
    # back in the ISR: a batch completes once all three have it
    publish(image((1, 2, 3), 2, 3))
    assert m.enough_racks(p)
    p.append_as_leader(bytearray(build_batch([(0, None, b"b", ())])), 0)
    waiter = asyncio.ensure_future(m.wait_committed([("t", 0, 2, 2)], 5))
    m.follower_fetched(2, holder["image"], [(("t", 0), FetchAt(2))], 0)
    m.follower_fetched(3, holder["image"], [(("t", 0), FetchAt(2))], 0)
    assert await asyncio.wait_for(waiter, 2) == {}
    publish(image((1, 2), 3, 4, racks=1))  # the topic's config changes: one rack is enough again
    assert m.enough_racks(p)
    logs.close()
