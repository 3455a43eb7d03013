"""The embedded store's journal: a change costs a record of what it changed; every acknowledged
change survives a crash at any byte; torn ends are dropped, corruption refused; compaction, old
files and a reader for running stores.

A "crash" here is a copy of the store's files taken between two acknowledged changes (each is
fdatasync'd before it is acknowledged, so this is what a SIGKILL or power loss leaves), or files
cut at a byte, or an injected write error; tests/e2e/test_metadata_crash.py kills a real broker.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.metadata import AclEntry, MetadataError, MetadataImage, ScramCredential, changed_topics
from shoal.metadata.embedded import (
    EmbeddedMetadataStore,
    MetadataFiles,
    journal_path,
    read_document,
    resolve_path,
)

CRED = ScramCredential("SCRAM-SHA-256", b"s" * 16, b"k" * 32, b"v" * 32, 4096)


def state(img: MetadataImage) -> tuple[Any, ...]:
    """Everything an image holds that is persisted (brokers are ephemeral)."""
    return (
        img.cluster_id,
        img.epoch,
        dict(img.broker_configs),
        {n: (t.topic_id, t.partitions, dict(t.configs), t.internal) for n, t in img.topics.items()},
        {i: t.name for i, t in img.topics_by_id.items()},
        {u: dict(c) for u, c in img.scram_credentials.items()},
        {k: (t.display_name, t.created_ms, dict(t.configs), dict(t.policy)) for k, t in img.tenants.items()},
        dict(img.user_tenants),
        set(img.tenant_admins),
        {n: dict(ns.configs) for n, ns in img.namespaces.items()},
        img.acls,
        {e: dict(v) for e, v in img.client_quotas.items()},
        dict(img.renamed_topics),
    )


def tenant_ids():
    """Deterministic tenant ids, so topic names can carry their prefixes."""
    n = 0

    def next_id() -> str:
        nonlocal n
        n += 1
        return f"lkc-{n:06d}"

    return next_id


def store(path: Path, **kw: Any) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, node_id=1, cluster_id="c", new_tenant_id=tenant_ids(),
                                 now_ms=lambda: 1000, **kw)


async def loaded(path: Path) -> EmbeddedMetadataStore:
    s = store(path)
    await s.start()
    return s


def copy_files(s: EmbeddedMetadataStore, dest: Path) -> Path:
    """The store's snapshot and journal as a crash would leave them (call between changes)."""
    dest.mkdir(parents=True)
    for f in (s.path, s.journal):
        if f.exists():
            shutil.copy(f, dest / f.name)
    return dest / s.path.name


async def provision(s: EmbeddedMetadataStore, n: int) -> list[str]:
    tids = []
    for i in range(n):
        tid = (await s.create_tenant(f"t{i}")).tenant_id
        await s.assign_user(f"u-{tid}", tid, CRED, new_user=True)
        await s.create_topic(f"{tid}_orders", [(1,)], {"retention.ms": "1000"})
        tids.append(tid)
    return tids


# -- what a change costs ---------------------------------------------------------------------------


async def test_a_change_writes_what_it_changed_whatever_the_store_holds(tmp_path):
    s = await loaded(tmp_path)
    sizes = []
    for n in (1, 300):
        before = s.journal.stat().st_size if s.journal.exists() else 0
        await provision(s, n)  # n tenants, users and topics
        lines = s.journal.read_bytes()[before:].splitlines()
        assert len(lines) == 3 * n
        sizes.append([len(line) for line in lines[-3:]])
    assert s.path.stat().st_size < 1000  # the snapshot written at start: nothing was rewritten
    for small, big in zip(*sizes):  # a record of the 301st tenant is the size of the first's
        assert abs(small - big) <= 8, sizes


async def test_the_new_image_shares_what_did_not_change(tmp_path):
    s = await loaded(tmp_path)
    await provision(s, 3)
    old = s.image
    t = await s.create_topic("x", [(1,), (1,)], {})
    new = s.image
    for section in ("tenants", "user_tenants", "scram_credentials", "namespaces", "client_quotas",
                    "broker_configs", "renamed_topics", "acls", "tenant_admins", "brokers"):
        assert getattr(new, section) is getattr(old, section), section
    assert all(new.topics[n] is old.topics[n] for n in old.topics)
    assert new.topics_by_id[t.topic_id] is new.topics["x"]
    assert changed_topics(old, new) == {"x": (None, t)}
    assert changed_topics(new, new) == {}
    await s.create_tenant("other")
    assert s.image.topics is new.topics and changed_topics(new, s.image) == {}


