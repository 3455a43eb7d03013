"""Request entities from plain values: :func:`build_entity` builds a kio entity of any version from
a ``dict``, nested entities included (for requests off the hot path; the replica fetcher encodes
its Fetch itself, :mod:`shoal.net.fetch_request`)."""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from functools import cache
from typing import Any, Iterable, Mapping


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not types.NoneType]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _convert(tp: Any, kafka_type: str, value: Any, where: str) -> Any:
    inner, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise TypeError(f"{where} may not be None")
    if typing.get_origin(inner) is tuple:
        (elem,) = typing.get_args(inner)[:1]
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise TypeError(f"{where} wants a list, got {type(value).__name__}")
        return tuple(_convert(elem, kafka_type, v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        if isinstance(value, inner):
            return value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # An entity of another version: carry over the fields both versions have.
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if not isinstance(value, Mapping):
            raise TypeError(f"{where} wants a dict for {inner.__name__}, got {type(value).__name__}")
        return build_entity(inner, value, _where=where)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and not isinstance(value, datetime.datetime):
        return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
    if kafka_type == "uuid" and isinstance(value, str):
        return uuid.UUID(value)
    return value


def build_entity(cls: type, values: Mapping[str, Any], *, _where: str | None = None) -> Any:
    """Build a kio entity of ``cls`` (any version) from plain values, nested entities included.

    Like :func:`shoal.protocol.codec.build`, keys this version does not have are dropped, so a
    caller passes the superset of fields and gets what each version takes. Nested entities can
    be given as dicts (or as entities of another version); lists become tuples; milliseconds
    become timedeltas, string UUIDs become ``uuid.UUID``. A field the caller leaves out keeps its
    schema default; without one, a list field becomes ``()``, a nullable field ``None``, and any
    other missing field is a ``TypeError`` naming it.
    """
    where = _where or cls.__name__
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        kafka_type = f.metadata.get("kafka_type", "")
        if f.name in values:
            kwargs[f.name] = _convert(tp, kafka_type, values[f.name], f"{where}.{f.name}")
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        inner, optional = _unwrap_optional(tp)
        if optional:
            kwargs[f.name] = None
        elif typing.get_origin(inner) is tuple:
            kwargs[f.name] = ()
        else:
            raise TypeError(f"{where}.{f.name} is required (v{cls.__version__})")
    return cls(**kwargs)
