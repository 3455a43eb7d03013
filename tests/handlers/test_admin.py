"""Admin handlers called directly: a real EmbeddedMetadataStore, a real BrokerConfig, real kio
request entities; every response is encoded and decoded again to prove it is valid on the wire."""

from __future__ import annotations

import random

import asyncio
import datetime
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shoal.config import BrokerConfig, ConfigSource
from shoal.handlers import configs as config_admin
from shoal.handlers import topics as topic_admin
from shoal.handlers.context import RequestContext
from shoal.metadata import BrokerInfo
from shoal.metadata.embedded import EmbeddedMetadataStore
from shoal.protocol.codec import (
    RequestHeader,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    kio_versions,
    request_type,
)
from shoal.protocol.errors import ErrorCode
from kio.index import load_payload_module
from kio.static.constants import EntityType

T0 = datetime.timedelta(seconds=30)


@dataclass
class FakeBroker:
    metadata: EmbeddedMetadataStore
    static_config: BrokerConfig
    node_id: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    random: random.Random = field(default_factory=random.Random)
    fenced_brokers: frozenset[int] = frozenset()  # none treated as gone (no controller here)

    @property
    def services(self) -> "FakeBroker":  # what handlers see (shoal.services.Services), duck-typed
        return self

    @property
    def config(self) -> BrokerConfig:
        image = self.metadata.image
        return self.static_config.with_dynamic(image.broker_configs, image.broker_overrides.get(self.node_id))


async def make_broker(tmp_path: Path, *, brokers: list[tuple[int, str | None]] | None = None, **overrides: str):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    for node, rack in brokers or [(1, None)]:
        await store.register_broker(BrokerInfo(node, "127.0.0.1", 9092 + node, rack))
    return FakeBroker(store, BrokerConfig.load(None, overrides))


@pytest.fixture
async def broker(tmp_path):
    b = await make_broker(tmp_path)
    yield b
    await b.metadata.close()


def req_mod(key: int, version: int):
    return load_payload_module(key, version, EntityType.request)


async def call(broker, key: int, version: int, req):
    """Run the handler for ``req`` as a client would: through the wire codec both ways."""
    frame = encode_request(key, version, 7, "test", req)
    header, decoded = decode_request(key, version, memoryview(frame)[4:])
    assert decoded == req
    spec = {
        topic_admin.CREATE_TOPICS: topic_admin.handle_create_topics,
        topic_admin.DELETE_TOPICS: topic_admin.handle_delete_topics,
        topic_admin.CREATE_PARTITIONS: topic_admin.handle_create_partitions,
        config_admin.DESCRIBE_CONFIGS: config_admin.handle_describe_configs,
        config_admin.ALTER_CONFIGS: config_admin.handle_alter_configs,
        config_admin.INCREMENTAL_ALTER_CONFIGS: config_admin.handle_incremental_alter_configs,
    }[key]
    ctx = RequestContext(services=broker.services, header=header, client_address="127.0.0.1:1")
    resp = await spec(ctx, decoded)
    out = encode_response(7, key, version, resp)
    cid, back = decode_response(key, version, memoryview(out)[4:])
    assert cid == 7 and back == resp
    return resp


def create_req(version: int, *topics: dict, validate_only: bool = False):
    m = req_mod(topic_admin.CREATE_TOPICS, version)
    ts = []
    for t in topics:
        ts.append(
            build(
                m.CreatableTopic,
                name=t["name"],
                num_partitions=t.get("partitions", -1),
                replication_factor=t.get("rf", -1),
                assignments=tuple(
                    build(m.CreatableReplicaAssignment, partition_index=i, broker_ids=tuple(b))
                    for i, b in t.get("assignments", {}).items()
                ),
                configs=tuple(build(m.CreatableTopicConfig, name=k, value=v) for k, v in t.get("configs", {}).items()),
            )
        )
    return build(m.CreateTopicsRequest, topics=tuple(ts), timeout=T0, validate_only=validate_only)


