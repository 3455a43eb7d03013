"""KIP-890 part 2 (transaction version 2) over the wire, with raw requests: no client on this
machine negotiates it (librdkafka, kafka-python and aiokafka stop at transaction version 1).

A TV2 producer sends no AddPartitionsToTxn / AddOffsetsToTxn: Produce v12 and TxnOffsetCommit v5
add their partition to the transaction through the coordinator, and EndTxn v5 bumps the epoch at
every commit and abort (the markers carry the new epoch, the old one is fenced)."""

from __future__ import annotations

import uuid

import pytest

from broker_thread import ThreadBroker
from shoal.protocol.errors import ErrorCode as E
from polling import until
from txn_helpers import create_topic, describe_txn, read_all, wire
from test_txn_verification import init, produce

pytestmark = pytest.mark.timeout(180)

CONF = {"transaction.state.log.num.partitions": "2"}


def end(bs: str, txn: str, pid: int, epoch: int, commit: bool, version: int = 5):
    return wire(bs, 26, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
                version=version)


def txn_offset_commit(bs: str, txn: str, group: str, topic: str, offset: int, pid: int, epoch: int) -> int:
    def attempt():
        r = wire(bs, 28, {"transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                          "generation_id": -1, "member_id": "", "group_instance_id": None,
                          "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                      "committed_leader_epoch": -1,
                                                                      "committed_metadata": ""}]}]}, version=5)
        code = r.topics[0].partitions[0].error_code
        return None if code in (E.coordinator_not_available, E.coordinator_load_in_progress) else code
    return until(lambda: (c := attempt()) is not None and (c,), 30, "TxnOffsetCommit")[0]


def committed(bs: str, group: str, topic: str) -> int:
    def attempt():
        r = wire(bs, 9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                         "require_stable": True}, version=7)
        p = r.topics[0].partitions[0]
        return None if r.error_code or p.error_code else (p.committed_offset,)
    return until(attempt, 30, "a stable OffsetFetch")[0]


def features(bs: str) -> tuple[dict, dict]:
    r = wire(bs, 18, {"client_software_name": "tv2-test", "client_software_version": "1"}, version=3)
    return ({f.name: (f.min_version, f.max_version) for f in r.supported_features},
            {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features})