async def test_changed_topics_without_a_delta_diffs_the_mappings(tmp_path):
    s = await loaded(tmp_path)
    await s.create_topic("a", [(1,)], {})
    await s.create_topic("b", [(1,)], {})
    first = s.image
    await s.delete_topic("a")
    await s.rename_topic("b", "c")
    last = s.image  # two changes on: its delta is from the image in between, so it diffs
    assert changed_topics(first, last) == {
        "a": (first.topics["a"], None), "b": (first.topics["b"], None), "c": (None, last.topics["c"])}


# -- crashes -----------------------------------------------------------------------------------------


async def test_a_torn_last_record_is_dropped_at_every_byte(tmp_path):
    s = await loaded(tmp_path / "s")
    await provision(s, 2)
    before = state(s.image)
    await s.assign_user("late", "lkc-000001", CRED)  # the record the crash tears
    after = state(s.image)
    journal = s.journal.read_bytes()
    start = journal.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(start, len(journal) + 1):
        snapshot = copy_files(s, tmp_path / f"cut{cut}")
        journal_path(snapshot).write_bytes(journal[:cut])
        s2 = await loaded(snapshot)
        assert state(s2.image) == (after if cut == len(journal) else before), cut
        assert journal_path(snapshot).read_bytes() == b""  # folded into the snapshot at start
        await s2.create_topic("next", [(1,)], {})  # and the store goes on from there
        assert "next" in (await loaded(snapshot)).image.topics


async def test_a_bad_record_before_good_ones_is_refused(tmp_path):
    s = await loaded(tmp_path / "s")
    await provision(s, 1)
    lines = s.journal.read_bytes().splitlines(keepends=True)
    flipped = bytearray(lines[1])
    flipped[20] ^= 0x01
    cases = {
        "corrupt": lines[0] + bytes(flipped) + lines[2],
        "gap": lines[0] + lines[2],
    }
    for name, journal in cases.items():
        d = copy_files(s, tmp_path / name)
        journal_path(d).write_bytes(journal)
        with pytest.raises(MetadataError) as e:
            await loaded(d)
        assert e.value.code == "KAFKA_STORAGE_ERROR", name
        assert journal_path(d).read_bytes() == journal  # nothing is rewritten over it