async def create(broker, *topics: dict, version: int = 7, validate_only: bool = False):
    return await call(broker, topic_admin.CREATE_TOPICS, version, create_req(version, *topics, validate_only=validate_only))


def codes(results) -> list[ErrorCode]:
    return [r.error_code for r in results]


# ---------------------------------------------------------------------------------------------


class TestCreateTopics:
    async def test_defaults_and_response(self, tmp_path):
        b = await make_broker(tmp_path, **{"num.partitions": "3"})
        resp = await create(b, {"name": "orders", "configs": {"retention.ms": "1000"}})
        (r,) = resp.topics
        assert r.error_code == ErrorCode.none and r.error_message is None
        t = b.metadata.image.topics["orders"]
        assert r.topic_id == t.topic_id and r.topic_id.int != 0
        assert r.num_partitions == 3 and r.replication_factor == 1
        assert len(t.partitions) == 3 and all(p.replicas == (1,) and p.leader == 1 for p in t.partitions)
        assert dict(t.configs) == {"retention.ms": "1000"}
        cfgs = {c.name: c for c in r.configs}
        assert cfgs["retention.ms"].value == "1000"
        assert cfgs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert cfgs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG

    @pytest.mark.parametrize("version", range(2, 8))
    async def test_every_version(self, broker, version):
        resp = await create(broker, {"name": f"t{version}", "partitions": 2, "rf": 1}, version=version)
        assert codes(resp.topics) == [ErrorCode.none]
        assert len(broker.metadata.image.topics[f"t{version}"].partitions) == 2

    async def test_errors(self, broker):
        await create(broker, {"name": "exists"})
        resp = await create(
            broker,
            {"name": "exists"},
            {"name": "bad/name"},
            {"name": ".."},
            {"name": "x" * 250},
            {"name": ""},
            {"name": "zero", "partitions": 0},
            {"name": "negative", "partitions": -2},
            {"name": "rf0", "rf": 0},
            {"name": "rf2", "rf": 2},
            {"name": "badcfg", "configs": {"segment.bytes": "1"}},
            {"name": "unknowncfg", "configs": {"nope": "1"}},
            {"name": "dup"},
            {"name": "dup"},
        )
        got = {(r.name, r.error_code) for r in resp.topics}
        assert got == {
            ("exists", ErrorCode.topic_already_exists),
            ("bad/name", ErrorCode.invalid_topic_exception),
            ("..", ErrorCode.invalid_topic_exception),
            ("x" * 250, ErrorCode.invalid_topic_exception),
            ("", ErrorCode.invalid_topic_exception),
            ("zero", ErrorCode.invalid_partitions),
            ("negative", ErrorCode.invalid_partitions),
            ("rf0", ErrorCode.invalid_replication_factor),
            ("rf2", ErrorCode.invalid_replication_factor),
            ("badcfg", ErrorCode.invalid_config),
            ("unknowncfg", ErrorCode.invalid_config),
            ("dup", ErrorCode.invalid_request),
        }
        for r in resp.topics:
            assert r.error_message, r.name
            assert r.topic_id is None
        assert set(broker.metadata.image.topics) == {"exists"}
        bad = next(r for r in resp.topics if r.name == "badcfg")
        assert "segment.bytes" in bad.error_message

    async def test_longest_legal_name(self, broker):
        resp = await create(broker, {"name": "a" * 249})
        assert codes(resp.topics) == [ErrorCode.none]

    async def test_collision(self, broker):
        await create(broker, {"name": "a.b"})
        resp = await create(broker, {"name": "a_b"})
        assert codes(resp.topics) == [ErrorCode.invalid_topic_exception]

    async def test_validate_only(self, broker):
        resp = await create(broker, {"name": "v", "partitions": 4}, validate_only=True)
        (r,) = resp.topics
        assert r.error_code == ErrorCode.none and r.num_partitions == 4 and r.replication_factor == 1
        assert "v" not in broker.metadata.image.topics

    async def test_manual_assignment(self, tmp_path):
        b = await make_broker(tmp_path, brokers=[(1, None), (2, None), (3, None)])
        resp = await create(b, {"name": "m", "assignments": {0: [3, 1], 1: [2, 3]}})
        assert codes(resp.topics) == [ErrorCode.none]
        t = b.metadata.image.topics["m"]
        assert [p.replicas for p in t.partitions] == [(3, 1), (2, 3)]
        assert [p.leader for p in t.partitions] == [3, 2]
        bad = await create(
            b,
            {"name": "unknown_broker", "assignments": {0: [9]}},
            {"name": "dup_broker", "assignments": {0: [1, 1]}},
            {"name": "gap", "assignments": {0: [1], 2: [2]}},
            {"name": "uneven", "assignments": {0: [1], 1: [1, 2]}},
            {"name": "with_count", "partitions": 2, "assignments": {0: [1]}},
        )
        assert {(r.name, r.error_code) for r in bad.topics} == {
            ("unknown_broker", ErrorCode.invalid_replica_assignment),
            ("dup_broker", ErrorCode.invalid_replica_assignment),
            ("gap", ErrorCode.invalid_replica_assignment),
            ("uneven", ErrorCode.invalid_replica_assignment),
            ("with_count", ErrorCode.invalid_request),
        }

    async def test_rack_aware_placement(self, tmp_path):
        racks = [(1, "DC1"), (2, "DC1"), (3, "DC1"), (4, "DC2"), (5, "DC2"), (6, "DC2")]
        b = await make_broker(tmp_path, brokers=racks)
        resp = await create(b, {"name": "stretch", "partitions": 6, "rf": 4})
        assert codes(resp.topics) == [ErrorCode.none]
        rack = dict(racks)
        parts = b.metadata.image.topics["stretch"].partitions
        for p in parts:
            assert sorted(rack[r] for r in p.replicas) == ["DC1", "DC1", "DC2", "DC2"]
        assert sorted(p.leader for p in parts) == [1, 2, 3, 4, 5, 6]

    async def test_concurrent_creates_of_one_name(self, broker):
        results = await asyncio.gather(*(create(broker, {"name": "race"}) for _ in range(5)))
        flat = [r.topics[0].error_code for r in results]
        assert flat.count(ErrorCode.none) == 1
        assert flat.count(ErrorCode.topic_already_exists) == 4


