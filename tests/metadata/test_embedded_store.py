"""The embedded metadata store: persistence, atomicity, serialization of concurrent mutations.

The ``TestContract`` class is written against ``MetadataStore`` only and runs against every
backend (embedded files, memory, etcd). The compare-and-swap contract
and the retry loop are in ``test_decide_commit.py``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.metadata import BrokerInfo, MetadataError, MetadataImage
from shoal.metadata.embedded import (
    EmbeddedMetadataStore,
    MetadataFiles,
    new_cluster_id,
    resolve_path,
)
from shoal.metadata.memory import memory_store


@pytest.fixture(params=["embedded", "memory", "etcd"])
async def store(request, tmp_path: Path):
    if request.param == "etcd":  # a real 3-member etcd (tests/etcd_cluster.py), a prefix per test
        from etcd_cluster import broker_store

        s = broker_store(request.getfixturevalue("etcd_cluster").url(request.getfixturevalue("etcd_prefix")),
                              node_id=1)
    else:
        s = EmbeddedMetadataStore(tmp_path, node_id=1) if request.param == "embedded" else memory_store()
    await s.start()
    yield s
    await s.close()


async def reopen(s: EmbeddedMetadataStore, **kw) -> EmbeddedMetadataStore:
    await s.close()
    s2 = EmbeddedMetadataStore(s.path, node_id=s.node_id, **kw)
    await s2.start()
    return s2


class TestContract:
    async def test_create_topic_defaults(self, store):
        t = await store.create_topic("a", [(1, 2), (2, 1)], {"retention.ms": "5"})
        assert t.name == "a"
        assert t.topic_id.int != 0
        assert [p.partition for p in t.partitions] == [0, 1]
        assert t.partitions[0].replicas == (1, 2)
        assert t.partitions[0].isr == (1, 2)
        assert t.partitions[0].leader == 1
        assert t.partitions[1].leader == 2
        assert all(p.leader_epoch == 0 for p in t.partitions)
        assert dict(t.configs) == {"retention.ms": "5"}
        assert t.replication_factor == 2
        img = store.image
        assert img.topic("a") == t
        assert img.topics_by_id[t.topic_id] is img.topics["a"]

    async def test_create_existing_fails(self, store):
        await store.create_topic("a", [(1,)], {})
        with pytest.raises(MetadataError) as e:
            await store.create_topic("a", [(1,)], {})
        assert e.value.code == "TOPIC_ALREADY_EXISTS"

    async def test_delete(self, store):
        t = await store.create_topic("a", [(1,)], {})
        deleted = await store.delete_topic("a")
        assert deleted.topic_id == t.topic_id
        assert "a" not in store.image.topics
        assert t.topic_id not in store.image.topics_by_id
        with pytest.raises(MetadataError) as e:
            await store.delete_topic("a")
        assert e.value.code == "UNKNOWN_TOPIC_OR_PARTITION"

    async def test_recreate_gets_new_id(self, store):
        t1 = await store.create_topic("a", [(1,)], {})
        await store.delete_topic("a")
        t2 = await store.create_topic("a", [(1,)], {})
        assert t1.topic_id != t2.topic_id

    async def test_add_partitions_appends(self, store):
        t = await store.create_topic("a", [(1,)], {"x": "y"})
        t2 = await store.add_partitions("a", [(1,), (1,)])
        assert [p.partition for p in t2.partitions] == [0, 1, 2]
        assert t2.partitions[0] == t.partitions[0]
        assert t2.topic_id == t.topic_id
        assert dict(t2.configs) == {"x": "y"}
        with pytest.raises(MetadataError) as e:
            await store.add_partitions("nope", [(1,)])
        assert e.value.code == "UNKNOWN_TOPIC_OR_PARTITION"

    async def test_set_topic_configs_replaces(self, store):
        await store.create_topic("a", [(1,)], {"x": "1", "y": "2"})
        t = await store.set_topic_configs("a", {"y": "3"})
        assert dict(t.configs) == {"y": "3"}
        assert dict(store.image.topics["a"].configs) == {"y": "3"}
        with pytest.raises(MetadataError):
            await store.set_topic_configs("nope", {})

    async def test_broker_configs(self, store):
        await store.set_broker_configs({"log.retention.ms": "100"})
        assert dict(store.image.broker_configs) == {"log.retention.ms": "100"}
        await store.set_broker_configs({})
        assert dict(store.image.broker_configs) == {}

    async def test_register_broker(self, store):
        await store.register_broker(BrokerInfo(1, "localhost", 9092, "r1"))
        assert store.image.brokers[1] == BrokerInfo(1, "localhost", 9092, "r1")
        assert store.image.controller_id == 1

    async def test_epoch_bumps_and_subscribers_see_old_and_new(self, store):
        seen: list[tuple[MetadataImage, MetadataImage]] = []
        store.subscribe(lambda old, new: seen.append((old, new)))
        e0 = store.image.epoch
        await store.create_topic("a", [(1,)], {})
        await store.set_topic_configs("a", {"k": "v"})
        await store.delete_topic("a")
        assert [n.epoch for _, n in seen] == [e0 + 1, e0 + 2, e0 + 3]
        assert "a" not in seen[0][0].topics and "a" in seen[0][1].topics
        assert seen[1][0].topics["a"].configs == {} and seen[1][1].topics["a"].configs == {"k": "v"}
        assert seen[2][1] is store.image

    async def test_image_is_immutable(self, store):
        await store.create_topic("a", [(1,)], {"k": "v"})
        img = store.image
        with pytest.raises(TypeError):
            img.topics["b"] = img.topics["a"]  # type: ignore[index]
        with pytest.raises(TypeError):
            img.topics["a"].configs["k"] = "w"  # type: ignore[index]
        await store.create_topic("b", [(1,)], {})
        assert "b" not in img.topics  # an old image never changes

    async def test_failing_listener_does_not_break_store(self, store):
        def bad(old, new):
            raise RuntimeError("boom")

        store.subscribe(bad)
        await store.create_topic("a", [(1,)], {})
        assert "a" in store.image.topics

    async def test_concurrent_mutations_serialize(self, store):
        seen: list[int] = []
        store.subscribe(lambda old, new: seen.append(new.epoch - old.epoch))
        names = [f"t{i}" for i in range(30)]
        results = await asyncio.gather(
            *(store.create_topic(n, [(1,)], {}) for n in names),
            *(store.create_topic("dup", [(1,)], {}) for _ in range(5)),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, MetadataError)]
        assert len(errors) == 4 and all(e.code == "TOPIC_ALREADY_EXISTS" for e in errors)
        assert set(store.image.topics) == set(names) | {"dup"}
        assert seen == [1] * 31  # every change published exactly once, one epoch apart

    async def test_concurrent_add_partitions_do_not_lose_updates(self, store):
        await store.create_topic("a", [(1,)], {})
        await asyncio.gather(*(store.add_partitions("a", [(1,)]) for _ in range(10)))
        parts = store.image.topics["a"].partitions
        assert [p.partition for p in parts] == list(range(11))

    async def test_update_partition(self, store):
        await store.create_topic("a", [(1, 2)], {})
        p = await store.update_partition("a", 0, leader=2, isr=(2,))
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2,), 1, 1)
        p = await store.update_partition("a", 0, isr=(2, 1))
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 1), 1, 2)
        with pytest.raises(MetadataError):
            await store.update_partition("a", 5, leader=1)

    async def test_rename_remembers_former_names_while_they_mean_the_topic(self, store):
        from shoal.metadata import former_topic_names

        t = await store.create_topic("a", [(1,)], {})
        await store.rename_topic("a", "b")
        await store.rename_topic("b", "c")
        assert dict(store.image.renamed_topics) == {"a": t.topic_id, "b": t.topic_id}
        assert former_topic_names(store.image) == {"a": "c", "b": "c"}
        if isinstance(store, EmbeddedMetadataStore):
            store = await reopen(store)  # durable
        assert former_topic_names(store.image) == {"a": "c", "b": "c"}
        await store.rename_topic("c", "a")  # back to a former name: not former any more
        assert former_topic_names(store.image) == {"b": "a", "c": "a"}
        await store.create_topic("b", [(1,)], {})  # the name is taken again by another topic
        assert former_topic_names(store.image) == {"c": "a"}
        await store.delete_topic("a")
        assert dict(store.image.renamed_topics) == {}


class TestPersistence:
    async def test_restart_keeps_everything(self, tmp_path):
        s = EmbeddedMetadataStore(tmp_path, node_id=3)
        await s.start()
        cid = s.image.cluster_id
        a = await s.create_topic("a", [(3,), (3,)], {"cleanup.policy": "compact"})
        b = await s.create_topic("__consumer_offsets", [(3,)], {}, internal=True)
        await s.add_partitions("a", [(3,)])
        await s.set_broker_configs({"log.retention.ms": "1000"})
        epoch = s.image.epoch

        s2 = await reopen(s)
        img = s2.image
        assert img.cluster_id == cid
        assert img.epoch == epoch
        assert img.controller_id == 3
        assert img.topics["a"].topic_id == a.topic_id
        assert len(img.topics["a"].partitions) == 3
        assert dict(img.topics["a"].configs) == {"cleanup.policy": "compact"}
        assert img.topics["__consumer_offsets"].internal
        assert img.topics_by_id[b.topic_id].name == "__consumer_offsets"
        assert dict(img.broker_configs) == {"log.retention.ms": "1000"}
        assert img.brokers == {}  # registrations are ephemeral
        await s2.close()

    async def test_cluster_id_generated_once(self, tmp_path):
        s = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s.start()
        cid = s.image.cluster_id
        assert len(cid) == 22
        base = __import__("base64").urlsafe_b64decode(cid + "==")
        assert len(base) == 16
        s2 = await reopen(s)
        assert s2.image.cluster_id == cid  # persisted even without any mutation
        await s2.close()

    async def test_given_cluster_id_used_and_enforced(self, tmp_path):
        s = EmbeddedMetadataStore(tmp_path, node_id=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qk")
        await s.start()
        assert s.image.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"
        await s.close()
        with pytest.raises(MetadataError):
            await EmbeddedMetadataStore(tmp_path, node_id=1, cluster_id="other").start()
        with pytest.raises(MetadataError):
            await EmbeddedMetadataStore(tmp_path, node_id=2).start()

    async def test_path_resolution(self, tmp_path):
        assert resolve_path(tmp_path) == tmp_path / "__metadata" / "metadata.json"
        assert resolve_path(tmp_path / "m.json") == tmp_path / "m.json"
        s = EmbeddedMetadataStore(tmp_path / "m.json", node_id=1)
        await s.start()
        assert (tmp_path / "m.json").exists()
        await s.close()

    async def test_files_are_json_snapshot_and_journal(self, tmp_path):
        s = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s.start()
        t = await s.create_topic("a", [(1,)], {})
        assert json.loads(s.path.read_text())["topics"] == []  # the snapshot written at start
        [line] = s.journal.read_bytes().splitlines()  # the change alone: "<crc32> <json>"
        crc, body = line.split(b" ", 1)
        assert int(crc, 16) == zlib.crc32(body)
        rec = json.loads(body)
        assert (rec["seq"], rec["epoch"], list(rec["topics"])) == (1, 1, ["a"])
        assert rec["topics"]["a"]["topic_id"] == str(t.topic_id)
        await s.close()  # folds the journal into the snapshot
        doc = json.loads(s.path.read_text())
        assert doc["topics"][0]["topic_id"] == str(t.topic_id) and doc["journal_seq"] == 1
        assert s.journal.read_bytes() == b""
        assert not s.path.with_name("metadata.json.tmp").exists()

    async def test_corrupt_file_refused(self, tmp_path):
        p = resolve_path(tmp_path)
        p.parent.mkdir(parents=True)
        p.write_text("{not json")
        with pytest.raises(MetadataError) as e:
            await EmbeddedMetadataStore(tmp_path, node_id=1).start()
        assert e.value.code == "KAFKA_STORAGE_ERROR"

    async def test_closed_store_refuses_writes(self, store):
        await store.close()
        with pytest.raises(MetadataError):
            await store.create_topic("a", [(1,)], {})


class CrashAfterTemp(MetadataFiles):
    """Writes half the temp file, then 'crashes' before the rename; appends half a journal
    record, then 'crashes' before the fdatasync."""

    def __init__(self) -> None:
        self.crash = False

    def write_atomic(self, path: Path, data: bytes) -> None:
        if not self.crash:
            return super().write_atomic(path, data)
        path.with_name(path.name + ".tmp").write_bytes(data[: len(data) // 2])  # torn temp
        raise OSError("simulated crash")

    def append(self, path: Path, data: bytes) -> None:
        if not self.crash:
            return super().append(path, data)
        with open(path, "ab") as f:
            f.write(data[: len(data) // 2])  # torn record
        raise OSError("simulated crash")


class TestCrashes:
    async def test_failed_write_publishes_nothing_and_disk_keeps_old_state(self, tmp_path):
        files = CrashAfterTemp()
        s = EmbeddedMetadataStore(tmp_path, node_id=1, files=files)
        await s.start()
        await s.create_topic("a", [(1,)], {})
        seen = []
        s.subscribe(lambda o, n: seen.append(n))
        epoch = s.image.epoch
        files.crash = True
        with pytest.raises(MetadataError) as e:
            await s.create_topic("b", [(1,)], {})
        assert e.value.code == "KAFKA_STORAGE_ERROR"
        assert "b" not in s.image.topics and s.image.epoch == epoch and seen == []
        s2 = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s2.start()  # the torn journal record is dropped
        assert set(s2.image.topics) == {"a"}
        with pytest.raises(MetadataError):  # after a torn append a snapshot, which fails too
            await s.create_topic("c", [(1,)], {})
        assert set(s.image.topics) == {"a"} and s.image.epoch == epoch and seen == []
        files.crash = False
        await s.create_topic("b", [(1,)], {})  # the store still works after a failed write
        assert set(s.image.topics) == {"a", "b"}
        s3 = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s3.start()
        assert set(s3.image.topics) == {"a", "b"} and s3.image.epoch == s.image.epoch

    async def test_cancelled_mutation_still_consistent(self, tmp_path):
        s = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s.start()
        task = asyncio.create_task(s.create_topic("a", [(1,)], {}))
        await asyncio.sleep(0)  # let it take the lock and start writing
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # whatever happened, memory and disk agree
        s2 = EmbeddedMetadataStore(tmp_path, node_id=1)
        await s2.start()
        assert set(s2.image.topics) == set(s.image.topics)


class TestIds:
    async def test_zero_and_duplicate_topic_ids_skipped(self, tmp_path):
        fixed = uuid.UUID("12345678-1234-4234-8234-123456789abc")
        seq = iter([uuid.UUID(int=0), fixed, fixed, uuid.UUID(int=0), uuid.UUID(int=7), uuid.uuid4()])
        s = EmbeddedMetadataStore(tmp_path, node_id=1, cluster_id="c", new_uuid=lambda: next(seq))
        await s.start()
        a = await s.create_topic("a", [(1,)], {})
        b = await s.create_topic("b", [(1,)], {})
        assert a.topic_id == fixed
        assert b.topic_id == uuid.UUID(int=7)

    def test_new_cluster_id_shape(self):
        cid = new_cluster_id(lambda: uuid.UUID(int=0))
        assert cid == "AAAAAAAAAAAAAAAAAAAAAA"
        assert len(new_cluster_id()) == 22


_names = st.sampled_from(["a", "b", "c.d", "e_f"])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), _names, st.integers(1, 3), st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=3), max_size=2)),
        st.tuples(st.just("delete"), _names),
        st.tuples(st.just("add"), _names, st.integers(1, 2)),
        st.tuples(st.just("configs"), _names, st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=3), max_size=2)),
        st.tuples(st.just("broker"), st.dictionaries(st.sampled_from(["p", "q"]), st.text(max_size=3), max_size=2)),
    ),
    max_size=12,
)


def _snapshot(img: MetadataImage):
    return (
        img.cluster_id,
        img.epoch,
        dict(img.broker_configs),
        {n: (t.topic_id, t.partitions, dict(t.configs), t.internal) for n, t in img.topics.items()},
        set(img.topics_by_id),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_any_history_survives_restart(tmp_path_factory, ops):
    async def run():
        d = tmp_path_factory.mktemp("hist")
        s = EmbeddedMetadataStore(d, node_id=1)
        await s.start()
        for op in ops:
            try:
                if op[0] == "create":
                    await s.create_topic(op[1], [(1,)] * op[2], op[3])
                elif op[0] == "delete":
                    await s.delete_topic(op[1])
                elif op[0] == "add":
                    await s.add_partitions(op[1], [(1,)] * op[2])
                elif op[0] == "configs":
                    await s.set_topic_configs(op[1], op[2])
                else:
                    await s.set_broker_configs(op[1])
            except MetadataError:
                pass
        before = _snapshot(s.image)
        s2 = await reopen(s)
        assert _snapshot(s2.image) == before
        assert all(t.topic_id == tid for tid, t in s2.image.topics_by_id.items())

    asyncio.run(run())
