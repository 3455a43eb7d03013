"""The internal-topic coordinator base (shoal.groups.runtime) with a toy coordinator whose
partition state is a set of keys: ownership follows the metadata image (unload, then load, in
partition order), status codes, load epochs that ignore a late load or write, the write path's
error mapping, and the broker-bound construction's config cache."""

import asyncio
import logging
import threading
import uuid
from types import SimpleNamespace

import pytest

from shoal.clock import ManualClock
from shoal.groups.runtime import InternalTopicCoordinator, PartitionStatus, coordinator_error
from shoal.groups import MemoryCoordinatorLog
from shoal.groups.records import partition_for
from shoal.protocol.errors import ErrorCode

E = ErrorCode
NODE = 1


class Toy(InternalTopicCoordinator[dict, list]):
    TOPIC = "__toy"
    RF_CONFIG = "toy.replication.factor"
    KEYS = "keys"
    NAME = "toy coordinator"
    logger = logging.getLogger("test.toy")

    def __init__(self, **kw):
        super().__init__(clock=kw.pop("clock", ManualClock()), log=kw.pop("log", MemoryCoordinatorLog()),
                         config=kw.pop("config", {"timeout_s": 5.0}), **kw)
        self.keys: dict[int, set[bytes]] = {}
        self.events: list[tuple[str, int]] = []
        self.gate: threading.Event | None = None  # a load's replay waits for it

    @property
    def write_timeout_s(self) -> float:
        return self.config["timeout_s"]

    def _read_partition(self, partition):
        if self.gate is not None:
            self.gate.wait(30)
        return [k for _, k, _ in self.log.replay(partition)]

    def _apply_loaded(self, partition, loaded):
        self.keys[partition] = set(loaded)

    def _on_loaded(self, partition, owned, loaded, started):
        self.events.append(("loaded", partition))

    def _drop_partition(self, partition):
        self.events.append(("unload", partition))
        return len(self.keys.pop(partition, ()))


def image(leaders: dict[int, int | tuple[int, int]] | None, topic_id=None):
    """A metadata image with ``__toy`` (partition -> leader, or (leader, leader epoch)); None: no topic."""
    if leaders is None:
        return SimpleNamespace(topic=lambda name: None)
    parts = [
        SimpleNamespace(partition=p, leader=v[0] if isinstance(v, tuple) else v, leader_epoch=v[1] if isinstance(v, tuple) else 0)
        for p, v in sorted(leaders.items())
    ]
    t = SimpleNamespace(topic_id=topic_id or uuid.UUID(int=1), partitions=parts)
    return SimpleNamespace(topic=lambda name: t if name == Toy.TOPIC else None)


def following(**kw) -> Toy:
    c = Toy(node_id=NODE, **kw)
    c.active = True
    return c


def test_coordinator_error_is_kafkas_mapping():
    assert {c: coordinator_error(c) for c in (
        E.unknown_topic_or_partition, E.not_enough_replicas, E.request_timed_out, E.not_leader_or_follower,
        E.kafka_storage_error, E.message_too_large, E.record_list_too_large, E.invalid_fetch_size,
        E.invalid_producer_epoch, E.none)} == {
        E.unknown_topic_or_partition: E.coordinator_not_available, E.not_enough_replicas: E.coordinator_not_available,
        E.request_timed_out: E.coordinator_not_available, E.not_leader_or_follower: E.not_coordinator,
        E.kafka_storage_error: E.not_coordinator, E.message_too_large: E.unknown_server_error,
        E.record_list_too_large: E.unknown_server_error, E.invalid_fetch_size: E.unknown_server_error,
        E.invalid_producer_epoch: E.invalid_producer_epoch, E.none: E.none}


async def test_status_without_topic_not_owned_loading_and_active():
    c = following()
    assert c.status("k") == E.coordinator_not_available  # no topic
    p = partition_for("k", 2)
    c.gate = threading.Event()
    c._reconcile(None, image({p: NODE, 1 - p: 2}))
    assert c.num_partitions == 2
    other = next(k for k in (f"k{i}" for i in range(100)) if partition_for(k, 2) != p)
    assert c.status(other) == E.not_coordinator
    assert c.status("k") == E.coordinator_load_in_progress
    assert c.owned_partitions() == {p: PartitionStatus.LOADING} and c.any_loading()
    c.gate.set()
    await c.wait_loaded()
    assert c.status("k") == E.none
    assert c.owned_partitions() == {p: PartitionStatus.ACTIVE} and not c.any_loading()
    assert c.serving(p) is not None and c.serving(1 - p) is None
    c.active = False
    assert c.status("k") == E.coordinator_not_available


async def test_a_load_waits_for_its_partitions_log_to_be_open():
    """The image names this broker the leader before the replica manager has opened the log (a
    topic of many partitions gets its logs in a worker thread): replaying then would read nothing
    and serve the partition empty, its keys lost; the load waits, and a write is refused with a
    retriable error meanwhile instead of NOT_COORDINATOR from a log that is not there."""
    log = MemoryCoordinatorLog()
    log.append(0, [(b"kept", b"v")], 0)
    log.unhosted.add(0)
    c = following(log=log)
    c._reconcile(None, image({0: NODE}))
    for _ in range(5):
        await asyncio.sleep(0.02)
    assert c.owned_partitions() == {0: PartitionStatus.LOADING}
    assert c.status("k") == E.coordinator_load_in_progress
    log.unhosted.discard(0)
    await c.wait_loaded()
    assert c.owned_partitions() == {0: PartitionStatus.ACTIVE} and c.keys[0] == {b"kept"}


