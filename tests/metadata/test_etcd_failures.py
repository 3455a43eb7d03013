"""The etcd backend when etcd fails: the quorum down, a broker cut off from etcd while the cluster
goes on (and compacts past its watch), etcd down when a broker starts. A three-member etcd of this
module's own (``tests/etcd_cluster.py``), since these tests stop it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from etcd_cluster import EtcdCluster, ProxiedEtcd, broker_store
from polling import until_async
from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, changed_topics


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    c.start()
    yield c
    c.close()


@pytest.fixture
def url(cluster):
    cluster.start_all()  # a test that failed may have left members down
    return cluster.url(f"/fail-{uuid.uuid4().hex[:8]}")



async def test_quorum_down_changes_refused_retriably_reads_kept_then_converges(cluster, url, caplog):
    caplog.set_level(logging.INFO, "shoal.metadata.etcd")
    a, b = broker_store(url, node_id=1), broker_store(url, node_id=2)
    await a.start()
    await b.start()
    try:
        await a.create_topic("before", [(1,)], {})
        await until_async(lambda: "before" in b.image.topics)
        image = a.image
        await asyncio.to_thread(cluster.stop_all)
        t0 = time.monotonic()
        with pytest.raises(MetadataError) as e:
            await a.create_topic("during", [(1,)], {})
        assert e.value.code == "REQUEST_TIMED_OUT"  # retriable: clients retry
        assert "etcd" in e.value.message and time.monotonic() - t0 < 10
        assert a.image is image and "before" in a.image.topics  # reads go on
        await asyncio.sleep(3)  # a few seconds down
        with pytest.raises(MetadataError) as e:
            await b.create_topic("during", [(1,)], {})
        assert e.value.code == "REQUEST_TIMED_OUT"
        logged = [r.getMessage() for r in caplog.records if "cannot reach etcd" in r.getMessage()]
        # said, and not once per retry (two stores retrying for 3 s would log dozens of lines; on
        # a loaded machine the members stopping one by one make each store flap once or twice)
        assert 1 <= len(logged) <= 8, logged
        await asyncio.to_thread(cluster.start_all)
        # b gets through first (retrying as a client would); a sees it, then writes again
        await until_async(lambda: b.backend.reachable)
        await b.create_topic("after-b", [(2,)], {})
        waited = await until_async(lambda: "after-b" in a.image.topics)
        await until_async(lambda: a.backend.reachable)
        await a.create_topic("after-a", [(1,)], {})
        await until_async(lambda: "after-a" in b.image.topics)
        assert set(a.image.topics) == set(b.image.topics) == {"before", "after-b", "after-a"}
        assert a.image.epoch == b.image.epoch
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        print(f"a saw b's change {waited:.2f} s after it was made")
    finally:
        await asyncio.to_thread(cluster.start_all)
        await a.close()
        await b.close()


async def test_cut_off_past_a_compaction_reloads_and_tells_listeners_the_difference(cluster, url):
    proxy = ProxiedEtcd(cluster)
    prefix = "/" + url.rpartition("/")[2]
    a = broker_store(proxy.url(prefix), node_id=1)  # reaches etcd only via the proxy
    b = broker_store(url, node_id=2)
    await a.start()
    await b.start()
    seen: list[tuple[MetadataImage, MetadataImage]] = []
    a.subscribe(lambda old, new: seen.append((old, new)))
    try:
        await b.create_topic("kept", [(1,)], {})
        await b.create_topic("deleted", [(1,)], {})
        await until_async(lambda: "deleted" in a.image.topics)
        seen.clear()
        proxy.cut()
        await until_async(lambda: not a.backend.reachable)
        await b.delete_topic("deleted")
        for i in range(5):
            await b.create_topic(f"new{i}", [(2,)], {})
        await asyncio.to_thread(cluster.compact)  # past everything a has seen
        assert "deleted" in a.image.topics and "new0" not in a.image.topics  # a still reads its image
        proxy.restore()
        await until_async(lambda: "new4" in a.image.topics)
        assert a.backend.reloads == 1  # the watch's revision was compacted: read again
        assert a.image.topics == b.image.topics and a.image.epoch == b.image.epoch
        assert len(seen) == 1  # one call with the whole difference
        old, new = seen[0]
        assert set(changed_topics(old, new)) == {"deleted"} | {f"new{i}" for i in range(5)}
        await a.create_topic("after", [(1,)], {})  # and a writes again
        await until_async(lambda: "after" in b.image.topics)
    finally:
        proxy.close()
        await a.close()
        await b.close()


async def test_a_broker_waits_for_etcd_at_start(cluster, url, caplog):
    caplog.set_level(logging.INFO, "shoal.metadata.etcd")
    await asyncio.to_thread(cluster.stop_all)
    s = broker_store(url, node_id=1)
    start = asyncio.ensure_future(s.start())
    try:
        await asyncio.sleep(2.5)
        assert not start.done()
        assert any("cannot reach etcd at" in r.getMessage() and "retrying" in r.getMessage()
                   for r in caplog.records)
        await asyncio.to_thread(cluster.start_all)
        await asyncio.wait_for(start, 30)
        await s.create_topic("t", [(1,)], {})
        assert "t" in s.image.topics and s.image.cluster_id
    finally:
        await asyncio.to_thread(cluster.start_all)
        start.cancel()
        await s.close()


async def test_a_change_made_while_etcd_elects_gets_through(cluster, url):
    """etcd without a leader for a moment (here: two members down, one back a second later) is
    what losing its leader looks like to a broker: the watch fails, the store is unreachable. A
    change made then is tried, its commit retrying until etcd answers, not refused at once (a
    whole-suite run saw CreateTopics refused right after the etcd leader was killed)."""
    a = broker_store(url, node_id=1)
    await a.start()
    try:
        await asyncio.to_thread(cluster.kill_member, 0)
        await asyncio.to_thread(cluster.kill_member, 1)
        await until_async(lambda: not a.backend.reachable)
        t0 = time.monotonic()
        change = asyncio.ensure_future(a.create_topic("while-electing", [(1,)], {}))
        await asyncio.sleep(1.0)
        assert not change.done()  # waiting for etcd, not refused
        await asyncio.to_thread(cluster.start_member, 1, False)
        await change
        took = time.monotonic() - t0
        assert "while-electing" in a.image.topics
        print(f"made {took:.2f} s after etcd lost its quorum")
    finally:
        await asyncio.to_thread(cluster.start_all)
        await a.close()


async def test_one_member_down_changes_go_on(cluster, url):
    """A quorum of two takes every change; the store moves its channel and its watch to another
    member (a change in flight when its member dies may get the retriable error, as a client
    would, and is retried)."""
    a = broker_store(url, node_id=1)
    await a.start()
    retried = 0
    try:
        await a.create_topic("t0", [(1,)], {})
        for i in range(3):
            await asyncio.to_thread(cluster.kill_member, i)
            for _ in range(100):
                try:
                    await a.create_topic(f"t{i + 1}", [(1,)], {})
                    break
                except MetadataError as e:
                    assert e.code in ("REQUEST_TIMED_OUT", "TOPIC_ALREADY_EXISTS"), e
                    if e.code == "TOPIC_ALREADY_EXISTS":  # the first attempt had landed
                        break
                    retried += 1
                    await asyncio.sleep(0.1)
            await asyncio.to_thread(cluster.start_member, i)
        assert {f"t{i}" for i in range(4)} <= set(a.image.topics)
        print(f"retried {retried} times over 3 member deaths")
        assert retried <= 30, retried
    finally:
        await asyncio.to_thread(cluster.start_all)
        await a.close()


async def test_registrations_outlive_a_paused_etcd_leader(cluster):
    """etcd's leader paused (SIGSTOP: a hung process or a black-holed link, not a closed one):
    the members elect another, which extends every lease by its TTL. A broker whose member is a
    follower keeps its registration: a refresh that the member holds while etcd elects is given up
    after one keep-alive interval and sent again (the whole 5 s request timeout before, longer than
    the 3 s session: brokers lost their registrations in a datacenter-loss drill).

    The paused member is then killed and started again, not resumed: etcd before 3.4.28/3.5.11
    lets a leader that was stalled longer than a lease revoke that lease when it resumes (its
    lessor still thinks it is primary; the revoke is forwarded to the new leader and committed:
    etcd issue 15247), which Debian's 3.4.23 does. That is etcd's bug, and the registration's
    answer to it (a new lease at the next keep-alive) is the lost-lease test's; this one is about
    the broker's side of an election."""
    import os
    import signal

    cluster.start_all()
    prefix = f"/pause-{uuid.uuid4().hex[:8]}"
    leader = cluster.leader()
    follower = next(i for i in range(3) if i != leader)
    a = broker_store(cluster.url(prefix, members=[follower]), node_id=1, session_timeout_ms=3000)
    watcher = broker_store(cluster.url(prefix, members=[follower]), node_id=2, session_timeout_ms=3000)
    await a.start()
    await watcher.start()
    paused = cluster.members[leader].proc
    try:
        await a.register_broker(BrokerInfo(1, "127.0.0.1", 9092))
        await until_async(lambda: 1 in watcher.image.brokers)
        lease = a.backend.session.lease_id
        os.kill(paused.pid, signal.SIGSTOP)
        await asyncio.sleep(8)  # an election (1.5-3 s) and more than two sessions
        assert a.backend.session.lease_id == lease  # never lost, so never registered again
        assert 1 in watcher.image.brokers
        await asyncio.to_thread(cluster.kill_member, leader)  # never resumed (see above)
        await asyncio.to_thread(cluster.start_member, leader)
        await asyncio.sleep(2)
        assert a.backend.session.lease_id == lease
        assert 1 in watcher.image.brokers
    finally:
        if paused.poll() is None:
            os.kill(paused.pid, signal.SIGCONT)
        await a.close()
        await watcher.close()


