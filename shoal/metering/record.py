"""The usage record: what a broker says it served to a tenant over one window (docs/metering.md).

One JSON object per (tenant, broker, window), keyed ``tenant|broker`` in ``__shoal_usage``::

    {"schema_version": 1, "broker": 1, "incarnation": 1795650000123, "seq": 42, "tenant": "acme",
     "window_start": 1795650000000, "window_end": 1795650010000,
     "bytes_in": 1048576, "messages_in": 1024, "bytes_out": 2097152, "requests": 37,
     "request_time_us": 81234, "throttle_time_ms": 0, "throttled_requests": 0,
     "partitions_led": 6, "storage_bytes": 73400320, "replica_storage_bytes": 220200960,
     "connections": 3}

Counters (``bytes_in`` .. ``throttled_requests``) are *deltas*: what happened in
``[window_start, window_end)`` on that broker, so a tenant's total is the plain sum of its records.
Gauges (``partitions_led``, ``storage_bytes``, ``replica_storage_bytes``, ``connections``) are
sampled at ``window_end``. A record is identified by ``(broker, incarnation, seq, tenant)``: a
window the broker could not confirm is sent again with the same identity, so a reader that drops
duplicates of that identity counts every window once. ``seq`` grows by one per published window of
a broker, across restarts (kept in the broker's data dir); ``incarnation`` is the broker's start
time (ms), so two starts never share an identity even if the data dir was lost.

The tenant ``""`` is the physical view (operators, the brokers' own traffic, unauthenticated
clients); billing leaves it out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from shoal.tenancy.internal_topics import USAGE_TOPIC  # noqa: F401  (the metering package exports it)

SCHEMA_VERSION = 1

# Cumulative counters a broker keeps per tenant; a record carries their increase over its window.
COUNTERS = ("bytes_in", "messages_in", "bytes_out", "requests", "request_time_us", "throttle_time_ms",
            "throttled_requests")
# Sampled at the end of the window.
GAUGES = ("partitions_led", "storage_bytes", "replica_storage_bytes", "connections")


class RecordError(ValueError):
    """A usage record this version cannot read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    broker: int
    incarnation: int
    seq: int
    tenant: str
    window_start: int
    window_end: int
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    requests: int = 0
    request_time_us: int = 0
    throttle_time_ms: int = 0
    throttled_requests: int = 0
    partitions_led: int = 0
    storage_bytes: int = 0
    replica_storage_bytes: int = 0
    connections: int = 0
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> bytes:
        return f"{self.tenant}|{self.broker}".encode()

    def to_json(self) -> bytes:
        d = asdict(self)
        ordered = {"schema_version": d.pop("schema_version"), **d}
        return json.dumps(ordered, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "UsageRecord":
        try:
            d = json.loads(data)
        except ValueError as e:
            raise RecordError(f"not JSON: {e}") from None
        if not isinstance(d, dict):
            raise RecordError("not a JSON object")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise RecordError(f"schema_version {d.get('schema_version')!r} (this reader knows {SCHEMA_VERSION})")
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for name in known:
            if name not in d:
                if name in COUNTERS or name in GAUGES:
                    continue
                raise RecordError(f"missing field {name!r}")
            v = d[name]
            if name == "tenant":
                if not isinstance(v, str):
                    raise RecordError("tenant must be a string")
            elif not isinstance(v, int) or isinstance(v, bool):
                raise RecordError(f"{name} must be an integer")
            kwargs[name] = v
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class Sample:
    """One tenant's usage as the broker sees it at one instant: cumulative counters since the
    broker started and the gauges now."""

    counters: Mapping[str, int]
    gauges: Mapping[str, int]


def window_records(
    before: Mapping[str, Mapping[str, int]],
    after: Mapping[str, Sample],
    *,
    broker: int,
    incarnation: int,
    seq: int,
    window_start: int,
    window_end: int,
) -> list[UsageRecord]:
    """The records of one window: for each tenant, ``after``'s counters minus ``before``'s (a
    tenant missing from ``before`` started at 0), and ``after``'s gauges. Tenants with nothing
    to say (all deltas and gauges zero) get no record. Pure; sorted by tenant.

    A counter that went *down* (the broker restarted, or a deleted topic's counters were dropped)
    counts from 0 again: the delta is its new value, never negative."""
    out = []
    for tenant in sorted(after):
        sample = after[tenant]
        prev = before.get(tenant, {})
        values: dict[str, int] = {}
        for name in COUNTERS:
            now = int(sample.counters.get(name, 0))
            was = int(prev.get(name, 0))
            values[name] = now - was if now >= was else now
        for name in GAUGES:
            values[name] = int(sample.gauges.get(name, 0))
        if not any(values.values()):
            continue
        out.append(UsageRecord(broker=broker, incarnation=incarnation, seq=seq, tenant=tenant,
                               window_start=window_start, window_end=window_end, **values))
    return out
