"""Per-broker dynamic configs (issue 11): DescribeConfigs / AlterConfigs / IncrementalAlterConfigs
on BROKER "<node id>" (this broker's own dynamic configs, DYNAMIC_BROKER_CONFIG) next to the
cluster-wide default "" (DYNAMIC_DEFAULT_BROKER_CONFIG). Handlers called directly over a real
EmbeddedMetadataStore, every request and response through the wire codec."""

from __future__ import annotations

from test_admin import call, make_broker, req_mod

from shoal.config import ConfigSource
from shoal.handlers import configs as config_admin
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.metadata.rules import configs as config_rules
from shoal.protocol.codec import build
from shoal.protocol.errors import ErrorCode

SET, DELETE = config_admin.OP_SET, config_admin.OP_DELETE
BROKER = config_admin.RESOURCE_BROKER


def incremental(*resources, validate_only=False):
    m = req_mod(config_admin.INCREMENTAL_ALTER_CONFIGS, 1)
    return build(m.IncrementalAlterConfigsRequest, resources=tuple(
        build(m.AlterConfigsResource, resource_type=BROKER, resource_name=n,
              configs=tuple(build(m.AlterableConfig, name=k, config_operation=op, value=v) for k, op, v in ops))
        for n, ops in resources), validate_only=validate_only)


def alter(name, configs):
    m = req_mod(config_admin.ALTER_CONFIGS, 2)
    return build(m.AlterConfigsRequest, resources=(build(
        m.AlterConfigsResource, resource_type=BROKER, resource_name=name,
        configs=tuple(build(m.AlterableConfig, name=k, value=v) for k, v in configs.items())),), validate_only=False)


async def describe(broker, name, keys=None):
    m = req_mod(config_admin.DESCRIBE_CONFIGS, 4)
    req = build(m.DescribeConfigsRequest, resources=(build(
        m.DescribeConfigsResource, resource_type=BROKER, resource_name=name,
        configuration_keys=None if keys is None else tuple(keys)),),
        include_synonyms=True, include_documentation=False)
    return (await call(broker, config_admin.DESCRIBE_CONFIGS, 4, req)).results[0]


async def inc(broker, *resources, validate_only=False):
    out = await call(broker, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, incremental(*resources, validate_only=validate_only))
    return [(r.error_code, r.error_message) for r in out.responses]


def rule_unchanged_when_same(image) -> bool:
    return config_rules.set_broker_overrides(image, 1, dict(image.broker_overrides.get(1, {}))).change is None


