"""Topic creation is one decision (``shoal.tenancy.creation``), decided on the image its commit is
decided on: when another broker commits first, the retry checks, places and creates again on the
newer image. Each path is driven through its entry point (Metadata's auto-creation, metering's
usage topic, CreateTopics' decision) over a real ``DecidingStore`` whose in-memory backend lets
"another broker" commit between a decision and its compare-and-swap (``before_commit``)."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from shoal.config import BrokerConfig
from shoal.handlers.metadata import auto_create_topic
from shoal.metadata import BrokerInfo, MetadataError, MetadataImage, TopicInfo
from shoal.metadata.change import Change
from shoal.metadata.memory import MemoryBackend
from shoal.metadata.rules import topics as topic_rules
from shoal.metadata.store import DecidingStore
from shoal.metering.publisher import ensure_topic
from shoal.tenancy import creation
from shoal.tenancy.internal_topics import USAGE_TOPIC
from shoal.tenancy.scope import Scope


def broker(node: int) -> BrokerInfo:
    return BrokerInfo(node, "127.0.0.1", 9092 + node)


async def store_with(*nodes: int) -> tuple[DecidingStore, MemoryBackend]:
    backend = MemoryBackend()
    store = DecidingStore(backend)
    await store.start()
    for node in nodes:
        await store.register_broker(broker(node))
    return store, backend


def another_broker_first(backend: MemoryBackend, change: Callable[[MetadataImage], Change]) -> list[int]:
    """At the first compare-and-swap, another broker's ``change`` lands first (so the decision
    was made on an image that is now stale); the epochs the store's commits were decided on."""
    decided_on: list[int] = []

    async def before(_change: Change) -> None:
        decided_on.append(backend.image.epoch)
        if len(decided_on) == 1:
            old = backend.image
            backend._image = change(old).apply(old)

    backend.before_commit = before
    return decided_on


def services(store: DecidingStore, **config: str) -> Any:
    """What auto-creation reads of ``shoal.services.Services``."""
    return SimpleNamespace(metadata=store, config=BrokerConfig.load(None, config), random=random.Random(7),
                           fenced_brokers=frozenset())


def broker_2_gone_3_came(image: MetadataImage) -> Change:
    return Change(brokers={2: None, 3: broker(3)})  # type: ignore[dict-item]


async def test_auto_creation_placed_again_on_the_brokers_live_at_commit():
    store, backend = await store_with(1, 2)
    decided_on = another_broker_first(backend, broker_2_gone_3_came)
    topic = await auto_create_topic(services(store, **{"default.replication.factor": "2"}), "t")
    assert len(decided_on) == 2  # lost the first swap, decided again
    assert topic is not None and {r for p in topic.partitions for r in p.replicas} == {1, 3}
    assert store.image.topic("t") == topic


async def test_auto_creation_counts_the_tenants_topics_at_commit():
    store, backend = await store_with(1)
    tenant = await store.create_tenant("acme")
    await store.update_tenant(tenant.tenant_id, policy={"max.topics": 1})
    prefix = f"{tenant.tenant_id}_"

    def its_first_topic(image: MetadataImage) -> Change:  # created through another broker
        return topic_rules.create_topic(image, prefix + "a", [(1,)], {}, new_uuid=uuid.uuid4).change

    another_broker_first(backend, its_first_topic)
    with pytest.raises(MetadataError) as e:
        await auto_create_topic(services(store), prefix + "b")
    assert e.value.code == "POLICY_VIOLATION" and "at most 1" in e.value.message
    assert sorted(store.image.topics) == [prefix + "a"]


async def test_auto_creation_of_a_topic_another_broker_created_meanwhile_answers_with_that_topic():
    store, backend = await store_with(1, 2)
    theirs: list[TopicInfo] = []

    def created_there(image: MetadataImage) -> Change:
        r = topic_rules.create_topic(image, "t", [(2,), (2,), (2,)], {}, new_uuid=uuid.uuid4)
        theirs.append(r.response)
        return r.change

    another_broker_first(backend, created_there)
    topic = await auto_create_topic(services(store), "t")
    assert topic == theirs[0] == store.image.topic("t")


async def test_the_usage_topic_placed_again_on_the_brokers_live_at_commit():
    store, backend = await store_with(1, 2)
    decided_on = another_broker_first(backend, broker_2_gone_3_came)
    host = SimpleNamespace(metadata=store, random=random.Random(3), controller=None, fenced_brokers=frozenset,
                           config=BrokerConfig.load(None, {"shoal.metering.topic.replication.factor": "2"}))
    assert await ensure_topic(host) is None
    assert len(decided_on) == 2
    topic = store.image.topic(USAGE_TOPIC)
    assert topic is not None and topic.internal
    assert {r for p in topic.partitions for r in p.replicas} == {1, 3}
    assert await ensure_topic(host) is None and store.image.topic(USAGE_TOPIC) == topic  # exists: nothing to do


async def test_an_internal_topic_lowers_its_replication_factor_to_the_brokers_live_at_commit():
    store, backend = await store_with(1, 2, 3)
    another_broker_first(backend, lambda image: Change(brokers={3: None}))  # type: ignore[dict-item]
    sizes: list[int] = []

    def configs(rf: int) -> dict[str, str]:
        sizes.append(rf)
        return {"min.insync.replicas": str(min(2, rf))}

    topic = await creation.create_internal_topic(store, "__internal", 2, 3, configs, rng=random.Random(1),
                                                 shrink_to_live=True)
    assert topic is not None and [p.replicas for p in topic.partitions] and sizes == [3, 2]
    assert all(sorted(p.replicas) == [1, 2] for p in topic.partitions) and topic.configs["min.insync.replicas"] == "2"


async def test_create_topics_decision_checks_again_what_exists_at_commit():
    store, backend = await store_with(1)
    decision = creation.CreateTopic(
        scope=Scope(store.image, BrokerConfig.load(None, {}), "User:op", "127.0.0.1", None), name="t.x",
        config=BrokerConfig.load(None, {}), new_uuid=store.new_uuid, rng=random.Random(1))
    assert decision.plan(store.image).assignments == ((1,),)

    def colliding(image: MetadataImage) -> Change:  # "t_x" created through another broker
        return topic_rules.create_topic(image, "t_x", [(1,)], {}, new_uuid=uuid.uuid4).change

    another_broker_first(backend, colliding)
    with pytest.raises(MetadataError) as e:
        await store.decide_and_commit(decision.decide)
    assert (e.value.code, e.value.message) == ("INVALID_TOPIC_EXCEPTION", "Topic 't.x' collides with existing topic: t_x")