def test_tv2_transactions_bump_the_epoch_and_add_partitions_implicitly(tmp_path):
    topic, txn, group = f"tv2-{uuid.uuid4().hex[:6]}", f"tx-tv2-{uuid.uuid4().hex[:6]}", "g-tv2"
    with ThreadBroker(tmp_path, CONF) as tb:
        bs = tb.bootstrap
        assert features(bs) == ({"shoal.version": (1, 2), "transaction.version": (0, 2)},
                                {"shoal.version": (1, 1), "transaction.version": (2, 2)})
        create_topic(bs, topic, 2)
        pid, e0 = init(bs, txn)
        # Produce v12, no AddPartitionsToTxn: the coordinator adds both partitions
        assert produce(bs, txn, topic, 0, pid, e0, version=12) == E.none
        assert produce(bs, txn, topic, 1, pid, e0, version=12) == E.none
        st = describe_txn(bs, txn)
        assert st.transaction_state == "Ongoing"
        assert sorted((t.topic, p) for t in st.topics for p in t.partitions) == [(topic, 0), (topic, 1)]
        r = end(bs, txn, pid, e0, commit=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e0 + 1)
        # the markers carry the new epoch: read_committed sees both records
        assert sorted(read_all(bs, topic, 2, "read_committed")) == [b"v", b"v"]
        # a late produce with the previous epoch is fenced (Kafka's INVALID_PRODUCER_EPOCH for Produce)
        assert produce(bs, txn, topic, 0, pid, e0, seq=1, version=12) == E.invalid_producer_epoch
        # a retry of the same EndTxn (the epoch before the bump) gets the current id and epoch (while
        # the markers are written, CONCURRENT_TRANSACTIONS, as Kafka answers)
        until(lambda: describe_txn(bs, txn).transaction_state == "CompleteCommit", 15, "CompleteCommit")
        r = end(bs, txn, pid, e0, commit=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e0 + 1)
        assert end(bs, txn, pid, e0, commit=False).error_code == E.invalid_txn_state

        # next transaction at e1: a produce and offsets (TxnOffsetCommit v5, no AddOffsetsToTxn), aborted
        e1 = e0 + 1
        assert produce(bs, txn, topic, 0, pid, e1, version=12) == E.none
        assert txn_offset_commit(bs, txn, group, topic, 7, pid, e1) == E.none
        assert "__consumer_offsets" in {t.topic for t in describe_txn(bs, txn).topics}
        r = end(bs, txn, pid, e1, commit=False)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e1 + 1)
        assert committed(bs, group, topic) == -1  # dropped with the abort
        assert sorted(read_all(bs, topic, 2, "read_committed")) == [b"v", b"v"]
        assert len(read_all(bs, topic, 2, "read_uncommitted")) == 3

        # an abort with nothing added (the client cannot know what its produces added) bumps too
        e2 = e1 + 1
        r = end(bs, txn, pid, e2, commit=False)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e2 + 1)
        until(lambda: describe_txn(bs, txn).transaction_state == "CompleteAbort", 15, "CompleteAbort")
        assert end(bs, txn, pid, e2 + 1, commit=True).error_code == E.invalid_txn_state  # nothing ongoing

        # offsets committed with the transaction
        e3 = e2 + 1
        assert produce(bs, txn, topic, 1, pid, e3, version=12) == E.none
        assert txn_offset_commit(bs, txn, group, topic, 9, pid, e3) == E.none
        r = end(bs, txn, pid, e3, commit=True)
        assert (r.error_code, r.producer_epoch) == (E.none, e3 + 1)
        assert committed(bs, group, topic) == 9
        until(lambda: describe_txn(bs, txn).transaction_state == "CompleteCommit", 15, "CompleteCommit")

    # the same id after a restart: its v1 records are read back
    with ThreadBroker(tmp_path, CONF) as tb:
        bs = tb.bootstrap
        st = until(lambda: (s := describe_txn(bs, txn)).error_code == 0 and s, 30, "the reloaded id")
        assert (st.transaction_state, st.producer_id) == ("CompleteCommit", pid)
        e4 = e3 + 1
        assert produce(bs, txn, topic, 0, pid, e3, seq=5, version=12) == E.invalid_producer_epoch
        assert produce(bs, txn, topic, 0, pid, e4, version=12) == E.none
        r = end(bs, txn, pid, e4, commit=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e4 + 1)
        assert len(read_all(bs, topic, 2, "read_committed")) == 4
        # a new instance of the producer still fences by InitProducerId
        _, e_new = init(bs, txn)
        assert e_new == e4 + 2


def test_transaction_version_1_keeps_the_old_behaviour(tmp_path):
    """``shoal.transaction.version=1``: finalized at 1, so clients stay at version 1; a Produce v12
    is verified (not added) and EndTxn v5 does not bump the epoch."""
    topic, txn = f"tv1-{uuid.uuid4().hex[:6]}", f"tx-tv1-{uuid.uuid4().hex[:6]}"
    with ThreadBroker(tmp_path, {**CONF, "shoal.transaction.version": "1"}) as tb:
        bs = tb.bootstrap
        assert features(bs) == ({"shoal.version": (1, 2), "transaction.version": (0, 2)},
                                {"shoal.version": (1, 1), "transaction.version": (1, 1)})
        create_topic(bs, topic, 1)
        pid, e0 = init(bs, txn)
        assert produce(bs, txn, topic, 0, pid, e0, version=12) == E.invalid_txn_state
        r = wire(bs, 24, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                          "v3_and_below_producer_epoch": e0,
                          "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}, version=3)
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == E.none
        assert produce(bs, txn, topic, 0, pid, e0, version=12) == E.none
        r = end(bs, txn, pid, e0, commit=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.none, pid, e0)
        assert read_all(bs, topic, 1, "read_committed") == [b"v"]

