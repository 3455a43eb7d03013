"""The etcd backend against a real three-member etcd (``tests/etcd_cluster.py``): two stores on one
prefix are two brokers of one cluster. (The contract suites run on etcd too:
``test_embedded_store.py::TestContract``, ``test_decide_commit.py``.)"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from etcd_cluster import broker_store
from polling import until_async
from shoal.metadata import AclEntry, BrokerInfo, IsrChange, MetadataError, MetadataImage, codec
from shoal.metadata.change import Change, Result
from shoal.metadata.rules import topics as topic_rules
from shoal.etcd.client import parse_url

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def two(etcd_cluster, etcd_prefix):
    """Two stores (two brokers) on one prefix."""
    url = etcd_cluster.url(etcd_prefix)
    a, b = broker_store(url, node_id=1), broker_store(url, node_id=2)
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


until = functools.partial(until_async, every=0.001)  # a millisecond: propagation delays are measured


def test_parse_url():
    assert parse_url("etcd://127.0.0.1:2379") == ([("127.0.0.1", 2379)], "/shoal")
    assert parse_url("etcd://a:1,b:2/prod/") == ([("a", 1), ("b", 2)], "/prod")
    assert parse_url("etcd://a:1/x/y") == ([("a", 1)], "/x/y")
    for bad in ("http://a:1", "etcd://a", "etcd://a:0", "etcd://:1", "etcd://a:1,b"):
        with pytest.raises(ValueError):
            parse_url(bad)


async def test_a_change_through_one_broker_is_seen_by_the_other(two):
    a, b = two
    assert a.image.cluster_id == b.image.cluster_id and len(a.image.cluster_id) == 22
    seen: list[tuple[int, int]] = []
    b.subscribe(lambda old, new: seen.append((old.epoch, new.epoch)))
    delays = []
    for i in range(20):
        t = await a.create_topic(f"t{i}", [(1,), (2,)], {"retention.ms": str(i)})
        delays.append(await until(lambda: f"t{i}" in b.image.topics))
        assert b.image.topics[f"t{i}"] == t
    delays.sort()
    print(f"propagation a -> b: p50 {delays[10] * 1000:.2f} ms, max {delays[-1] * 1000:.2f} ms")
    assert delays[-1] < 1.0
    # b published each of a's changes once, in order, one epoch apart
    assert seen == [(e, e + 1) for e in range(seen[0][0], seen[0][0] + 20)]
    assert b.image.epoch == a.image.epoch


async def test_same_topic_created_through_both_brokers_at_once_exactly_one_wins(two):
    a, b = two
    for i in range(15):
        results = await asyncio.gather(a.create_topic(f"x{i}", [(1,)], {}), b.create_topic(f"x{i}", [(2,)], {}),
                                       return_exceptions=True)
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1, results
        assert isinstance(lost[0], MetadataError) and lost[0].code == "TOPIC_ALREADY_EXISTS"
        await until(lambda: a.image.epoch == b.image.epoch)
        assert a.image.topics[f"x{i}"] == b.image.topics[f"x{i}"] == won[0]
    assert a.conflicts + b.conflicts >= 1  # they did race


async def test_concurrent_incremental_changes_through_both_brokers_all_land(two):
    a, b = two
    await a.create_topic("shared", [(1,)], {})
    await until(lambda: "shared" in b.image.topics)
    await asyncio.gather(
        *(s.alter_topic_configs("shared", {f"k{i}": str(i)}) for i in range(20) for s in [(a, b)[i % 2]]),
        *(s.add_partitions("shared", [(1,)]) for s in (a, b, a, b)),
        *(s.alter_acls([AclEntry(None, 2, f"r{i}", 3, "User:u", "*", 2, 3)], []) for i, s in enumerate((a, b) * 3)),
        *(s.allocate_producer_ids(10) for s in (a, b, a, b)),
    )
    await until(lambda: a.image.epoch == b.image.epoch)
    for s in (a, b):
        t = s.image.topics["shared"]
        assert dict(t.configs) == {f"k{i}": str(i) for i in range(20)}
        assert [p.partition for p in t.partitions] == [0, 1, 2, 3, 4]
        assert {x.resource_name for x in s.image.acls} == {f"r{i}" for i in range(6)}
        assert s.image.next_producer_id == 40
    assert a.image.acls == b.image.acls  # the same order on both


async def test_everything_the_image_holds_round_trips_through_etcd(two, etcd_cluster, etcd_prefix):
    a, b = two
    t = await a.create_tenant("Acme")
    await a.assign_user("alice", t.tenant_id, None, new_user=True)
    await a.set_tenant_admin("alice", True)
    await a.set_scram_credential("alice", "SCRAM-SHA-256", b"s", b"k", b"v", 4096)
    await a.create_namespaces([f"{t.tenant_id}_payments"])
    await a.set_namespace_configs(f"{t.tenant_id}_payments", {"retention.ms": "1"})
    await a.create_identity_pool(t.tenant_id, "https://idp", {"claim": "groups", "contains": "acme"})
    await a.create_topic(f"{t.tenant_id}_orders", [(1, 2)], {"cleanup.policy": "compact"})
    await a.rename_topic(f"{t.tenant_id}_orders", f"{t.tenant_id}_orders2")
    await a.alter_client_quotas([((("tenant", t.tenant_id),), {"producer_byte_rate": 1024.0})])
    await a.set_broker_configs({"log.retention.ms": "5"})
    await a.update_partition(f"{t.tenant_id}_orders2", 0, leader=2, isr=(2,))
    await until(lambda: a.image.epoch == b.image.epoch)
    c = broker_store(etcd_cluster.url(etcd_prefix), node_id=3)  # a broker that starts now
    await c.start()
    try:
        for other in (b.image, c.image):
            for field in ("cluster_id", "epoch", "topics", "topics_by_id", "broker_configs", "scram_credentials",
                          "tenants", "user_tenants", "tenant_admins", "namespaces", "acls", "client_quotas",
                          "renamed_topics", "next_producer_id", "identity_pools"):
                assert getattr(other, field) == getattr(a.image, field), field
        # the tenant-delete cascade is one transaction too
        await c.delete_tenant(t.tenant_id)
        await until(lambda: a.image.epoch == c.image.epoch)
        assert not a.image.tenants and not a.image.topics and not a.image.user_tenants
        assert not a.image.namespaces and not a.image.client_quotas and not a.image.tenant_admins
        assert not a.image.identity_pools
    finally:
        await c.close()


async def test_registration_and_duplicate_node_id(etcd_cluster, etcd_prefix):
    url = etcd_cluster.url(etcd_prefix)
    a = broker_store(url, node_id=1, session_timeout_ms=2000)
    b = broker_store(url, node_id=1, session_timeout_ms=2000)
    await a.start()
    await b.start()
    try:
        info = BrokerInfo(1, "127.0.0.1", 9092, "dc1", (("PLAINTEXT", "127.0.0.1", 9092),))
        await a.register_broker(info)
        assert a.image.brokers[1] == info and a.image.controller_id == 1
        await until(lambda: 1 in b.image.brokers)
        t0 = time.monotonic()
        with pytest.raises(MetadataError) as e:  # a's lease is kept alive: b is refused
            await b.register_broker(BrokerInfo(1, "127.0.0.1", 9093, "dc1"))
        assert e.value.code == "DUPLICATE_BROKER_REGISTRATION" and "127.0.0.1:9092" in e.value.message
        assert time.monotonic() - t0 >= 2.0  # it waited a session for a dead holder's lease
        assert b.image.brokers[1] == info
        await a.close()  # a clean shutdown revokes the lease: the id is free at once
        await until(lambda: 1 not in b.image.brokers, 5.0)
        await b.register_broker(BrokerInfo(1, "127.0.0.1", 9093, "dc1"))
        assert b.image.brokers[1].port == 9093
    finally:
        await a.close()
        await b.close()


_REGISTER = """
import asyncio, sys
from shoal.metadata import BrokerInfo
from shoal.cluster.registration import Registration
from shoal.metadata.etcd import EtcdMetadataStore
async def main():
    s = EtcdMetadataStore(sys.argv[1], node_id=7, session_timeout_ms=3000,
                          registration=Registration.for_backend)
    await s.start()
    await s.register_broker(BrokerInfo(7, "127.0.0.1", 7777, "dc7"))
    print("registered", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_a_killed_brokers_registration_goes_when_its_lease_expires(etcd_cluster, etcd_prefix):
    url = etcd_cluster.url(etcd_prefix)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _REGISTER, url], stdout=subprocess.PIPE, env=env)
    watcher = broker_store(url, node_id=1)
    await watcher.start()
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)  # type: ignore[union-attr]
        assert line.strip() == b"registered"
        await until(lambda: 7 in watcher.image.brokers)
        gone: list[MetadataImage] = []
        watcher.subscribe(lambda old, new: gone.append(new) if 7 in old.brokers and 7 not in new.brokers else None)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        waited = await until(lambda: 7 not in watcher.image.brokers, 15.0)
        print(f"registration gone {waited:.2f} s after kill -9 (lease TTL 3 s)")
        assert 1.0 <= waited <= 3.0 + 5.0  # kept while the lease lives, gone once it expires
        assert len(gone) == 1 and gone[0].epoch == watcher.image.epoch  # ephemeral: no epoch bump
        del t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        await watcher.close()


