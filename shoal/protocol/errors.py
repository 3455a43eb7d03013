"""Kafka error codes (kio's ErrorCode enum) and a generic error-response builder."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "error_code", "error_response"]

_ZERO_BY_KAFKA_TYPE: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "uuid": uuid.UUID(int=0),
    "records": None,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def error_code(name: str) -> ErrorCode:
    """ErrorCode by Kafka's upper-case name ("UNKNOWN_TOPIC_OR_PARTITION")."""
    return ErrorCode[name.lower()]


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _optional(tp: Any) -> bool:
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def error_response(cls: type, code: ErrorCode, message: str | None = None) -> Any:
    """A response of type ``cls`` whose error_code fields say ``code`` and whose lists are empty.

    Used when a request of a known API cannot be served at all (a version outside the handler's
    range, a handler failure): the client gets the protocol's error, never a hang.
    """
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for f in fields(cls):
        if f.name == "error_code":
            values[f.name] = code
            continue
        if f.name == "error_message":
            values[f.name] = message
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue
        tp = hints[f.name]
        if get_origin(tp) is tuple:
            values[f.name] = ()
        elif _optional(tp):
            values[f.name] = None
        elif is_dataclass(tp):
            values[f.name] = error_response(tp, code, message)
        else:
            values[f.name] = _ZERO_BY_KAFKA_TYPE.get(f.metadata.get("kafka_type", ""), 0)
    return cls(**values)
