"""The marker writer's decisions with fake partitions: local appends and acks=all, the group
coordinator told of __consumer_offsets markers, retries of retriable errors, a deleted topic's
partition dropped, a fenced marker stopping the sending, remote leaders asked with WriteTxnMarkers."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from shoal.clock import ManualClock
from shoal.protocol.errors import ErrorCode as E
from shoal.storage.producer_state import ProducerStateError
from shoal.txn.markers import MarkerWriter, write_local_markers


@dataclass
class FakePartition:
    name: str
    fail: list = field(default_factory=list)  # exceptions to raise, one per append
    markers: list = field(default_factory=list)

    def append_marker(self, pid, epoch, coordinator_epoch, commit, now_ms):
        if self.fail:
            raise self.fail.pop(0)
        self.markers.append((pid, epoch, coordinator_epoch, commit))
        return SimpleNamespace(last_offset=len(self.markers))


class FakeServices:
    def __init__(self, topics: dict[str, list[int]], node_id: int = 1):
        self.node_id = node_id
        self.clock = ManualClock()
        self.leaders = topics
        self.parts = {(t, i): FakePartition(f"{t}-{i}") for t, ls in topics.items() for i in range(len(ls))}
        self.waits = []
        self.completed = []
        self.groups = SimpleNamespace(on_txn_completed=lambda pid, parts, commit: self.completed.append(
            (pid, list(parts), commit)))
        svc = self

        class Image:
            def topic(self, name):
                ls = svc.leaders.get(name)
                if ls is None:
                    return None
                return SimpleNamespace(partitions=[SimpleNamespace(partition=i, leader=l) for i, l in enumerate(ls)])

        class Replicas:
            def leader(self, name, pinfo):
                return svc.parts[(name, pinfo.partition)] if pinfo.leader == svc.node_id else None

            async def wait_committed(self, waits, timeout):
                svc.waits.append(list(waits))
                return {}

        self.metadata = SimpleNamespace(image=Image())
        self.replicas = Replicas()


async def test_local_markers_wait_and_complete_group_offsets():
    svc = FakeServices({"t": [1, 1], "__consumer_offsets": [1]})
    out = await write_local_markers(svc, svc.groups, 7, 2, 5, True, [("t", 0), ("t", 1), ("__consumer_offsets", 0), ("gone", 0)], 1.0)
    assert out == {("t", 0): E.none, ("t", 1): E.none, ("__consumer_offsets", 0): E.none,
                   ("gone", 0): E.unknown_topic_or_partition}
    assert svc.parts[("t", 0)].markers == [(7, 2, 5, True)]
    assert svc.waits == [[("t", 0, 2, 1), ("t", 1, 2, 1), ("__consumer_offsets", 0, 2, 1)]]
    assert svc.completed == [(7, [0], True)]


async def test_refused_marker_carries_the_partitions_error():
    svc = FakeServices({"t": [1]})
    svc.parts[("t", 0)].fail = [ProducerStateError("INVALID_PRODUCER_EPOCH", "old epoch")]
    assert await write_local_markers(svc, svc.groups, 7, 1, 0, False, [("t", 0)], 1.0) == {("t", 0): E.invalid_producer_epoch}


async def test_writer_retries_drops_deleted_topics_and_stops_when_fenced():
    svc = FakeServices({"t": [1, 2], "u": [1]})
    calls = []

    async def remote(node, pid, epoch, ce, commit, parts):
        calls.append((node, list(parts)))
        if len(calls) == 1:
            return {tp: E.not_leader_or_follower for tp in parts}  # retried
        return {tp: E.none for tp in parts}

    w = MarkerWriter(svc, svc.groups, backoff_s=0.001)
    w._remote = remote
    svc.parts[("t", 0)].fail = [OSError("disk")]  # KAFKA_STORAGE_ERROR: retried
    assert await w.send(7, 0, 3, True, [("t", 0), ("t", 1), ("u", 0), ("deleted", 4)], lambda: True)
    assert calls == [(2, [("t", 1)]), (2, [("t", 1)])]
    assert svc.parts[("t", 0)].markers == [(7, 0, 3, True)] and svc.parts[("u", 0)].markers == [(7, 0, 3, True)]
    # fenced: stop, report it
    svc.parts[("u", 0)].fail = [ProducerStateError("TRANSACTION_COORDINATOR_FENCED", "newer coordinator")]
    assert not await w.send(7, 0, 3, True, [("u", 0)], lambda: True)
    # no longer the coordinator: stop before writing
    assert not await w.send(7, 0, 3, True, [("u", 0)], lambda: False)
    assert len(svc.parts[("u", 0)].markers) == 1