class TestDeleteTopics:
    async def test_by_name_all_versions(self, broker):
        for v in range(1, 7):
            await create(broker, {"name": f"d{v}"})
            m = req_mod(topic_admin.DELETE_TOPICS, v)
            if v >= 6:
                req = build(m.DeleteTopicsRequest, topics=(build(m.DeleteTopicState, name=f"d{v}", topic_id=None),), timeout=T0)
            else:
                req = build(m.DeleteTopicsRequest, topic_names=(f"d{v}",), timeout=T0)
            resp = await call(broker, topic_admin.DELETE_TOPICS, v, req)
            assert codes(resp.responses) == [ErrorCode.none]
            assert f"d{v}" not in broker.metadata.image.topics

    async def test_by_id_and_errors(self, broker):
        resp = await create(broker, {"name": "x"})
        tid = resp.topics[0].topic_id
        m = req_mod(topic_admin.DELETE_TOPICS, 6)
        S = m.DeleteTopicState
        req = build(
            m.DeleteTopicsRequest,
            topics=(
                S(name=None, topic_id=tid),
                S(name=None, topic_id=uuid.uuid4()),
                S(name="ghost", topic_id=None),
                S(name="y", topic_id=uuid.uuid4()),
                S(name=None, topic_id=None),
            ),
            timeout=T0,
        )
        out = await call(broker, topic_admin.DELETE_TOPICS, 6, req)
        r = out.responses
        assert r[0].error_code == ErrorCode.none and r[0].name == "x" and r[0].topic_id == tid
        assert r[1].error_code == ErrorCode.unknown_topic_id
        assert r[2].error_code == ErrorCode.unknown_topic_or_partition
        assert r[3].error_code == ErrorCode.invalid_request
        assert r[4].error_code == ErrorCode.invalid_request
        assert "x" not in broker.metadata.image.topics

    async def test_deletion_disabled(self, tmp_path):
        b = await make_broker(tmp_path, **{"delete.topic.enable": "false"})
        await create(b, {"name": "keep"})
        m = req_mod(topic_admin.DELETE_TOPICS, 5)
        out = await call(b, topic_admin.DELETE_TOPICS, 5, build(m.DeleteTopicsRequest, topic_names=("keep",), timeout=T0))
        assert codes(out.responses) == [ErrorCode.topic_deletion_disabled]
        assert "keep" in b.metadata.image.topics

    async def test_internal_topic_refused(self, broker):
        await broker.metadata.create_topic("__consumer_offsets", [(1,)], {}, internal=True)
        m = req_mod(topic_admin.DELETE_TOPICS, 4)
        out = await call(
            broker, topic_admin.DELETE_TOPICS, 4, build(m.DeleteTopicsRequest, topic_names=("__consumer_offsets",), timeout=T0)
        )
        assert codes(out.responses) == [ErrorCode.invalid_request]


