"""Property: whatever the interleaving of appends, follower fetches, ISR changes and time, the
leader's high watermark never goes back, never passes its log end, and moves only to an offset
every ISR member (of the current ISR or one in flight) has reported having."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.config import BrokerConfig
from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo
from shoal.protocol.records import build_batch
from shoal.replica import ReplicaManager
from shoal.storage import LogManager

TID = uuid.uuid4()
REPLICAS = (1, 2, 3)


def image(isr: tuple[int, ...], pepoch: int) -> MetadataImage:
    t = TopicInfo("t", TID, (PartitionInfo(0, REPLICAS, isr, leader=1, leader_epoch=0, partition_epoch=pepoch),))
    empty = MappingProxyType({})
    return MetadataImage("c", 1, empty, MappingProxyType({"t": t}), MappingProxyType({TID: t}), empty, epoch=pepoch + 1)


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.integers(0, 40)),
    st.tuples(st.just("isr"), st.sampled_from([(1,), (1, 2), (1, 3), (1, 2, 3)])),
    st.tuples(st.just("tick"), st.integers(0, 2000)),
), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_high_watermark_rules(steps) -> None:
    asyncio.run(_run(steps))


async def _run(steps) -> None:
    with tempfile.TemporaryDirectory() as d:
        clock = ManualClock()
        logs = LogManager(Path(d), clock=clock)
        holder = {"image": image(REPLICAS, 0)}
        m = ReplicaManager(1, logs, lambda: holder["image"], lambda: BrokerConfig.load(None, {}), clock)
        m.load()
        m.start()
        p = m.partition("t", 0)
        reported = {2: 0, 3: 0}  # what each follower last said it has
        pepoch, last_hw = 0, 0
        for op in steps:
            if op[0] == "append":
                p.append_as_leader(bytearray(build_batch([(0, None, b"v", ())] * op[1])), clock.now_ms())
            elif op[0] == "fetch":
                offset = min(op[2], p.log_end_offset)
                m.follower_fetched(op[1], holder["image"], [(("t", 0), _At(offset))], clock.now_ms())
                reported[op[1]] = offset
            elif op[0] == "isr":
                pepoch += 1
                old, holder["image"] = holder["image"], image(op[1], pepoch)
                m.on_metadata(old, holder["image"])
            else:
                clock.sleep(op[1] / 1000)
                m.shrink_isrs()
            hw = p.high_watermark
            assert last_hw <= hw <= p.log_end_offset
            if hw > last_hw:  # it moved: every member of the ISR (current or in flight) has it all
                assert all(reported[r] >= hw for r in p.maximal_isr() if r != 1), (op, hw, reported)
            last_hw = hw
        logs.close()


class _At:
    def __init__(self, offset: int) -> None:
        self.fetch_offset = offset
