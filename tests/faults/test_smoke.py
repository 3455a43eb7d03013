"""The fault harness end to end, the CI part: three real brokers on a real etcd of their own, every
broker<->broker and client<->broker link through a link proxy.

- ``test_links_are_routed_through_proxies``: the wiring: each broker, asked on broker s's
  inter-broker listener, names every peer d at the proxy port of link ``b<s>->b<d>``; a client
  bootstrapped on its links is told only its own proxy ports.
- ``test_fixed_schedule_loses_nothing``: idempotent acks=all producers and a committing consumer
  group over 6 partitions while a fixed schedule pauses a partition leader (SIGSTOP 2 s), resets
  the producers' links, stalls a consumer link, kills the etcd leader and kill -9s a broker;
  afterwards every checker of ``faults.checker`` is clean and the table row says 0 lost, 0
  duplicated, 0 misordered.
- ``test_checker_catches_a_loss``: the negative control: acknowledged records are destroyed on
  purpose (a partition's segment cut in half while its broker is down) and the same checker
  reports exactly those as lost, so the harness can fail.

RF: 1 today (``RFS``). Replication (issue 12) is not there yet: Metadata reports an ISR of one
and acks=all waits for the leader alone, so an RF=3 run would prove nothing and is left out.
When followers land, add 3 to ``RFS``: ``create_topic`` already passes it, ``replica_bytes``
compares every in-sync replica's files up to the high watermark, and ``kill``/``partition`` ops
then exercise failover (raise ``KILL_HOLD`` so that kill -9 outlives the session timeout).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from faults.checker import check, log_bytes_upto, row, table
from faults.nemesis import Nemesis, Schedule
from faults.workload import Workload
from shoal.client import AdminClient

RFS = [1]
PARTITIONS = 6
FIXED = """\
seed=0 op=0 at=1.00 kind=pause target=leader:0 hold=2.00 mode=-
seed=0 op=1 at=4.00 kind=cut-client target=producer hold=2.00 mode=reset
seed=0 op=2 at=7.00 kind=cut-client target=consumer->b2 hold=2.00 mode=stall
seed=0 op=3 at=10.00 kind=etcd-leader target=etcd hold=2.00 mode=-
seed=0 op=4 at=13.00 kind=kill target=leader:1 hold=1.00 mode=-
"""


def create_topic(cluster, name: str, rf: int, partitions: int = PARTITIONS) -> None:
    async def go() -> None:
        async with AdminClient(cluster[1].bootstrap, timeout=30) as c:
            await c.create_topics([{"name": name, "num_partitions": partitions, "replication_factor": rf}])

    asyncio.run(go())
    deadline = time.monotonic() + 30
    while any(cluster.leader_of(name, p) < 0 for p in range(partitions)):
        assert time.monotonic() < deadline, "partitions without a leader"
        time.sleep(0.2)


def replica_bytes(cluster, topic: str, hws: dict[int, int]) -> dict[int, dict[int, bytes]]:
    """partition -> broker -> its log bytes up to the HW, for every in-sync replica (files, not
    Fetch: see ``checker.log_bytes_upto``)."""
    async def isrs() -> dict[int, tuple[int, ...]]:
        async with AdminClient(cluster.live[0].bootstrap, timeout=10) as c:
            t = (await c.describe_topics([topic]))[topic]
            return {p.partition: p.isr for p in t.partitions}

    out: dict[int, dict[int, bytes]] = {}
    for p, isr in asyncio.run(isrs()).items():
        out[p] = {b: log_bytes_upto(cluster[b].data_dir / f"{topic}-{p}", hws[p]) for b in isr}
    return out


def _logs(cluster) -> str:
    return "\n".join(b.log_tail(40) for b in cluster.brokers.values())


def test_links_are_routed_through_proxies(proxied3):
    c = proxied3

    async def brokers_seen(bootstrap: str) -> dict[int, int]:
        async with AdminClient(bootstrap, timeout=10) as a:
            return {n: v[1] for n, v in (await a.describe_cluster())["brokers"].items()}

    for s in c.brokers:
        for d in c.brokers:  # asked on broker d's listener B<s>: broker s's view of the cluster
            seen = asyncio.run(brokers_seen(f"127.0.0.1:{c[d].extra[f'B{s}']}"))
            assert seen == {x: (c.links.port(f"b{s}->b{x}") if x != s else c[x].extra[f"B{s}"])
                            for x in c.brokers}
    seen = asyncio.run(brokers_seen(c.client_bootstrap("producer", 2)))
    assert seen == {x: c.links.port(f"producer->b{x}") for x in c.brokers}
    c.links.cut("producer->b2", mode="reset")
    with pytest.raises(Exception):
        asyncio.run(brokers_seen(c.client_bootstrap("producer", 2)))
    assert asyncio.run(brokers_seen(c.client_bootstrap("consumer", 2)))  # another client's link
    c.links.heal("producer->b2")
    assert asyncio.run(brokers_seen(c.client_bootstrap("producer", 2)))


@pytest.mark.parametrize("rf", RFS)
def test_fixed_schedule_loses_nothing(proxied3, fault_etcd, rf):
    c = proxied3
    topic = f"faults-{rf}-{uuid.uuid4().hex[:6]}"
    create_topic(c, topic, rf)
    w = Workload(topic, PARTITIONS, c.client_bootstrap("producer"), c.client_bootstrap("consumer"),
                 observer_bootstrap=c.bootstrap(), producers=2, consumers=2, rate=150)
    w.start()
    schedule = Schedule.parse(FIXED)
    nemesis = Nemesis(c, fault_etcd, topic)
    try:
        assert w.wait_acked(100, timeout=60), f"no acks before the faults\n{_logs(c)}"
        print(schedule)
        nemesis.run(schedule)
        c.wait_brokers(set(c.brokers), timeout=60)
        # liveness after healing: acks come again
        assert w.wait_acked(300, timeout=90), f"producers stuck after the faults: {w.fatal}\n{_logs(c)}"
    finally:
        w.stop()
    hws = w.final_read(c.bootstrap())
    result = check(w.history, replica_bytes(c, topic, hws))
    print(result.summary())
    print(table([row(1, nemesis.faults, [result])]))
    assert [e.error for e in nemesis.events] == [""] * len(schedule.ops), nemesis.events
    assert nemesis.faults == 5
    assert not w.fatal, w.fatal
    assert result.acked >= 400 and result.reads > 0 and w.history.commits
    assert result.ok, result.summary()
    # every client byte went through the proxies
    assert all(c.links.stats(f"producer->b{n}")["up_bytes"] > 0 for n in c.brokers)


def test_checker_catches_a_loss(proxied3):
    """Negative control: records acknowledged with acks=all, then destroyed on purpose."""
    c = proxied3
    topic = f"faults-loss-{uuid.uuid4().hex[:6]}"
    create_topic(c, topic, 1, partitions=2)
    w = Workload(topic, 2, c.client_bootstrap("producer"), c.client_bootstrap("consumer"),
                 producers=1, consumers=0, rate=500)
    w.start()
    assert w.wait_acked(400, timeout=60)
    w.stop(drain=0)
    victim = c.leader_of(topic, 0)
    c.kill(victim)
    segment = sorted((c[victim].data_dir / f"{topic}-0").glob("*.log"))[-1]
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size // 2)  # a torn tail: recovery drops every batch from the cut on
    c.start_one(victim)
    c.wait_brokers(set(c.brokers), timeout=60)
    hws = w.final_read(c.bootstrap())
    result = check(w.history)
    print(result.summary())
    acked0 = [a for a in w.history.acks if a.partition == 0]
    assert 0 < hws[0] < len(acked0)
    # exactly the acknowledged records at or above the new high watermark of partition 0
    assert sorted(result.lost, key=lambda a: a.offset) == sorted((a for a in acked0 if a.offset >= hws[0]),
                                                                 key=lambda a: a.offset)
    assert not result.ok and row(1, 1, [result])[3] == len(result.lost) > 0