class TestCreatePartitions:
    def req(self, version, *topics, validate_only=False):
        m = req_mod(topic_admin.CREATE_PARTITIONS, version)
        return build(
            m.CreatePartitionsRequest,
            topics=tuple(
                build(
                    m.CreatePartitionsTopic,
                    name=name,
                    count=count,
                    assignments=None
                    if assignments is None
                    else tuple(build(m.CreatePartitionsAssignment, broker_ids=tuple(a)) for a in assignments),
                )
                for name, count, assignments in topics
            ),
            timeout=T0,
            validate_only=validate_only,
        )

    @pytest.mark.parametrize("version", range(0, 4))
    async def test_increase(self, broker, version):
        await create(broker, {"name": "p", "partitions": 2})
        out = await call(broker, topic_admin.CREATE_PARTITIONS, version, self.req(version, ("p", 5, None)))
        assert codes(out.results) == [ErrorCode.none]
        parts = broker.metadata.image.topics["p"].partitions
        assert [p.partition for p in parts] == [0, 1, 2, 3, 4]

    async def test_errors_and_validate_only(self, broker):
        await create(broker, {"name": "p", "partitions": 3})
        out = await call(
            broker,
            topic_admin.CREATE_PARTITIONS,
            3,
            self.req(
                3,
                ("p", 2, None),
                ("ghost", 4, None),
                ("p", 3, None),
            ),
        )
        assert codes(out.results) == [
            ErrorCode.invalid_request,  # duplicate name in one request
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_request,
        ]
        out = await call(broker, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 2, None)))
        assert codes(out.results) == [ErrorCode.invalid_partitions]
        # KRaft's ReplicationControlManager.createPartitions message (the cluster planner's)
        assert out.results[0].error_message == "The topic p currently has 3 partition(s); 2 would not be an increase."
        out = await call(broker, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 3, None)))
        assert codes(out.results) == [ErrorCode.invalid_partitions]
        out = await call(broker, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 9, None), validate_only=True))
        assert codes(out.results) == [ErrorCode.none]
        assert len(broker.metadata.image.topics["p"].partitions) == 3

    async def test_manual_assignments(self, tmp_path):
        b = await make_broker(tmp_path, brokers=[(1, None), (2, None)])
        await create(b, {"name": "p", "partitions": 1, "rf": 2})
        out = await call(b, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 3, [[2, 1], [1, 2]])))
        assert codes(out.results) == [ErrorCode.none]
        assert [p.replicas for p in b.metadata.image.topics["p"].partitions][1:] == [(2, 1), (1, 2)]
        out = await call(b, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 5, [[1, 2]])))
        assert codes(out.results) == [ErrorCode.invalid_replica_assignment]
        out = await call(b, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 4, [[1]])))
        assert codes(out.results) == [ErrorCode.invalid_replica_assignment]  # RF must match
        out = await call(b, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 4, [[1, 7]])))
        assert codes(out.results) == [ErrorCode.invalid_replica_assignment]

    async def test_new_partitions_follow_kafka_round_robin(self, tmp_path):
        b = await make_broker(tmp_path, brokers=[(1, None), (2, None), (3, None)])
        await create(b, {"name": "p", "assignments": {0: [1, 2]}})
        await call(b, topic_admin.CREATE_PARTITIONS, 3, self.req(3, ("p", 4, None)))
        reps = [p.replicas for p in b.metadata.image.topics["p"].partitions]
        # start index = position of partition 0's leader (broker 1), partition ids continue at 1
        assert reps[1:] == [(2, 3), (3, 1), (1, 3)]


