"""Transactional producers of real clients against one broker (issue 14): confluent-kafka
(librdkafka), kafka-python and aiokafka; outcomes checked in the read_committed and the
read_uncommitted view (the control batches take offsets, so the log end passes the records).

The broker runs in-process on its own loop (``ThreadBroker``) with a short timed-out-transaction
check, so the timeout test takes seconds."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from broker_thread import ThreadBroker
from polling import until
from txn_helpers import TXN_TIMEOUT, create_topic, describe_txn, end_offsets, read_all, wire

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with ThreadBroker(tmp_path_factory.mktemp("txn-clients"), {
        "transaction.state.log.num.partitions": "4",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }) as b:
        yield b


def names(tag: str) -> tuple[str, str]:
    u = uuid.uuid4().hex[:6]
    return f"{tag}-{u}", f"tx-{tag}-{u}"


def producer(bs: str, txn: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bs, "transactional.id": txn, "linger.ms": 5, **extra})


def test_confluent_commit_and_abort_over_partitions(tb):
    bs = tb.bootstrap
    topic, txn = names("commit")
    create_topic(bs, topic, 3)
    p = producer(bs, txn)
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c%d" % i, partition=i % 3)
    p.commit_transaction(TXN_TIMEOUT)
    p.begin_transaction()
    for i in range(9):
        p.produce(topic, value=b"a%d" % i, partition=i % 3)
    p.flush(TXN_TIMEOUT)  # the aborted records are in the log
    p.abort_transaction(TXN_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"c-last", partition=1)
    p.commit_transaction(TXN_TIMEOUT)

    committed = sorted(read_all(bs, topic, 3, "read_committed"))
    assert committed == sorted([b"c%d" % i for i in range(30)] + [b"c-last"])
    everything = sorted(read_all(bs, topic, 3, "read_uncommitted"))
    assert everything == sorted(committed + [b"a%d" % i for i in range(9)])
    # one control batch (one offset) per partition and transaction: 3 + 3 + 1 markers
    assert sum(end_offsets(bs, topic, 3)) == len(everything) + 7
    state = describe_txn(bs, txn)
    assert (state.error_code, state.transaction_state, state.producer_epoch) == (0, "CompleteCommit", 0)


def test_zombie_is_fenced_by_a_new_instance(tb):
    bs = tb.bootstrap
    topic, txn = names("zombie")
    create_topic(bs, topic, 2)
    old = producer(bs, txn)
    old.init_transactions(TXN_TIMEOUT)
    old.begin_transaction()
    for i in range(4):
        old.produce(topic, value=b"zombie%d" % i, partition=i % 2)
    old.flush(TXN_TIMEOUT)
    new = producer(bs, txn)
    new.init_transactions(TXN_TIMEOUT)  # aborts the old instance's transaction, bumps the epoch twice
    assert describe_txn(bs, txn).producer_epoch == 2
    new.begin_transaction()
    new.produce(topic, value=b"new", partition=0)
    new.commit_transaction(TXN_TIMEOUT)
    with pytest.raises(KafkaException) as e:
        old.produce(topic, value=b"late", partition=1)
        old.commit_transaction(TXN_TIMEOUT)
    assert e.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                      KafkaError.INVALID_PRODUCER_EPOCH), e.value
    assert read_all(bs, topic, 2, "read_committed") == [b"new"]
    assert sorted(read_all(bs, topic, 2, "read_uncommitted")) == sorted([b"new"] + [b"zombie%d" % i for i in range(4)])


def test_transaction_timeout_aborts_and_fences(tb):
    bs = tb.bootstrap
    topic, txn = names("timeout")
    create_topic(bs, topic, 1)
    p = producer(bs, txn, **{"transaction.timeout.ms": 2000})
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"late")
    p.flush(TXN_TIMEOUT)
    until(lambda: describe_txn(bs, txn).transaction_state == "CompleteAbort", 30, "the coordinator's abort")
    assert describe_txn(bs, txn).producer_epoch == 1  # bumped by the abort: the producer is fenced
    with pytest.raises(KafkaException):
        p.commit_transaction(TXN_TIMEOUT)
    assert read_all(bs, topic, 1, "read_committed") == []
    assert read_all(bs, topic, 1, "read_uncommitted") == [b"late"]


def test_transaction_timeout_above_the_maximum_is_refused(tb):
    bs = tb.bootstrap
    _, txn = names("maxtimeout")
    p = producer(bs, txn, **{"transaction.timeout.ms": 900001})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(TXN_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_kafka_python_transactional_producer(tb):
    from kafka import KafkaProducer

    bs = tb.bootstrap
    topic, txn = names("kpy")
    create_topic(bs, topic, 2)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=txn, linger_ms=5)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send(topic, value=b"k%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"gone", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    assert sorted(read_all(bs, topic, 2, "read_committed")) == [b"k%d" % i for i in range(6)]
    assert len(read_all(bs, topic, 2, "read_uncommitted")) == 7


def test_aiokafka_transactional_producer(tb):
    from aiokafka import AIOKafkaProducer

    bs = tb.bootstrap
    topic, txn = names("aio")
    create_topic(bs, topic, 2)

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn, linger_ms=5)
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send(topic, value=b"x%d" % i, partition=i % 2)
            await p.begin_transaction()
            await p.send(topic, value=b"gone", partition=1)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(go(), 120))
    assert sorted(read_all(bs, topic, 2, "read_committed")) == [b"x%d" % i for i in range(6)]
    assert len(read_all(bs, topic, 2, "read_uncommitted")) == 7


def test_describe_and_list_transactions(tb):
    bs = tb.bootstrap
    topic, txn = names("list")
    create_topic(bs, topic, 2)
    p = producer(bs, txn)
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=1)
    p.flush(TXN_TIMEOUT)
    state = describe_txn(bs, txn)
    assert (state.transaction_state, [(t.topic, list(t.partitions)) for t in state.topics]) == ("Ongoing", [(topic, [1])])
    listed = wire(bs, 66, {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1,
                           "transactional_id_pattern": None})
    assert (txn, state.producer_id, "Ongoing") in [(t.transactional_id, t.producer_id, t.transaction_state)
                                                   for t in listed.transaction_states]
    by_pid = wire(bs, 66, {"state_filters": [], "producer_id_filters": [state.producer_id], "duration_filter": -1,
                           "transactional_id_pattern": None})
    assert [t.transactional_id for t in by_pid.transaction_states] == [txn]
    unknown = wire(bs, 66, {"state_filters": ["Bogus"], "producer_id_filters": [], "duration_filter": -1,
                            "transactional_id_pattern": None})
    assert list(unknown.unknown_state_filters) == ["Bogus"] and not unknown.transaction_states
    # DescribeProducers shows the ongoing transaction's first offset
    dp = wire(bs, 61, {"topics": [{"name": topic, "partition_indexes": [1]}]})
    (prod,) = dp.topics[0].partitions[0].active_producers
    assert (prod.producer_id, prod.current_txn_start_offset) == (state.producer_id, 0)
    p.commit_transaction(TXN_TIMEOUT)
    (prod,) = wire(bs, 61, {"topics": [{"name": topic, "partition_indexes": [1]}]}).topics[0].partitions[0].active_producers
    assert prod.current_txn_start_offset == -1
    assert describe_txn(bs, "never-seen-" + txn).error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND


def test_idle_transactional_id_expires(tmp_path):
    """transactional.id.expiration.ms: an id idle that long is removed (a tombstone); its next
    InitProducerId starts it again from a new producer id."""
    with ThreadBroker(tmp_path, {"transaction.state.log.num.partitions": "1", "transactional.id.expiration.ms": "1500",
                                 "transaction.remove.expired.transaction.cleanup.interval.ms": "200"}) as b:
        bs = b.bootstrap
        topic, txn = names("expire")
        create_topic(bs, topic, 1)
        p = producer(bs, txn)
        p.init_transactions(TXN_TIMEOUT)
        p.begin_transaction()
        p.produce(topic, value=b"kept")
        p.commit_transaction(TXN_TIMEOUT)
        first = describe_txn(bs, txn).producer_id
        until(lambda: describe_txn(bs, txn).error_code == 105, 30, "the id's expiration")  # TRANSACTIONAL_ID_NOT_FOUND
        again = producer(bs, txn)
        again.init_transactions(TXN_TIMEOUT)
        state = describe_txn(bs, txn)
        assert (state.error_code, state.producer_epoch) == (0, 0) and state.producer_id != first
        assert read_all(bs, topic, 1, "read_committed") == [b"kept"]


def test_list_transactions_pattern_is_matched_by_re2(tb):
    """Issue 24 item 3: ListTransactions v2's pattern ``(a+)+b`` against the id ``"a" * 28`` made
    Python's ``re`` backtrack 2**28 steps on the event loop; RE2 answers at once. A pattern RE2/J
    refuses gets INVALID_REGULAR_EXPRESSION (128), as Kafka's."""
    evil_id = "a" * 28
    p = producer(tb.bootstrap, evil_id)
    p.init_transactions(TXN_TIMEOUT)
    _, named = names("rx")
    q = producer(tb.bootstrap, named)
    q.init_transactions(TXN_TIMEOUT)

    def listed(pattern: str | None):
        return wire(tb.bootstrap, 66, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                                       "transactional_id_pattern": pattern}, version=2)

    t0 = time.monotonic()
    r = listed("(a+)+b")
    assert time.monotonic() - t0 < 2.0
    assert (r.error_code, list(r.transaction_states)) == (0, [])
    assert [t.transactional_id for t in listed("a{28}").transaction_states] == [evil_id]
    assert [t.transactional_id for t in listed(named.replace("-", "\\-")).transaction_states] == [named]
    for bad in ("(a)\\1", "(?!a)", "(", "a" * 1001):
        assert listed(bad).error_code == 128, bad
