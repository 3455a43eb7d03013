"""``shoal transactions`` as an operator runs it, against a real broker process and real
confluent-kafka producers: a hanging transaction (a transactional producer that begins, produces and
dies with ``os._exit`` in a subprocess) shows in ``list``, ``describe`` and ``describe-producers``
and holds the last stable offset back, so a read_committed consumer stops at it; ``abort
--start-offset`` ends it with an ABORT marker: the LSO moves to the high watermark and the
read_committed consumer gets past it, without the aborted records. ``find-hanging`` does not name it
(its coordinator lists the partition: it will end it). Idempotent producers in describe-producers; errors
as one line with exit status 1; usage errors (2) before connecting. Plus the pure helpers, exactly."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from polling import until
from shoal.cli import main
from shoal.cli.common import UsageError
from shoal.cli.transactions import abort_spec, candidates, hanging, ms_or_none, open_transaction_at
from shoal.client import LATEST
from shoal.client import AdminClient as ShoalAdmin

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 40.0


def shoal_txn(broker, *args: str, subprocess_: bool = False) -> subprocess.CompletedProcess:
    """``shoal transactions ARGS`` against ``broker``: ``main`` in this process, or ``python -m
    shoal`` as a user runs it."""
    argv = ["transactions", *args, "--bootstrap-server", broker.bootstrap, "--timeout", "20"]
    if subprocess_:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, "-m", "shoal", *argv], capture_output=True, text=True, timeout=90,
                              env=env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    return r.stdout


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 1, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    return r.stderr


def make_topic(broker, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=20)


def produce_plain(broker, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(20) == 0


HANGING = textwrap.dedent("""
    import json, os, sys
    from confluent_kafka import Producer
    conf, topic, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    p = Producer({**conf, "transaction.timeout.ms": 600000, "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"hanging-%d" % i, partition=0)
    assert p.flush(30) == 0, "not delivered"
    print("produced", flush=True)
    os._exit(0)  # no EndTxn, no close: the transaction stays open
""")


def hanging_transaction(conf: dict, topic: str, n: int) -> None:
    """A transaction left open on ``topic`` partition 0 (``n`` records) by a producer of client
    settings ``conf`` (bootstrap, ``transactional.id``, credentials) that then dies."""
    r = subprocess.run([sys.executable, "-c", HANGING, json.dumps(conf), topic, str(n)],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0 and "produced" in r.stdout, r.stdout + r.stderr


def offsets(broker, topic: str, isolation_level: int) -> int:
    async def go() -> int:
        async with ShoalAdmin(broker.bootstrap, timeout=15) as c:
            got = await c.list_offsets({(topic, 0): LATEST}, isolation_level=isolation_level)
            return got[(topic, 0)][0]

    return asyncio.run(go())


def read_committed(broker, topic: str, want: int, timeout: float) -> list[bytes]:
    """Values a read_committed consumer gets from offset 0 within ``timeout`` (stops at ``want``)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.2):
                if not m.error():
                    got.append(m.value())
    finally:
        c.close()
    return got


# -- against a real broker ---------------------------------------------------------------------


def test_hanging_transaction_listed_described_and_aborted(broker):
    topic, tid = f"cli-txn-{uuid.uuid4().hex[:8]}", f"hanging-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic)
    produce_plain(broker, topic, [b"before-0", b"before-1"])  # offsets 0, 1
    hanging_transaction({"bootstrap.servers": broker.bootstrap, "transactional.id": tid}, topic, 5)  # 2..6, open
    produce_plain(broker, topic, [b"after-0", b"after-1", b"after-2"])  # offsets 7..9, above the open one

    listed = {t["transactional_id"]: t for t in json.loads(ok(shoal_txn(broker, "list", "--output", "json")))}
    assert listed[tid]["state"] == "Ongoing" and listed[tid]["producer_id"] >= 0
    pid = listed[tid]["producer_id"]
    text = ok(shoal_txn(broker, "list", subprocess_=True)).splitlines()
    assert text[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [tid, str(listed[tid]["coordinator"]), str(pid), "Ongoing"] in [line.split() for line in text[1:]]
    assert tid in ok(shoal_txn(broker, "list", "--state", "Ongoing"))
    assert tid not in ok(shoal_txn(broker, "list", "--state", "CompleteCommit"))
    assert tid in ok(shoal_txn(broker, "list", "--producer-id", str(pid)))

    d = json.loads(ok(shoal_txn(broker, "describe", "--transactional-id", tid, "--output", "json")))
    assert d["state"] == "Ongoing" and d["producer_id"] == pid and d["timeout_ms"] == 600000
    assert d["partitions"] == [{"topic": topic, "partition": 0}]
    assert d["start_time_ms"] is not None and 0 <= d["duration_ms"] < 600000
    text = ok(shoal_txn(broker, "describe", "--transactional-id", tid)).splitlines()
    assert text[0].split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                   "TransactionState"]
    assert text[1].split()[1:3] == [tid, str(pid)] and text[1].split()[-1] == f"{topic}-0"

    prods = json.loads(ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "0",
                                    "--output", "json")))["producers"]
    mine = [p for p in prods if p["producer_id"] == pid]
    assert len(mine) == 1 and mine[0]["current_transaction_start_offset"] == 2 and mine[0]["last_sequence"] == 4
    others = [p for p in prods if p["producer_id"] != pid]
    assert len(others) == 2 and all(p["current_transaction_start_offset"] is None for p in others)
    text = ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "0")).splitlines()
    assert text[0].split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                               "LastTimestamp", "CurrentTransactionStartOffset"]
    assert {(r.split()[0], r.split()[-1]) for r in text[1:]} >= {(str(pid), "2")}

    # not hanging: its coordinator lists the partition in the transaction (it will finish it)
    assert json.loads(ok(shoal_txn(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
                                   "--output", "json"))) == []
    assert ok(shoal_txn(broker, "find-hanging", "--topic", topic, "--partition", "0")).split() == [
        "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
        "Duration(min)"]

    # the open transaction holds the LSO at its first offset: read_committed stops there
    assert offsets(broker, topic, 0) == 10 and offsets(broker, topic, 1) == 2
    assert read_committed(broker, topic, 3, timeout=3) == [b"before-0", b"before-1"]

    # not a transaction's start offset: refused, nothing written
    refused(shoal_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3"),
            "Could not find any open transactions starting at offset 3")
    assert offsets(broker, topic, 1) == 2

    out = ok(shoal_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2",
                       subprocess_=True))
    assert f"producer {pid}" in out and "starting at offset 2" in out
    # the marker is at offset 10; the LSO moves to the high watermark, past the aborted records
    assert until(lambda: offsets(broker, topic, 1) == 11, DEADLINE, "the LSO to move past the abort marker")
    assert offsets(broker, topic, 0) == 11
    got = read_committed(broker, topic, 5, timeout=DEADLINE)
    assert got == [b"before-0", b"before-1", b"after-0", b"after-1", b"after-2"]
    prods = json.loads(ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "0",
                                    "--output", "json")))["producers"]
    assert all(p["current_transaction_start_offset"] is None for p in prods)
    # a second abort at the same offset finds nothing open
    refused(shoal_txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2"),
            "Could not find any open transactions")