class TestDescribeConfigs:
    def req(self, version, *resources, synonyms=False, docs=False):
        m = req_mod(config_admin.DESCRIBE_CONFIGS, version)
        return build(
            m.DescribeConfigsRequest,
            resources=tuple(
                build(m.DescribeConfigsResource, resource_type=t, resource_name=n, configuration_keys=keys)
                for t, n, keys in resources
            ),
            include_synonyms=synonyms,
            include_documentation=docs,
        )

    @pytest.mark.parametrize("version", range(1, 5))
    async def test_topic(self, broker, version):
        await create(broker, {"name": "t", "configs": {"cleanup.policy": "compact"}})
        out = await call(broker, config_admin.DESCRIBE_CONFIGS, version, self.req(version, (2, "t", None), synonyms=True, docs=True))
        (res,) = out.results
        assert res.error_code == ErrorCode.none
        cfg = {c.name: c for c in res.configs}
        assert cfg["cleanup.policy"].value == "compact"
        assert cfg["cleanup.policy"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert [s.name for s in cfg["cleanup.policy"].synonyms] == ["cleanup.policy", "log.cleanup.policy"]
        assert cfg["retention.ms"].value == "604800000"
        if version >= 3:
            assert cfg["cleanup.policy"].config_type == 7  # LIST
            assert cfg["cleanup.policy"].documentation

    async def test_filters_and_flags(self, broker):
        await create(broker, {"name": "t"})
        out = await call(broker, config_admin.DESCRIBE_CONFIGS, 4, self.req(4, (2, "t", ("retention.ms", "segment.bytes", "bogus"))))
        (res,) = out.results
        assert sorted(c.name for c in res.configs) == ["retention.ms", "segment.bytes"]
        assert all(c.synonyms == () and c.documentation is None for c in res.configs)

    async def test_errors(self, broker):
        out = await call(
            broker,
            config_admin.DESCRIBE_CONFIGS,
            4,
            self.req(4, (2, "ghost", None), (2, "bad/name", None), (4, "99", None), (4, "x", None), (3, "g", None)),
        )
        assert codes(out.results) == [
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_topic_exception,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ]

    async def test_broker(self, tmp_path):
        b = await make_broker(tmp_path, **{"num.partitions": "6"})
        await b.metadata.set_broker_configs({"log.retention.ms": "123"})
        out = await call(
            b, config_admin.DESCRIBE_CONFIGS, 4, self.req(4, (4, "1", None), (4, "", None), (8, "1", None), synonyms=True)
        )
        node, cluster, logger = out.results
        cfg = {c.name: c for c in node.configs}
        assert cfg["num.partitions"].value == "6"
        assert cfg["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG
        assert cfg["num.partitions"].read_only
        assert cfg["log.retention.ms"].value == "123"
        assert cfg["log.retention.ms"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        assert not cfg["log.retention.ms"].read_only
        assert [(c.name, c.value) for c in cluster.configs] == [("log.retention.ms", "123")]
        assert logger.error_code == ErrorCode.none and logger.configs == ()


class TestAlterConfigs:
    def alter_req(self, version, *resources, validate_only=False):
        m = req_mod(config_admin.ALTER_CONFIGS, version)
        return build(
            m.AlterConfigsRequest,
            resources=tuple(
                build(
                    m.AlterConfigsResource,
                    resource_type=t,
                    resource_name=n,
                    configs=tuple(build(m.AlterableConfig, name=k, value=v) for k, v in cfgs.items()),
                )
                for t, n, cfgs in resources
            ),
            validate_only=validate_only,
        )

    def inc_req(self, version, *resources, validate_only=False):
        m = req_mod(config_admin.INCREMENTAL_ALTER_CONFIGS, version)
        return build(
            m.IncrementalAlterConfigsRequest,
            resources=tuple(
                build(
                    m.AlterConfigsResource,
                    resource_type=t,
                    resource_name=n,
                    configs=tuple(build(m.AlterableConfig, name=k, config_operation=op, value=v) for k, op, v in ops),
                )
                for t, n, ops in resources
            ),
            validate_only=validate_only,
        )

    @pytest.mark.parametrize("version", range(0, 3))
    async def test_alter_replaces_topic_overrides(self, broker, version):
        await create(broker, {"name": "t", "configs": {"retention.ms": "1", "segment.bytes": "1000"}})
        out = await call(broker, config_admin.ALTER_CONFIGS, version, self.alter_req(version, (2, "t", {"retention.ms": "5"})))
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.topics["t"].configs) == {"retention.ms": "5"}

    async def test_alter_errors_and_validate_only(self, broker):
        await create(broker, {"name": "t"})
        out = await call(
            broker,
            config_admin.ALTER_CONFIGS,
            2,
            self.alter_req(
                2,
                (2, "ghost", {"retention.ms": "5"}),
                (2, "t", {"segment.bytes": "1"}),
                (2, "t", {}),  # duplicate resource
            ),
        )
        assert codes(out.responses) == [
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ]
        out = await call(broker, config_admin.ALTER_CONFIGS, 2, self.alter_req(2, (2, "t", {"segment.bytes": "1"})))
        assert codes(out.responses) == [ErrorCode.invalid_config]
        assert "segment.bytes" in out.responses[0].error_message
        out = await call(broker, config_admin.ALTER_CONFIGS, 2, self.alter_req(2, (2, "t", {"retention.ms": "9"}), validate_only=True))
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.topics["t"].configs) == {}

    async def test_alter_broker(self, broker):
        epoch = broker.metadata.image.epoch
        out = await call(
            broker,
            config_admin.ALTER_CONFIGS,
            2,
            self.alter_req(2, (4, "", {"log.retention.ms": "1000", "message.max.bytes": "2000"})),
        )
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.broker_configs) == {"log.retention.ms": "1000", "message.max.bytes": "2000"}
        assert broker.config.get("message.max.bytes") == 2000
        assert broker.metadata.image.epoch == epoch + 1
        out = await call(
            broker,
            config_admin.ALTER_CONFIGS,
            2,
            self.alter_req(2, (4, "", {"listeners": "PLAINTEXT://:1"}), (4, "2", {"log.retention.ms": "1"}), (4, "", {})),
        )
        r = out.responses
        assert r[0].error_code == ErrorCode.invalid_request  # duplicate resource
        assert r[1].error_code == ErrorCode.invalid_request  # another broker's id
        out = await call(broker, config_admin.ALTER_CONFIGS, 2, self.alter_req(2, (4, "", {"listeners": "PLAINTEXT://:1"})))
        assert out.responses[0].error_code == ErrorCode.invalid_request
        assert "Cannot update these configs dynamically" in out.responses[0].error_message
        out = await call(broker, config_admin.ALTER_CONFIGS, 2, self.alter_req(2, (4, "", {})))
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.broker_configs) == {}

    @pytest.mark.parametrize("version", range(0, 2))
    async def test_incremental_topic(self, broker, version):
        await create(broker, {"name": "t", "configs": {"retention.ms": "1", "segment.bytes": "1000"}})
        out = await call(
            broker,
            config_admin.INCREMENTAL_ALTER_CONFIGS,
            version,
            self.inc_req(
                version,
                (
                    2,
                    "t",
                    [
                        ("retention.ms", config_admin.OP_SET, "7"),
                        ("segment.bytes", config_admin.OP_DELETE, None),
                        ("cleanup.policy", config_admin.OP_APPEND, "compact"),
                    ],
                ),
            ),
        )
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.topics["t"].configs) == {
            "retention.ms": "7",
            "cleanup.policy": "delete,compact",  # appended to the effective default
        }
        out = await call(
            broker,
            config_admin.INCREMENTAL_ALTER_CONFIGS,
            version,
            self.inc_req(version, (2, "t", [("cleanup.policy", config_admin.OP_SUBTRACT, "delete")])),
        )
        assert codes(out.responses) == [ErrorCode.none]
        assert broker.metadata.image.topics["t"].configs["cleanup.policy"] == "compact"

    async def test_incremental_errors(self, broker):
        await create(broker, {"name": "t"})
        cases = [
            ([("retention.ms", config_admin.OP_APPEND, "1")], ErrorCode.invalid_config),
            ([("nope", config_admin.OP_SET, "1")], ErrorCode.invalid_config),
            ([("retention.ms", 9, "1")], ErrorCode.invalid_request),
            ([("retention.ms", config_admin.OP_SET, "1"), ("retention.ms", config_admin.OP_DELETE, None)], ErrorCode.invalid_request),
            ([("cleanup.policy", config_admin.OP_APPEND, "shred")], ErrorCode.invalid_config),
        ]
        for ops, code in cases:
            out = await call(broker, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, self.inc_req(1, (2, "t", ops)))
            assert codes(out.responses) == [code], ops
        assert dict(broker.metadata.image.topics["t"].configs) == {}

    async def test_incremental_broker(self, broker):
        out = await call(
            broker,
            config_admin.INCREMENTAL_ALTER_CONFIGS,
            1,
            self.inc_req(1, (4, "", [("log.retention.ms", config_admin.OP_SET, "10"), ("log.cleanup.policy", config_admin.OP_APPEND, "compact")])),
        )
        assert codes(out.responses) == [ErrorCode.none]
        assert dict(broker.metadata.image.broker_configs) == {"log.retention.ms": "10", "log.cleanup.policy": "delete,compact"}
        out = await call(
            broker, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, self.inc_req(1, (4, "", [("log.retention.ms", config_admin.OP_DELETE, None)]))
        )
        assert dict(broker.metadata.image.broker_configs) == {"log.cleanup.policy": "delete,compact"}
        out = await call(
            broker, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, self.inc_req(1, (4, "", [("node.id", config_admin.OP_SET, "3")]))
        )
        assert codes(out.responses) == [ErrorCode.invalid_request]
        out = await call(
            broker,
            config_admin.INCREMENTAL_ALTER_CONFIGS,
            1,
            self.inc_req(1, (4, "", [("log.retention.ms", config_admin.OP_SET, "5")]), validate_only=True),
        )
        assert codes(out.responses) == [ErrorCode.none]
        assert "log.retention.ms" not in broker.metadata.image.broker_configs

    async def test_concurrent_incremental_alters_do_not_lose_updates(self, broker):
        await create(broker, {"name": "t"})
        keys = ["retention.ms", "segment.ms", "flush.ms", "file.delete.delay.ms", "delete.retention.ms"]
        await asyncio.gather(
            *(
                call(broker, config_admin.INCREMENTAL_ALTER_CONFIGS, 1, self.inc_req(1, (2, "t", [(k, config_admin.OP_SET, "100")])))
                for k in keys
            )
        )
        assert set(broker.metadata.image.topics["t"].configs) == set(keys)


def test_versions_are_within_kio():
    for key, lo, hi in [(19, 2, 7), (20, 1, 6), (37, 0, 3), (32, 1, 4), (33, 0, 2), (44, 0, 1)]:
        k = kio_versions(key)
        assert k is not None and k[0] <= lo and hi <= k[1]
