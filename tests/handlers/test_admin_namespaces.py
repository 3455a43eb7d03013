"""Admin handlers with KIP-37 namespaces, config inheritance, tenant defaults and the create-topic
policy, called directly in a tenant's scope (real store, real kio entities, through the codec)."""

from __future__ import annotations

import pytest

from test_admin import T0, create_req, make_broker, req_mod

from shoal.handlers import configs as config_admin
from shoal.handlers import topics as topic_admin
from shoal.handlers.context import RequestContext
from shoal.metadata import AclEntry, BrokerInfo
from shoal.protocol.codec import build, decode_request, decode_response, encode_request, encode_response
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation, PatternType, Permission, ResourceType

HANDLERS = {
    topic_admin.CREATE_TOPICS: topic_admin.handle_create_topics,
    topic_admin.CREATE_PARTITIONS: topic_admin.handle_create_partitions,
    config_admin.DESCRIBE_CONFIGS: config_admin.handle_describe_configs,
    config_admin.ALTER_CONFIGS: config_admin.handle_alter_configs,
    config_admin.INCREMENTAL_ALTER_CONFIGS: config_admin.handle_incremental_alter_configs,
}
SET, DELETE, APPEND = 0, 1, 2


async def call_as(broker, key: int, version: int, req, *, principal="User:alice", tenant=None):
    frame = encode_request(key, version, 7, "test", req)
    header, decoded = decode_request(key, version, memoryview(frame)[4:])
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1", principal=principal, tenant=tenant)
    resp = await HANDLERS[key](ctx, decoded)
    cid, back = decode_response(key, version, memoryview(encode_response(7, key, version, resp))[4:])
    assert back == resp
    return resp


@pytest.fixture
async def env(tmp_path):
    """A broker with tenant T (user alice) and namespaces payments, payments:eu in it."""
    b = await make_broker(tmp_path, **{"log.retention.hours": "24"})
    store = b.metadata
    t = await store.create_tenant("T")
    await store.assign_user("alice", t.tenant_id)
    p = t.tenant_id + "_"
    await store.create_namespaces([p + "payments", p + "payments:eu"])
    yield b, t.tenant_id, p
    await store.close()


def describe_req(version, *resources, synonyms=True, docs=True):
    m = req_mod(config_admin.DESCRIBE_CONFIGS, version)
    return build(m.DescribeConfigsRequest, resources=tuple(
        build(m.DescribeConfigsResource, resource_type=t, resource_name=n, configuration_keys=keys)
        for t, n, keys in resources), include_synonyms=synonyms, include_documentation=docs)


def inc_req(*resources, validate_only=False):
    m = req_mod(config_admin.INCREMENTAL_ALTER_CONFIGS, 1)
    return build(m.IncrementalAlterConfigsRequest, resources=tuple(
        build(m.AlterConfigsResource, resource_type=t, resource_name=n,
              configs=tuple(build(m.AlterableConfig, name=k, config_operation=op, value=v) for k, op, v in ops))
        for t, n, ops in resources), validate_only=validate_only)


def alter_req(*resources):
    m = req_mod(config_admin.ALTER_CONFIGS, 2)
    return build(m.AlterConfigsRequest, resources=tuple(
        build(m.AlterConfigsResource, resource_type=t, resource_name=n,
              configs=tuple(build(m.AlterableConfig, name=k, value=v) for k, v in cfgs.items()))
        for t, n, cfgs in resources), validate_only=False)


async def create_as(b, tid, *topics, validate_only=False, version=7):
    return await call_as(b, topic_admin.CREATE_TOPICS, version, create_req(version, *topics, validate_only=validate_only),
                         tenant=tid)


async def describe_as(b, tid, *resources, version=4):
    return await call_as(b, config_admin.DESCRIBE_CONFIGS, version, describe_req(version, *resources), tenant=tid)


def by_name(result):
    return {c.name: c for c in result.configs}


async def test_topics_need_their_namespace(env):
    b, tid, p = env
    resp = await create_as(b, tid, {"name": "payments:us:orders"}, {"name": "payments:eu:orders"},
                           {"name": "plain"}, {"name": "payments:eu:bad/x"}, {"name": ":x"})
    r = {t.name: t for t in resp.topics}
    assert r["payments:us:orders"].error_code == ErrorCode.invalid_topic_exception
    assert r["payments:us:orders"].error_message == "Namespace 'payments:us' does not exist"
    assert r["payments:eu:orders"].error_code == ErrorCode.none
    assert r["plain"].error_code == ErrorCode.none
    assert r["payments:eu:bad/x"].error_code == ErrorCode.invalid_topic_exception
    assert r[":x"].error_code == ErrorCode.invalid_topic_exception
    assert set(b.metadata.image.topics) >= {p + "payments:eu:orders", p + "plain"}
    assert p + "payments:us:orders" not in b.metadata.image.topics


