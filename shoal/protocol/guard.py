"""A structural check of a request body before kio's native reader sees it.

kio's native reader trusts lengths: an array count of two billion makes it allocate that many
slots up front, and a failed allocation aborts the whole process (found by the decoder fuzzer in
tests/protocol/test_codec.py). Unknown tagged fields, which the protocol says to skip, make it
raise. So every request body is first walked here, in Python, against the same kio schema: each
length and count must fit in the bytes that remain (an array of N elements needs at least N times
the smallest encoding of one element). A body that passes cannot make the native reader
over-allocate; one that fails is a MalformedRequest.

A null (count or length -1; 0 in the compact encoding) is accepted only where the schema says the
field is nullable in this version. kio's reader would hand a non-nullable array over as None, and
the handler would then crash on it (a TypeError and a traceback per request: 27 APIs did); a
non-nullable string it refuses itself, but later and with a less useful message. Kafka fails to
parse such a request and closes the connection (``RequestContext.parseRequest`` throws
InvalidRequestException; ``SocketServer`` closes the channel), and so does Shoal.

Deviation: kio refuses tagged fields it does not know, so a request carrying a tag newer than its
schema is answered as malformed instead of having the tag ignored. No client we test sends one.

The walker is compiled once per (api, version) into closures; it costs a few microseconds for a
Produce request.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache
from types import NoneType, UnionType
from typing import Any, Callable, Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class GuardError(Exception):
    """The body does not have the shape of its schema."""


# pos -> new pos; raises GuardError.
Skip = Callable[[memoryview, int], int]

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_VARLEN = {"string", "bytes", "records"}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: nearly every length and count
        return buf[pos], pos + 1
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise GuardError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise GuardError("varint longer than 5 bytes")


def _need(buf: memoryview, pos: int, size: int) -> int:
    end = pos + size
    if end > len(buf):
        raise GuardError(f"field of {size} bytes at {pos} runs past the end ({len(buf)})")
    return end


def _fixed(size: int) -> Skip:
    def skip(buf: memoryview, pos: int) -> int:
        return _need(buf, pos, size)

    return skip


def _null(name: str) -> GuardError:
    return GuardError(f"{name} is null, which this version does not allow")


def _varlen(flexible: bool, kafka_type: str, name: str, null_ok: bool) -> Skip:
    if flexible:

        def skip(buf: memoryview, pos: int) -> int:
            n, pos = _uvarint(buf, pos)
            if n == 0:
                if not null_ok:
                    raise _null(name)
                return pos
            return _need(buf, pos, n - 1)

    else:  # legacy: int16 length of a string, int32 of bytes
        width, unpack = (2, _I16.unpack_from) if kafka_type == "string" else (4, _I32.unpack_from)

        def skip(buf: memoryview, pos: int) -> int:
            end = _need(buf, pos, width)
            (n,) = unpack(buf, pos)
            if n < 0:
                if n < -1:
                    raise GuardError(f"negative {kafka_type} length {n}")
                if not null_ok:
                    raise _null(name)
                return end
            return _need(buf, end, n)

    return skip


def _array(flexible: bool, item: Skip, item_min: int, name: str, null_ok: bool) -> Skip:
    def skip(buf: memoryview, pos: int) -> int:
        if flexible:
            n, pos = _uvarint(buf, pos)
            n -= 1
        else:
            pos = _need(buf, pos, 4)
            (n,) = _I32.unpack_from(buf, pos - 4)
            if n < -1:
                raise GuardError(f"negative array length {n}")
        if n <= 0:
            if n < 0 and not null_ok:
                raise _null(name)
            return pos
        if n * item_min > len(buf) - pos:
            raise GuardError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
        for _ in range(n):
            pos = item(buf, pos)
        return pos

    return skip


def _min_size(kafka_type: str, flexible: bool) -> int:
    if kafka_type in _FIXED:
        return _FIXED[kafka_type]
    if flexible:
        return 1
    return 2 if kafka_type == "string" else 4


@cache
def _entity(cls: type) -> tuple[Skip, int]:
    """(skip function, smallest encoding in bytes) of a kio entity class."""
    flexible = bool(cls.__flexible__)
    steps: list[Skip] = []
    tagged: dict[int, Skip] = {}
    min_size = 1 if flexible else 0  # the tagged-field count
    fixed_run = 0  # consecutive fixed-size fields: checked as one span (one call, not one a field)
    for f in fields(cls):
        kind = classify_field(f)
        name = f"{cls.__name__}.{f.name}"
        null_ok = _nullable(f.type)
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner, inner_min = _entity(kind.type_)
            if isinstance(kind, EntityTupleField):
                step = _array(flexible, inner, max(inner_min, 1), name, null_ok)
                size = 1 if flexible else 4
            elif is_optional(f):
                step = _nullable_entity(inner)
                size = 1
            else:
                step, size = inner, inner_min
        else:
            kafka_type = f.metadata["kafka_type"]
            if kafka_type in _FIXED:
                item: Skip = _fixed(_FIXED[kafka_type])
            elif kafka_type in _VARLEN:
                # an array's elements are nullable when its element type is (tuple[str | None, ...])
                item_null_ok = _nullable(_array_item(f.type)) if isinstance(kind, PrimitiveTupleField) else null_ok
                item = _varlen(flexible, kafka_type, name, item_null_ok)
            else:
                raise TypeError(f"guard does not know kafka_type {kafka_type!r} ({name})")
            if isinstance(kind, PrimitiveTupleField):
                step = _array(flexible, item, max(_min_size(kafka_type, flexible), 1), name, null_ok)
                size = 1 if flexible else 4
            else:
                assert isinstance(kind, PrimitiveField)
                step, size = item, _min_size(kafka_type, flexible)
        tag = get_field_tag(f)
        if tag is not None:
            tagged[int(tag)] = step
            continue
        min_size += size
        if isinstance(kind, PrimitiveField) and f.metadata["kafka_type"] in _FIXED:
            fixed_run += size
            continue
        if fixed_run:
            steps.append(_fixed(fixed_run))
            fixed_run = 0
        steps.append(step)
    if fixed_run:
        steps.append(_fixed(fixed_run))
    if flexible:
        steps.append(_tagged_section(tagged))
    run = tuple(steps)
    if len(run) == 1:
        return run[0], min_size

    def skip(buf: memoryview, pos: int) -> int:
        for step in run:
            pos = step(buf, pos)
        return pos

    return skip, min_size


def _nullable(tp: Any) -> bool:
    """Whether a kio field type admits None (``X | None``): the field is nullable in this version."""
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def _array_item(tp: Any) -> Any:
    """The element type of a kio array type (``tuple[X, ...]``, possibly ``| None``)."""
    if get_origin(tp) in (UnionType, Union):
        tp = next(a for a in get_args(tp) if a is not NoneType)
    return get_args(tp)[0]


def _nullable_entity(inner: Skip) -> Skip:
    def skip(buf: memoryview, pos: int) -> int:
        end = _need(buf, pos, 1)
        marker = buf[pos]
        return end if marker == 0xFF else inner(buf, end)

    return skip


def _tagged_section(known: dict[int, Skip]) -> Skip:
    def skip(buf: memoryview, pos: int) -> int:
        if pos < len(buf) and buf[pos] == 0:  # no tagged fields: nearly always
            return pos + 1
        count, pos = _uvarint(buf, pos)
        if count > len(buf) - pos:
            raise GuardError(f"{count} tagged fields cannot fit")
        last = -1
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            if tag <= last:
                raise GuardError("tagged fields out of order")
            last = tag
            size, pos = _uvarint(buf, pos)
            end = _need(buf, pos, size)
            check = known.get(tag)
            if check is not None and check(buf[:end], pos) != end:
                raise GuardError(f"tagged field {tag} does not fill its {size} bytes")
            pos = end
        return pos

    return skip


def check(cls: type, buf: bytes | memoryview, pos: int) -> int:
    """Walk a body of kio type ``cls`` at ``pos``; return where it ends or raise GuardError."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return _entity(cls)[0](view, pos)
