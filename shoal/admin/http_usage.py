"""``GET /v1/tenants/{id}/usage``: a tenant's usage this month, its bill, quotas and throttling.

For the tenant's administrator (its own tenant only: ``HttpAuth``) and the operator (any). A
tenant cannot read ``__shoal_usage`` (an internal topic) nor the pipeline's Parquet files, so this
is how it sees what it is billed for; the console's usage page shows it.

Where the numbers come from (``source``):

- ``metering``: ``shoal.metering.tables.dir`` names the directory ``shoal metering run --output``
  writes and the pipeline has written there: this month's row of the ``billing`` table
  (quantities and cost at the rate card's prices) and the month's ``hourly_usage`` rows summed
  (bytes, messages, requests, request and throttle time, throttled requests). Every broker's
  windows, de-duplicated; as fresh as the pipeline's last micro-batch.
- ``live``: no tables: this broker's own counters since it started (``shoal.metering.counters``'
  ``Sampler``, what it publishes to ``__shoal_usage``), and its gauges now (partitions led, bytes
  stored, connections). No cost: prices are the pipeline's rate card. On a cluster, each broker
  answers for itself (``broker``).

``quotas``: the client quotas that bound the tenant, as it sees them with DescribeClientQuotas
(its tenant-wide quota, its own or the tenant default's, and its user and client-id quotas).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Mapping, TypeVar

from pydantic import Field
from pydantic.json_schema import JsonDict

from shoal.admin.http_routes import Model, TenantId, endpoint
from shoal.metering.tables import month_of, tenant_month
from shoal.quotas.entities import describe as describe_quotas

if TYPE_CHECKING:
    from shoal.admin.http import AdminHttpServer
    from shoal.metering.record import Sample

I64: JsonDict = {"format": "int64"}
M = TypeVar("M", bound=Model)


class UsageNumbers(Model):
    bytes_in: int = Field(0, json_schema_extra=I64)
    messages_in: int = Field(0, json_schema_extra=I64)
    bytes_out: int = Field(0, json_schema_extra=I64)
    requests: int = Field(0, json_schema_extra=I64)
    request_time_us: int = Field(0, json_schema_extra=I64)
    throttle_time_ms: int = Field(0, json_schema_extra=I64, description="time the tenant's requests were throttled")
    throttled_requests: int = Field(0, json_schema_extra=I64, description="how many were throttled")
    partition_hours: float | None = None
    gb_months_stored: float | None = None
    partitions_led: int | None = Field(None, description="live: partitions of the tenant this broker leads now")
    storage_bytes: int | None = Field(None, json_schema_extra=I64, description="live: their log bytes now")
    connections: int | None = Field(None, description="live: the tenant's connections now (metering: the peak)")


class Bill(Model):
    gb_in: float
    gb_out: float
    partition_hours: float
    gb_months_stored: float
    cost_in: float
    cost_out: float
    cost_partitions: float
    cost_storage: float
    total: float
    currency: str


class Quota(Model):
    entity: dict[str, str | None] = Field(description="as DescribeClientQuotas names it to the tenant "
                                                      "(null: the default)")
    values: dict[str, float]


class TenantUsage(Model):
    tenant_id: str
    month: str = Field(description="yyyy-MM, UTC")
    source: Literal["metering", "live", "none"]
    since_ms: int | None = Field(None, json_schema_extra=I64, description="live: this broker's counters since then")
    broker: int | None = Field(None, description="live: the broker that counted")
    usage: UsageNumbers
    bill: Bill | None = Field(None, description="metering: this month's bill (none yet: null)")
    quotas: list[Quota]


def _complete(model: type[M], values: Mapping[str, Any]) -> M:
    """``model`` with every field set (the API answers only the fields set: a null is said, not left out)."""
    return model.model_validate({name: values.get(name, f.default) for name, f in model.model_fields.items()},
                                strict=False)


class UsageRoutes:
    """The endpoint above on an ``AdminHttpServer``. ``live_usage``: this broker's per-tenant
    samples (None while metering is off), with the broker's id and the start of its counters."""

    def __init__(self, server: "AdminHttpServer", broker_config: Callable[[], Any] | None,
                 live_usage: Callable[[], tuple[Mapping[str, "Sample"], int, int] | None] | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.server = server
        self.broker_config = broker_config
        self.live_usage = live_usage
        self.clock = clock

    async def around(self, call: Awaitable[Model], kwargs: dict[str, Any]) -> Model:
        return await self.server.tenancy.around(call, kwargs)  # 404 for an unknown tenant first

    def tables_dir(self) -> Path | None:
        try:
            value = self.broker_config().get("shoal.metering.tables.dir") if self.broker_config else None
        except KeyError:
            value = None
        return Path(value) if value else None

    @endpoint("GET", "/v1/tenants/{tenant_id}/usage", op="tenantUsage", errors=[403, 404],
              summary="The tenant's usage and bill this month (the metering tables, else this broker's live "
                      "counters), its quotas and how often it was throttled")
    async def tenant_usage(self, tenant_id: TenantId) -> TenantUsage:
        import asyncio

        month = month_of(int(self.clock() * 1000))
        quotas = [Quota(entity=dict(e), values=v) for e, v in describe_quotas(self.server.store.image, tenant_id, [],
                                                                              strict=False)]
        tables = self.tables_dir()
        found = await asyncio.to_thread(tenant_month, tables, tenant_id, month) if tables is not None else None
        if found is not None:
            bill, sums = found
            usage = _complete(UsageNumbers, {**{k: int(v) for k, v in sums.items()},
                                             "partition_hours": float(sums["partition_hours"]),
                                             "gb_months_stored": float(sums["gb_months_stored"]),
                                             "connections": int(sums["peak_connections"])})
            return _complete(TenantUsage, {"tenant_id": tenant_id, "month": month, "source": "metering",
                                           "usage": usage, "quotas": quotas,
                                           "bill": _complete(Bill, bill) if bill else None})
        live = self.live_usage() if self.live_usage is not None else None
        if live is None:
            return _complete(TenantUsage, {"tenant_id": tenant_id, "month": month, "source": "none",
                                           "usage": _complete(UsageNumbers, {}), "quotas": quotas})
        samples, broker, since_ms = live
        sample = samples.get(tenant_id)
        numbers: dict[str, Any] = {}
        if sample is not None:
            numbers.update(sample.counters)
            numbers.update(sample.gauges)
        for gauge in ("partitions_led", "storage_bytes", "connections"):
            numbers.setdefault(gauge, 0)
        return _complete(TenantUsage, {"tenant_id": tenant_id, "month": month, "source": "live", "since_ms": since_ms,
                                       "broker": broker, "usage": _complete(UsageNumbers, numbers), "quotas": quotas})
