"""A broker whose registration lease is lost registers again under a new lease, in one log line:
the lease revoked behind its back, or expired while it was cut off from etcd (``ProxiedEtcd``); and
it stays unregistered, saying why, when another live broker took its node id meanwhile. Against the
session's real etcd (``tests/etcd_cluster.py``), each test on a prefix of its own."""

from __future__ import annotations

import asyncio
import logging

import pytest

from etcd_cluster import ProxiedEtcd, broker_store
from polling import until_async
from shoal.etcd.client import EtcdClient, parse_url
from shoal.metadata import BrokerInfo

SESSION_MS = 3000  # a lease of 3 s, kept alive every second



@pytest.fixture
async def pair(etcd_cluster, etcd_prefix):
    """Stores of brokers 1 and 2, and a client of etcd's own (to act behind their backs)."""
    url = etcd_cluster.url(etcd_prefix)
    a = broker_store(url, node_id=1, session_timeout_ms=SESSION_MS)
    b = broker_store(url, node_id=2, session_timeout_ms=SESSION_MS)
    direct = EtcdClient(parse_url(url)[0])
    await a.start()
    await b.start()
    try:
        yield a, b, direct
    finally:
        await direct.close()
        await a.close()
        await b.close()


def info(node_id: int, port: int = 9092) -> BrokerInfo:
    return BrokerInfo(node_id, "127.0.0.1", port, f"dc{node_id}")


def again_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "register again" in r.getMessage()
            or "registered again" in r.getMessage()]


async def test_a_revoked_lease_registers_again_under_a_new_one(pair, caplog):
    caplog.set_level(logging.INFO, "shoal.cluster.registration")
    a, b, direct = pair
    await a.register_broker(info(1))
    await until_async(lambda: 1 in b.image.brokers)
    first = a.backend.session.lease_id
    await direct.lease_revoke(first)  # behind the broker's back
    await until_async(lambda: 1 not in b.image.brokers, 5)
    took = await until_async(lambda: 1 in b.image.brokers, 10)  # back, within about a keep-alive round
    assert a.backend.session.lease_id not in (None, first)
    assert b.image.brokers[1] == info(1) and 1 in a.image.brokers
    await until_async(lambda: again_lines(caplog), 5)  # said once registered (the watch may show it first)
    assert len(again_lines(caplog)) == 1, again_lines(caplog)
    # the new lease is kept alive: still registered a few sessions later
    await asyncio.sleep(2 * SESSION_MS / 1000)
    assert 1 in b.image.brokers
    print(f"registered again {took:.2f} s after the revocation")


async def test_a_lease_expired_while_cut_off_registers_again_when_etcd_is_back(etcd_cluster, etcd_prefix, caplog):
    caplog.set_level(logging.INFO, "shoal.cluster.registration")
    proxy = ProxiedEtcd(etcd_cluster)
    a = broker_store(proxy.url(etcd_prefix), node_id=1, session_timeout_ms=SESSION_MS)
    b = broker_store(etcd_cluster.url(etcd_prefix), node_id=2, session_timeout_ms=SESSION_MS)
    await a.start()
    await b.start()
    try:
        await a.register_broker(info(1))
        await until_async(lambda: 1 in b.image.brokers)
        proxy.cut()
        await until_async(lambda: 1 not in b.image.brokers, 15)  # the lease expired: the cluster sees it gone
        await asyncio.sleep(1.5)  # and some keep-alive rounds fail meanwhile
        proxy.restore()
        await until_async(lambda: 1 in b.image.brokers, 15)
        await until_async(lambda: 1 in a.image.brokers, 15)
        await until_async(lambda: again_lines(caplog), 5)  # said once registered (the watch may show it first)
        assert len(again_lines(caplog)) == 1, again_lines(caplog)
    finally:
        await a.close()
        await b.close()
        proxy.close()


async def test_a_node_id_taken_meanwhile_is_not_taken_back(etcd_cluster, etcd_prefix, caplog):
    """Broker 1's lease is revoked while it cannot reach etcd (through a proxy, cut), and another
    process registers node id 1 before broker 1 can notice: when etcd is back, broker 1 finds its
    lease gone and the id held by a live broker, says so, and stays unregistered. (Revoking it
    while it was connected raced with its keep-alive, which notices within a second.)"""
    caplog.set_level(logging.INFO, "shoal.cluster.registration")
    proxy = ProxiedEtcd(etcd_cluster)
    url = etcd_cluster.url(etcd_prefix)
    a = broker_store(proxy.url(etcd_prefix), node_id=1, session_timeout_ms=SESSION_MS)
    b = broker_store(url, node_id=2, session_timeout_ms=SESSION_MS)
    direct = EtcdClient(parse_url(url)[0])
    await a.start()
    await b.start()
    try:
        await a.register_broker(info(1))
        await until_async(lambda: 1 in b.image.brokers)
        proxy.cut()
        await direct.lease_revoke(a.backend.session.lease_id)  # behind the broker's back
        await until_async(lambda: 1 not in b.image.brokers, 5)
        await b.register_broker(info(1, 9999))  # another process takes node id 1 first
        proxy.restore()
        await until_async(lambda: any("stays unregistered" in line for line in again_lines(caplog)), 20)
        assert b.image.brokers[1].port == 9999  # the newcomer keeps it
        assert len(again_lines(caplog)) == 1, again_lines(caplog)
    finally:
        await direct.close()
        await a.close()
        await b.close()
        proxy.close()