async def test_a_change_too_large_for_one_transaction_is_refused_clearly(etcd_cluster, etcd_prefix):
    """The harness's etcd takes 10,000 operations per transaction (docs/cluster.md); a change with
    more is refused with POLICY_VIOLATION naming the setting, and nothing is committed."""
    s = broker_store(etcd_cluster.url(etcd_prefix), node_id=1)
    await s.start()
    try:
        big = await s.create_topic("big", [(1, 2, 3)] * 2000, {})  # one key: fits
        assert len(s.image.topics["big"].partitions) == 2000 == len(big.partitions)
        epoch = s.image.epoch
        acls = [AclEntry(None, 2, f"r{i}", 3, "User:u", "*", 2, 3) for i in range(10001)]
        with pytest.raises(MetadataError) as e:
            await s.alter_acls(acls, [])
        assert e.value.code == "POLICY_VIOLATION" and "--max-txn-ops" in e.value.message
        assert s.image.epoch == epoch and not s.image.acls
    finally:
        await s.close()


async def test_a_batch_of_isr_changes_is_split_within_etcds_default_limits(etcd_cluster, etcd_prefix):
    """``alter_isrs`` over 300 topics: transactions of at most etcd's default 128 operations (127
    topics and the epoch), so 3 of them, whatever the members allow; with a byte budget of about
    two topics, one transaction per two topics. Every change is answered and in the image."""
    s = broker_store(etcd_cluster.url(etcd_prefix), node_id=1)
    await s.start()
    try:
        names = [f"t{i:03d}" for i in range(300)]
        await s.decide_and_commit(lambda img: _create_all(img, names))
        sizes: list[int] = []
        txn = s.backend.client.txn

        async def counting_txn(compare, success, failure=None, timeout=None):
            sizes.append(len(success))
            return await txn(compare, success, failure, timeout)

        s.backend.client.txn = counting_txn
        epoch = s.image.epoch
        answers = await s.alter_isrs([IsrChange(n, 0, 1, 0, 0, (1,)) for n in names])
        assert all(a.isr == (1,) for a in answers) and s.image.epoch == epoch + 3
        assert sizes == [128, 128, 47]
        assert all(s.image.topics[n].partitions[0].isr == (1,) for n in names)
        sizes.clear()
        s.backend.batch_max_bytes = 2 * len(json.dumps(codec.topic_to_json(s.image.topics["t000"]))) + 200
        answers = await s.alter_isrs([IsrChange(n, 0, 1, 0, 1, (1, 2)) for n in names[:10]])
        assert all(a.isr == (1, 2) for a in answers) and sizes == [3] * 5
    finally:
        await s.close()