async def test_inherited_configs_and_their_sources(env):
    b, tid, p = env
    store = b.metadata
    await store.set_namespace_configs(p + "payments", {"retention.ms": "1000", "segment.bytes": "2000000"})
    await store.set_namespace_configs(p + "payments:eu", {"retention.ms": "2000"})
    await store.update_tenant(tid, configs={"segment.ms": "3000", "retention.ms": "9"})
    resp = await create_as(b, tid, {"name": "payments:eu:orders", "configs": {"cleanup.policy": "compact"}})
    (t,) = resp.topics
    created = {c.name: c for c in t.configs}  # CreateTopics v5+ reports what the topic inherits too
    assert (created["retention.ms"].value, created["retention.ms"].config_source) == ("2000", 3)

    (res,) = (await describe_as(b, tid, (2, "payments:eu:orders", None))).results
    assert res.error_code == ErrorCode.none
    c = by_name(res)
    assert (c["cleanup.policy"].value, c["cleanup.policy"].config_source) == ("compact", 1)
    assert (c["retention.ms"].value, c["retention.ms"].config_source) == ("2000", 3)
    assert [(s.name, s.value, s.source) for s in c["retention.ms"].synonyms] == [
        ("retention.ms", "2000", 3), ("retention.ms", "1000", 3), ("retention.ms", "9", 3),
        ("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)]
    assert c["retention.ms"].documentation.startswith("inherited from namespace payments:eu")
    assert c["segment.bytes"].documentation.startswith("inherited from namespace payments;")
    assert c["segment.ms"].documentation.startswith("tenant default")
    assert (c["segment.ms"].value, c["segment.ms"].config_source) == ("3000", 3)
    assert c["flush.ms"].config_source == 5  # nothing above the broker sets it
    # the log config the broker derives is the same resolution
    from shoal.config import log_config
    from shoal.metadata.inheritance import topic_overrides

    lc = log_config(b.config, topic_overrides(store.image, p + "payments:eu:orders"))
    assert (lc.retention_ms, lc.segment_bytes, lc.segment_ms) == (2000, 2000000, 3000)
    # v1 (no documentation field asked for) is valid too
    (res1,) = (await describe_as(b, tid, (2, "payments:eu:orders", ["retention.ms"]), version=1)).results
    assert [(x.name, x.value, x.config_source) for x in res1.configs] == [("retention.ms", "2000", 3)]


async def test_namespace_configs_over_the_wire(env):
    b, tid, p = env
    store = b.metadata
    await store.set_namespace_configs(p + "payments", {"cleanup.policy": "compact"})
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req(
        (2, "payments:eu:", [("retention.ms", SET, "5000"), ("cleanup.policy", APPEND, "delete")]),
        (2, "payments:nope:", [("retention.ms", SET, "1")]),
        (2, "payments:eu:", [("bogus", SET, "1")]),
        (2, "bad//:", [("retention.ms", SET, "1")]),
    ), tenant=tid)
    codes = [r.error_code for r in resp.responses]
    assert codes == [ErrorCode.invalid_request, ErrorCode.invalid_topic_exception,  # "payments:eu:" twice
                     ErrorCode.invalid_request, ErrorCode.invalid_topic_exception]
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req(
        (2, "payments:eu:", [("retention.ms", SET, "5000"), ("cleanup.policy", APPEND, "delete")]),
        (2, "payments:nope:", [("retention.ms", SET, "1")]),
    ), tenant=tid)
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.invalid_topic_exception]
    assert resp.responses[1].error_message == "Namespace 'payments:nope' does not exist"
    # APPEND started from the inherited value (compact), as Kafka starts from the effective one
    assert dict(store.image.namespaces[p + "payments:eu"].configs) == {
        "retention.ms": "5000", "cleanup.policy": "compact,delete"}
    (res,) = (await describe_as(b, tid, (2, "payments:eu:", ["retention.ms", "cleanup.policy"]))).results
    assert [(c.name, c.value, c.config_source) for c in res.configs] == [
        ("cleanup.policy", "compact,delete", 1), ("retention.ms", "5000", 1)]
    (res,) = (await describe_as(b, tid, (2, "payments:", ["cleanup.policy"]))).results
    assert [(c.name, c.value, c.config_source) for c in res.configs] == [("cleanup.policy", "compact", 1)]
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req(
        (2, "payments:eu:", [("retention.ms", DELETE, None), ("segment.ms", SET, "-5")])), tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.invalid_config
    resp = await call_as(b, config_admin.ALTER_CONFIGS, 2, alter_req((2, "payments:eu:", {"flush.ms": "77"})), tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.none
    assert dict(store.image.namespaces[p + "payments:eu"].configs) == {"flush.ms": "77"}
    (res,) = (await describe_as(b, tid, (2, "other:", None))).results
    assert res.error_code == ErrorCode.invalid_topic_exception and res.configs == ()


async def test_tenant_defaults_on_the_broker_resource(env):
    b, tid, p = env
    store = b.metadata
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req(
        (4, "", [("log.retention.hours", SET, "2"), ("segment.ms", SET, "60000")])), tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.none
    assert dict(store.image.tenants[tid].configs) == {"retention.ms": "7200000", "segment.ms": "60000"}
    (res,) = (await describe_as(b, tid, (4, "", None))).results
    assert [(c.name, c.value, c.config_source) for c in res.configs] == [
        ("retention.ms", "7200000", 3), ("segment.ms", "60000", 3)]
    (res,) = (await describe_as(b, tid, (4, "", ["log.retention.ms"]))).results
    assert [c.name for c in res.configs] == ["retention.ms"]
    for bad, code in ((("num.io.threads", SET, "4"),), ErrorCode.policy_violation), \
                     ((("retention.ms", SET, "x"),), ErrorCode.invalid_config):
        resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req((4, "", list(bad))), tenant=tid)
        assert resp.responses[0].error_code == code, bad
    # this broker's id addresses them too (librdkafka refuses an empty resource name); another id not
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req((4, "1", [("flush.ms", SET, "5")]),
                                                                         (4, "2", [("flush.ms", SET, "6")])), tenant=tid)
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.invalid_request]
    (res,) = (await describe_as(b, tid, (4, "1", None))).results
    assert [c.name for c in res.configs] == ["flush.ms", "retention.ms", "segment.ms"]
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req((4, "", [("flush.ms", DELETE, None)])), tenant=tid)
    assert dict(store.image.tenants[tid].configs) == {"retention.ms": "7200000", "segment.ms": "60000"}
    # a topic in the default namespace inherits them
    await create_as(b, tid, {"name": "plain"})
    (res,) = (await describe_as(b, tid, (2, "plain", ["retention.ms"]))).results
    assert [(c.value, c.config_source) for c in res.configs] == [("7200000", 3)]
    assert res.configs[0].documentation.startswith("tenant default")
    # the physical view's broker resource is untouched by any of it
    assert dict(store.image.broker_configs) == {}
    (res,) = (await call_as(b, config_admin.DESCRIBE_CONFIGS, 4, describe_req(4, (4, "", None)), principal="User:ANONYMOUS")).results
    assert res.configs == ()


