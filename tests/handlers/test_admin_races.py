"""Admin changes racing through two brokers that share one metadata quorum: no check bypassed, no
update lost (issue 11: the process-local ``admin_lock`` is gone; each handler's checks and change
are one decision run through ``store.decide_and_commit``).

Two ``DecidingStore``s over one ``MemoryBackend`` stand for two brokers on one etcd: each broker
decides on the image it sees and commits by compare-and-swap. The backend's ``before_commit`` hook
yields to the event loop between every decision and its swap, so the two requests always decide
on the same image first and one of them loses the swap and is decided again. With the former
per-broker lock both would have committed a decision made on the stale image.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from test_admin import FakeBroker

from shoal.client import build_entity
from shoal.config import BrokerConfig
from shoal.handlers import acls, client_quotas
from shoal.handlers import configs as config_admin
from shoal.handlers import topics as topic_admin
from shoal.handlers.context import RequestContext
from shoal.metadata import BrokerInfo
from shoal.metadata.memory import MemoryBackend
from shoal.metadata.store import DecidingStore
from shoal.protocol.codec import decode_request, decode_response, encode_request, encode_response, request_type
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType

HANDLERS = {
    topic_admin.CREATE_TOPICS: topic_admin.handle_create_topics,
    topic_admin.CREATE_PARTITIONS: topic_admin.handle_create_partitions,
    config_admin.ALTER_CONFIGS: config_admin.handle_alter_configs,
    config_admin.INCREMENTAL_ALTER_CONFIGS: config_admin.handle_incremental_alter_configs,
    acls.CREATE_ACLS: acls.handle_create_acls,
    acls.DELETE_ACLS: acls.handle_delete_acls,
    client_quotas.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter_client_quotas,
}
VERSION = {topic_admin.CREATE_TOPICS: 7, topic_admin.CREATE_PARTITIONS: 3, config_admin.ALTER_CONFIGS: 2,
           config_admin.INCREMENTAL_ALTER_CONFIGS: 1, acls.CREATE_ACLS: 3, acls.DELETE_ACLS: 3,
           client_quotas.ALTER_CLIENT_QUOTAS: 1}
SET, DELETE = config_admin.OP_SET, config_admin.OP_DELETE
TOPIC, BROKER = config_admin.RESOURCE_TOPIC, config_admin.RESOURCE_BROKER


@pytest.fixture
async def brokers():
    """Two brokers (two stores) on one backend whose every commit lets the other run first."""

    async def interleave(_change: Any) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    backend = MemoryBackend(before_commit=interleave)
    stores = [DecidingStore(backend), DecidingStore(backend)]
    await backend.start()
    for node in (1, 2):
        await stores[0].register_broker(BrokerInfo(node, "127.0.0.1", 9092 + node, None))
    config = BrokerConfig.load(None, {"authorizer.class.name": "shoal", "super.users": "User:admin"})
    yield [FakeBroker(s, config, node_id=n) for s, n in zip(stores, (1, 2))]
    await backend.close()


async def send(broker, key: int, body: dict, *, principal: str = "User:admin", tenant: str | None = None):
    """One request as a client sends it, through the wire codec both ways."""
    version = VERSION[key]
    req = build_entity(request_type(key, version), body)
    header, decoded = decode_request(key, version, memoryview(encode_request(key, version, 7, "t", req))[4:])
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1", principal=principal,
                         tenant=tenant)
    resp = await HANDLERS[key](ctx, decoded)
    _cid, back = decode_response(key, version, memoryview(encode_response(7, key, version, resp))[4:])
    assert back == resp
    return resp


def create_body(name: str, partitions: int) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout": 30000, "validate_only": False}


def incremental_body(resource_type: int, name: str, *ops: tuple[str, int, str | None]) -> dict:
    return {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False}


def stores_of(a, b) -> int:
    return a.metadata.conflicts + b.metadata.conflicts


async def tenant(store, policy: dict) -> str:
    t = await store.create_tenant("T")
    await store.assign_user("alice", t.tenant_id)
    await store.set_tenant_admin("alice", True)
    await store.update_tenant(t.tenant_id, policy=policy)
    return t.tenant_id


async def test_a_tenants_partition_limit_holds_when_two_brokers_create_topics_at_once(brokers) -> None:
    a, b = brokers
    tid = await tenant(a.metadata, {"max.partitions": 4})
    ra, rb = await asyncio.gather(
        send(a, topic_admin.CREATE_TOPICS, create_body("x", 3), principal="User:alice", tenant=tid),
        send(b, topic_admin.CREATE_TOPICS, create_body("y", 3), principal="User:alice", tenant=tid),
    )
    codes = sorted([ra.topics[0].error_code, rb.topics[0].error_code])
    assert codes == [ErrorCode.none, ErrorCode.policy_violation], codes
    loser = ra if ra.topics[0].error_code else rb
    assert "its policy allows at most 4" in loser.topics[0].error_message
    image = a.metadata.image
    assert sum(len(t.partitions) for n, t in image.topics.items() if n.startswith(tid)) == 3
    assert stores_of(a, b) >= 1  # the loser was decided again, on the image with the winner's topic


async def test_a_tenants_partition_limit_holds_when_two_brokers_add_partitions_at_once(brokers) -> None:
    a, b = brokers
    tid = await tenant(a.metadata, {"max.partitions": 4})
    assert (await send(a, topic_admin.CREATE_TOPICS, create_body("x", 1), principal="User:alice",
                       tenant=tid)).topics[0].error_code == ErrorCode.none
    assert (await send(a, topic_admin.CREATE_TOPICS, create_body("y", 1), principal="User:alice",
                       tenant=tid)).topics[0].error_code == ErrorCode.none

    def grow(name: str, count: int) -> dict:
        return {"topics": [{"name": name, "count": count, "assignments": None}], "timeout": 30000,
                "validate_only": False}

    ra, rb = await asyncio.gather(
        send(a, topic_admin.CREATE_PARTITIONS, grow("x", 3), principal="User:alice", tenant=tid),
        send(b, topic_admin.CREATE_PARTITIONS, grow("y", 3), principal="User:alice", tenant=tid),
    )
    codes = sorted([ra.results[0].error_code, rb.results[0].error_code])
    assert codes == [ErrorCode.none, ErrorCode.policy_violation], codes
    image = a.metadata.image
    assert sum(len(t.partitions) for n, t in image.topics.items() if n.startswith(tid)) == 4


async def test_two_brokers_growing_one_topic_to_the_same_count_add_its_partitions_once(brokers) -> None:
    a, b = brokers
    await send(a, topic_admin.CREATE_TOPICS, create_body("t", 1))
    body = {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout": 30000, "validate_only": False}
    ra, rb = await asyncio.gather(send(a, topic_admin.CREATE_PARTITIONS, body), send(b, topic_admin.CREATE_PARTITIONS, body))
    codes = sorted([ra.results[0].error_code, rb.results[0].error_code])
    assert codes == [ErrorCode.none, ErrorCode.invalid_partitions], codes
    assert len(a.metadata.image.topics["t"].partitions) == 3


async def test_incremental_alter_configs_of_different_keys_of_one_topic_both_land(brokers) -> None:
    a, b = brokers
    await send(a, topic_admin.CREATE_TOPICS, create_body("t", 1))
    ra, rb = await asyncio.gather(
        send(a, config_admin.INCREMENTAL_ALTER_CONFIGS, incremental_body(TOPIC, "t", ("retention.ms", SET, "1000"))),
        send(b, config_admin.INCREMENTAL_ALTER_CONFIGS, incremental_body(TOPIC, "t", ("segment.bytes", SET, "1048576"))),
    )
    assert [ra.responses[0].error_code, rb.responses[0].error_code] == [ErrorCode.none, ErrorCode.none]
    assert dict(a.metadata.image.topics["t"].configs) == {"retention.ms": "1000", "segment.bytes": "1048576"}
    assert stores_of(a, b) >= 1


async def test_incremental_alter_configs_of_the_cluster_default_and_a_tenants_defaults_both_land(brokers) -> None:
    a, b = brokers
    ra, rb = await asyncio.gather(
        send(a, config_admin.INCREMENTAL_ALTER_CONFIGS, incremental_body(BROKER, "", ("log.retention.ms", SET, "5000"))),
        send(b, config_admin.INCREMENTAL_ALTER_CONFIGS,
             incremental_body(BROKER, "", ("log.cleaner.threads", SET, "2"))),
    )
    assert [ra.responses[0].error_code, rb.responses[0].error_code] == [ErrorCode.none, ErrorCode.none], (ra, rb)
    assert dict(a.metadata.image.broker_configs) == {"log.retention.ms": "5000", "log.cleaner.threads": "2"}

    tid = await tenant(a.metadata, {})
    ra, rb = await asyncio.gather(
        send(a, config_admin.INCREMENTAL_ALTER_CONFIGS, incremental_body(BROKER, "", ("retention.ms", SET, "7000")),
             principal="User:alice", tenant=tid),
        send(b, config_admin.INCREMENTAL_ALTER_CONFIGS, incremental_body(BROKER, "", ("max.message.bytes", SET, "2000")),
             principal="User:alice", tenant=tid),
    )
    assert [ra.responses[0].error_code, rb.responses[0].error_code] == [ErrorCode.none, ErrorCode.none]
    assert dict(a.metadata.image.tenants[tid].configs) == {"retention.ms": "7000", "max.message.bytes": "2000"}


def acl(principal: str, name: str) -> dict:
    return {"resource_type": int(ResourceType.TOPIC), "resource_name": name,
            "resource_pattern_type": int(PatternType.LITERAL), "principal": principal, "host": "*",
            "operation": int(Operation.READ), "permission_type": int(Permission.ALLOW)}


def delete_filter(principal: str) -> dict:
    return {"filters": [{"resource_type_filter": int(ResourceType.ANY), "resource_name_filter": None,
                         "pattern_type_filter": int(PatternType.ANY), "principal_filter": principal,
                         "host_filter": None, "operation": int(Operation.ANY),
                         "permission_type": int(Permission.ANY)}]}


async def test_delete_acls_racing_create_acls_and_another_delete_loses_nothing(brokers) -> None:
    a, b = brokers
    await send(a, acls.CREATE_ACLS, {"creations": [acl("User:bob", "t1"), acl("User:bob", "t2")]})
    # Two brokers delete bob's bindings while a third request creates carol's: each of bob's
    # bindings is reported deleted exactly once, and carol's (matching no filter) stays.
    da, db, created = await asyncio.gather(
        send(a, acls.DELETE_ACLS, delete_filter("User:bob")),
        send(b, acls.DELETE_ACLS, delete_filter("User:bob")),
        send(b, acls.CREATE_ACLS, {"creations": [acl("User:carol", "t1")]}),
    )
    assert [c.error_code for c in created.results] == [ErrorCode.none]
    reported = [m.resource_name for r in (da, db) for m in r.filter_results[0].matching_acls]
    assert sorted(reported) == ["t1", "t2"]
    assert [(x.principal, x.resource_name) for x in a.metadata.image.acls] == [("User:carol", "t1")]


async def test_alter_client_quotas_of_different_keys_of_one_entity_both_land(brokers) -> None:
    a, b = brokers

    def body(key: str, value: float) -> dict:
        return {"entries": [{"entity": [{"entity_type": "user", "entity_name": "u"}],
                             "ops": [{"key": key, "value": value, "remove": False}]}], "validate_only": False}

    ra, rb = await asyncio.gather(send(a, client_quotas.ALTER_CLIENT_QUOTAS, body("producer_byte_rate", 100.0)),
                                  send(b, client_quotas.ALTER_CLIENT_QUOTAS, body("consumer_byte_rate", 200.0)))
    assert [ra.entries[0].error_code, rb.entries[0].error_code] == [ErrorCode.none, ErrorCode.none]
    assert dict(a.metadata.image.client_quotas[(("user", "u"),)]) == {"producer_byte_rate": 100.0,
                                                                      "consumer_byte_rate": 200.0}


async def test_http_admin_patches_of_different_keys_through_two_brokers_both_land(brokers) -> None:
    """The HTTP admin API's PATCH of a namespace's or a tenant's configs edits the configs it
    commits to: two brokers' APIs patching different keys at once keep both."""
    import json

    from shoal.admin.http import AdminHttpServer

    a, b = brokers
    tid = (await a.metadata.create_tenant("T")).tenant_id
    await a.metadata.create_namespaces([tid + "_pay"])
    apis = [AdminHttpServer(x.metadata, "127.0.0.1", 0, broker_config=lambda: x.static_config) for x in (a, b)]

    async def patch(api, path: str, body: dict) -> int:
        status, _payload = await api.route("PATCH", path.replace("{t}", tid), json.dumps(body).encode(), "")
        return status

    assert await asyncio.gather(
        patch(apis[0], "/v1/tenants/{t}/namespaces/pay/configs", {"set": {"retention.ms": "1000"}}),
        patch(apis[1], "/v1/tenants/{t}/namespaces/pay/configs", {"set": {"segment.ms": "2000"}}),
        patch(apis[0], "/v1/tenants/{t}/configs", {"set": {"retention.ms": "3000"}}),
        patch(apis[1], "/v1/tenants/{t}/configs", {"set": {"flush.ms": "42"}}),
    ) == [200, 200, 200, 200]
    image = a.metadata.image
    assert dict(image.namespaces[tid + "_pay"].configs) == {"retention.ms": "1000", "segment.ms": "2000"}
    assert dict(image.tenants[tid].configs) == {"retention.ms": "3000", "flush.ms": "42"}
    assert stores_of(a, b) >= 2
