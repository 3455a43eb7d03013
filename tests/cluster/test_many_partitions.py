"""Issue 25 at a size the suite can afford: three brokers with 1,500 partitions at RF 3 (topics of
100, no traffic), one broker restarted after a kill -9 and the controller after a SIGTERM
(controlled shutdown). Each time every ISR is full again within ``REJOIN_S``, no broker lost its
etcd lease (its log would say "registered again under a new lease") and the controller moved no
leadership off a live broker (a move it logs naming brokers gone, while all three are up).
``bench/bench_partitions.py`` measures the same at 2,000-10,000 partitions (docs/benchmarks.md,
"Thousands of partitions").

Heavy (three brokers carrying 1,500 partitions each): ``serial``, so it runs alone after the
parallel phase. Measured alone (load 1-3): 24 s in all, the kill -9 rejoin ~9 s (most of it the
restarted broker waiting out its dead process's 9 s lease), the controlled one ~5 s."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from cluster_harness import LEASE_LOST, Cluster, leadership_moves, started_at, until
from shoal.client import AdminClient, TopicDescription

pytestmark = pytest.mark.serial

PARTITIONS, PER_TOPIC = 1500, 100
TOPICS = [f"many-{i:02d}" for i in range(PARTITIONS // PER_TOPIC)]
# every ISR full after a restart: measured 5-9 s alone (the target is 60 s at 6,000
# partitions); generous for a 2-core machine that other work loads too
REJOIN_S = 90.0
POLL_S = 0.5  # a full Metadata of 1,500 partitions is work for the broker answering it


async def _isr_full(bootstrap: str) -> int:
    async with AdminClient(bootstrap, timeout=60) as c:
        md = await c.metadata(TOPICS)
    return sum(1 for t in md.topics.values() if isinstance(t, TopicDescription)
               for p in t.partitions if p.leader >= 0 and len(p.isr) == len(p.replicas))


def isr_full(c: Cluster, via: int) -> int:
    return asyncio.run(_isr_full(c[via].bootstrap))


async def _create(c: Cluster) -> None:
    clients = [AdminClient(b.bootstrap, timeout=120) for b in c.brokers.values()]
    for a in clients:
        await a.connect()
    try:
        await asyncio.gather(*(clients[i % 3].create_topics(
            [{"name": name, "num_partitions": PER_TOPIC, "replication_factor": 3}]) for i, name in enumerate(TOPICS)))
    finally:
        for a in clients:
            await a.close()


@pytest.fixture(scope="module")
def many(etcd_cluster, tmp_path_factory):
    # the broker's default session (9 s), not the harness's 3 s: an etcd that stalls for a few
    # seconds on a loaded machine (a whole-module run saw every lease expire at once) is not what
    # this test is about; the probes still see a killed broker at once
    c = Cluster(tmp_path_factory.mktemp("many"), etcd_cluster.url(f"/many-{uuid.uuid4().hex[:8]}"),
                overrides={"broker.session.timeout.ms": "9000"})
    try:
        c.start()
        asyncio.run(_create(c))
        until(lambda: isr_full(c, 1) == PARTITIONS, 120, "every ISR full after creation", POLL_S)
        yield c
    finally:
        c.close()


def rejoin(c: Cluster, node: int, marks: dict[int, int]) -> float:
    """Start ``node`` again; the seconds until every ISR is full (through another broker). Since
    ``marks`` (``Cluster.log_marks``), no broker lost its lease and no leadership moved off a live
    broker."""
    via = next(n for n in c.brokers if n != node)
    t0 = time.monotonic()
    c.start_one(node)
    seen = [0]

    def full() -> bool:
        seen[0] = isr_full(c, via)
        return seen[0] == PARTITIONS

    late = None
    try:
        until(full, REJOIN_S, f"every ISR full after broker {node}'s restart", POLL_S)
    except AssertionError as e:
        late = f"{e}: {seen[0]} of {PARTITIONS} ISR full"
    took = time.monotonic() - t0
    logs = c.logs_since(marks)
    lost = {n: text.count(LEASE_LOST) for n, text in logs.items() if LEASE_LOST in text}
    assert not lost, f"brokers lost their etcd lease (broker: times): {lost}"
    # before ``node`` started, a move naming only it is off its dead process's registration
    up = started_at(logs[node], node)
    moves = [(n, m) for n, text in logs.items() for m in leadership_moves(text)
             if m[2] - {node} or up is None or m[0] >= up]
    assert not moves, f"the controller moved leaderships off a live broker: {moves}"
    assert late is None, late
    print(f"broker {node}: every ISR full {took:.1f} s after its start")
    return took


async def _placed(bootstrap: str, name: str) -> set[int]:
    """Create ``name`` (6 partitions, RF 2) through ``bootstrap``: the brokers it was placed on."""
    async with AdminClient(bootstrap, timeout=60) as c:
        await c.create_topics([{"name": name, "num_partitions": 6, "replication_factor": 2}])
        md = await c.metadata([name])
    return {r for p in md.topics[name].partitions for r in p.replicas}


def test_rejoin_after_kill9(many):
    """A broker that is not the controller is killed: its leaderships move, and new topics are
    placed elsewhere (it stays registered until its lease expires, but the controller treats it
    as gone), through the controller or another broker; restarted, it catches up every
    partition."""
    controller = many.wait_controller(60)
    node = max(n for n in many.brokers if n != controller)
    other = next(n for n in many.brokers if n not in (node, controller))
    many.kill(node)
    until(lambda: isr_full(many, controller) == 0, 60, f"broker {node} out of every ISR", POLL_S)
    assert node in many.describe(controller)["brokers"], "its lease expired already: nothing to check"
    assert asyncio.run(_placed(many[controller].bootstrap, "placed-via-controller")) == {controller, other}
    time.sleep(1.5)  # the other brokers read what the controller publishes every half second
    assert asyncio.run(_placed(many[other].bootstrap, "placed-via-other")) == {controller, other}
    rejoin(many, node, many.log_marks())


def test_rejoin_after_controlled_restart(many):
    """The controller itself stops (SIGTERM: its leaderships move and it leaves every ISR in one
    change, its fetchers stop, its lease is revoked, another broker takes over) and starts
    again."""
    node = many.wait_controller(60)
    marks = many.log_marks()
    many.stop(node)
    stopped = many[node].log_text()[marks[node]:]
    assert "controlled shutdown: " in stopped and "leaderships moved in" in stopped, \
        "the controlled shutdown did not move the leaderships away:\n" + \
        "\n".join(line for line in stopped.splitlines() if "controlled shutdown" in line)
    many.wait_controller(60, not_=node)
    # out of every ISR, it fetches no more: its leaders do not add it back (KIP-841's rule)
    readded = [line[:200] for n, text in many.logs_since(marks).items() if n != node
               for line in text.splitlines() if f"(replica {node} caught up)" in line]
    assert not readded, f"broker {node} added back to ISRs while it stopped: {readded}"
    rejoin(many, node, marks)