def _create_all(img: MetadataImage, names: list[str]) -> Result[None]:
    """One change creating a one-partition topic (replicas 1, 2) of each name."""
    work = img
    for n in names:
        work = topic_rules.create_topic(work, n, [(1, 2)], {}, new_uuid=uuid.uuid4).change.apply(work)
    return Result(Change(topics={n: work.topics[n] for n in names}), None)


async def test_keys_are_readable_json_under_the_prefix(two, etcd_cluster, etcd_prefix):
    a, _ = two
    await a.create_topic("t", [(1,)], {})
    out = etcd_cluster.etcdctl("get", f"{etcd_prefix}/topics/t", "--print-value-only")
    assert json.loads(out)["name"] == "t"
    epoch = json.loads(etcd_cluster.etcdctl("get", f"{etcd_prefix}/meta/epoch", "--print-value-only"))
    assert epoch["epoch"] == a.image.epoch


async def test_a_key_written_by_hand_that_does_not_decode_is_ignored(two, etcd_cluster, etcd_prefix):
    a, b = two
    await asyncio.to_thread(etcd_cluster.etcdctl, "put", f"{etcd_prefix}/topics/junk", "not json")
    await a.create_topic("after", [(1,)], {})
    await until(lambda: "after" in b.image.topics)
    assert "junk" not in b.image.topics and b.backend.reachable