async def test_reconcile_unloads_then_loads_in_partition_order():
    c = following()
    c._reconcile(None, image({0: 2, 1: NODE, 2: NODE, 3: 2}))
    await c.wait_loaded()
    assert c.events == [("loaded", 1), ("loaded", 2)]
    c.events.clear()
    c._reconcile(None, image({0: NODE, 1: 2, 2: 3, 3: NODE}))  # leadership moves both ways
    assert c.events == [("unload", 1), ("unload", 2)]
    await c.wait_loaded()
    assert c.events[2:] == [("loaded", 0), ("loaded", 3)]
    assert set(c.owned_partitions()) == {0, 3}


async def test_a_recreated_topic_unloads_everything_and_a_deleted_one_leaves_nothing():
    c = following()
    c._reconcile(None, image({0: NODE, 1: NODE}, uuid.UUID(int=1)))
    await c.wait_loaded()
    c.events.clear()
    c._reconcile(None, image({0: NODE, 1: NODE}, uuid.UUID(int=2)))
    await c.wait_loaded()
    assert c.events == [("unload", 0), ("unload", 1), ("loaded", 0), ("loaded", 1)]
    c.events.clear()
    c._reconcile(None, image(None))
    assert c.events == [("unload", 0), ("unload", 1)] and c.owned_partitions() == {} and c.num_partitions == 0


@pytest.mark.parametrize("reload", [False, True])
async def test_a_new_leader_epoch_reloads_only_when_asked(reload):
    c = following()
    c.RELOAD_ON_NEW_LEADER_EPOCH = reload
    c._reconcile(None, image({0: (NODE, 4)}))
    await c.wait_loaded()
    assert c._owned[0].coordinator_epoch == 4
    c.events.clear()
    c._reconcile(None, image({0: (NODE, 5)}))
    await c.wait_loaded()
    assert c.events == ([("unload", 0), ("loaded", 0)] if reload else [])
    assert c._owned[0].coordinator_epoch == (5 if reload else 4)


async def test_a_load_that_ends_after_its_partition_was_unloaded_or_reloaded_is_ignored():
    c = Toy()
    c.log.append(0, [(b"a", b"1")], 0)
    c.gate = threading.Event()
    unloaded = c.start_loading(0)
    await asyncio.sleep(0.05)  # the replay is parked in its worker thread
    c.unload_partition(0)
    superseded = c.start_loading(0)  # load epoch 2, superseded at once by a reload without unload
    current = c.start_loading(0)
    c.gate.set()
    await asyncio.gather(unloaded, superseded, current, return_exceptions=True)
    assert unloaded.cancelled()
    assert c.events == [("unload", 0), ("loaded", 0)]  # one load applied: the last one
    assert c._owned[0].load_epoch == 3 and c.keys == {0: {b"a"}}


async def test_writes_need_an_active_partition_and_map_errors():
    c = Toy(num_partitions=1)
    assert c._append(0, [(b"k", b"v")]) == E.not_coordinator  # not owned
    c.gate = threading.Event()
    c.start_loading(0)
    assert c._append(0, [(b"k", b"v")]) == E.not_coordinator  # loading
    c.gate.set()
    await c.wait_loaded()
    assert c._append(0, [(b"k", b"v")]) == (1, 1)  # end offset, load epoch
    c.log.fail_with = E.not_leader_or_follower
    assert c._append(0, [(b"k", b"v")]) == E.not_coordinator
    c.log.fail_with = E.not_enough_replicas
    assert c._append(0, [(b"k", b"v")]) == E.coordinator_not_available
    c.log.fail_with = None
    assert await c._committed(0, 1, 1) == E.none
    c.log.hold()
    end, epoch = c._append(0, [(b"k2", b"v")])
    waiting = asyncio.ensure_future(c._committed(0, end, epoch))
    await asyncio.sleep(0)
    c.unload_partition(0)
    c.start_loading(0)  # a new incarnation: the old write's completion is not its business
    c.log.release()
    assert await waiting == E.not_coordinator
    await c.stop()
    assert c.owned_partitions() == {} and not c.active


async def test_for_context_parses_the_broker_config_once_per_config_object():
    parsed = []

    def parse(cfg):
        parsed.append(cfg)
        return {"timeout_s": cfg["t"]}

    svc = SimpleNamespace(config={"t": 1.0}, replicas=None, metadata=SimpleNamespace(image=None),
                          clock=ManualClock(), node_id=7)
    c = Toy._for_context(svc, parse)
    assert (c.node_id, c.log.topic, c._ctx) == (7, "__toy", svc)
    assert c.write_timeout_s == 1.0 and c.write_timeout_s == 1.0 and len(parsed) == 1
    svc.config = {"t": 2.0}
    assert c.write_timeout_s == 2.0 and len(parsed) == 2
