"""Request bodies with one non-nullable field sent as null, written from kio's schemas by an
encoder of its own (not Shoal's writer or guard), for the null-array tests
(tests/protocol/test_guard_nulls.py, tests/e2e/test_hardening_nulls.py). Imported as
``null_requests`` (tests/ is on sys.path).

Every array in the body has one element (so nested fields are reached) and every other value is
zero or empty; the field at ``path`` is written as null: array count -1 (compact: 0), string length
-1 (compact: 0), bytes length -1 (compact: 0). Tagged fields are left out, except the one that
holds the target.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from types import NoneType, UnionType
from typing import Iterator, Union, get_args, get_origin

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, get_field_tag

FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "float64": 8, "uuid": 16,
}


def nullable(tp) -> bool:
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _null(kafka_type: str, flexible: bool, array: bool) -> bytes:
    if flexible:
        return b"\x00"
    if array or kafka_type != "string":
        return struct.pack(">i", -1)
    return struct.pack(">h", -1)


def _empty(kafka_type: str, flexible: bool) -> bytes:
    if kafka_type in FIXED:
        return b"\x00" * FIXED[kafka_type]
    if flexible:
        return b"\x01"
    return b"\x00\x00" if kafka_type == "string" else b"\x00\x00\x00\x00"


def _count(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else struct.pack(">i", n)


def null_paths(cls: type, prefix: str = "", *, allowed: bool = False) -> Iterator[str]:
    """Dotted paths of the non-nullable (``allowed``: the nullable) arrays, strings and bytes of
    ``cls``, nested ones too."""
    for f in fields(cls):
        kind = classify_field(f)
        path = prefix + f.name
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            if nullable(f.type) == allowed:
                yield path
            if isinstance(kind, EntityTupleField):
                yield from null_paths(kind.type_, path + ".", allowed=allowed)
        elif isinstance(kind, EntityField):
            yield from null_paths(kind.type_, path + ".", allowed=allowed)
        elif f.metadata["kafka_type"] in ("string", "bytes", "records") and nullable(f.type) == allowed:
            yield path


def encode(cls: type, target: str | None) -> bytes:
    """The body of ``cls`` with the field at dotted path ``target`` written as null."""
    flexible = bool(cls.__flexible__)
    head, _, rest = (target or "").partition(".")
    out = bytearray()
    tagged: list[tuple[int, bytes]] = []
    for f in fields(cls):
        kind = classify_field(f)
        hit = f.name == head
        sub = rest if hit else None
        if hit and not rest:
            kafka_type = f.metadata.get("kafka_type", "")
            value = _null(kafka_type, flexible, isinstance(kind, (EntityTupleField, PrimitiveTupleField)))
        elif isinstance(kind, EntityTupleField):
            value = _count(1, flexible) + encode(kind.type_, sub)
        elif isinstance(kind, EntityField):
            value = (b"\x01" if nullable(f.type) else b"") + encode(kind.type_, sub)
        elif isinstance(kind, PrimitiveTupleField):
            value = _count(1, flexible) + _empty(f.metadata["kafka_type"], flexible)
        else:
            value = _empty(f.metadata["kafka_type"], flexible)
        tag = get_field_tag(f)
        if tag is None:
            out += value
        elif hit:
            tagged.append((int(tag), value))
    if flexible:
        out += uvarint(len(tagged))
        for tag, value in tagged:
            out += uvarint(tag) + uvarint(len(value)) + value
    return bytes(out)


def frame(api_key: int, version: int, correlation_id: int, client_id: str, body: bytes, flexible: bool) -> bytes:
    """A whole request (length prefix, header v1 or v2, body)."""
    raw = client_id.encode()
    out = struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw
    if flexible:
        out += b"\x00"
    out += body
    return struct.pack(">i", len(out)) + out
