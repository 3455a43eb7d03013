"""The metadata rules as pure decisions: image + command -> Result(change, response), no I/O.

Each rule is checked exactly on hand-built images: the change it answers (section by section), the
response, the error it raises, and that it neither touches its input image nor reads the clock or
randomness (ids and times come in as arguments).
"""

from __future__ import annotations

import random
import secrets
import time
import uuid
from types import MappingProxyType
from typing import Any

import pytest

from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    IsrChange,
    MetadataError,
    MetadataImage,
    NamespaceInfo,
    PartitionInfo,
    ScramCredential,
    TenantInfo,
)
from shoal.metadata.change import Change, Result
from shoal.metadata.rules import acls, cluster, configs, namespaces, quotas, tenants, topics, users

CRED = ScramCredential("SCRAM-SHA-256", b"s", b"k", b"v", 4096)
CRED512 = ScramCredential("SCRAM-SHA-512", b"t", b"k", b"v", 4096)
A, B = "lkc-aaaaaa", "lkc-bbbbbb"


def ids(*values: int):
    it = iter(values)
    return lambda: uuid.UUID(int=next(it))


def empty() -> MetadataImage:
    e = MappingProxyType({})
    return MetadataImage("c", 1, e, e, e, e)


def then(image: MetadataImage, result: Result[Any]) -> MetadataImage:
    """The image after a decision's change (the image itself when there is none)."""
    return image if result.change is None else result.change.apply(image)


def with_topic(image: MetadataImage, name: str, n: int = 1, tid: int = 100, cfg: dict | None = None) -> MetadataImage:
    return then(image, topics.create_topic(image, name, [(1, 2)] * n, cfg or {}, new_uuid=ids(tid)))


def code(e: pytest.ExceptionInfo[MetadataError]) -> str:
    return e.value.code


# -- topics -------------------------------------------------------------------------------------


def test_create_topic_decides_the_topic_and_nothing_else():
    img = empty()
    r = topics.create_topic(img, "a", [(2, 1), (1, 2)], {"x": "1"}, new_uuid=ids(0, 7))
    t = r.response
    assert t.topic_id == uuid.UUID(int=7)  # the zero uuid is skipped
    assert [(p.partition, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)
            for p in t.partitions] == [(0, (2, 1), (2, 1), 2, 0, 0), (1, (1, 2), (1, 2), 1, 0, 0)]
    assert dict(t.configs) == {"x": "1"} and not t.internal
    assert r.change == Change(topics={"a": t})
    assert "a" not in img.topics  # the input image is untouched


def test_create_topic_skips_ids_in_use_and_refuses_a_name_in_use():
    img = with_topic(empty(), "a", tid=7)
    t = topics.create_topic(img, "b", [(1,)], {}, new_uuid=ids(7, 7, 8)).response
    assert t.topic_id == uuid.UUID(int=8)
    with pytest.raises(MetadataError) as e:
        topics.create_topic(img, "a", [(1,)], {}, new_uuid=ids(9))
    assert code(e) == "TOPIC_ALREADY_EXISTS"


def test_delete_and_add_partitions():
    img = with_topic(empty(), "a", n=2)
    r = topics.delete_topic(img, "a")
    assert r.change == Change(topics={"a": None}) and r.response is img.topics["a"]
    r = topics.add_partitions(img, "a", [(3,)])
    assert [p.partition for p in r.response.partitions] == [0, 1, 2]
    assert r.response.partitions[2] == PartitionInfo(2, (3,), (3,), 3, 0, 0)
    assert r.response.topic_id == img.topics["a"].topic_id and r.change == Change(topics={"a": r.response})
    for rule in (lambda: topics.delete_topic(img, "x"), lambda: topics.add_partitions(img, "x", [(1,)])):
        with pytest.raises(MetadataError) as e:
            rule()
        assert code(e) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_rename_moves_the_topic_and_remembers_the_former_name():
    img = with_topic(with_topic(empty(), "a", tid=1), "c", tid=2)
    r = topics.rename_topic(img, "a", "b")
    assert r.response.name == "b" and r.response.topic_id == uuid.UUID(int=1)
    assert r.change == Change(topics={"a": None, "b": r.response}, renamed_topics={"a": uuid.UUID(int=1)})
    with pytest.raises(MetadataError) as e:
        topics.rename_topic(img, "a", "c")
    assert code(e) == "TOPIC_ALREADY_EXISTS"


