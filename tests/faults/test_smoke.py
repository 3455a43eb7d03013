"""The fault harness end to end, the CI part: three real brokers on a real etcd of their own, every
broker<->broker and client<->broker link through a link proxy.

- ``test_links_are_routed_through_proxies``: the wiring: each broker, asked on broker s's
  inter-broker listener, names every peer d at the proxy port of link ``b<s>->b<d>``; a client
  bootstrapped on its links is told only its own proxy ports.
- ``test_fixed_schedule_loses_nothing``: idempotent acks=all producers and a committing consumer
  group over 6 partitions while a fixed schedule pauses a partition leader (SIGSTOP 2 s), resets
  the producers' links, stalls a consumer link, kills the etcd leader, kill -9s a broker and
  isolates one from its peers and from etcd for 4 s (its lease expires: it leaves and comes back),
  kill -9s the leader of an idle partition (its successor takes an epoch and writes nothing in
  it) and, once it is back, elects every preferred leader again (the brokers also rebalance
  leaders on their own every 5 s); afterwards every checker of ``faults.checker`` is clean, the
  table row says 0 lost, 0 duplicated, 0 misordered, and every replica of the workload's and the
  idle topic's partitions is back in the ISR (a follower stuck after the preferred election is not).
- ``test_checker_catches_a_loss``: the negative control: acknowledged records are destroyed on
  purpose (a partition's segment cut in half while its broker is down) and the same checker
  reports exactly those as lost, so the harness can fail.

RF: ``RFS`` = [1, 3]. RF=3 runs since replication landed (checked: followers hold the leader's
bytes up to the high watermark, ``faults.run.replicating``, asserted after the run, and their
fetches cross the ``b<s>->b<d>`` proxy links, asserted too). The ``kill`` op's hold (1 s) is
shorter than a session (``cluster_harness.SESSION_MS``); a longer hold and ``partition`` ops
exercise failover harder: that is the campaign's job (bench/bench_faults.py --rf 3).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from faults.checker import check, row, table
from faults.nemesis import Schedule
from faults.run import FaultRun, create_topic, replicating
from faults.workload import Workload
from shoal.client import AdminClient
from cluster_harness import until

RFS = [1, 3]
PARTITIONS = 6
FIXED = """\
seed=0 op=0 at=1.00 kind=pause target=leader:0 hold=2.00 mode=-
seed=0 op=1 at=4.00 kind=cut-client target=producer hold=2.00 mode=reset
seed=0 op=2 at=7.00 kind=cut-client target=consumer->b2 hold=2.00 mode=stall
seed=0 op=3 at=10.00 kind=etcd-leader target=etcd hold=2.00 mode=-
seed=0 op=4 at=13.00 kind=kill target=leader:1 hold=1.00 mode=-
seed=0 op=5 at=16.00 kind=isolate target=b3 hold=4.00 mode=stall
seed=0 op=6 at=21.00 kind=kill target=idle-leader:0 hold=1.00 mode=-
seed=0 op=7 at=28.00 kind=elect-preferred target=all hold=0.50 mode=-
"""


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
    run = FaultRun(c, fault_etcd, rf=rf, partitions=PARTITIONS, producers=2, consumers=2, rate=150)
    schedule = Schedule.parse(FIXED)
    try:
        result = run.play(schedule, warmup_acks=100, after_acks=300)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_logs(c)}") from None
    w, nemesis = run.workload, run.nemesis
    print(result.summary())
    print(table([row(1, nemesis.faults, [result])]))
    assert [e.error for e in nemesis.events] == [""] * len(schedule.ops), nemesis.events
    assert nemesis.faults == 8
    assert not w.fatal, w.fatal
    assert result.acked >= 400 and result.reads > 0 and w.history.commits
    assert result.ok, result.summary()
    # followers (RF > 1) hold the leader's bytes up to the high watermark: an ISR listing is not proof
    assert replicating(c, run.topic, PARTITIONS, rf)
    if rf > 1:  # replication traffic went through the broker links
        assert sum(c.links.stats(n)["up_bytes"] for n in c.broker_links({1}, {2, 3})) > 0
    # every client byte went through the proxies
    assert all(c.links.stats(f"producer->b{n}")["up_bytes"] > 0 for n in c.brokers)


def test_checker_catches_a_loss(proxied3):
    """Negative control: records acknowledged with acks=all, then destroyed on purpose."""
    c = proxied3
    topic = f"faults-loss-{uuid.uuid4().hex[:6]}"
    create_topic(c, topic, 1, 2)
    w = Workload(topic, 2, c.client_bootstrap("producer"), c.client_bootstrap("consumer"),
                 producers=1, consumers=0, rate=500)
    w.start()
    assert w.wait_acked(400, timeout=60)
    w.stop(drain=0)
    victim = c.leader_of(topic, 0)
    c.kill(victim)
    segment = sorted((c[victim].data_dir / f"{topic}-0").glob("*.log"))[-1]
    data = segment.read_bytes()
    starts, pos = [], 0
    while pos + 12 <= len(data):  # batch boundaries: base offset (8), batch length (4), the rest
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    assert len(starts) >= 2, f"{len(starts)} batch(es): nothing to keep before a cut"
    with open(segment, "r+b") as f:  # a torn tail, inside the middle batch (not at half the file:
        f.truncate(starts[len(starts) // 2] + 20)  # one large first batch would take everything)
    c.start_one(victim)
    c.wait_brokers(set(c.brokers), timeout=60)
    # RF=1: only the victim can lead partition 0 again; on a loaded machine the controller may
    # still have it offline (leader -1) here, and a read then would see no high watermark at all
    until(lambda: c.leader_of(topic, 0) == victim and c.leader_of(topic, 1) >= 0, 60, "both partitions led")
    hws = w.final_read(c.bootstrap())
    result = check(w.history)
    print(result.summary())
    acked0 = [a for a in w.history.acks if a.partition == 0]
    assert 0 < hws[0] < len(acked0)
    # exactly the acknowledged records at or above the new high watermark of partition 0
    assert sorted(result.lost, key=lambda a: a.offset) == sorted((a for a in acked0 if a.offset >= hws[0]),
                                                                 key=lambda a: a.offset)
    assert not result.ok and row(1, 1, [result])[3] == len(result.lost) > 0