class FailingFiles(MetadataFiles):
    """Fails chosen operations: an append writes half its record first (torn), a truncate
    leaves the journal whole (a crash between the snapshot's rename and the journal's cut)."""

    def __init__(self) -> None:
        self.fail: set[str] = set()

    def append(self, path: Path, data: bytes) -> None:
        if "append" in self.fail:
            with open(path, "ab") as f:
                f.write(data[: len(data) // 2])
            raise OSError("injected")
        super().append(path, data)

    def truncate(self, path: Path) -> None:
        if "truncate" in self.fail:
            raise OSError("injected")
        super().truncate(path)

    def write_atomic(self, path: Path, data: bytes) -> None:
        if "write_atomic" in self.fail:
            raise OSError("injected")
        super().write_atomic(path, data)


async def test_a_snapshot_whose_journal_was_not_cut_skips_the_records_it_holds(tmp_path):
    files = FailingFiles()
    s = store(tmp_path, files=files)
    await s.start()
    files.fail = {"truncate"}
    await s.create_tenant("a")
    await s.compact()
    assert json.loads(s.path.read_text())["journal_seq"] == 1 and s.journal.stat().st_size > 0
    await s.create_tenant("b")  # appended after the records the snapshot holds
    s2 = await loaded(copy_files(s, tmp_path / "crash"))
    assert state(s2.image) == state(s.image)


async def test_after_a_failed_append_the_next_change_writes_a_snapshot(tmp_path):
    files = FailingFiles()
    s = store(tmp_path, files=files)
    await s.start()
    await s.create_tenant("a")
    files.fail = {"append"}
    with pytest.raises(MetadataError):
        await s.create_tenant("b")
    assert len(s.image.tenants) == 1
    files.fail = set()
    await s.create_tenant("c")  # not appended after the torn record: a snapshot, journal cut
    assert s.journal.read_bytes() == b""
    assert set(json.loads(s.path.read_text())["tenants"][i]["display_name"] for i in range(2)) == {"a", "c"}
    await s.create_tenant("d")  # appends again
    s2 = await loaded(copy_files(s, tmp_path / "crash"))
    assert state(s2.image) == state(s.image)


# -- compaction, old files, readers ------------------------------------------------------------------


async def test_compaction_keeps_the_journal_near_its_threshold(tmp_path):
    s = store(tmp_path, compact_bytes=2000)
    await s.start()
    for i in range(40):
        await s.create_topic(f"t{i}", [(1,)], {})
        await s.compaction_done()
        assert s.journal.stat().st_size <= max(2000, s.path.stat().st_size) + 400
    assert json.loads(s.path.read_text())["journal_seq"] > 0
    s2 = await loaded(copy_files(s, tmp_path / "crash"))
    assert state(s2.image) == state(s.image)


async def test_close_folds_the_journal_into_the_snapshot(tmp_path):
    s = await loaded(tmp_path)
    await provision(s, 2)
    expected = state(s.image)
    await s.close()
    assert s.journal.read_bytes() == b""
    doc = json.loads(s.path.read_text())  # the snapshot alone is the state, as files before journals
    assert {t["name"] for t in doc["topics"]} == {"lkc-000001_orders", "lkc-000002_orders"}
    s.path.with_suffix(".journal").unlink()
    assert state((await loaded(tmp_path)).image) == expected


async def test_files_from_before_the_journal_load(tmp_path):
    topic_id = uuid.uuid4()
    old = {  # as the store wrote it before journals: json.dumps(indent=1), no journal_seq
        "version": 1, "cluster_id": "c", "node_id": 1, "epoch": 7, "next_producer_id": 2000,
        "broker_configs": {"log.retention.ms": "5"},
        "topics": [{"name": "lkc-000001_a", "topic_id": str(topic_id), "internal": False, "configs": {},
                    "partitions": [{"partition": 0, "replicas": [1], "isr": [1], "leader": 1,
                                    "leader_epoch": 0, "partition_epoch": 0}]}],
        "scram_credentials": {}, "tenants": [{"tenant_id": "lkc-000001", "display_name": "A",
                                              "created_ms": 5, "configs": {}, "policy": {}}],
        "user_tenants": {"alice": "lkc-000001"}, "tenant_admins": ["alice"], "namespaces": {},
        "acls": [["lkc-000001", 2, "a", 3, "User:alice", "*", 2, 3]],
        "client_quotas": [{"entity": [["user", "alice"]], "values": {"producer_byte_rate": 10.0}},
                          {"entity": [["tenant", "lkc-000001"]], "values": {"producer_byte_rate": 5.0}}],
        "renamed_topics": {},
    }
    p = resolve_path(tmp_path)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(old, indent=1))
    s = await loaded(tmp_path)
    img = s.image
    assert img.epoch == 7 and img.topics["lkc-000001_a"].topic_id == topic_id
    assert img.acls == (AclEntry("lkc-000001", 2, "a", 3, "User:alice", "*", 2, 3),)
    assert dict(img.client_quotas) == {(("user", "alice"),): {"producer_byte_rate": 10.0},
                                       (("tenant", "lkc-000001"),): {"producer_byte_rate": 5.0}}
    await s.delete_tenant("lkc-000001")
    assert await s.allocate_producer_ids(10) == (2000, 10)
    s2 = await loaded(copy_files(s, tmp_path / "crash"))
    assert state(s2.image) == state(s.image) and s2._next_producer_id == 2010
    assert dict(s2.image.tenants) == {} and dict(s2.image.user_tenants) == {} and s2.image.acls == ()
    assert list(s2.image.client_quotas) == [(("user", "alice"),)]  # the tenant's own quota went


async def test_read_document_sees_a_running_store(tmp_path):
    s = await loaded(tmp_path)
    await provision(s, 2)
    await s.alter_acls([AclEntry("lkc-000001", 2, "x", 3, "User:u0", "*", 2, 3)], [])
    live = read_document(tmp_path)
    await s.close()
    assert live == json.loads(s.path.read_text())


async def test_a_journal_without_its_snapshot_is_not_replayed(tmp_path):
    s = await loaded(tmp_path / "old")
    await provision(s, 1)
    d = tmp_path / "new"
    d.mkdir()
    shutil.copy(s.journal, d / "m.journal")
    s2 = store(d / "m.json")
    await s2.start()
    assert dict(s2.image.tenants) == {} and not (d / "m.journal").exists()


# -- any history, any crash point --------------------------------------------------------------------

_topic = st.sampled_from(["a", "b", "lkc-000001_t", "lkc-000002_t", "lkc-000001_ns:t"])
_user = st.sampled_from(["u1", "u2", "lkc-000001_u"])
_tenant = st.sampled_from(["lkc-000001", "lkc-000002", "lkc-000003"])
_cfg = st.dictionaries(st.sampled_from(["x", "y"]), st.sampled_from(["1", "2"]), max_size=2)
_acl = st.builds(AclEntry, st.sampled_from([None, "lkc-000001"]), st.just(2), _topic, st.just(3),
                 st.sampled_from(["User:u1", "User:*"]), st.just("*"), st.sampled_from([2, 3]),
                 st.sampled_from([2, 3]))
_entity = st.sampled_from([(("user", "u1"),), (("tenant", "lkc-000001"),), (("client-id", None),)])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("create_topic"), _topic, st.integers(1, 2), _cfg),
        st.tuples(st.just("delete_topic"), _topic),
        st.tuples(st.just("add_partitions"), _topic),
        st.tuples(st.just("set_topic_configs"), _topic, _cfg),
        st.tuples(st.just("update_partition"), _topic, st.integers(-1, 2)),
        st.tuples(st.just("rename_topic"), _topic, _topic),
        st.tuples(st.just("set_broker_configs"), _cfg),
        st.tuples(st.just("create_tenant"), st.sampled_from(["A", "B"])),
        st.tuples(st.just("delete_tenant"), _tenant),
        st.tuples(st.just("update_tenant"), _tenant, _cfg),
        st.tuples(st.just("assign_user"), _user, _tenant, st.booleans()),
        st.tuples(st.just("remove_user"), _user),
        st.tuples(st.just("set_scram_credential"), _user),
        st.tuples(st.just("delete_scram_credential"), _user),
        st.tuples(st.just("set_tenant_admin"), _user, st.booleans()),
        st.tuples(st.just("create_namespaces"), st.lists(st.sampled_from(["lkc-000001_ns", "n"]), max_size=2)),
        st.tuples(st.just("delete_namespaces"), st.lists(st.sampled_from(["lkc-000001_ns", "n"]), max_size=2),
                  st.lists(_topic, max_size=2)),
        st.tuples(st.just("set_namespace_configs"), st.sampled_from(["lkc-000001_ns", "n"]), _cfg),
        st.tuples(st.just("alter_acls"), st.lists(_acl, max_size=2), st.lists(_acl, max_size=2)),
        st.tuples(st.just("alter_client_quotas"), _entity,
                  st.dictionaries(st.sampled_from(["producer_byte_rate", "request_percentage"]),
                                  st.sampled_from([None, None, 1.0, 2.5]), min_size=1, max_size=2)),
        st.tuples(st.just("allocate_producer_ids"), st.integers(1, 1000)),
        st.tuples(st.just("fail_next_write")),
    ),
    max_size=30,
)