def test_apply_is_pure_and_settle_records_the_former_names_a_change_makes_stale():
    """``apply`` never changes the change (a backend may apply it more than once: on commit and
    when its watch delivers it); ``settle`` is what a backend persists: the change plus the former
    names it makes stale as removals, so replaying the record drops them too."""
    img = with_topic(empty(), "a", tid=1)
    img = topics.rename_topic(img, "a", "b").change.apply(img)
    img = topics.rename_topic(img, "b", "c").change.apply(img)
    assert dict(img.renamed_topics) == {"a": uuid.UUID(int=1), "b": uuid.UUID(int=1)}
    back = topics.rename_topic(img, "c", "a").change  # "a" names the topic again: not former
    before = Change(topics=dict(back.topics), renamed_topics=dict(back.renamed_topics))
    after = back.apply(img)
    assert back == before  # untouched
    assert dict(after.renamed_topics) == {"b": uuid.UUID(int=1), "c": uuid.UUID(int=1)}
    settled = back.settle(img)
    assert settled.renamed_topics == {"c": uuid.UUID(int=1), "a": None}
    assert back == before and settled.settle(img) == settled  # pure, and settled once is settled
    assert settled.apply(img) == after
    # a replay of the persisted record (no image topics needed) drops the stale name as well
    replayed = Change(renamed_topics=settled.renamed_topics).apply(img)
    assert dict(replayed.renamed_topics) == dict(after.renamed_topics)
    gone = topics.delete_topic(after, "a").change  # the topic goes: every former name goes
    assert dict(gone.apply(after).renamed_topics) == {}
    assert gone.settle(after).renamed_topics == {"b": None, "c": None}
    assert Change().settle(img) == Change()


def test_update_partition_bumps_epochs_as_kraft():
    img = with_topic(empty(), "a")
    r = topics.update_partition(img, "a", 0, leader=2, isr=(2,))
    assert (r.response.leader, r.response.isr, r.response.leader_epoch, r.response.partition_epoch) == (2, (2,), 1, 1)
    img = then(img, r)
    r = topics.update_partition(img, "a", 0, isr=(2, 1))  # same leader: only the partition epoch
    assert (r.response.leader_epoch, r.response.partition_epoch) == (1, 2)
    with pytest.raises(MetadataError) as e:
        topics.update_partition(img, "a", 1, leader=1)
    assert code(e) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_alter_isr_is_fenced_by_the_leader_epoch_and_the_partition_epoch():
    img = then(with_topic(empty(), "a"), topics.update_partition(with_topic(empty(), "a"), "a", 0, leader=1,
                                                                   isr=(1,), replicas=(1, 2, 3)))
    p = img.topics["a"].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 0, 1)
    r = topics.alter_isr(img, "a", 0, leader=1, leader_epoch=0, partition_epoch=1, isr=(1, 2))
    assert (r.response.isr, r.response.leader_epoch, r.response.partition_epoch) == ((1, 2), 0, 2)
    img2 = then(img, r)
    for kwargs, expected in (
        (dict(leader=2, leader_epoch=0, partition_epoch=2), "FENCED_LEADER_EPOCH"),  # not the leader
        (dict(leader=1, leader_epoch=1, partition_epoch=2), "FENCED_LEADER_EPOCH"),  # another epoch
        (dict(leader=1, leader_epoch=0, partition_epoch=1), "INVALID_UPDATE_VERSION"),  # decided on a stale ISR
    ):
        with pytest.raises(MetadataError) as e:
            topics.alter_isr(img2, "a", 0, isr=(1,), **kwargs)
        assert code(e) == expected
    for bad in ((2, 3), (1, 4), (1, 1)):  # without the leader, a non-replica, a repeat
        with pytest.raises(MetadataError) as e:
            topics.alter_isr(img2, "a", 0, leader=1, leader_epoch=0, partition_epoch=2, isr=bad)
        assert code(e) == "INVALID_REQUEST"
    same = topics.alter_isr(img2, "a", 0, leader=1, leader_epoch=0, partition_epoch=2, isr=(1, 2))
    assert same.change is None and same.response.isr == (1, 2)