async def test_a_brokers_own_config_overrides_the_cluster_default_and_is_described_with_its_source(tmp_path):
    b = await make_broker(tmp_path, **{"log.cleaner.threads": "1"})
    try:
        assert await inc(b, ("", [("message.max.bytes", SET, "3000"), ("log.cleaner.threads", SET, "2")])) == [
            (ErrorCode.none, None)]
        assert await inc(b, ("1", [("message.max.bytes", SET, "5000")])) == [(ErrorCode.none, None)]
        image = b.metadata.image
        assert dict(image.broker_overrides) == {1: {"message.max.bytes": "5000"}}
        assert dict(image.broker_configs) == {"message.max.bytes": "3000", "log.cleaner.threads": "2"}
        assert b.config.get("message.max.bytes") == 5000  # this broker's own value is in force
        assert b.config.source("message.max.bytes") == ConfigSource.DYNAMIC_BROKER_CONFIG

        res = await describe(b, "1", ["message.max.bytes", "log.cleaner.threads", "listeners"])
        assert res.error_code == ErrorCode.none
        got = {c.name: c for c in res.configs}
        mmb = got["message.max.bytes"]
        assert (mmb.value, mmb.config_source, mmb.read_only, mmb.is_sensitive) == (
            "5000", ConfigSource.DYNAMIC_BROKER_CONFIG, False, False)
        assert [(s.name, s.value, s.source) for s in mmb.synonyms] == [
            ("message.max.bytes", "5000", ConfigSource.DYNAMIC_BROKER_CONFIG),
            ("message.max.bytes", "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
        ]
        threads = got["log.cleaner.threads"]
        assert (threads.value, threads.config_source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert [s.source for s in threads.synonyms] == [
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
        assert got["listeners"].read_only and got["listeners"].config_source == ConfigSource.DEFAULT_CONFIG

        default = await describe(b, "")  # the cluster-wide default lists only what it sets
        assert {c.name: (c.value, c.config_source) for c in default.configs} == {
            "message.max.bytes": ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            "log.cleaner.threads": ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        }

        # Deleting the broker's own value falls back to the cluster default; none left: no entry.
        assert await inc(b, ("1", [("message.max.bytes", DELETE, None)])) == [(ErrorCode.none, None)]
        assert dict(b.metadata.image.broker_overrides) == {}
        assert b.config.get("message.max.bytes") == 3000
        assert rule_unchanged_when_same(b.metadata.image)
    finally:
        await b.metadata.close()


async def test_alter_configs_replaces_a_brokers_own_configs_and_they_survive_a_restart(tmp_path):
    b = await make_broker(tmp_path)
    out = await call(b, config_admin.ALTER_CONFIGS, 2, alter("1", {"log.retention.ms": "7000", "num.io.threads": "4"}))
    assert [r.error_code for r in out.responses] == [ErrorCode.none]
    out = await call(b, config_admin.ALTER_CONFIGS, 2, alter("1", {"log.retention.ms": "8000"}))
    assert [r.error_code for r in out.responses] == [ErrorCode.none]
    assert dict(b.metadata.image.broker_overrides[1]) == {"log.retention.ms": "8000"}
    await b.metadata.close()  # journal and snapshot keep them
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    try:
        assert dict(store.image.broker_overrides) == {1: {"log.retention.ms": "8000"}}
    finally:
        await store.close()


async def test_refusals_a_static_config_another_brokers_id_a_bad_value_and_validate_only(tmp_path):
    b = await make_broker(tmp_path)
    try:
        [(code, message)] = await inc(b, ("1", [("listeners", SET, "PLAINTEXT://:1")]))
        assert code == ErrorCode.invalid_request and "Cannot update these configs dynamically" in message
        [(code, message)] = await inc(b, ("2", [("message.max.bytes", SET, "1")]))
        assert (code, message) == (
            ErrorCode.invalid_request, "Unexpected broker id, expected 1 or empty string, but received 2")
        [(code, message)] = await inc(b, ("x", [("message.max.bytes", SET, "1")]))
        assert code == ErrorCode.invalid_request and "Broker id must be an integer" in message
        [(code, _m)] = await inc(b, ("1", [("message.max.bytes", SET, "lots")]))
        assert code == ErrorCode.invalid_config
        assert await inc(b, ("1", [("message.max.bytes", SET, "9")]), validate_only=True) == [(ErrorCode.none, None)]
        assert dict(b.metadata.image.broker_overrides) == {}
        res = await describe(b, "2")
        assert res.error_code == ErrorCode.invalid_request
    finally:
        await b.metadata.close()


async def test_a_brokers_own_configs_go_through_etcd_to_every_broker_and_a_fresh_load(etcd_cluster):
    """Key ``broker_configs/<node id>`` under the cluster's prefix: written by one broker's commit,
    delivered by the other's watch, read by a broker starting later; removed with the last key."""
    import asyncio
    import uuid

    from shoal.metadata.etcd import EtcdMetadataStore

    url = etcd_cluster.url(f"/shoal-test/{uuid.uuid4().hex[:12]}")
    a, b = EtcdMetadataStore(url, node_id=1), EtcdMetadataStore(url, node_id=2)
    await a.start()
    await b.start()
    try:
        await a.decide_and_commit(lambda img: config_rules.set_broker_overrides(img, 2, {"num.io.threads": "3"}))
        for _ in range(100):
            if b.image.broker_overrides:
                break
            await asyncio.sleep(0.05)
        assert dict(b.image.broker_overrides) == {2: {"num.io.threads": "3"}}
        c = EtcdMetadataStore(url, node_id=3)
        await c.start()
        try:
            assert dict(c.image.broker_overrides) == {2: {"num.io.threads": "3"}}
        finally:
            await c.close()
        await b.decide_and_commit(lambda img: config_rules.set_broker_overrides(img, 2, {}))
        for _ in range(100):
            if not a.image.broker_overrides:
                break
            await asyncio.sleep(0.05)
        assert dict(a.image.broker_overrides) == {}
    finally:
        await a.close()
        await b.close()