def test_describe_producers_of_idempotent_producers(broker):
    topic = f"cli-txn-idem-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic, 2)
    produce_plain(broker, topic, [b"a", b"b", b"c"], partition=1)
    prods = json.loads(ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "1",
                                    "--output", "json")))
    assert prods["topic"] == topic and prods["partition"] == 1
    (p,) = prods["producers"]
    assert p["last_sequence"] == 2 and p["producer_epoch"] == 0 and p["current_transaction_start_offset"] is None
    assert abs(p["last_timestamp"] - time.time() * 1000) < 120_000
    empty = ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "0")).splitlines()
    assert len(empty) == 1 and empty[0].startswith("ProducerId")
    # --broker-id: the leader itself (one broker)
    assert ok(shoal_txn(broker, "describe-producers", "--topic", topic, "--partition", "1", "--broker-id",
                        "1")).count("\n") in (1, 2)


def test_errors_are_one_line(broker):
    refused(shoal_txn(broker, "describe-producers", "--topic", "no-such-topic-xyz", "--partition", "0"),
            "Failed to describe producers for partition no-such-topic-xyz-0 on leader", "UNKNOWN_TOPIC_OR_PARTITION")
    refused(shoal_txn(broker, "abort", "--topic", "no-such-topic-xyz", "--partition", "0", "--start-offset", "0"),
            "Failed to validate producer state", "UNKNOWN_TOPIC_OR_PARTITION")
    refused(shoal_txn(broker, "describe", "--transactional-id", f"never-{uuid.uuid4().hex[:6]}"),
            "Failed to describe transaction state", "TRANSACTIONAL_ID_NOT_FOUND")


def test_usage_errors_before_connecting(broker):
    r = shoal_txn(broker, "abort", "--topic", "t", "--partition", "0", subprocess_=True)
    assert r.returncode == 2 and "--start-offset" in r.stderr and "Traceback" not in r.stderr
    r = shoal_txn(broker, "abort", "--topic", "t", "--partition", "0", "--producer-id", "5")
    assert r.returncode == 2 and "Missing required argument --producer-epoch" in r.stderr
    r = shoal_txn(broker, "find-hanging")
    assert r.returncode == 2 and "requires either --topic or --broker-id" in r.stderr
    r = shoal_txn(broker, "find-hanging", "--partition", "1", "--broker-id", "1")
    assert r.returncode == 2 and "--partition argument requires --topic" in r.stderr
    r = shoal_txn(broker, "describe")  # argparse: --transactional-id is required
    assert r.returncode == 2