def test_alter_isrs_decides_each_change_alone_in_one_change():
    """A batch (Kafka's AlterPartition with many partitions): a stale or fenced item is refused
    alone, the rest are one change; the same partition twice sees its earlier change (so the
    second, decided on the old epoch, is stale); an ISR already so is answered as it is."""
    img = with_topic(with_topic(empty(), "a", n=3, tid=100), "b", n=2, tid=200)
    img = then(img, topics.update_partition(img, "a", 1, isr=(1,)))  # a-1 now at partition epoch 1
    items = [
        IsrChange("a", 0, 1, 0, 0, (1,)),  # shrink: commits
        IsrChange("a", 1, 1, 0, 0, (1, 2)),  # decided on epoch 0, now 1: stale
        IsrChange("b", 0, 2, 0, 0, (2,)),  # broker 2 does not lead b-0: fenced
        IsrChange("b", 1, 1, 0, 0, (1,)),  # commits
        IsrChange("a", 0, 1, 0, 0, (1, 2)),  # a-0 again: its epoch moved with the first item
        IsrChange("a", 2, 1, 0, 0, (1, 2)),  # already so
        IsrChange("gone", 0, 1, 0, 0, (1,)),
    ]
    r = topics.alter_isrs(img, items)
    answers = r.response
    assert [(a.isr, a.partition_epoch) for a in (answers[0], answers[3], answers[5])] == [((1,), 1), ((1,), 1),
                                                                                         ((1, 2), 0)]
    assert [answers[i].code for i in (1, 2, 4, 6)] == ["INVALID_UPDATE_VERSION", "FENCED_LEADER_EPOCH",
                                                         "INVALID_UPDATE_VERSION", "UNKNOWN_TOPIC_OR_PARTITION"]
    assert set(r.change.topics) == {"a", "b"}
    after = r.change.apply(img)
    assert [p.isr for p in after.topics["a"].partitions] == [(1,), (1,), (1, 2)]
    assert [p.isr for p in after.topics["b"].partitions] == [(1, 2), (1,)]
    assert after.topics["a"].partitions[2] is img.topics["a"].partitions[2]
    # nothing to change: no change, the answers still given
    none = topics.alter_isrs(img, [items[1], items[5]])
    assert none.change is None and none.response[0].code == "INVALID_UPDATE_VERSION"


def test_alter_isrs_leaves_out_the_topics_its_budget_refuses():
    """``admit`` is asked once per topic the change writes (the first always admitted, even when
    refused: every call makes progress); a refused topic's items are answered None, to be decided
    again in a later change."""
    img = with_topic(with_topic(with_topic(empty(), "a", tid=100), "b", tid=200), "c", tid=300)
    asked = []

    def admit(topic):
        asked.append(topic.name)
        return topic.name != "b" and len(asked) < 3

    items = [IsrChange(n, 0, 1, 0, 0, (1,)) for n in ("a", "b", "b", "c", "a")]
    r = topics.alter_isrs(img, items, admit)
    assert asked == ["a", "b", "c"]
    assert [None if a is None else type(a).__name__ for a in r.response] == [
        "PartitionInfo", None, None, None, "MetadataError"]  # the second a-0 is stale after the first
    assert set(r.change.topics) == {"a"}
    r = topics.alter_isrs(img, items[1:2], lambda t: False)
    assert set(r.change.topics) == {"b"} and r.response[0].isr == (1,)

# -- configs ------------------------------------------------------------------------------------


