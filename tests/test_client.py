"""shoal.client without a broker: the entity builder, and version negotiation against a fake."""

from __future__ import annotations

import asyncio
import datetime
import struct
import uuid

import pytest

from shoal.client import AdminClient, KafkaError, build_entity
from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode


def _roundtrip(api_key: int, version: int, entity):
    frame = codec.encode_request(api_key, version, 7, "test", entity)
    header, decoded = codec.decode_request(api_key, version, frame[4:])
    assert header.correlation_id == 7
    return decoded


def _versions(api_key: int) -> range:
    lo, hi = codec.kio_versions(api_key)
    return range(lo, hi + 1)


@pytest.mark.parametrize("version", _versions(19))
def test_create_topics_from_plain_dicts_every_version(version):
    cls = codec.request_type(19, version)
    entity = build_entity(
        cls,
        {
            "topics": [
                {
                    "name": "orders",
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "configs": [{"name": "cleanup.policy", "value": "compact"}],
                    "not_a_field": 1,  # dropped, like codec.build
                }
            ],
            "timeout": 5000,
            "validate_only": True,
        },
    )
    assert type(entity) is cls
    topic = entity.topics[0]
    assert type(topic).__name__ == "CreatableTopic" and type(topic).__version__ == version
    assert topic.assignments == ()  # required list left out -> empty
    assert topic.configs[0].value == "compact"
    assert entity.timeout == datetime.timedelta(milliseconds=5000)
    assert _roundtrip(19, version, entity) == entity


@pytest.mark.parametrize("version", _versions(20))
def test_delete_topics_superset_of_fields(version):
    cls = codec.request_type(20, version)
    entity = build_entity(
        cls,
        {"topic_names": ["a", "b"], "topics": [{"name": "a"}, {"name": "b"}], "timeout": 1000},
    )
    if version >= 6:
        assert [t.name for t in entity.topics] == ["a", "b"]
        assert entity.topics[0].topic_id is None  # nullable, left out
    else:
        assert entity.topic_names == ("a", "b")
    assert _roundtrip(20, version, entity) == entity


@pytest.mark.parametrize("api_key", [2, 3, 21, 32, 33, 37, 44, 60])
def test_other_admin_requests_build_and_roundtrip(api_key):
    values = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "offset": 5}]}],
        "resources": [
            {"resource_type": 2, "resource_name": "t", "configuration_keys": None,
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}
        ],
        "replica_id": -1,
        "isolation_level": 0,
        "timeout": 1000,
        "include_synonyms": False,
        "include_documentation": False,
        "validate_only": False,
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
        "endpoint_type": 1,
        "include_fenced_brokers": False,
    }
    if api_key == 37:
        values["topics"] = [{"name": "t", "count": 4, "assignments": None}]
    for version in _versions(api_key):
        entity = build_entity(codec.request_type(api_key, version), values)
        assert _roundtrip(api_key, version, entity) == entity


def test_missing_required_scalar_names_the_field():
    cls = codec.request_type(19, 7)
    with pytest.raises(TypeError, match=r"CreateTopicsRequest.topics\[0\].num_partitions"):
        build_entity(cls, {"topics": [{"name": "x", "replication_factor": 1}]})


def test_wrong_shapes_are_type_errors():
    cls = codec.request_type(19, 7)
    with pytest.raises(TypeError, match="wants a list"):
        build_entity(cls, {"topics": {"name": "x"}})
    with pytest.raises(TypeError, match="wants a dict"):
        build_entity(cls, {"topics": ["x"]})


def test_uuid_strings_and_entities_of_another_version():
    tid = uuid.uuid4()
    entity = build_entity(codec.request_type(20, 6), {"topics": [{"name": None, "topic_id": str(tid)}], "timeout": 1000})
    assert entity.topics[0].topic_id == tid
    # A nested entity built for v5 of CreateTopics reused in a v7 request.
    old = build_entity(codec.request_type(19, 5), {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1}]})
    new = build_entity(codec.request_type(19, 7), {"topics": list(old.topics)})
    assert type(new.topics[0]).__version__ == 7 and new.topics[0].name == "x"


# -- negotiation against a fake broker ----------------------------------------------------------


class FakeBroker:
    """Answers ApiVersions with a chosen table (and v0 UNSUPPORTED_VERSION above ``max_av``)."""

    def __init__(self, table: dict[int, tuple[int, int]], max_av: int = 3) -> None:
        self.table = table
        self.max_av = max_av
        self.seen: list[tuple[int, int]] = []
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def _api_versions(self, version: int, code: ErrorCode):
        mod = codec.response_module(18, version)
        keys = tuple(
            codec.build(mod.ApiVersion, api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.table.items())
        )
        return codec.build(
            mod.ApiVersionsResponse, error_code=code, api_keys=keys,
            throttle_time=datetime.timedelta(0), supported_features=(), finalized_features_epoch=-1,
            finalized_features=(), zk_migration_ready=False,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                key, version, cid = codec.peek_header(frame)
                self.seen.append((key, version))
                if key == 18 and version > self.max_av:
                    body, v = self._api_versions(0, ErrorCode.unsupported_version), 0
                elif key == 18:
                    codec.decode_request(key, version, frame)
                    body, v = self._api_versions(version, ErrorCode.none), version
                elif key == 60:
                    _, req = codec.decode_request(key, version, frame)
                    mod = codec.response_module(60, version)
                    body = codec.build(
                        mod.DescribeClusterResponse, throttle_time=datetime.timedelta(0),
                        error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                        cluster_id="fake", controller_id=1,
                        brokers=(codec.build(mod.DescribeClusterBroker, broker_id=1, host="h", port=1, rack=None),),
                        cluster_authorized_operations=-2147483648,
                    )
                    v = version
                else:
                    break
                writer.write(codec.encode_response(cid, key, v, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_negotiates_highest_common_version():
    fake = FakeBroker({18: (0, 3), 60: (0, 0), 19: (2, 4)})
    bootstrap = await fake.start()
    try:
        async with AdminClient(bootstrap, timeout=5) as client:
            assert client.version_for(18) == 3
            assert client.version_for(60) == 0
            assert client.version_for(19) == 4
            with pytest.raises(KafkaError) as e:
                client.version_for(44)
            assert e.value.code_name == "UNSUPPORTED_VERSION"
            info = await client.describe_cluster()
            assert info["cluster_id"] == "fake" and info["brokers"] == {1: ("h", 1, None)}
        assert fake.seen == [(18, 3), (60, 0)]
    finally:
        await fake.stop()


async def test_falls_back_when_api_versions_is_too_new():
    fake = FakeBroker({18: (0, 2), 60: (0, 1)}, max_av=2)
    bootstrap = await fake.start()
    try:
        async with AdminClient(bootstrap, timeout=5) as client:
            assert client.version_for(60) == 1
        assert fake.seen == [(18, 3), (18, 2)]
    finally:
        await fake.stop()


async def test_unreachable_broker_is_a_kafka_error():
    with pytest.raises(KafkaError) as e:
        await AdminClient("127.0.0.1:1", timeout=2).connect()
    assert e.value.code_name == "NETWORK_EXCEPTION"
