"""``shoal transactions`` as an operator runs it, against a real broker process and real
confluent-kafka producers: a hanging transaction (a transactional producer that begins, produces and
dies with ``os._exit`` in a subprocess) shows in ``list``, ``describe`` and ``describe-producers``
and holds the last stable offset back, so a read_committed consumer stops at it; ``abort
--start-offset`` ends it with an ABORT marker: the LSO moves to the high watermark and the
read_committed consumer gets past it, without the aborted records. ``find-hanging`` names it once
its coordinator no longer lists the partition. Idempotent producers in describe-producers; errors
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

from shoal.cli import main
from shoal.cli_admin import UsageError
from shoal.cli_transactions import abort_spec, candidates, hanging, ms_or_none, open_transaction_at
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


def wait_for(cond, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def make_topic(broker, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=20)


def produce_plain(broker, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(20) == 0


HANGING = textwrap.dedent("""
    import os, sys
    from confluent_kafka import Producer
    bootstrap, topic, tid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 600000,
                  "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"hanging-%d" % i, partition=0)
    assert p.flush(30) == 0, "not delivered"
    print("produced", flush=True)
    os._exit(0)  # no EndTxn, no close: the transaction stays open
""")


def hanging_transaction(broker, topic: str, tid: str, n: int) -> None:
    r = subprocess.run([sys.executable, "-c", HANGING, broker.bootstrap, topic, tid, str(n)],
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
