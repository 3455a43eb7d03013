"""InitProducerId, DescribeProducers and idempotent Produce, called on a real in-process Broker
(listening on an ephemeral port, never connected to): every request and response goes through the
wire codec both ways."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from shoal.broker import Broker
from shoal.config import BrokerConfig
from shoal.handlers.context import RequestContext
from shoal.handlers.producer_ids import ProducerIdManager
from shoal.metadata import MetadataError
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from kio.index import load_payload_module
from kio.static.constants import EntityType

INIT, PRODUCE, DESCRIBE = 22, 0, 61
T0 = 1_700_000_000_000


def req_mod(key: int, version: int):
    return load_payload_module(key, version, EntityType.request)


async def call(broker: Broker, key: int, version: int, req):
    frame = encode_request(key, version, 7, "test", req)
    header, decoded = decode_request(key, version, memoryview(frame)[4:])
    spec = broker.registry.lookup(key)
    assert spec is not None and spec.min_version <= version <= spec.max_version
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1")
    resp = await spec.handler(ctx, decoded)
    out = encode_response(7, key, version, resp)
    _, back = decode_response(key, version, memoryview(out)[4:])
    return back


async def start_broker(data_dir) -> Broker:
    cfg = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir)})
    b = Broker(cfg)
    await b.start()
    return b


@pytest.fixture
async def broker(tmp_path):
    b = await start_broker(tmp_path)
    yield b
    await b.stop()


async def init(broker, version: int = 4, *, txn: str | None = None, pid: int = -1, epoch: int = -1):
    mod = req_mod(INIT, version)
    fields = {"transactional_id": txn, "transaction_timeout": datetime.timedelta(minutes=1)}
    if version >= 3:
        fields.update(producer_id=pid, producer_epoch=epoch)
    r = await call(broker, INIT, version, mod.InitProducerIdRequest(**fields))
    return r.error_code, r.producer_id, r.producer_epoch


async def produce(broker, topic: str, partition: int, records: bytes, version: int = 9, acks: int = -1):
    mod = req_mod(PRODUCE, version)
    req = mod.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            mod.TopicProduceData(
                name=topic, partition_data=(mod.PartitionProduceData(index=partition, records=records),)
            ),
        ),
    )
    r = await call(broker, PRODUCE, version, req)
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, *, transactional: bool = False) -> bytes:
    return build_batch(
        [(T0 + i, None, b"v%d" % (seq + i), []) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


async def make_topic(broker, name: str = "t", partitions: int = 2) -> str:
    await broker.metadata.create_topic(name, [(broker.node_id,)] * partitions, {})
    return name


# -- InitProducerId ------------------------------------------------------------------------------


def test_versions_are_advertised(broker) -> None:
    assert (broker.registry.lookup(INIT).min_version, broker.registry.lookup(INIT).max_version) == (0, 5)
    assert (broker.registry.lookup(DESCRIBE).min_version, broker.registry.lookup(DESCRIBE).max_version) == (0, 0)


async def test_fresh_ids_with_epoch_zero_at_every_version(broker) -> None:
    got = [await init(broker, v) for v in range(6)]
    assert got == [(ErrorCode.none, i, 0) for i in range(6)]


async def test_ids_are_durable_and_unique_across_restarts(tmp_path) -> None:
    b = await start_broker(tmp_path)
    first = [(await init(b))[1] for _ in range(3)]
    await b.stop()
    b2 = await start_broker(tmp_path)
    try:
        again = [(await init(b2))[1] for _ in range(3)]
    finally:
        await b2.stop()
    assert first == [0, 1, 2]
    assert again == [1000, 1001, 1002]  # the rest of the first block is abandoned, as in Kafka


async def test_allocators_sharing_a_store_never_overlap(tmp_path) -> None:
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    a, b = ProducerIdManager(store, block_size=10), ProducerIdManager(store, block_size=10)
    ids = await asyncio.gather(*[m.next_id() for m in (a, b) * 25])
    assert len(set(ids)) == 50 and min(ids) == 0
    assert await store.allocate_producer_ids(5) == (60, 5)
    await store.close()
    store2 = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store2.start()
    assert await store2.allocate_producer_ids(1000) == (65, 1000)
    await store2.close()


async def test_epoch_bump_kip_360(broker) -> None:
    _, pid, epoch = await init(broker)
    assert await init(broker, 4, pid=pid, epoch=0) == (ErrorCode.none, pid, 1)
    # The answer was lost and the client asks again with the old epoch: the same bump.
    assert await init(broker, 4, pid=pid, epoch=0) == (ErrorCode.none, pid, 1)
    assert await init(broker, 3, pid=pid, epoch=1) == (ErrorCode.none, pid, 2)
    # A zombie with an older epoch is fenced; clients before v4 get INVALID_PRODUCER_EPOCH.
    assert await init(broker, 4, pid=pid, epoch=0) == (ErrorCode.producer_fenced, -1, -1)
    assert await init(broker, 3, pid=pid, epoch=0) == (ErrorCode.invalid_producer_epoch, -1, -1)
    assert await init(broker, 5, pid=pid, epoch=2) == (ErrorCode.none, pid, 3)


async def test_bump_of_an_unknown_or_exhausted_producer_gets_a_fresh_id(broker) -> None:
    _, pid, _ = await init(broker)
    assert await init(broker, 4, pid=999_999, epoch=3) == (ErrorCode.none, pid + 1, 0)
    assert await init(broker, 4, pid=pid, epoch=32766) == (ErrorCode.none, pid + 2, 0)


async def test_half_given_producer_id_and_epoch_is_invalid(broker) -> None:
    assert await init(broker, 4, pid=-1, epoch=3) == (ErrorCode.invalid_request, -1, -1)
    assert await init(broker, 4, pid=7, epoch=-1) == (ErrorCode.invalid_request, -1, -1)


async def test_epoch_known_from_partition_state_after_a_restart(tmp_path) -> None:
    b = await start_broker(tmp_path)
    await make_topic(b)
    _, pid, _ = await init(b)
    assert await produce(b, "t", 1, pbatch(pid, 4, 0)) == (ErrorCode.none, 0)
    await b.stop()
    b2 = await start_broker(tmp_path)  # a new allocator: only the partition knows pid's epoch
    try:
        assert await init(b2, 4, pid=pid, epoch=3) == (ErrorCode.producer_fenced, -1, -1)
        assert await init(b2, 4, pid=pid, epoch=4) == (ErrorCode.none, pid, 5)
    finally:
        await b2.stop()


async def test_transactional_ids_go_to_the_transaction_coordinator(broker) -> None:
    assert await init(broker, 4, txn="") == (ErrorCode.invalid_request, -1, -1)
    # __transaction_state is created at the first request; until it is loaded: retriable
    for _ in range(200):
        got = await init(broker, 4, txn="my-txn")
        if got[0] != ErrorCode.coordinator_not_available and got[0] != ErrorCode.coordinator_load_in_progress:
            break
        await asyncio.sleep(0.05)
    code, pid, epoch = got
    assert (code, epoch) == (ErrorCode.none, 0) and pid >= 0
    assert await init(broker, 0, txn="my-txn") == (ErrorCode.none, pid, 1)  # a new instance: fenced
    _, other, _ = await init(broker)  # the idempotent path shares the allocator
    assert other != pid


async def test_a_store_that_cannot_allocate_gives_a_retriable_error(broker) -> None:
    async def fail(count: int):
        raise MetadataError("KAFKA_STORAGE_ERROR", "disk full")

    broker.services.producer_ids = ProducerIdManager(broker.metadata)
    broker.services.producer_ids._store = type("S", (), {"allocate_producer_ids": staticmethod(fail)})()
    assert await init(broker) == (ErrorCode.coordinator_load_in_progress, -1, -1)


# -- Produce with producer ids -------------------------------------------------------------------


async def test_produce_duplicates_gaps_and_fencing(broker) -> None:
    await make_topic(broker)
    _, pid, _ = await init(broker)
    assert await produce(broker, "t", 0, pbatch(pid, 0, 0, 3)) == (ErrorCode.none, 0)
    assert await produce(broker, "t", 0, pbatch(pid, 0, 3, 2)) == (ErrorCode.none, 3)
    # Retries of either batch: the original offsets, nothing written.
    assert await produce(broker, "t", 0, pbatch(pid, 0, 0, 3)) == (ErrorCode.none, 0)
    assert await produce(broker, "t", 0, pbatch(pid, 0, 3, 2)) == (ErrorCode.none, 3)
    assert broker.replicas.partition("t", 0).log.log_end_offset == 5
    assert await produce(broker, "t", 0, pbatch(pid, 0, 7)) == (ErrorCode.out_of_order_sequence_number, -1)
    assert await produce(broker, "t", 0, pbatch(pid, 1, 5)) == (ErrorCode.out_of_order_sequence_number, -1)
    assert await produce(broker, "t", 0, pbatch(pid, 1, 0)) == (ErrorCode.none, 5)
    assert await produce(broker, "t", 0, pbatch(pid, 0, 5)) == (ErrorCode.invalid_producer_epoch, -1)
    # Old produce versions get the same codes (they exist since 0.11).
    assert await produce(broker, "t", 0, pbatch(pid, 1, 0), version=3) == (ErrorCode.none, 5)
    assert await produce(broker, "t", 0, pbatch(pid, 1, 9), version=3) == (
        ErrorCode.out_of_order_sequence_number,
        -1,
    )
    # acks=1 and acks=0 use the same rules.
    assert await produce(broker, "t", 0, pbatch(pid, 1, 1), acks=1) == (ErrorCode.none, 6)
    assert broker.replicas.partition("t", 0).log.log_end_offset == 7


async def test_transactional_batches_are_refused(broker) -> None:
    await make_topic(broker)
    _, pid, _ = await init(broker)
    got = await produce(broker, "t", 0, pbatch(pid, 0, 0, transactional=True))
    assert got == (ErrorCode.transactional_id_authorization_failed, -1)
    assert broker.replicas.partition("t", 0).log.log_end_offset == 0


# -- DescribeProducers ---------------------------------------------------------------------------


async def test_describe_producers(broker) -> None:
    await make_topic(broker)
    _, a, _ = await init(broker)
    _, b, _ = await init(broker)
    await produce(broker, "t", 0, pbatch(a, 0, 0, 4))
    await produce(broker, "t", 0, pbatch(b, 0, 0, 1))
    await produce(broker, "t", 0, pbatch(b, 0, 1, 2))
    mod = req_mod(DESCRIBE, 0)
    req = mod.DescribeProducersRequest(
        topics=(
            mod.TopicRequest(name="t", partition_indexes=(0, 1, 5)),
            mod.TopicRequest(name="nope", partition_indexes=(0,)),
        )
    )
    r = await call(broker, DESCRIBE, 0, req)
    t, nope = r.topics
    p0, p1, p5 = t.partitions
    assert (p0.partition_index, p0.error_code) == (0, ErrorCode.none)
    got = [
        (s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch, s.current_txn_start_offset)
        for s in p0.active_producers
    ]
    assert got == [(a, 0, 3, T0 + 3, -1, -1), (b, 0, 2, T0 + 1, -1, -1)]
    assert (p1.error_code, p1.active_producers) == (ErrorCode.none, ())
    assert p5.error_code == ErrorCode.unknown_topic_or_partition
    assert nope.partitions[0].error_code == ErrorCode.unknown_topic_or_partition


async def test_describe_producers_on_a_partition_led_elsewhere(broker) -> None:
    await make_topic(broker)
    await broker.metadata.update_partition("t", 1, leader=99)
    mod = req_mod(DESCRIBE, 0)
    r = await call(broker, DESCRIBE, 0, mod.DescribeProducersRequest(topics=(mod.TopicRequest(name="t", partition_indexes=(1,)),)))
    assert r.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