def test_alter_topic_configs_sets_and_deletes_named_keys_only():
    img = with_topic(empty(), "a", cfg={"x": "1", "y": "2"})
    r = configs.alter_topic_configs(img, "a", {"x": None, "z": "3"})
    assert dict(r.response.configs) == {"y": "2", "z": "3"}
    assert r.change == Change(topics={"a": r.response})
    assert configs.alter_topic_configs(img, "a", {"x": "1", "q": None}).change is None  # nothing changes
    assert dict(configs.set_topic_configs(img, "a", {"z": "9"}).response.configs) == {"z": "9"}


def test_broker_configs_replace_them_all():
    r = configs.set_broker_configs(empty(), {"log.retention.ms": 5})
    assert r.change == Change(broker_configs={"log.retention.ms": "5"})


# -- tenants and users --------------------------------------------------------------------------


def tenant_world() -> MetadataImage:
    """Tenants A and B with users, topics, namespaces, ACLs and quotas of both, plus the operator's."""
    img = empty()
    for tid in (A, B):
        img = then(img, tenants.create_tenant(img, tid, new_tenant_id=lambda tid=tid: tid, now_ms=5))
    img = then(img, users.assign_user(img, "alice", A, CRED))  # mapped, unprefixed
    img = then(img, users.assign_user(img, f"{A}_bob", A))  # mapped, prefixed, no credential
    img = then(img, users.set_scram_credential(img, f"{A}_carol", CRED))  # prefixed credential only
    img = then(img, users.assign_user(img, "dave", B, CRED))
    img = then(img, users.set_scram_credential(img, "admin", CRED))  # the operator's
    img = then(img, tenants.set_tenant_admin(img, "alice", True))
    img = then(img, tenants.set_tenant_admin(img, "dave", True))
    for i, name in enumerate([f"{A}_orders", f"{A}_ns:t", f"{B}_orders", "plain"]):
        img = with_topic(img, name, tid=10 + i)
    img = then(img, namespaces.create_namespaces(img, [f"{A}_ns", f"{B}_ns"]))
    acl = lambda tenant, name: AclEntry(tenant, 2, name, 3, "User:alice", "*", 2, 3)  # noqa: E731
    img = then(img, acls.alter_acls(img, [acl(A, "orders"), acl(B, "orders"), acl(None, "plain")], []))
    img = then(img, quotas.alter_client_quotas(img, [
        ((("tenant", A),), {"producer_byte_rate": 1.0}),
        ((("user", f"{A}_bob"),), {"producer_byte_rate": 2.0}),
        ((("user", "alice"), ("client-id", None)), {"producer_byte_rate": 3.0}),
        ((("tenant", B),), {"producer_byte_rate": 4.0}),
        ((("client-id", None),), {"producer_byte_rate": 5.0}),
    ]))
    return img


def test_delete_tenant_cascades_to_exactly_what_it_owns():
    img = tenant_world()
    r = tenants.delete_tenant(img, A)
    c = r.change
    assert r.response == img.tenants[A]
    assert c.tenants == {A: None}
    assert c.user_tenants == {"alice": None, f"{A}_bob": None}
    assert c.scram_credentials == {"alice": None, f"{A}_carol": None}
    assert c.tenant_admins == {"alice": False}
    assert c.topics == {f"{A}_orders": None, f"{A}_ns:t": None}
    assert c.namespaces == {f"{A}_ns": None}
    assert c.acls_removed == {a for a in img.acls if a.tenant == A} and len(c.acls_removed) == 1
    assert set(c.client_quotas) == {(("tenant", A),), (("user", f"{A}_bob"),)}
    assert all(v is None for v in c.client_quotas.values())
    after = c.apply(img)  # B, the operator's user and the unscoped quota stay
    assert set(after.tenants) == {B} and set(after.user_tenants) == {"dave"}
    assert set(after.scram_credentials) == {"dave", "admin"} and after.tenant_admins == {"dave"}
    assert set(after.topics) == {f"{B}_orders", "plain"} and set(after.namespaces) == {f"{B}_ns"}
    assert [a.tenant for a in after.acls] == [B, None]
    assert set(after.client_quotas) == {(("user", "alice"), ("client-id", None)), (("tenant", B),),
                                        (("client-id", None),)}
    with pytest.raises(MetadataError) as e:
        tenants.delete_tenant(after, A)
    assert code(e) == "RESOURCE_NOT_FOUND"


