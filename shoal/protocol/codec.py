"""Request/response codec on top of kio's generated message types.

kio (Aiven) generates frozen dataclasses from Kafka's own JSON schemas. Its reader is native code
(under 1 µs for a Produce v9 request with one 1 KiB batch) but trusts lengths, so every body is
first walked by ``guard`` (~3.5 µs). Its writer is plain Python (~10 µs for a one-partition
Produce response), so responses go through ``writer``, compiled from the same schemas, which
writes kio's exact bytes in ~3 µs (bench/kio_cost.py; tests/protocol/test_writer.py).

Header handling is written here because it is tiny and hot: request header v1 (legacy) and v2
(flexible, with tagged fields); response header v0 and v1. ApiVersions responses always use
response header v0 (KIP-511), whatever the request version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from shoal.protocol import guard
from shoal.protocol.regions import SINK, Region, RegionFrame
from shoal.protocol.writer import entity_writer as fast_writer

API_VERSIONS_KEY = 18

_H = struct.Struct(">hhih")
_I32 = struct.Struct(">i")


class MalformedRequest(Exception):
    """The bytes cannot be a request of the version they claim. The connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header takes, so the body starts at this offset


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id of a frame, without trusting the rest of it."""
    if len(frame) < 8:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    return api_key, api_version, correlation_id


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise MalformedRequest("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint too long")


def decode_header(frame: bytes | memoryview, flexible: bool) -> RequestHeader:
    """Request header v1, or v2 when the request version is flexible."""
    if len(frame) < 10:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, n = _H.unpack_from(frame, 0)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise MalformedRequest("client_id runs past the end of the request")
        try:
            client_id = bytes(frame[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedRequest("client_id is not UTF-8") from e
        pos += n
    elif n != -1:
        raise MalformedRequest(f"client_id has negative length {n}")
    if flexible:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise MalformedRequest("tagged field runs past the end of the header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


@cache
def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has schemas for, or None for an API kio does not know."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = [
        v
        for v, kinds in schema_name_map[name].items()
        if EntityType.request in kinds and EntityType.response in kinds
    ]
    return (min(versions), max(versions)) if versions else None


@cache
def request_type(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(request_type(api_key, api_version).__flexible__)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


def decode_request(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode a whole request frame (without its length prefix) for a supported version."""
    if not isinstance(frame, bytes) and not (isinstance(frame, memoryview) and frame.readonly):
        frame = bytes(frame)  # kio's reader wants a read-only buffer
    flexible = is_flexible(api_key, api_version)
    header = decode_header(frame, flexible)
    cls = request_type(api_key, api_version)
    try:
        guard.check(cls, frame, header.size)
    except guard.GuardError as e:
        raise MalformedRequest(f"malformed {api_key_map.get(api_key)} v{api_version}: {e}") from e
    try:
        body, _size = _reader(cls)(frame, header.size)
    except (SerialError, ValueError, TypeError, OverflowError, IndexError, KeyError) as e:
        raise MalformedRequest(f"cannot decode {api_key_map.get(api_key)} v{api_version}: {e}") from e
    return header, body


def encode_response(correlation_id: int, api_key: int, api_version: int, body: Any) -> bytearray | RegionFrame:
    """The response frame, length prefix included (shoal.protocol.writer: kio's bytes, faster).

    A record set that is a file region (zero-copy Fetch, ``shoal.protocol.regions``) is not copied:
    the answer is then a ``RegionFrame``, the response's bytes around the regions, its length
    prefix counting them."""
    out = bytearray(8)
    _I32.pack_into(out, 4, correlation_id)
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, api_version):
        out += b"\0"  # response header v1: no tagged fields
    sink: list[tuple[int, Region]] = []
    SINK.regions = sink
    try:
        fast_writer(type(body))(out, body)
    except BaseException:
        for _, r in sink:
            r.close()
        raise
    finally:
        SINK.regions = None
    if not sink:
        _I32.pack_into(out, 0, len(out) - 4)
        return out
    size = len(out) + sum(r.length for _, r in sink)
    _I32.pack_into(out, 0, size - 4)
    parts: list[Any] = []
    view = memoryview(out)
    at = 0
    for pos, r in sink:
        if pos > at:
            parts.append(view[at:pos])
        parts.append(r)
        at = pos
    if at < len(out):
        parts.append(view[at:])
    return RegionFrame(parts, size)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A request frame, length prefix included (for Shoal's own admin client and tests)."""
    out = bytearray(4)
    out += struct.pack(">hhi", api_key, api_version, correlation_id)
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if is_flexible(api_key, api_version):
        out += b"\0"
    fast_writer(type(body))(out, body)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """correlation_id and body of a response frame without its length prefix."""
    if not isinstance(frame, bytes):
        frame = bytes(frame)  # kio's reader wants a read-only buffer
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, api_version):
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
    body, _ = _reader(response_type(api_key, api_version))(frame, pos)
    return correlation_id, body


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def build(cls: type, **values: Any) -> Any:
    """Construct a kio entity of any version from the superset of fields a handler knows.

    Values for fields this version does not have are dropped, so one handler body serves every
    version; fields the caller leaves out keep the schema default.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls_or_obj: Any, name: str) -> bool:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    return name in _field_names(cls)
