"""``shoal.etcd.session.EtcdSession`` on its own, against the session's real etcd
(``tests/etcd_cluster.py``), each test on a prefix of its own: the election key and its fence, an
ephemeral key's claim, and a lost lease handed to its owner."""

from __future__ import annotations

import asyncio

import pytest

from polling import until_async
from shoal.etcd.client import EtcdClient, parse_url
from shoal.etcd.session import EtcdSession


@pytest.fixture
async def sessions(etcd_cluster, etcd_prefix):
    """Two sessions (leases of 3 s) on clients of their own, and a client to act behind their backs."""
    endpoints = parse_url(etcd_cluster.url(etcd_prefix))[0]
    a = EtcdSession(EtcdClient(endpoints), ttl_s=3)
    b = EtcdSession(EtcdClient(endpoints), ttl_s=3)
    direct = EtcdClient(endpoints)
    try:
        yield a, b, direct, etcd_prefix.encode()
    finally:
        for s in (a, b):
            await s.close()
            await s.client.close()
        await direct.close()


async def fenced_put(session: EtcdSession, fence: list, key: bytes) -> bool:
    """A transaction under ``fence``: whether it passed."""
    resp = await session.client.txn(fence, [session.client.put_op(key, b"x")])
    return bool(resp.succeeded)


async def test_campaign_takes_a_free_key_and_fences_by_its_creation_revision(sessions):
    a, b, direct, prefix = sessions
    key, other = prefix + b"/controller", prefix + b"/other"
    assert await a.campaign(key, b"1") is None  # no lease yet: nothing to campaign with
    lease_a = await a.lease()
    await b.lease()
    took = await a.campaign(key, b"1")
    assert took is not None and took.took and took.revision > 0
    seen = await b.campaign(key, b"2")
    assert seen is not None and not seen.took
    assert seen.holder is not None
    assert (seen.holder.value, seen.holder.lease, seen.holder.create_revision) == (b"1", lease_a, took.revision)
    assert await fenced_put(a, a.fence(key, took.revision), other)
    assert not await fenced_put(a, a.fence(key, -1), other)  # no epoch: compares false
    await a.close()  # the lease is revoked: the key goes at once
    again = await b.campaign(key, b"2")
    assert again is not None and again.took and again.revision > took.revision
    assert not await fenced_put(b, b.fence(key, took.revision), other)  # the former holder's epoch
    await b.delete_if_created(key, took.revision)  # not that holder's any more: stays
    assert (await direct.range(key)).kvs
    await b.delete_if_created(key, again.revision)
    assert not (await direct.range(key)).kvs


async def test_claim_creates_if_absent_and_replaces_only_its_own(sessions):
    a, b, direct, prefix = sessions
    key = prefix + b"/brokers/1"
    first = await a.claim(key, b"a1", replace_own=False)
    assert first.succeeded and first.revision > 0
    refused = await b.claim(key, b"b1", replace_own=False)
    assert not refused.succeeded and refused.holder is not None
    assert (refused.holder.value, refused.holder.lease) == (b"a1", a.lease_id)
    assert not (await b.claim(key, b"b1", replace_own=True)).succeeded  # not under b's lease
    assert (await a.claim(key, b"a2", replace_own=True)).succeeded
    kv = (await direct.range(key)).kvs[0]
    assert (kv.value, kv.lease) == (b"a2", a.lease_id)
    await a.put_ephemeral(prefix + b"/demand/1", b"d")
    assert [k for k, _v, _r in await b.read_prefix(prefix + b"/demand/")] == [prefix + b"/demand/1"]


async def test_a_lost_lease_is_handed_to_its_owner(sessions):
    a, _b, direct, prefix = sessions
    renewed: list[int] = []

    async def renew() -> None:
        renewed.append(await a.lease())

    a.on_lease_lost = renew
    first = await a.lease()
    await direct.lease_revoke(first)  # behind its back: the keeper finds TTL 0 at its next round
    await until_async(lambda: renewed, timeout=5.0)
    assert renewed[0] not in (None, first) and a.lease_id == renewed[0]
    await asyncio.sleep(1.5)  # the new lease is kept alive
    assert a.keeper is not None and a.keeper.refreshes > 0 and a.lease_id == renewed[0]
