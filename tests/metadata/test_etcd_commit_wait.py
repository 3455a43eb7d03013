"""A commit whose transaction succeeded does not wait for its watch without limit: etcd dies right
after the transaction, before the broker's watch delivers it. The commit answers within
``OWN_WATCH_WAIT_S`` with the change published, listeners are told of it once, and when etcd
returns the watch's delivery of that revision changes nothing more (a registration below it is
still applied). A three-member etcd of this module's own (``tests/etcd_cluster.py``): the test
kills the quorum.

The broker's watch reaches etcd through a ``ProxiedEtcd`` cut just before the transaction (which goes
straight to etcd), so the watch cannot have delivered the change before the quorum dies: the
interleaving is the same every run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from etcd_cluster import EtcdCluster, ProxiedEtcd, broker_store
from polling import until_async
from shoal.metadata import BrokerInfo, MetadataImage
from shoal.etcd.client import EtcdClient, parse_url
from shoal.metadata.etcd import OWN_WATCH_WAIT_S


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    c.start()
    yield c
    c.close()



async def test_quorum_dies_right_after_the_txn_commit_answers_within_the_bound(cluster, caplog):
    caplog.set_level(logging.INFO, "shoal.metadata.etcd")
    cluster.start_all()
    prefix = f"/wait-{uuid.uuid4().hex[:8]}"
    proxy = ProxiedEtcd(cluster)
    a = broker_store(proxy.url(prefix), node_id=1)  # its watch: via the proxy
    b = broker_store(cluster.url(prefix), node_id=2)
    direct = EtcdClient(parse_url(cluster.url(prefix))[0])
    await a.start()
    await b.start()
    told: list[tuple[MetadataImage, MetadataImage]] = []
    a.subscribe(lambda old, new: told.append((old, new)))
    real_txn = a.backend.client.txn

    async def txn_then_quorum_dies(compare, success, failure=None, timeout=None):
        proxy.cut()  # the watch goes blind first
        await until_async(lambda: not a.backend.reachable, 10)
        # a registration lands below the change's revision: the watch has not delivered it either
        await b.register_broker(BrokerInfo(2, "127.0.0.1", 9999, "dc2"))
        resp = await direct.txn(compare, success, failure)  # the change's own transaction: it succeeds
        for i in range(len(cluster.members)):
            cluster.kill_member(i)  # SIGKILL: etcd is gone before anything more is said
        return resp

    try:
        await a.create_topic("before", [(1,)], {})
        epoch = a.image.epoch
        told.clear()
        a.backend.client.txn = txn_then_quorum_dies
        t0 = time.monotonic()
        await asyncio.wait_for(a.create_topic("t", [(1,)], {}), 30)
        took = time.monotonic() - t0
        a.backend.client.txn = real_txn
        # the caller has its answer with the change published, etcd still down
        assert "t" in a.image.topics and a.image.epoch == epoch + 1
        assert [set(new.topics) - set(old.topics) for old, new in told] == [{"t"}]
        assert any("before its watch delivered it" in r.getMessage() for r in caplog.records)
        assert took < OWN_WATCH_WAIT_S + 15, took  # the wait for the watch was bounded
        assert 2 not in a.image.brokers  # the registration below it is still to come

        await asyncio.to_thread(cluster.start_all)
        proxy.restore()
        await until_async(lambda: 2 in a.image.brokers)  # the watch caught up: the registration applied
        await until_async(lambda: a.backend._revision >= b.backend._revision and not a.backend._ahead)
        # every change told once, in epoch order; the image never went back
        assert [set(new.topics) - set(old.topics) for old, new in told] == [{"t"}, set()]
        assert set(told[1][1].brokers) - set(told[1][0].brokers) == {2}
        assert all(new.epoch >= old.epoch for old, new in told)
        assert a.image.topics == b.image.topics and a.image.epoch == b.image.epoch == epoch + 1
        # and the next change commits normally, through the watch
        told.clear()
        await a.create_topic("after", [(1,)], {})
        await until_async(lambda: "after" in b.image.topics)
        assert len(told) == 1 and a.image.epoch == epoch + 2
        print(f"commit answered {took:.2f} s after its transaction (etcd killed right after it)")
    finally:
        a.backend.client.txn = real_txn
        await asyncio.to_thread(cluster.start_all)
        proxy.close()
        await direct.close()
        await a.close()
        await b.close()


async def test_an_answer_lost_in_transit_is_sent_again_and_the_change_made_once(cluster):
    """The transaction lands but its answer is lost (the member died as it answered): the commit
    sends it again with the same compare; that one fails, and the writer token in /meta/epoch shows
    the first landed, so the caller gets its success, not TOPIC_ALREADY_EXISTS, and one change."""
    import grpc

    cluster.start_all()
    s = broker_store(cluster.url(f"/lost-{uuid.uuid4().hex[:8]}"), node_id=1)
    await s.start()
    real_txn = s.backend.client.txn
    calls = []

    async def lands_then_answer_lost(compare, success, failure=None, timeout=None):
        resp = await real_txn(compare, success, failure, timeout)
        calls.append(resp.succeeded)
        if len(calls) == 1:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       "connection reset as the member answered")
        return resp

    told: list[tuple[MetadataImage, MetadataImage]] = []
    s.subscribe(lambda old, new: told.append((old, new)))
    try:
        epoch = s.image.epoch
        s.backend.client.txn = lands_then_answer_lost
        await s.create_topic("t", [(1,)], {})
        assert calls == [True, False]  # sent twice, made once
        assert "t" in s.image.topics and s.image.epoch == epoch + 1
        assert len(told) == 1
    finally:
        s.backend.client.txn = real_txn
        await s.close()
