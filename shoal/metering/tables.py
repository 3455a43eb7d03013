"""Reading the metering pipeline's tables (``shoal metering run --output DIR``, Parquet written by
``shoal.metering.pipeline``) with pyarrow, without Spark: one tenant's month for the admin API's
``GET /v1/tenants/{id}/usage`` (``shoal.admin.http_usage``) and the capacity report's tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from shoal.metering.record import COUNTERS


def month_of(ms: int) -> str:
    """The billing table's ``month`` (``yyyy-MM``, UTC) of an instant."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m")


def read_rows(path: Path, filters: list[tuple[str, str, Any]] | None = None) -> list[dict[str, Any]]:
    """A table's rows (every Parquet file under ``path``), those ``filters`` keep; none if the
    pipeline has not written it."""
    import pyarrow.parquet as pq

    if not path.exists():
        return []
    return pq.read_table(str(path), filters=filters or None).to_pylist()


def tenant_month(tables: Path, tenant: str, month: str) -> tuple[dict[str, Any] | None, dict[str, float]] | None:
    """``tenant``'s ``month`` in the tables under ``tables``: its billing row (quantities and
    cost; None when the month has none yet) and its hourly counters summed over the month (plus
    ``partition_hours``, ``gb_months_stored`` and ``peak_connections``); None when the pipeline
    has written no table there."""
    billing_dir, hourly_dir = tables / "billing", tables / "hourly_usage"
    if not billing_dir.exists() and not hourly_dir.exists():
        return None
    bills = read_rows(billing_dir, [("tenant", "=", tenant), ("month", "=", month)])
    sums: dict[str, float] = {c: 0 for c in COUNTERS}
    sums.update(partition_hours=0.0, gb_months_stored=0.0, peak_connections=0)
    for row in read_rows(hourly_dir, [("tenant", "=", tenant)]):
        start = row.get("hour_start")
        if not isinstance(start, dt.datetime):
            continue
        if start.replace(tzinfo=start.tzinfo or dt.timezone.utc).astimezone(dt.timezone.utc).strftime("%Y-%m") != month:
            continue
        for c in (*COUNTERS, "partition_hours", "gb_months_stored"):
            sums[c] += row.get(c) or 0
        sums["peak_connections"] = max(sums["peak_connections"], row.get("peak_connections") or 0)
    return (bills[0] if bills else None), sums