async def test_a_tenants_cell_places_its_topics_and_its_defaults_leave_it_alone(env):
    b, tid, p = env
    store = b.metadata
    for node in (2, 3):
        await store.register_broker(BrokerInfo(node, "127.0.0.1", 9092 + node, None))
    await store.update_tenant(tid, configs={"shoal.tenant.cell.brokers": "1", "retention.ms": "5"})
    resp = await create_as(b, tid, {"name": "in", "partitions": 3, "rf": 1}, {"name": "wide", "partitions": 1, "rf": 2})
    r = {t.name: t for t in resp.topics}
    assert r["in"].error_code == ErrorCode.none
    assert all(part.replicas == (1,) for part in store.image.topics[p + "in"].partitions)
    assert r["wide"].error_code == ErrorCode.invalid_replication_factor
    assert r["wide"].error_message == (
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be reached because "
        f"only 1 broker(s) are registered in tenant {tid}'s cell (shoal.tenant.cell.brokers=1).")
    # the tenant's defaults over the wire: the cell is not one of them, and stays
    (res,) = (await describe_as(b, tid, (4, "", None))).results
    assert [c.name for c in res.configs] == ["retention.ms"]
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req(
        (4, "", [("shoal.tenant.cell.brokers", SET, "2")])), tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.policy_violation
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, inc_req((4, "", [("segment.ms", SET, "60000")])),
                         tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.none
    resp = await call_as(b, config_admin.ALTER_CONFIGS, 2, alter_req((4, "", {"flush.ms": "7"})), tenant=tid)
    assert resp.responses[0].error_code == ErrorCode.none
    assert dict(store.image.tenants[tid].configs) == {"shoal.tenant.cell.brokers": "1", "flush.ms": "7"}


