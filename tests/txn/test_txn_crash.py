"""kill -9 of the broker in the middle of transactions (issue 14): before EndTxn, after EndTxn
before the markers, and while they are written. After the restart every transaction is fully
committed or fully aborted in the read_committed view: a transaction whose commit was answered is
committed in every partition (the coordinator found PrepareCommit and wrote the rest of the
markers), an aborted one shows nothing, and one left open is aborted when it times out.

The transactions span many partitions (64) so that the markers take long enough for a kill right
after EndTxn's answer to land among them; the test repeats until the broker's log shows that a
load found a transaction to complete (and checks the outcome every time)."""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_process import BrokerProcess
from polling import until
from txn_helpers import TXN_TIMEOUT, create_topic, describe_txn, read_all

pytestmark = pytest.mark.timeout(600)
PARTITIONS = 64
RESENT = re.compile(r", [1-9][0-9]* transactions to complete")  # the coordinator's load log line


@pytest.fixture(scope="module")
def broker():
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="shoal-txn-crash-")),
                      overrides={"transaction.state.log.num.partitions": "2",
                                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
                                 "offsets.topic.num.partitions": "1"})
    b.start()
    yield b
    b.stop()


def producer(bs: str, txn: str, timeout_ms: int = 60000) -> Producer:
    return Producer({"bootstrap.servers": bs, "transactional.id": txn, "linger.ms": 5, "log_level": 2,
                     "transaction.timeout.ms": timeout_ms})


def run_txn(p: Producer, topic: str, tag: bytes, n: int = PARTITIONS) -> list[bytes]:
    values = [tag + b"-%d" % i for i in range(n)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % PARTITIONS)
    p.flush(TXN_TIMEOUT)
    return values


def committed_view(bs: str, topic: str) -> list[bytes]:
    return sorted(read_all(bs, topic, PARTITIONS, "read_committed", idle=2.0, timeout=60))


def test_kill_before_end_txn_aborts_at_timeout(broker):
    bs = broker.bootstrap
    topic, txn = f"crash-open-{uuid.uuid4().hex[:6]}", f"tx-open-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, PARTITIONS)
    p = producer(bs, txn, timeout_ms=3000)
    p.init_transactions(TXN_TIMEOUT)
    done = run_txn(p, topic, b"ok")
    p.commit_transaction(TXN_TIMEOUT)
    run_txn(p, topic, b"open")  # never ended
    broker.kill9()
    until(lambda: describe_txn(bs, txn).transaction_state == "CompleteAbort", 60, "the timed-out abort")
    assert committed_view(bs, topic) == sorted(done)
    assert len(read_all(bs, topic, PARTITIONS, "read_uncommitted", idle=2.0)) == 2 * PARTITIONS


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_kill_after_end_txn_before_or_during_markers(broker, commit):
    bs = broker.bootstrap
    topic = f"crash-end-{'c' if commit else 'a'}-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, PARTITIONS)
    expected: list[bytes] = []
    resent = 0
    for attempt in range(4):
        txn = f"tx-end-{uuid.uuid4().hex[:6]}"
        p = producer(bs, txn)
        p.init_transactions(TXN_TIMEOUT)
        values = run_txn(p, topic, b"t%d" % attempt)
        before = len(RESENT.findall(broker.log_text()))
        if commit:
            p.commit_transaction(TXN_TIMEOUT)
            expected += values
        else:
            p.abort_transaction(TXN_TIMEOUT)
        broker.kill9()  # EndTxn was answered: PrepareCommit/PrepareAbort is in __transaction_state
        final = "CompleteCommit" if commit else "CompleteAbort"
        until(lambda: describe_txn(bs, txn).transaction_state == final, 60, final)
        assert committed_view(bs, topic) == sorted(expected), f"attempt {attempt}"
        resent += len(RESENT.findall(broker.log_text())) > before
        if resent:
            break
    assert resent, "no kill landed before the markers were all written (the load found nothing to complete)"


def test_megabyte_transactions_through_kill9_in_the_read_committed_view(broker):
    """Transactions of 1 KiB records whose Produce requests are megabyte frames (read into place,
    batch headers rewritten apart from the records: issue 29 part 4): after kill -9, the
    read_committed view holds exactly the committed transactions' records, in order and byte for
    byte, nothing of the aborted one nor of the one left open (aborted at its timeout)."""
    bs = broker.bootstrap
    topic, txn = f"crash-mb-{uuid.uuid4().hex[:6]}", f"tx-mb-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn, "linger.ms": 5, "log_level": 2,
                  "transaction.timeout.ms": 3000})
    p.init_transactions(TXN_TIMEOUT)

    def txn_of(tag: bytes, n: int) -> list[bytes]:
        values = [(tag + b"-%06d-" % i).ljust(1024, tag[:1]) for i in range(n)]
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        p.flush(TXN_TIMEOUT)
        return values

    committed = txn_of(b"a", 1500)
    p.commit_transaction(TXN_TIMEOUT)
    txn_of(b"b", 1200)
    p.abort_transaction(TXN_TIMEOUT)
    committed += txn_of(b"c", 1000)
    p.commit_transaction(TXN_TIMEOUT)
    txn_of(b"d", 800)  # acknowledged, never ended
    broker.kill9()
    until(lambda: describe_txn(bs, txn).transaction_state == "CompleteAbort", 60, "the timed-out abort")
    assert read_all(bs, topic, 1, "read_committed", idle=2.0, timeout=60) == committed
    assert len(read_all(bs, topic, 1, "read_uncommitted", idle=2.0, timeout=60)) == 1500 + 1200 + 1000 + 800
