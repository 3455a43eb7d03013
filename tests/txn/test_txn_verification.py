"""KIP-890 part 1 over the wire: a transactional batch goes to a partition only if the coordinator
confirms the partition is in the producer's ongoing transaction (the first batch of the producer
there); otherwise Produce answers as Kafka does. Raw requests (Shoal's own client) to one broker."""

from __future__ import annotations

import time
import uuid

import pytest

from broker_thread import ThreadBroker
from shoal.protocol.errors import ErrorCode as E
from shoal.protocol.records import build_batch
from polling import until
from txn_helpers import create_topic, wire

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with ThreadBroker(tmp_path_factory.mktemp("txn-verify"), {"transaction.state.log.num.partitions": "2"}) as b:
        yield b


def init(bs: str, txn: str) -> tuple[int, int]:
    def attempt():
        r = wire(bs, 22, {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
        return (r.producer_id, r.producer_epoch) if r.error_code == 0 else None
    return until(attempt, 30, "InitProducerId")


def produce(bs: str, txn: str | None, topic: str, partition: int, pid: int, epoch: int, seq: int = 0,
            transactional: bool = True, version: int = 11) -> int:
    """Produce v11 by default: the last version of transaction version 1 (v12 adds the partition to
    the transaction, KIP-890 part 2: tests/txn/test_txn_v2.py)."""
    batch = build_batch([(int(time.time() * 1000), None, b"v", ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=transactional)
    r = wire(bs, 0, {"transactional_id": txn, "acks": -1, "timeout": 5000,
                     "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]},
             version=version)
    return r.responses[0].partition_responses[0].error_code


def add(bs: str, txn: str, pid: int, epoch: int, topic: str, partition: int) -> int:
    r = wire(bs, 24, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                      "v3_and_below_producer_epoch": epoch,
                      "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}, version=3)
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def test_produce_needs_the_partition_in_the_transaction(tb):
    bs = tb.bootstrap
    topic, txn = f"ver-{uuid.uuid4().hex[:6]}", f"tx-ver-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 2)
    pid, epoch = init(bs, txn)
    assert produce(bs, txn, topic, 0, pid, epoch) == E.invalid_txn_state  # not added: nothing written
    assert add(bs, txn, pid, epoch, topic, 0) == E.none
    assert produce(bs, txn, topic, 0, pid, epoch) == E.none
    assert produce(bs, txn, topic, 0, pid, epoch, seq=1) == E.none  # ongoing there: no check needed
    assert produce(bs, txn, topic, 0, pid, epoch + 1) == E.invalid_producer_epoch  # another epoch is checked
    assert produce(bs, txn, topic, 1, pid, epoch) == E.invalid_txn_state  # the other partition was not added
    assert produce(bs, txn, topic, 0, pid + 1, 0) == E.invalid_producer_epoch  # not the id's producer
    assert produce(bs, None, topic, 1, pid, epoch) == E.transactional_id_authorization_failed  # no id
    # the coordinator's end of the transaction: a new transaction must add the partition again
    r = wire(bs, 26, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
             version=4)
    assert r.error_code == E.none
    until(lambda: produce(bs, txn, topic, 0, pid, epoch, seq=2) == E.invalid_txn_state, 15, "CompleteCommit")
    # a new instance fences the epoch: the old producer's batch is refused by the check
    _, new_epoch = init(bs, txn)
    assert new_epoch == epoch + 1
    assert add(bs, txn, pid, new_epoch, topic, 1) == E.none
    assert produce(bs, txn, topic, 1, pid, epoch, seq=0) == E.invalid_producer_epoch
    assert produce(bs, txn, topic, 1, pid, new_epoch, seq=0) == E.none


def test_fenced_epoch_codes_by_version(tb):
    """KIP-588: PRODUCER_FENCED from v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (v4 of
    InitProducerId); INVALID_PRODUCER_EPOCH before, which is what older clients know."""
    bs = tb.bootstrap
    topic, txn = f"fence-{uuid.uuid4().hex[:6]}", f"tx-fence-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 1)
    pid, epoch = init(bs, txn)
    init(bs, txn)  # a new instance: epoch + 1
    for v, want in ((0, E.invalid_producer_epoch), (1, E.invalid_producer_epoch), (2, E.producer_fenced),
                    (3, E.producer_fenced)):
        r = wire(bs, 24, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                          "v3_and_below_producer_epoch": epoch,
                          "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}, version=v)
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == want, v
        r = wire(bs, 25, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "group_id": "g"},
                 version=v)
        assert r.error_code == want, v
        r = wire(bs, 26, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
                 version=v)
        assert r.error_code == want, v
    r = wire(bs, 22, {"transactional_id": txn, "transaction_timeout": 60000, "producer_id": pid,
                      "producer_epoch": epoch}, version=3)
    assert r.error_code == E.invalid_producer_epoch
