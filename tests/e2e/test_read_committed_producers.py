"""read_committed end to end with real transactional producers (the coordinator and the partition
side together): confluent-kafka's transactional producer commits and aborts; confluent-kafka,
kafka-python and aiokafka read_committed consumers see exactly the committed records, and an
open transaction holds them at the last stable offset; after a kill -9 of the broker the aborted
transactions are still hidden (the transaction index and the producer state are rebuilt by the
recovery scan). Its own broker (``fresh_broker``), since one test kills it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from e2e_helpers import create_topic
from read_committed_helpers import aio_values, ck_values, kp_values

pytestmark = pytest.mark.timeout(180)

TXN_TIMEOUT = 60


def txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(TXN_TIMEOUT)
    return p


def run_transactions(p: Producer, topic: str, plan: list[tuple[list[bytes], bool]]) -> None:
    for values, commit in plan:
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        if commit:
            p.commit_transaction(TXN_TIMEOUT)
        else:
            p.flush(TXN_TIMEOUT)  # the records are in the log before the abort marker
            p.abort_transaction(TXN_TIMEOUT)


PLAN = [
    ([b"c0", b"c1"], True),
    ([b"x0", b"x1", b"x2"], False),
    ([b"c2"], True),
    ([b"x3"], False),
    ([b"c3", b"c4"], True),
]
COMMITTED = [b"c0", b"c1", b"c2", b"c3", b"c4"]
ALL_DATA = [b"c0", b"c1", b"x0", b"x1", b"x2", b"c2", b"x3", b"c3", b"c4"]


def test_committed_and_aborted_transactions_seen_by_every_client(fresh_broker, topic_name) -> None:
    b = fresh_broker.bootstrap
    create_topic(b, topic_name, 1)
    p = txn_producer(b, f"tx-{topic_name}")
    run_transactions(p, topic_name, PLAN)
    assert ck_values(b, topic_name, "read_committed", len(COMMITTED)) == COMMITTED
    assert ck_values(b, topic_name, "read_uncommitted", len(ALL_DATA)) == ALL_DATA
    assert kp_values(b, topic_name) == COMMITTED
    assert aio_values(b, topic_name, len(COMMITTED))[0] == COMMITTED


def test_an_open_transaction_holds_read_committed_at_the_lso(fresh_broker, topic_name) -> None:
    b = fresh_broker.bootstrap
    create_topic(b, topic_name, 1)
    tx = txn_producer(b, f"open-{topic_name}")
    tx.begin_transaction()
    tx.produce(topic_name, value=b"pending", partition=0)
    tx.flush(TXN_TIMEOUT)
    plain = Producer({"bootstrap.servers": b, "linger.ms": 0})
    plain.produce(topic_name, value=b"after", partition=0)
    assert plain.flush(30) == 0
    # nothing below the LSO (0): "after" waits behind the open transaction
    assert ck_values(b, topic_name, "read_committed", 1, settle=0, timeout=4) == []
    assert ck_values(b, topic_name, "read_uncommitted", 2) == [b"pending", b"after"]
    tx.commit_transaction(TXN_TIMEOUT)
    assert ck_values(b, topic_name, "read_committed", 2) == [b"pending", b"after"]


def test_aborted_transactions_stay_hidden_after_kill9(fresh_broker, topic_name) -> None:
    b = fresh_broker
    create_topic(b.bootstrap, topic_name, 1, config={"segment.bytes": "1024"})  # several segments
    p = txn_producer(b.bootstrap, f"k9-{topic_name}")
    plan = [([b"c%d" % i + b"." * 200], i % 2 == 0) for i in range(12)]
    run_transactions(p, topic_name, plan)
    committed = [v[0] for v, commit in plan if commit]
    b.kill9()
    assert ck_values(b.bootstrap, topic_name, "read_committed", len(committed)) == committed
    assert kp_values(b.bootstrap, topic_name) == committed
