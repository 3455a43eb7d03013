"""Decide, then commit: compare-and-swap against the epoch a change was decided on, and the one
retry loop (``DecidingStore.decide_and_commit``) that keeps concurrent commands from losing updates.

Every test runs against each backend (embedded files, memory, etcd). Interleavings are forced by a
wrapper backend that lets other coroutines run between a decision and its compare-and-swap, and
that can commit a "remote" change first (what another broker sharing the quorum would do), so
decisions are made on stale images and must be decided again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.metadata import AclEntry, IsrChange, MetadataError, MetadataImage
from shoal.metadata.change import Change, Result
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.metadata.memory import MemoryBackend
from shoal.metadata.rules import topics as topic_rules
from shoal.metadata.store import CommitConflict, DecidingStore, MetadataBackend


class Interleaving(MetadataBackend):
    """Wraps a backend: before each compare-and-swap, yields to the event loop ``yields()`` times
    and, when ``remote()`` says so, commits a change of its own first (another broker's)."""

    def __init__(self, inner: MetadataBackend, yields: Any = lambda: 0, remote: Any = lambda: None) -> None:
        super().__init__()
        self.inner, self.yields, self.remote = inner, yields, remote
        self.remote_topics: list[str] = []

    @property
    def image(self) -> MetadataImage:
        return self.inner.image

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def writable(self) -> MetadataImage:
        return self.inner.writable()

    def subscribe(self, listener: Any) -> None:
        self.inner.subscribe(listener)

    def txn_budget(self) -> Any:
        return self.inner.txn_budget()

    async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
        for _ in range(self.yields()):
            await asyncio.sleep(0)
        name = self.remote()
        if name is not None:  # another broker's change lands first
            img = self.inner.image
            r = topic_rules.create_topic(img, name, [(2,)], {}, new_uuid=uuid.uuid4)
            await self.inner.commit(r.change, img.epoch)
            self.remote_topics.append(name)
        return await self.inner.commit(change, expected_epoch)


@pytest.fixture(params=["embedded", "memory", "etcd"])
def make_store(request, tmp_path_factory):
    """``make_store(wrap)``: a started store whose backend is ``wrap(backend)``."""
    stores: list[DecidingStore] = []
    etcd = request.getfixturevalue("etcd_cluster") if request.param == "etcd" else None

    async def make(wrap: Any = lambda b: b) -> DecidingStore:
        if etcd is not None:  # a real 3-member etcd (tests/etcd_cluster.py), a fresh prefix each
            from shoal.metadata.etcd import EtcdMetadataStore

            s: DecidingStore = EtcdMetadataStore(etcd.url(f"/shoal-test/{uuid.uuid4().hex[:12]}"), node_id=1)
        elif request.param == "embedded":
            s = EmbeddedMetadataStore(tmp_path_factory.mktemp("m"), node_id=1)
        else:
            s = DecidingStore(MemoryBackend())
        s.backend = wrap(s.backend)
        await s.start()
        stores.append(s)
        return s

    return make


# -- the backend contract: compare-and-swap ---------------------------------------------------------


async def test_commit_against_a_stale_epoch_changes_nothing(make_store):
    s = await make_store()
    seen: list[int] = []
    s.subscribe(lambda old, new: seen.append(new.epoch))
    stale = s.image
    await s.create_topic("a", [(1,)], {})
    before = s.image
    with pytest.raises(CommitConflict) as e:
        await s.backend.commit(Change(broker_configs={"x": "1"}), stale.epoch)
    assert (e.value.expected, e.value.actual) == (stale.epoch, before.epoch)
    assert s.image is before and seen == [before.epoch]
    new = await s.backend.commit(Change(broker_configs={"x": "1"}), before.epoch)
    assert new is s.image and new.epoch == before.epoch + 1 and seen[-1] == new.epoch


async def test_a_stale_decision_is_decided_again_on_the_newer_image(make_store):
    """The second create of the same name was decided when the name was free; its commit loses
    the compare-and-swap, and decided again it is TOPIC_ALREADY_EXISTS, not a second topic."""
    s = await make_store(lambda b: Interleaving(b, yields=lambda: 3))
    results = await asyncio.gather(s.create_topic("a", [(1,)], {}), s.create_topic("a", [(1,)], {}),
                                   return_exceptions=True)
    assert sum(isinstance(r, MetadataError) and r.code == "TOPIC_ALREADY_EXISTS" for r in results) == 1
    assert s.conflicts >= 1 and len(s.image.topics) == 1


async def test_a_remote_change_between_decision_and_commit_is_kept(make_store):
    """Another broker commits first: the local command loses the swap, is decided again and both
    changes are in the final image."""
    names = iter(["remote-1", None, None, None])
    s = await make_store(lambda b: Interleaving(b, remote=lambda: next(names, None)))
    t = await s.create_topic("local", [(1,)], {})
    assert s.conflicts == 1 and set(s.image.topics) == {"remote-1", "local"}
    assert s.image.topics["local"] is t


async def test_no_change_no_commit(make_store):
    s = await make_store()
    await s.create_namespaces(["n"])
    epoch = s.image.epoch
    await s.create_namespaces(["n"])
    await s.alter_acls([], [])
    assert s.image.epoch == epoch


# -- the property: no lost updates ------------------------------------------------------------------

_commands = st.lists(
    st.one_of(
        st.tuples(st.just("create_topic"), st.sampled_from(["t1", "t2", "t3", "t4"])),
        st.tuples(st.just("add_partition")),
        st.tuples(st.just("alter_config")),
        st.tuples(st.just("add_acl")),
        st.tuples(st.just("set_quota")),
        st.tuples(st.just("allocate_producer_ids"), st.integers(1, 50)),
        st.tuples(st.just("create_tenant")),
    ),
    min_size=1,
    max_size=25,
)


async def _run(s: DecidingStore, i: int, cmd: tuple[Any, ...]) -> Any:
    kind = cmd[0]
    if kind == "create_topic":
        return await s.create_topic(cmd[1], [(1,)], {})
    if kind == "add_partition":
        return await s.add_partitions("shared", [(1,)])
    if kind == "alter_config":
        return await s.alter_topic_configs("shared", {f"k{i}": str(i)})
    if kind == "add_acl":
        return await s.alter_acls([AclEntry(None, 2, f"r{i}", 3, "User:u", "*", 2, 3)], [])
    if kind == "set_quota":
        return await s.alter_client_quotas([((("user", "u"),), {f"q{i}": float(i)})])
    if kind == "allocate_producer_ids":
        return await s.allocate_producer_ids(cmd[1])
    return await s.create_tenant(f"T{i}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands=_commands, yields=st.lists(st.integers(0, 4), min_size=1, max_size=8),
       remote=st.lists(st.booleans(), max_size=8))
def test_concurrent_commands_on_stale_images_lose_no_update(make_store, commands, yields, remote):
    """All commands run at once; each decision may be made on an image that is stale by the time
    it commits, and other brokers' changes land in between. Whatever the interleaving, the final
    image holds the effect of every command that succeeded, and only duplicate creations fail."""

    async def run() -> None:
        ys, rs = iter(yields * 100), iter(remote)
        remote_names = (f"remote-{i}" for i in range(100))
        s = await make_store(lambda b: Interleaving(
            b, yields=lambda: next(ys, 0), remote=lambda: next(remote_names) if next(rs, False) else None))
        seen: list[tuple[int, int]] = []
        s.subscribe(lambda old, new: seen.append((old.epoch, new.epoch)))
        start = s.image.epoch
        await s.create_topic("shared", [(1,)], {})
        results = await asyncio.gather(*(_run(s, i, c) for i, c in enumerate(commands)), return_exceptions=True)
        img = s.image

        failed = [(c, r) for c, r in zip(commands, results) if isinstance(r, BaseException)]
        created = [c[1] for c in commands if c[0] == "create_topic"]
        assert all(c[0] == "create_topic" and r.code == "TOPIC_ALREADY_EXISTS" for c, r in failed), failed
        assert len(failed) == len(created) - len(set(created))
        assert set(img.topics) == {"shared"} | set(created) | set(s.backend.remote_topics)

        shared = img.topics["shared"]
        adds = sum(c[0] == "add_partition" for c in commands)
        assert [p.partition for p in shared.partitions] == list(range(1 + adds))
        assert dict(shared.configs) == {f"k{i}": str(i) for i, c in enumerate(commands) if c[0] == "alter_config"}
        assert {a.resource_name for a in img.acls} == {f"r{i}" for i, c in enumerate(commands) if c[0] == "add_acl"}
        quotas = {f"q{i}": float(i) for i, c in enumerate(commands) if c[0] == "set_quota"}
        assert dict(img.client_quotas.get((("user", "u"),), {})) == quotas
        blocks = sorted(r for c, r in zip(commands, results) if c[0] == "allocate_producer_ids")
        assert sum(n for _, n in blocks) == img.next_producer_id  # disjoint, contiguous from 0
        assert all(a + n == b for (a, n), (b, _) in zip(blocks, blocks[1:])) and (not blocks or blocks[0][0] == 0)
        assert len(img.tenants) == sum(c[0] == "create_tenant" for c in commands)

        # every commit published once, one epoch apart; one per command that changed something
        assert seen == [(e, e + 1) for e in range(start, img.epoch)]
        assert img.epoch - start == 1 + len(commands) - len(failed) + len(s.backend.remote_topics)
        if isinstance(s, EmbeddedMetadataStore):  # what was acknowledged is what reloads
            await s.close()
            s2 = EmbeddedMetadataStore(s.path, node_id=1)
            await s2.start()
            assert s2.image.topics.keys() == img.topics.keys() and s2.image.epoch == img.epoch
            assert s2.image.next_producer_id == img.next_producer_id
            await s2.close()

    asyncio.run(run())


async def test_many_concurrent_writers_all_land(make_store):
    """A burst far above the default retry budget's reach still completes: each lost swap means
    another writer won, so every writer eventually commits."""
    s = await make_store(lambda b: Interleaving(b, yields=lambda: 1))
    await s.create_topic("shared", [(1,)], {})
    await asyncio.gather(*(s.alter_topic_configs("shared", {f"k{i}": "v"}) for i in range(60)))
    assert len(s.image.topics["shared"].configs) == 60 and s.conflicts > 0


async def test_a_backend_that_never_lets_a_swap_through_gives_a_retriable_error(make_store, monkeypatch):
    from shoal.metadata import store as store_mod

    class Starved(Interleaving):
        async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
            raise CommitConflict(expected_epoch, expected_epoch + 1)

    monkeypatch.setattr(store_mod, "MAX_ATTEMPTS", 5)
    s = await make_store(lambda b: Starved(b))
    with pytest.raises(MetadataError) as e:
        await s.create_topic("a", [(1,)], {})
    assert e.value.code == "REQUEST_TIMED_OUT" and s.conflicts == 5 and "a" not in s.image.topics


async def test_a_callers_precondition_decided_with_the_rule_holds_under_races(make_store):
    """A policy read from the image (here: at most 5 topics) holds across concurrent writers when
    the caller decides it together with the rule, in one decision: each retry re-checks it on the
    newer image. (Checked before the call instead, all 12 would pass it.)"""

    def capped(img: MetadataImage, name: str):
        if len(img.topics) >= 5:
            raise MetadataError("POLICY_VIOLATION", "at most 5 topics")
        return topic_rules.create_topic(img, name, [(1,)], {}, new_uuid=uuid.uuid4)

    s = await make_store(lambda b: Interleaving(b, yields=lambda: 2))
    results = await asyncio.gather(
        *(s.decide_and_commit(lambda img, n=f"t{i}": capped(img, n)) for i in range(12)), return_exceptions=True)
    assert len(s.image.topics) == 5 and s.conflicts > 0
    assert sum(isinstance(r, MetadataError) and r.code == "POLICY_VIOLATION" for r in results) == 7


# -- a batch of ISR changes (Kafka's AlterPartition with many partitions) ---------------------------


async def _isr_topics(s: DecidingStore, names: list[str]) -> None:
    """A one-partition topic (replicas 1, 2; leader 1) of each name, in one change."""

    def create(img: MetadataImage) -> Any:
        work = img
        for n in names:
            work = topic_rules.create_topic(work, n, [(1, 2)], {}, new_uuid=uuid.uuid4).change.apply(work)
        return Result(Change(topics={n: work.topics[n] for n in names}), None)

    await s.decide_and_commit(create)


async def test_a_batch_of_isr_changes_commits_together_and_a_stale_one_fails_alone(make_store):
    """Five shrinks and one decided on a partition epoch that has moved: the five commit in one
    commit (on etcd with room for two topics a transaction: three), the stale one is refused with
    INVALID_UPDATE_VERSION and its partition left as it was."""
    s = await make_store()
    names = [f"t{i}" for i in range(6)]
    await _isr_topics(s, names)
    await s.alter_isr("t5", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1,))
    commits = 1
    if hasattr(s.backend, "batch_max_ops"):  # etcd
        s.backend.batch_max_ops, commits = 3, 3
    epoch = s.image.epoch
    answers = await s.alter_isrs([IsrChange(n, 0, 1, 0, 0, (1,)) for n in names])
    assert [a.isr for a in answers[:5]] == [(1,)] * 5 and all(a.partition_epoch == 1 for a in answers[:5])
    assert isinstance(answers[5], MetadataError) and answers[5].code == "INVALID_UPDATE_VERSION"
    assert s.image.epoch == epoch + commits
    assert [s.image.topics[n].partitions[0].partition_epoch for n in names] == [1] * 6


async def test_a_batch_that_loses_its_swap_is_decided_again_without_the_overtaken_partition(make_store):
    """Another broker's change to one partition of the batch lands between the decision and the
    commit: the batch loses the compare-and-swap, is decided again on the newer image, and only
    that partition is refused (stale); the others commit, in one more commit."""
    s = await make_store()
    names = ["a", "b", "c"]
    await _isr_topics(s, names)

    class Overtaken(Interleaving):
        async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
            if not self.remote_topics:  # the first commit: "b" changes first, elsewhere
                self.remote_topics.append("b")
                img = self.inner.image
                r = topic_rules.alter_isr(img, "b", 0, leader=1, leader_epoch=0, partition_epoch=0, isr=(1,))
                await self.inner.commit(r.change, img.epoch)
            return await self.inner.commit(change, expected_epoch)

    s.backend = Overtaken(s.backend)
    epoch = s.image.epoch
    answers = await s.alter_isrs([IsrChange(n, 0, 1, 0, 0, (1,)) for n in names])
    assert s.conflicts == 1 and s.image.epoch == epoch + 2
    assert answers[1].code == "INVALID_UPDATE_VERSION" and (answers[0].isr, answers[2].isr) == ((1,), (1,))