# -- pure helpers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class P:
    producer_id: int
    producer_epoch: int = 0
    last_sequence: int = 0
    last_timestamp: int = 0
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(frozen=True)
class D:
    partitions: tuple


def ns(**kw) -> argparse.Namespace:
    base = {"start_offset": None, "producer_id": None, "producer_epoch": None, "coordinator_epoch": None}
    return argparse.Namespace(**{**base, **kw})


def test_open_transaction_at():
    ps = [P(1), P(2, current_txn_start_offset=7), P(3, current_txn_start_offset=12)]
    assert open_transaction_at(ps, 12).producer_id == 3
    assert open_transaction_at(ps, 7).producer_id == 2
    assert open_transaction_at(ps, 8) is None
    assert open_transaction_at(ps, -1) is None  # -1 is "no open transaction", never a match


def test_abort_spec():
    assert abort_spec(ns(start_offset=4)) is None
    assert abort_spec(ns(producer_id=9, producer_epoch=2, coordinator_epoch=5)) == (9, 2, 5)
    assert abort_spec(ns(producer_id=9, producer_epoch=2, coordinator_epoch=-1)) == (9, 2, 0)  # as Kafka's tool
    for bad in (ns(), ns(producer_id=9), ns(producer_id=9, producer_epoch=1),
                ns(start_offset=1, producer_id=9, producer_epoch=1, coordinator_epoch=0)):
        with pytest.raises(UsageError):
            abort_spec(bad)


def test_candidates_and_hanging():
    now, limit = 10_000_000, 900_000
    old, fresh = now - limit - 1, now - limit
    by_tp = {("t", 0): [P(1, last_timestamp=old, current_txn_start_offset=5), P(2, last_timestamp=old)],
             ("t", 1): [P(1, last_timestamp=fresh, current_txn_start_offset=9)],
             ("u", 0): [P(3, last_timestamp=old, current_txn_start_offset=0),
                        P(4, last_timestamp=old, current_txn_start_offset=2)]}
    c = candidates(by_tp, now, limit)
    assert [(tp, p.producer_id) for tp, p in c] == [(("t", 0), 1), (("u", 0), 3), (("u", 0), 4)]
    # 1: its id's transaction still lists t-0 (the coordinator will finish it); 3: no id any more;
    # 4: its id lives but its transaction does not list u-0
    txn_ids = {1: "a", 4: "b"}
    descs = {"a": D((("t", 0),)), "b": D((("t", 0),))}
    assert [(tp, p.producer_id) for tp, p in hanging(c, txn_ids, descs)] == [(("u", 0), 3), (("u", 0), 4)]
    assert [p.producer_id for _, p in hanging(c, txn_ids, {"a": None, "b": None})] == [1, 3, 4]  # ids gone


def test_ms_or_none():
    assert ms_or_none(None) == "None" and ms_or_none(-1) == "None" and ms_or_none(0) == "0"
    assert ms_or_none(1234) == "1234"


def test_describe_transactions_response_with_no_start_time():
    """Kafka answers start time -1 for an id without a transaction; kio's reader refuses a negative
    timestamp, so the client reads DescribeTransactions v0 itself: the same fields as kio's."""
    from kio.schema.errors import ErrorCode

    from shoal.client.admin import _decode_describe_transactions, build_entity
    from shoal.protocol import codec

    mod = codec.response_module(65, 0)
    states = [{"error_code": ErrorCode.none, "transactional_id": "x", "transaction_state": "Ongoing",
               "transaction_timeout": 60000, "transaction_start_time": 1700000000123, "producer_id": 5,
               "producer_epoch": 2, "topics": [{"topic": "t", "partitions": [0, 3]}, {"topic": "u", "partitions": []}]},
              {"error_code": ErrorCode.transactional_id_not_found, "transactional_id": "y", "transaction_state": "",
               "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1,
               "topics": []}]
    frame = bytes(codec.encode_response(7, 65, 0, build_entity(
        mod.DescribeTransactionsResponse, {"throttle_time": 3, "transaction_states": states})))[4:]
    with pytest.raises(Exception):
        codec.decode_response(65, 0, frame)
    cid, resp = _decode_describe_transactions(65, 0, frame)
    assert cid == 7 and resp.throttle_time == 3
    x, y = resp.transaction_states
    assert (x.error_code, x.transactional_id, x.transaction_state, x.transaction_timeout, x.transaction_start_time,
            x.producer_id, x.producer_epoch) == (0, "x", "Ongoing", 60000, 1700000000123, 5, 2)
    assert [(t.topic, t.partitions) for t in x.topics] == [("t", (0, 3)), ("u", ())]
    assert (y.error_code, y.transactional_id, y.transaction_start_time, y.topics) == (105, "y", -1, ())