async def test_a_busy_event_loop_keeps_its_registration(cluster):
    """A broker's loop busy for three sessions (CPU-bound work holding it, as a broker rejoining
    thousands of partitions does) keeps its lease and its registration: the lease is refreshed
    from a thread of its own. From the loop, no refresh ran while it was busy, the lease expired
    and the broker registered again under a new one (the controller meanwhile took it for gone)."""
    cluster.start_all()
    prefix = f"/busy-{uuid.uuid4().hex[:8]}"
    a = broker_store(cluster.url(prefix), node_id=1, session_timeout_ms=3000)
    watcher = broker_store(cluster.url(prefix), node_id=2, session_timeout_ms=3000)
    await a.start()
    await watcher.start()
    seen: list[set[int]] = []
    watcher.subscribe(lambda old, new: seen.append(set(new.brokers)))
    try:
        await a.register_broker(BrokerInfo(1, "127.0.0.1", 9092))
        await until_async(lambda: 1 in watcher.image.brokers)
        lease = a.backend.session.lease_id
        end = time.monotonic() + 9.0  # three 3 s sessions of a loop that runs nothing else
        while time.monotonic() < end:
            sum(range(10_000))
        await asyncio.sleep(1.0)  # the watcher hears of what happened meanwhile
        assert a.backend.session.lease_id == lease  # never lost, so never registered again
        assert 1 in watcher.image.brokers and all(1 in brokers for brokers in seen), seen
        assert a.backend.session.keeper.max_gap < 2.5  # refreshed every second or so throughout
    finally:
        await a.close()
        await watcher.close()
