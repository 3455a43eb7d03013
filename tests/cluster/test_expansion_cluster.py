"""Automatic expansion end to end (issue 27, part 6) on real broker processes on the real etcd,
with a real producer: three brokers whose disk write capacity the producer's acks=all load fills
past the headroom; the controller runs the operator's expansion hook once, with the broker counts;
the hook asks for a broker (it leaves a request, as a call to a cloud control plane would, and this
test, the control plane, starts broker 4); the balancer fills the new broker until it takes a share
of the bytes in; no acknowledged record is lost."""

from __future__ import annotations

import json
import stat
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_harness import Cluster, until
from test_balancer_cluster import Writer, shoal, shoal_status
from test_replication import read_all

pytestmark = pytest.mark.timeout(300)

DISK_WRITE = 1_000_000  # bytes/s of disk writes each broker reports it can take
RATE = 800_000  # bytes/s produced: x RF 3 / 3 brokers -> 80% of every broker's disk writes


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("expand")
    hook = workdir / "expand.sh"
    hook.write_text(f'#!/bin/sh\necho "$1 $2" >> {workdir / "asked"}\necho "asked the control plane for $2 brokers"\n')
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    c = Cluster(workdir, etcd_cluster.url(f"/expand-{uuid.uuid4().hex[:8]}"), size=4, racks=[None] * 4, overrides={
        "shoal.balancer.enable": "true", "shoal.balancer.interval.ms": "1000",
        "shoal.balancer.expand.command": str(hook), "shoal.balancer.expand.after.ms": "4000",
        "shoal.balancer.load.interval.ms": "500", "shoal.balancer.load.window.ms": "3000",
        "shoal.balancer.capacity.disk.write.bytes.per.second": str(DISK_WRITE),
        "shoal.balancer.throttle.bytes.per.second": "50000000",
        "shoal.balancer.max.concurrent.moves.per.broker": "10",
        "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"})
    c.workdir = workdir
    try:
        for n in (1, 2, 3):
            c.start_one(n)
        c.wait_brokers({1, 2, 3})
        yield c
    finally:
        c.close()


class PacedWriter(Writer):
    """The balancer tests' writer, paced: ``RATE`` bytes/s of 1,000-byte values (their first 12
    bytes, the sequence number, is what it keeps of those acknowledged)."""

    def _done(self, err, msg) -> None:
        (self.errors.append(str(err)) if err is not None else self.acked.add(msg.value()[:12]))

    def _run(self) -> None:
        i, t0, per_tick = 0, time.monotonic(), RATE // 1000 // 20
        while not self._stop.is_set():
            for _ in range(per_tick):
                self.p.produce(self.topic, (b"x%011d" % i).ljust(1000, b"."), on_delivery=self._done)
                i += 1
            self.p.poll(0)
            time.sleep(max(0.0, t0 + i / (RATE / 1000) - time.monotonic()))
        self.p.flush(60)


def status(cluster: Cluster) -> dict:
    return shoal_status(["--admin-url", cluster[1].admin_url])


def bytes_in(cluster: Cluster) -> dict[int, float]:
    r = shoal("cluster", "load", "--output", "json", "--admin-url", cluster[1].admin_url)
    assert r.returncode == 0, r.stderr
    return {b["node_id"]: b["bytes_in_per_second"] for b in json.loads(r.stdout)["brokers"]}


def test_a_cluster_past_its_headroom_runs_the_hook_once_and_fills_the_broker_it_brings(cluster):
    boot = cluster.bootstrap(1, 2, 3)
    topic = f"busy-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, 12, 3)])[topic].result(30)
    asked = cluster.workdir / "asked"
    with PacedWriter(boot, topic) as w:
        # the hook runs once the utilization has stayed above 70% for the window (4 s)
        until(asked.exists, 60, lambda: f"the hook to run: {status(cluster)['controller'].get('expansion')}", every=0.5)
        current, recommended = map(int, asked.read_text().split())
        assert current == 3 and recommended >= 4  # 2.4 brokers of load / 0.7
        e = until(lambda: (s := status(cluster)["controller"]["expansion"]).get("hook", {}).get("exit") == 0 and s,
                  30, "the hook's exit in the status")
        assert e["state"] in ("waiting", "watching") and "asked the control plane" in e["hook"]["output"]
        text = shoal("cluster", "balancer", "status", "--admin-url", cluster[1].admin_url).stdout
        assert f"expansion hook (3 -> {recommended} brokers): exit 0" in text, text
        cluster.start_one(4)  # the control plane provisions the broker
        cluster.wait_brokers({1, 2, 3, 4}, timeout=60)

        def share() -> float:
            b = bytes_in(cluster)
            return b.get(4, 0) / max(1.0, sum(b.values()))
        until(lambda: share() >= 0.2, 120, lambda: f"broker 4 to take 20% of the bytes in: {bytes_in(cluster)}; "
              f"balancer {status(cluster)['controller']}", every=1.0)
        time.sleep(1.0)
    assert asked.read_text().count("\n") == 1  # once
    assert not w.errors, w.errors[:5]
    got = {v[:12] for _p, _o, v in read_all(cluster.bootstrap(), topic, 12, len(w.acked))}
    assert w.acked and w.acked <= got  # nothing acknowledged was lost
