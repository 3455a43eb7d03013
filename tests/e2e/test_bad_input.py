"""Bad bytes on raw sockets: the broker answers or drops that connection, and keeps serving others."""

from __future__ import annotations

import socket
import struct
import time

import crc32c
import pytest

from raw_client import recv_frame
from shoal.protocol import codec
from shoal.protocol.records import encode_uvarint as _uvarint

pytestmark = pytest.mark.timeout(60)

SOCKET_TIMEOUT = 10.0


def connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=SOCKET_TIMEOUT)
    s.settimeout(SOCKET_TIMEOUT)
    return s


def closed_by_peer(s: socket.socket) -> bool:
    """True when the broker closes the connection (EOF or reset) before SOCKET_TIMEOUT."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def request(api_key: int, version: int, body, correlation_id: int = 1, client_id: str = "bad-input") -> bytes:
    return codec.encode_request(api_key, version, correlation_id, client_id, body)


def assert_broker_still_serves(broker) -> None:
    """Another client connects and gets ApiVersions and Metadata answers."""
    from confluent_kafka.admin import AdminClient

    with connect(broker) as s:
        s.sendall(request(18, 3, codec.build(codec.request_type(18, 3), client_software_name="probe",
                                             client_software_version="1.0"), correlation_id=42))
        cid, resp = codec.decode_response(18, 3, recv_frame(s))
        assert cid == 42 and resp.error_code == 0 and any(k.api_key == 0 for k in resp.api_keys)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert [b.port for b in md.brokers.values()] == [broker.port]


def test_frame_shorter_than_a_header(broker):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", 3) + b"\x00\x12\x00")
        assert closed_by_peer(s)
    assert_broker_still_serves(broker)


def test_garbage_frame(broker):
    with connect(broker) as s:
        # ApiVersions v3 claims a flexible header, then the body is noise.
        junk = struct.pack(">hhih", 18, 3, 7, 200) + bytes(range(256)) * 2
        s.sendall(struct.pack(">i", len(junk)) + junk)
        assert closed_by_peer(s)
    with connect(broker) as s:
        # A Metadata v12 whose topic array claims more entries than there are bytes.
        junk = struct.pack(">hhih", 3, 12, 8, -1) + b"\x00" + b"\xff\xff\xff\x0f" + b"\x01\x02"
        s.sendall(struct.pack(">i", len(junk)) + junk)
        assert closed_by_peer(s)
    assert_broker_still_serves(broker)


def test_oversize_length_prefix(broker):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 64)
        assert closed_by_peer(s)
    with connect(broker) as s:
        s.sendall(struct.pack(">i", -5))
        assert closed_by_peer(s)
    assert_broker_still_serves(broker)


def test_unknown_api_key(broker):
    with connect(broker) as s:
        body = struct.pack(">hhih", 9999, 0, 5, 3) + b"abc"
        s.sendall(struct.pack(">i", len(body)) + body)
        # Kafka closes the connection for an api key it does not know.
        assert closed_by_peer(s)
    assert_broker_still_serves(broker)


def test_api_versions_v99_answered_in_v0(broker):
    with connect(broker) as s:
        header = struct.pack(">hhih", 18, 99, 77, 5) + b"probe" + b"\x00"  # v99 claims a flexible header
        s.sendall(struct.pack(">i", len(header) + 2) + header + b"\x00\x00")
        frame = recv_frame(s)
        cid, resp = codec.decode_response(18, 0, frame)
        assert cid == 77
        assert resp.error_code == 35  # UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert 18 in ranges and ranges[18][0] == 0 and 0 in ranges and 1 in ranges
        # The connection stays usable: the client retries with a version from the list.
        s.sendall(request(18, ranges[18][1] if ranges[18][1] <= 3 else 3,
                          codec.build(codec.request_type(18, min(3, ranges[18][1])),
                                      client_software_name="probe", client_software_version="1.0"),
                          correlation_id=78))
        v = min(3, ranges[18][1])
        cid, resp = codec.decode_response(18, v, recv_frame(s))
        assert cid == 78 and resp.error_code == 0
    assert_broker_still_serves(broker)


# -- Produce with a corrupted batch --------------------------------------------------------------


def _varint(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def _bytes_field(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def record_batch(values: list[bytes], timestamp_ms: int) -> bytes:
    """An uncompressed RecordBatch v2 (magic 2) with a correct CRC-32C."""
    records = b""
    for i, v in enumerate(values):
        body = b"\x00" + _varint(0) + _varint(i) + _bytes_field(None) + _bytes_field(v) + _uvarint(0)
        records += _varint(len(body)) + body
    after_crc = struct.pack(
        ">hiqqqhii", 0, len(values) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(values)
    ) + records
    crc = crc32c.crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def produce_request(topic: str, records: bytes, version: int, correlation_id: int) -> bytes:
    from shoal.client import build_entity

    body = build_entity(
        codec.request_type(0, version),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return request(0, version, body, correlation_id=correlation_id)


@pytest.mark.parametrize("version", [3, 9])
def test_produce_with_corrupted_crc(broker, make_topic, topic_name, version):
    topic = make_topic(topic_name, partitions=1)
    good = record_batch([b"good-1", b"good-2"], int(time.time() * 1000))
    bad = bytearray(record_batch([b"evil-1", b"evil-2"], int(time.time() * 1000)))
    bad[-3] ^= 0xFF  # flip bits in the last record's value; the CRC no longer matches
    with connect(broker) as s:
        s.sendall(produce_request(topic, good, version, 1))
        _, resp = codec.decode_response(0, version, recv_frame(s))
        (p,) = resp.responses[0].partition_responses
        assert p.error_code == 0 and p.base_offset == 0

        s.sendall(produce_request(topic, bytes(bad), version, 2))
        cid, resp = codec.decode_response(0, version, recv_frame(s))
        (p,) = resp.responses[0].partition_responses
        assert cid == 2 and p.error_code == 2  # CORRUPT_MESSAGE

        # Same connection, next request: still served, and nothing of the bad batch was stored.
        s.sendall(produce_request(topic, good, version, 3))
        _, resp = codec.decode_response(0, version, recv_frame(s))
        (p,) = resp.responses[0].partition_responses
        assert p.error_code == 0 and p.base_offset == 2
    assert_broker_still_serves(broker)

    from e2e_helpers import consume

    got = consume(broker.bootstrap, topic, [0], expected=4)
    assert [m.value() for m in got] == [b"good-1", b"good-2", b"good-1", b"good-2"]


def test_clients_cannot_write_or_grow_internal_topics(broker):
    """__consumer_offsets belongs to the group coordinator: produce and CreatePartitions refuse."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions

    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    errors = []
    p.produce("__consumer_offsets", b"junk", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_partitions([NewPartitions("__consumer_offsets", 60)])["__consumer_offsets"]
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=10)
    assert info.value.args[0].name() == "INVALID_REQUEST"