async def test_create_topic_policy(env):
    b, tid, p = env
    await b.metadata.update_tenant(tid, policy={
        "max.partitions.per.topic": 4, "max.partitions": 6, "topic.name.prefix": "payments:",
        "config.ranges": {"retention.ms": [1000, None]}})
    resp = await create_as(b, tid, {"name": "payments:eu:a", "partitions": 5}, {"name": "other", "partitions": 1},
                           {"name": "payments:eu:b", "partitions": 1, "configs": {"retention.ms": "10"}},
                           {"name": "payments:eu:c", "partitions": 4})
    got = [(t.name, t.error_code) for t in resp.topics]
    assert got == [("payments:eu:a", ErrorCode.policy_violation), ("other", ErrorCode.policy_violation),
                   ("payments:eu:b", ErrorCode.policy_violation), ("payments:eu:c", ErrorCode.none)]
    assert "(max.partitions.per.topic)" in resp.topics[0].error_message
    assert "(topic.name.prefix)" in resp.topics[1].error_message
    assert "(config.ranges)" in resp.topics[2].error_message
    # validate_only is judged the same way; the tenant total now counts c's 4 partitions
    resp = await create_as(b, tid, {"name": "payments:d", "partitions": 3}, {"name": "payments:e", "partitions": 2},
                           validate_only=True)
    assert [t.error_code for t in resp.topics] == [ErrorCode.policy_violation, ErrorCode.none]
    assert "(max.partitions)" in resp.topics[0].error_message
    m = req_mod(topic_admin.CREATE_PARTITIONS, 3)

    def grow(name, count):
        return build(m.CreatePartitionsRequest, topics=(build(m.CreatePartitionsTopic, name=name, count=count,
                                                              assignments=None),), timeout=T0, validate_only=False)

    resp = await call_as(b, topic_admin.CREATE_PARTITIONS, 3, grow("payments:eu:c", 5), tenant=tid)
    assert resp.results[0].error_code == ErrorCode.policy_violation
    assert len(b.metadata.image.topics[p + "payments:eu:c"].partitions) == 4
    # the operator (physical view) is not bound by a tenant's policy
    resp = await call_as(b, topic_admin.CREATE_PARTITIONS, 3, grow(p + "payments:eu:c", 5), principal="User:ANONYMOUS")
    assert resp.results[0].error_code == ErrorCode.none


async def test_namespace_and_tenant_configs_are_authorized(tmp_path):
    b = await make_broker(tmp_path, **{"authorizer.class.name": "shoal"})
    store = b.metadata
    t = await store.create_tenant("T")
    tid, p = t.tenant_id, t.tenant_id + "_"
    await store.assign_user("alice", tid)
    await store.create_namespaces([p + "payments", p + "payments:eu"])
    ops = inc_req((2, "payments:eu:", [("retention.ms", SET, "5")]), (4, "", [("retention.ms", SET, "5")]))
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, ops, tenant=tid)
    assert [r.error_code for r in resp.responses] == [ErrorCode.topic_authorization_failed,
                                                      ErrorCode.cluster_authorization_failed]
    out = await describe_as(b, tid, (2, "payments:eu:", None), (4, "", None))
    assert [r.error_code for r in out.results] == [ErrorCode.topic_authorization_failed,
                                                   ErrorCode.cluster_authorization_failed]
    # ALTER_CONFIGS on namespace "payments" covers payments:eu; on the cluster, the tenant defaults
    await store.alter_acls([
        AclEntry(tid, ResourceType.NAMESPACE, "payments", PatternType.LITERAL, "User:alice", "*",
                 Operation.ALTER_CONFIGS, Permission.ALLOW),
        AclEntry(tid, ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*",
                 Operation.ALTER_CONFIGS, Permission.ALLOW),
    ], [])
    resp = await call_as(b, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, ops, tenant=tid)
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.none]
    out = await describe_as(b, tid, (2, "payments:eu:", ["retention.ms"]), (4, "", None))
    assert [r.error_code for r in out.results] == [ErrorCode.none, ErrorCode.none]
    await store.close()