def test_create_tenant_draws_until_an_unused_id():
    img = tenant_world()
    drawn = iter([A, B, "lkc-cccccc"])
    r = tenants.create_tenant(img, "C", new_tenant_id=lambda: next(drawn), now_ms=42)
    assert r.response == TenantInfo("lkc-cccccc", "C", 42)
    assert r.change == Change(tenants={"lkc-cccccc": r.response})


def test_update_tenant_replaces_what_is_given():
    img = tenant_world()
    r = tenants.update_tenant(img, A, configs={"retention.ms": 1})
    assert dict(r.response.configs) == {"retention.ms": "1"} and r.response.display_name == A
    assert tenants.update_tenant(img, A, display_name=A).change is None
    with pytest.raises(MetadataError):
        tenants.update_tenant(img, "lkc-zzzzzz", display_name="x")


def test_tenant_admins():
    img = tenant_world()
    assert tenants.set_tenant_admin(img, "alice", True).change is None
    assert tenants.set_tenant_admin(img, f"{A}_carol", True).change == Change(tenant_admins={f"{A}_carol": True})
    assert tenants.set_tenant_admin(img, "nobody", False).change is None
    with pytest.raises(MetadataError) as e:
        tenants.set_tenant_admin(img, "admin", True)  # the operator's user belongs to no tenant
    assert code(e) == "RESOURCE_NOT_FOUND"


def test_assign_user():
    img = tenant_world()
    with pytest.raises(MetadataError) as e:
        users.assign_user(img, "eve", "lkc-zzzzzz")
    assert code(e) == "RESOURCE_NOT_FOUND"
    with pytest.raises(MetadataError) as e:
        users.assign_user(img, "dave", A)
    assert code(e) == "DUPLICATE_RESOURCE" and B in e.value.message
    with pytest.raises(MetadataError) as e:
        users.assign_user(img, "admin", A, CRED, new_user=True)  # has a credential already
    assert code(e) == "DUPLICATE_RESOURCE"
    assert users.assign_user(img, "alice", A).change is None
    r = users.assign_user(img, "alice", A, CRED512)  # a second mechanism joins the first
    assert r.change.user_tenants == {"alice": A}
    assert dict(r.change.scram_credentials["alice"]) == {"SCRAM-SHA-256": CRED, "SCRAM-SHA-512": CRED512}
    assert users.assign_user(img, "eve", B, new_user=True).change == Change(user_tenants={"eve": B})


def test_remove_user_and_credentials():
    img = tenant_world()
    assert users.remove_user(img, "alice").change == Change(
        user_tenants={"alice": None}, scram_credentials={"alice": None}, tenant_admins={"alice": False})
    with pytest.raises(MetadataError) as e:
        users.remove_user(img, "nobody")
    assert code(e) == "RESOURCE_NOT_FOUND"
    assert users.set_scram_credential(img, "alice", CRED).change is None
    assert users.delete_scram_credential(img, "alice", "SCRAM-SHA-256").change == Change(
        scram_credentials={"alice": None})
    with pytest.raises(MetadataError) as e:
        users.delete_scram_credential(img, "alice", "SCRAM-SHA-512")
    assert code(e) == "RESOURCE_NOT_FOUND"


# -- namespaces, ACLs, quotas, cluster ----------------------------------------------------------