async def _apply(s: EmbeddedMetadataStore, op: tuple[Any, ...]) -> None:
    kind, *a = op
    if kind == "create_topic":
        await s.create_topic(a[0], [(1,)] * a[1], a[2])
    elif kind == "add_partitions":
        await s.add_partitions(a[0], [(1,)])
    elif kind == "update_partition":
        await s.update_partition(a[0], 0, leader=a[1], isr=(1,) if a[1] >= 0 else ())
    elif kind == "update_tenant":
        await s.update_tenant(a[0], configs=a[1], policy={"max_partitions": 3})
    elif kind == "assign_user":
        await s.assign_user(a[0], a[1], CRED if a[2] else None)
    elif kind == "set_scram_credential":
        await s.set_scram_credential(a[0], "SCRAM-SHA-512", b"t", b"k", b"v", 4096)
    elif kind == "delete_scram_credential":
        await s.delete_scram_credential(a[0], "SCRAM-SHA-512")
    elif kind == "alter_client_quotas":
        await s.alter_client_quotas([(a[0], a[1])])
    else:
        await getattr(s, kind)(*a)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, crash_at=st.integers(0, 30), compact_bytes=st.sampled_from([0, 600, 1 << 20]))
def test_any_history_reloads_as_it_was_acknowledged(tmp_path_factory, ops, crash_at, compact_bytes):
    """Replaying the journal (JSON level) gives the images the store published (object level),
    after every history of every kind of change, with compactions between them, failed writes
    (torn appends, failed snapshots) and a crash at any point."""

    async def run() -> None:
        d = tmp_path_factory.mktemp("hist")
        files = FailingFiles()
        s = store(d / "s", files=files, compact_bytes=compact_bytes)
        await s.start()
        crash: tuple[Path, tuple[Any, ...]] | None = None
        for i, op in enumerate(ops):
            if op[0] == "fail_next_write":
                files.fail = {"append", "write_atomic"}
                continue
            before = state(s.image)
            try:
                await _apply(s, op)
            except MetadataError:
                assert state(s.image) == before  # a failed change publishes nothing
            files.fail = set()
            if i == crash_at:
                async with s._lock:  # between changes, and not during a compaction
                    crash = (copy_files(s, d / "crash"), state(s.image))
        await s.compaction_done()
        s2 = await loaded(copy_files(s, d / "end"))
        assert state(s2.image) == state(s.image)
        assert s2._next_producer_id == s._next_producer_id
        assert all(t.topic_id == i for i, t in s2.image.topics_by_id.items())
        if crash is not None:
            assert state((await loaded(crash[0])).image) == crash[1]
        expected = state(s.image)
        await s.close()
        assert state((await loaded(d / "s")).image) == expected

    asyncio.run(run())
