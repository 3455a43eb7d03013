"""DescribeClientQuotas / AlterClientQuotas handlers called directly: a real EmbeddedMetadataStore,
real kio entities through the wire codec both ways, the operator's and a tenant's scope."""

from __future__ import annotations

import pytest

from test_admin import make_broker

from shoal.client import build_entity
from shoal.handlers import client_quotas as cq
from shoal.handlers.context import RequestContext
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.protocol.codec import decode_request, decode_response, encode_request, encode_response, request_type
from shoal.protocol.errors import ErrorCode

HANDLERS = {cq.DESCRIBE_CLIENT_QUOTAS: cq.handle_describe_client_quotas,
            cq.ALTER_CLIENT_QUOTAS: cq.handle_alter_client_quotas}


async def send(broker, key: int, body: dict, *, version: int = 1, principal: str = "User:ANONYMOUS",
               tenant: str | None = None):
    """One request as a client sends it (encoded, decoded), the response likewise."""
    req = build_entity(request_type(key, version), body)
    header, decoded = decode_request(key, version, memoryview(encode_request(key, version, 7, "t", req))[4:])
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1", principal=principal,
                         tenant=tenant)
    resp = await HANDLERS[key](ctx, decoded)
    _cid, back = decode_response(key, version, memoryview(encode_response(7, key, version, resp))[4:])
    assert back == resp
    return resp


def alter_body(*entries: tuple[list, dict], validate_only: bool = False) -> dict:
    return {
        "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
             "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops.items()]}
            for entity, ops in entries
        ],
        "validate_only": validate_only,
    }


def describe_body(*components: tuple[str, int, str | None], strict: bool = False) -> dict:
    return {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
            "strict": strict}


def outcome(resp) -> list[tuple[ErrorCode, str | None]]:
    return [(e.error_code, e.error_message) for e in resp.entries]


def entries(resp) -> list[tuple[list, dict]]:
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in resp.entries]


@pytest.fixture
async def env(tmp_path):
    b = await make_broker(tmp_path)
    t = await b.metadata.create_tenant("T")
    await b.metadata.assign_user("alice", t.tenant_id)
    yield b, t.tenant_id
    await b.metadata.close()


async def test_alter_each_entry_on_its_own_and_describe(env) -> None:
    broker, _tid = env
    resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(
        ([("user", "u1")], {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
        ([("user", "u2")], {"producer_byte_rate": 1.5}),
        ([("client-id", "c"), ("user", None)], {"consumer_byte_rate": 2048.0}),
        ([("user", "u3"), ("user", "u4")], {"producer_byte_rate": 1.0}),
        ([("user", "u5")], {"bogus": 1.0}),
    ))
    assert outcome(resp) == [
        (ErrorCode.none, None),
        (ErrorCode.invalid_request, "producer_byte_rate cannot be a fractional value."),
        (ErrorCode.none, None),
        (ErrorCode.invalid_request, "Invalid client quota entity, duplicate entity entry user"),
        (ErrorCode.invalid_request, "Invalid configuration key bogus"),
    ]
    resp = await send(broker, cq.DESCRIBE_CLIENT_QUOTAS, describe_body())
    assert resp.error_code == ErrorCode.none
    assert entries(resp) == [
        ([("client-id", "c"), ("user", None)], {"consumer_byte_rate": 2048.0}),
        ([("user", "u1")], {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
    ]
    # remove one key, the entity stays; remove the last, it goes; a missing key is a no-op
    await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(([("user", "u1")], {"request_percentage": None})))
    await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(
        ([("client-id", "c"), ("user", None)], {"consumer_byte_rate": None, "producer_byte_rate": None})))
    resp = await send(broker, cq.DESCRIBE_CLIENT_QUOTAS, describe_body(("user", 2, None)))
    assert entries(resp) == [([("user", "u1")], {"producer_byte_rate": 1024.0})]


async def test_validate_only_duplicates_and_version_0(env) -> None:
    broker, _tid = env
    resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(
        ([("user", "v")], {"producer_byte_rate": 10.0}), validate_only=True), version=0)
    assert outcome(resp) == [(ErrorCode.none, None)]
    assert broker.metadata.image.client_quotas == {}
    resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, {
        "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "d"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False},
                     {"key": "producer_byte_rate", "value": 2.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "e"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "e"}],
             "ops": [{"key": "consumer_byte_rate", "value": 1.0, "remove": False}]},
        ],
        "validate_only": False,
    })
    assert [c for c, _m in outcome(resp)] == [ErrorCode.invalid_request] * 3
    assert "Duplicate quota key producer_byte_rate" in outcome(resp)[0][1]
    assert outcome(resp)[1][1] == "Ignoring duplicate entity (user=e)"
    assert broker.metadata.image.client_quotas == {}
    resp = await send(broker, cq.DESCRIBE_CLIENT_QUOTAS, describe_body(("user", 0, None)), version=0)
    assert resp.error_code == ErrorCode.invalid_request and resp.entries is None


async def test_a_tenant_alters_and_sees_its_own_entities(env) -> None:
    broker, tid = env
    await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(([("client-id", "app")], {"producer_byte_rate": 100.0})))
    resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(
        ([("client-id", "app")], {"producer_byte_rate": 200.0}),
        ([("user", "carol")], {"consumer_byte_rate": 300.0}),
        ([("tenant", tid)], {"producer_byte_rate": 1.0}),
    ), principal="User:alice", tenant=tid)
    assert [c for c, _m in outcome(resp)] == [ErrorCode.none, ErrorCode.none, ErrorCode.invalid_request]
    assert dict(broker.metadata.image.client_quotas) == {
        (("client-id", "app"),): {"producer_byte_rate": 100.0},
        (("client-id", "app"), ("tenant", tid)): {"producer_byte_rate": 200.0},
        (("tenant", tid), ("user", tid + "_carol")): {"consumer_byte_rate": 300.0},
    }
    resp = await send(broker, cq.DESCRIBE_CLIENT_QUOTAS, describe_body(), principal="User:alice", tenant=tid)
    assert entries(resp) == [([("client-id", "app")], {"producer_byte_rate": 200.0}),
                             ([("user", "carol")], {"consumer_byte_rate": 300.0})]
    # They are kept: a new store on the same file sees them.
    store = EmbeddedMetadataStore(broker.metadata.path, node_id=1)
    await store.start()
    try:
        assert store.image.client_quotas == broker.metadata.image.client_quotas
    finally:
        await store.close()
    # Deleting the tenant deletes its quotas.
    await broker.metadata.delete_tenant(tid)
    assert list(broker.metadata.image.client_quotas) == [(("client-id", "app"),)]


async def test_needs_describe_configs_and_alter_configs_on_the_cluster(tmp_path) -> None:
    broker = await make_broker(tmp_path, **{"authorizer.class.name": "shoal", "super.users": "User:admin"})
    try:
        resp = await send(broker, cq.DESCRIBE_CLIENT_QUOTAS, describe_body(), principal="User:bob")
        assert resp.error_code == ErrorCode.cluster_authorization_failed and resp.entries is None
        resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(([("user", "x")], {"producer_byte_rate": 1.0})),
                          principal="User:bob")
        assert [c for c, _m in outcome(resp)] == [ErrorCode.cluster_authorization_failed]
        resp = await send(broker, cq.ALTER_CLIENT_QUOTAS, alter_body(([("user", "x")], {"producer_byte_rate": 1.0})),
                          principal="User:admin")
        assert outcome(resp) == [(ErrorCode.none, None)]
    finally:
        await broker.metadata.close()