def test_namespaces():
    img = tenant_world()
    assert namespaces.create_namespaces(img, [f"{A}_ns", f"{A}_ns:eu"]).change == Change(
        namespaces={f"{A}_ns:eu": NamespaceInfo(f"{A}_ns:eu", {})})
    assert namespaces.create_namespaces(img, [f"{A}_ns"]).change is None
    r = namespaces.delete_namespaces(img, [f"{A}_ns", "nope"], [f"{A}_ns:t", "nope"])
    assert r.change == Change(namespaces={f"{A}_ns": None}, topics={f"{A}_ns:t": None})
    assert dict(namespaces.set_namespace_configs(img, f"{A}_ns", {"a": 1}).response.configs) == {"a": "1"}
    with pytest.raises(MetadataError) as e:
        namespaces.set_namespace_configs(img, "nope", {})
    assert code(e) == "RESOURCE_NOT_FOUND"


def test_acls_are_a_set():
    img = tenant_world()
    have, new = img.acls[0], AclEntry(A, 2, "x", 3, "User:*", "*", 2, 3)
    assert acls.alter_acls(img, [have], []).change is None
    assert acls.alter_acls(img, [], [new]).change is None
    r = acls.alter_acls(img, [new, new, have], [have])  # removed, then added again: present
    assert r.change == Change(acls_removed={have}, acls_added=[new, have])
    assert set(r.change.apply(img).acls) == set(img.acls) | {new}


def test_client_quotas():
    img = tenant_world()
    e = (("tenant", A),)
    assert quotas.alter_client_quotas(img, [(e, {"producer_byte_rate": 1.0})]).change is None
    r = quotas.alter_client_quotas(img, [(e, {"producer_byte_rate": None}), (e, {"consumer_byte_rate": 2})])
    assert r.change == Change(client_quotas={e: {"consumer_byte_rate": 2.0}})
    r = quotas.alter_client_quotas(img, [(e, {"producer_byte_rate": None})])
    assert r.change == Change(client_quotas={e: None})  # no values left: the entity goes


def test_producer_id_blocks_and_broker_registration():
    img = empty()
    r = cluster.allocate_producer_ids(img, 1000)
    assert r.response == (0, 1000) and r.change == Change(next_producer_id=1000)
    img = then(img, r)
    assert img.next_producer_id == 1000 and img.epoch == 1  # a block is a change like any other
    assert cluster.allocate_producer_ids(img, 5).response == (1000, 5)
    with pytest.raises(ValueError):
        cluster.allocate_producer_ids(img, 0)
    with pytest.raises(MetadataError):
        cluster.allocate_producer_ids(img, cluster.MAX_PRODUCER_ID)
    b = BrokerInfo(1, "h", 9092, "r1")
    img = then(img, cluster.register_broker(img, b))
    assert img.brokers == {1: b} and cluster.register_broker(img, b).change is None


def test_every_change_bumps_the_epoch_by_one():
    img = tenant_world()
    for r in (tenants.delete_tenant(img, A), configs.set_broker_configs(img, {}),
              cluster.allocate_producer_ids(img, 1), topics.delete_topic(img, "plain")):
        assert r.change.apply(img).epoch == img.epoch + 1


def test_rules_read_no_clock_and_no_randomness(monkeypatch):
    def forbidden(*a: Any, **k: Any) -> Any:
        raise AssertionError("a rule read the clock or randomness")

    img = tenant_world()
    for mod, name in [(time, "time"), (time, "time_ns"), (time, "monotonic"), (uuid, "uuid4"),
                      (secrets, "choice"), (random, "random"), (random, "choice")]:
        monkeypatch.setattr(mod, name, forbidden)
    topics.create_topic(img, "n", [(1,)], {}, new_uuid=ids(99))
    tenants.create_tenant(img, "x", new_tenant_id=lambda: "lkc-xxxxxx", now_ms=1)
    tenants.delete_tenant(img, A)
    users.assign_user(img, "new", B, CRED, new_user=True)
    namespaces.create_namespaces(img, ["n"])
    acls.alter_acls(img, [], list(img.acls))
    quotas.alter_client_quotas(img, [((("user", "u"),), {"a": 1.0})])
    cluster.allocate_producer_ids(img, 10)
    configs.alter_topic_configs(img, "plain", {"a": "b"})
