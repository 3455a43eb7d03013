"""Reassignment (KIP-455) as pure rules, exactly: start (target, override), cancel, complete; the
two new ``PartitionInfo`` fields persisted by the embedded and etcd backends, and data stored
before them still loading."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import MappingProxyType

import pytest

from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, PartitionInfo, codec
from shoal.metadata.change import Result
from shoal.metadata.rules import topics


def image(replicas=(1,), isr=None, leader=None, brokers=(1, 2, 3, 4), **kw) -> MetadataImage:
    e = MappingProxyType({})
    img = MetadataImage("c", 1, MappingProxyType({b: BrokerInfo(b, "h", 9000 + b) for b in brokers}), e, e, e)
    r = topics.create_topic(img, "t", [tuple(replicas)], {}, new_uuid=lambda: uuid.UUID(int=5))
    img = r.change.apply(img)
    p = img.topics["t"].partitions[0]
    np = PartitionInfo(0, tuple(replicas), tuple(replicas if isr is None else isr),
                       replicas[0] if leader is None else leader, **kw)
    return topics._with_partition(img, "t", np).apply(img) if np != p else img


def then(img: MetadataImage, r: Result) -> MetadataImage:
    return img if r.change is None else r.change.apply(img)


def part(img: MetadataImage) -> PartitionInfo:
    return img.topics["t"].partitions[0]


def code(rule) -> str:
    with pytest.raises(MetadataError) as e:
        rule()
    return e.value.code


def test_start_orders_replicas_as_kafka_and_keeps_leader_and_isr():
    img = image((1, 2), leader_epoch=3, partition_epoch=7)
    r = topics.start_reassignment(img, "t", 0, (3, 2))
    assert r.response == PartitionInfo(0, (3, 2, 1), (1, 2), 1, 3, 8, adding=(3,), removing=(1,))
    assert part(then(img, r)) == r.response and part(img).adding == ()  # input untouched


def test_start_rf_1_to_3_and_3_to_2():
    r = topics.start_reassignment(image((1,)), "t", 0, (1, 2, 3))
    assert (r.response.replicas, r.response.adding, r.response.removing) == ((1, 2, 3), (2, 3), ())
    r = topics.start_reassignment(image((1, 2, 3)), "t", 0, (2, 3))
    assert (r.response.replicas, r.response.adding, r.response.removing) == ((2, 3, 1), (), (1,))


def test_start_refuses_bad_targets():
    img = image((1,))
    for target in ((), (2, 2), (2, 9)):
        assert code(lambda: topics.start_reassignment(img, "t", 0, target)) == "INVALID_REPLICA_ASSIGNMENT"
    assert code(lambda: topics.start_reassignment(img, "t", 1, (2,))) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert code(lambda: topics.start_reassignment(img, "x", 0, (2,))) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_start_with_the_current_replicas_changes_nothing():
    r = topics.start_reassignment(image((1, 2)), "t", 0, (1, 2))
    assert r.change is None and not r.response.reassigning


def test_a_new_target_overrides_against_the_current_replicas():
    img = then(image((1,)), topics.start_reassignment(image((1,)), "t", 0, (2,)))
    r = topics.start_reassignment(img, "t", 0, (3,))
    assert (r.response.replicas, r.response.adding, r.response.removing) == ((3, 2, 1), (3,), (2, 1))
    assert r.response.partition_epoch == part(img).partition_epoch + 1


def test_cancel_goes_back_to_the_original_replicas():
    img = then(image((1, 2)), topics.start_reassignment(image((1, 2)), "t", 0, (3, 4)))
    img = topics._with_partition(img, "t", PartitionInfo(0, (3, 4, 1, 2), (1, 2, 3), 1, 0, 1, (3, 4), (1, 2))).apply(img)
    r = topics.cancel_reassignment(img, "t", 0)
    assert r.response == PartitionInfo(0, (1, 2), (1, 2), 1, 0, 2)
    assert code(lambda: topics.cancel_reassignment(then(img, r), "t", 0)) == "NO_REASSIGNMENT_IN_PROGRESS"


def test_cancel_moves_a_leader_that_was_being_added():
    img = image((2, 1), isr=(2, 1), leader=2, leader_epoch=4, partition_epoch=9, adding=(2,), removing=())
    r = topics.cancel_reassignment(img, "t", 0)
    assert r.response == PartitionInfo(0, (1,), (1,), 1, 5, 10)


def test_cancel_with_only_adding_replicas_in_sync_takes_the_first_original_one():
    img = image((2, 1), isr=(2,), leader=2, adding=(2,), removing=(1,))
    r = topics.cancel_reassignment(img, "t", 0)
    assert (r.response.replicas, r.response.isr, r.response.leader, r.response.leader_epoch) == ((1,), (1,), 1, 1)


def test_complete_waits_for_every_target_replica_in_the_isr():
    p = PartitionInfo(0, (2, 3, 1), (1, 2), 1, 2, 5, adding=(2, 3), removing=(1,))
    assert topics.complete_reassignment(p) is None
    p = PartitionInfo(0, (2, 3, 1), (1, 3, 2), 1, 2, 5, adding=(2, 3), removing=(1,))
    assert topics.complete_reassignment(p) == PartitionInfo(0, (2, 3), (3, 2), 2, 3, 6)


def test_complete_keeps_a_leader_in_the_target():
    p = PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1, 2, 5, adding=(2, 3))
    assert topics.complete_reassignment(p) == PartitionInfo(0, (1, 2, 3), (1, 2, 3), 1, 2, 6)
    p = PartitionInfo(0, (2, 3, 1), (3, 1), 3, 2, 5, removing=(1,))  # 3 -> 2 replicas, 2 out of sync
    assert topics.complete_reassignment(p) is None
    p = PartitionInfo(0, (2, 3, 1), (3, 1, 2), 3, 2, 5, removing=(1,))
    assert topics.complete_reassignment(p) == PartitionInfo(0, (2, 3), (3, 2), 3, 2, 6)


def test_complete_reassignments_is_one_change_over_the_image():
    img = image((2, 1), isr=(1, 2), leader=1, adding=(2,), removing=(1,))
    r = topics.complete_reassignments(img)
    assert r.response == [("t", 0)] and part(then(img, r)) == PartitionInfo(0, (2,), (2,), 2, 1, 1)
    assert topics.complete_reassignments(then(img, r)).change is None
    assert topics.ongoing_reassignments(img) == [("t", part(img))]
    assert topics.ongoing_reassignments(img, [("t", 0), ("t", 5), ("x", 0)]) == [("t", part(img))]
    assert topics.ongoing_reassignments(then(img, r)) == []


def test_update_partition_keeps_a_reassignment():
    img = image((2, 1), isr=(1,), leader=1, adding=(2,), removing=(1,))
    r = topics.update_partition(img, "t", 0, isr=(1, 2))
    assert (r.response.adding, r.response.removing) == ((2,), (1,))


# -- persistence ----------------------------------------------------------------------------------


def test_codec_round_trip_and_old_data():
    p = PartitionInfo(0, (2, 1), (1,), 1, 3, 4, adding=(2,), removing=(1,))
    assert codec.partition_from_json(json.loads(json.dumps(codec.partition_to_json(p)))) == p
    plain = PartitionInfo(0, (1,), (1,), 1, 3, 4)
    assert "adding" not in codec.partition_to_json(plain)  # what older brokers wrote, byte for byte
    old = {"partition": 0, "replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 3, "partition_epoch": 4}
    assert codec.partition_from_json(old) == plain


@pytest.fixture(params=["embedded", "etcd"])
async def reopened(request, tmp_path: Path):
    """(store, reopen()) where reopen gives a store that reads what the first one wrote anew."""
    if request.param == "etcd":
        from etcd_cluster import broker_store

        url = request.getfixturevalue("etcd_cluster").url(request.getfixturevalue("etcd_prefix"))
        make = lambda: broker_store(url, node_id=1)  # noqa: E731
    else:
        from shoal.metadata.embedded import EmbeddedMetadataStore

        make = lambda: EmbeddedMetadataStore(tmp_path, node_id=1)  # noqa: E731
    stores = [make()]
    await stores[0].start()

    async def reopen():
        await stores[-1].close()
        stores.append(make())
        await stores[-1].start()
        return stores[-1]

    yield stores[0], reopen
    await stores[-1].close()


async def test_both_backends_persist_a_reassignment(reopened):
    store, reopen = reopened
    for n in (1, 2):
        await store.register_broker(BrokerInfo(n, "127.0.0.1", 9000 + n))
    await store.create_topic("t", [(1,)], {})
    started = await store.decide_and_commit(lambda img: topics.start_reassignment(img, "t", 0, (2,)))
    assert (started.adding, started.removing) == ((2,), (1,))
    store = await reopen()
    assert store.image.topics["t"].partitions[0] == started
    done = await store.decide_and_commit(lambda img: topics.cancel_reassignment(img, "t", 0))
    store = await reopen()
    assert store.image.topics["t"].partitions[0] == done and not done.reassigning


def test_messages_name_no_topic():
    """A tenant's answer must not show its physical topic names (the partition is in the response)."""
    img = image((1,))
    img = topics.rename_topic(img, "t", "lkc-aaaaaa_t").change.apply(img)
    rules = [lambda: topics.start_reassignment(img, "lkc-aaaaaa_t", 0, (2, 2)),
             lambda: topics.start_reassignment(img, "lkc-aaaaaa_t", 0, (9,)),
             lambda: topics.start_reassignment(img, "lkc-aaaaaa_t", 0, ()),
             lambda: topics.start_reassignment(img, "lkc-aaaaaa_t", 3, (2,)),
             lambda: topics.cancel_reassignment(img, "lkc-aaaaaa_t", 0)]
    for rule in rules:
        with pytest.raises(MetadataError) as e:
            rule()
        assert "lkc-" not in e.value.message, e.value.message