async def test_topics_are_written_compact_once_shoal_version_2_is_finalized(two, etcd_cluster, etcd_prefix, caplog):
    """The gated format (issue 28 part 2): topic values are version 1, what 0.14.0 reads, until
    shoal.version 2 is finalized, and version 2 (compact partition rows) after; both read back
    equal on the other broker, and a value of a version this release does not read is skipped in
    one error line, never misread (an unchanged topic keeps its version-1 value)."""
    from shoal.metadata.features import SHOAL_VERSION
    from shoal.metadata.rules.features import UPGRADE

    a, b = two

    def stored(name: str) -> dict:
        return json.loads(etcd_cluster.etcdctl("get", f"{etcd_prefix}/topics/{name}", "--print-value-only"))

    await a.finalize_missing_features({SHOAL_VERSION: 1})
    await a.create_topic("before", [(1, 2), (2, 1)], {})
    assert "v" not in stored("before") and len(stored("before")["partitions"]) == 2
    await a.update_features([(SHOAL_VERSION, 2, UPGRADE)])
    await until(lambda: b.image.features.levels.get(SHOAL_VERSION) == 2)
    await b.create_topic("after", [(1, 2), (2, 1)], {})
    doc = stored("after")
    assert doc["v"] == 2 and "partitions" not in doc
    assert doc["p"] == [[0, [1, 2], [1, 2], 1, 0, 0], [1, [2, 1], [2, 1], 2, 0, 0]]
    await until(lambda: "after" in a.image.topics)
    assert a.image.topics["after"] == b.image.topics["after"]
    assert "v" not in stored("before")  # unchanged topics are not rewritten
    # a value of a newer version than this release reads (as a later release would write it)
    await b.create_topic("isr", [(1, 2)], {})
    newer = {**stored("isr"), "v": 3}
    with caplog.at_level("ERROR", logger="shoal.metadata.etcd"):
        await asyncio.to_thread(etcd_cluster.etcdctl, "put", f"{etcd_prefix}/topics/isr", json.dumps(newer))
        await a.create_topic("later", [(1,)], {})
        await until(lambda: "later" in b.image.topics)
    # skipped, not misread: the image keeps the last version it could read
    assert b.image.topics["isr"].partitions[0].replicas == (1, 2)
    assert "skipping etcd key b'%s/topics/isr': a topic of format version 3, this broker (shoal " % etcd_prefix \
        in caplog.text
    assert "reads topic versions 1 to 2: a newer release wrote it" in caplog.text
