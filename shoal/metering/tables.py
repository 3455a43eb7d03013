"""Reading the metering pipeline's tables (``shoal metering run --output DIR``, Parquet written by
``shoal.metering.pipeline``) with pyarrow, without Spark: one tenant's month for the admin API's
``GET /v1/tenants/{id}/usage`` (``shoal.admin.http_usage``) and the capacity report's tables."""

from __future__ import annotations

import datetime as dt
import os
import threading
from dataclasses import dataclass
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


SUMMED = (*COUNTERS, "partition_hours", "gb_months_stored")


@dataclass(frozen=True)
class MonthSummary:
    """Every tenant's month, read once from the tables: billing rows and summed hourly counters."""

    bills: dict[str, dict[str, Any]]
    sums: dict[str, dict[str, float]]


_cache: dict[tuple[str, str], tuple[tuple, MonthSummary]] = {}
_cache_lock = threading.Lock()


def _fingerprint(*dirs: Path) -> tuple:
    """The tables' files as they are now (name, size, mtime): the pipeline replaces a table by
    swapping its directory, which changes this."""
    out = []
    for d in dirs:
        if not d.exists():
            out.append((str(d), None))
            continue
        for root, _dirs, files in os.walk(d):
            for f in sorted(files):
                st = os.stat(os.path.join(root, f))
                out.append((os.path.join(root, f), st.st_size, st.st_mtime_ns))
    return tuple(out)


def month_summary(tables: Path, month: str) -> MonthSummary:
    """Every tenant's ``month`` (``yyyy-MM``) in the tables under ``tables``, kept until their
    files change: the operator's Tenants page asks for each tenant on it, so the month is read
    and summed once (pyarrow's group-by), not once per tenant."""
    billing_dir, hourly_dir = tables / "billing", tables / "hourly_usage"
    key = (str(tables), month)
    with _cache_lock:  # one reader at a time: the tenants a page asks for at once wait for one read
        fp = _fingerprint(billing_dir, hourly_dir)
        hit = _cache.get(key)
        if hit is not None and hit[0] == fp:
            return hit[1]
        summary = _read_month(billing_dir, hourly_dir, month)
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = (fp, summary)
        return summary


def _read_month(billing_dir: Path, hourly_dir: Path, month: str) -> MonthSummary:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    bills = {r["tenant"]: r for r in read_rows(billing_dir, [("month", "=", month)])}
    sums: dict[str, dict[str, float]] = {}
    if hourly_dir.exists():
        t = pq.read_table(str(hourly_dir))
        if t.num_rows and "hour_start" in t.column_names:
            start = dt.datetime.strptime(month, "%Y-%m").replace(tzinfo=dt.timezone.utc)
            end = (start + dt.timedelta(days=32)).replace(day=1)
            col = t.column("hour_start")
            if pa.types.is_timestamp(col.type) and col.type.tz is None:  # naive: UTC
                start, end = start.replace(tzinfo=None), end.replace(tzinfo=None)
            t = t.filter(pc.and_(pc.greater_equal(col, pa.scalar(start, col.type)),
                                 pc.less(col, pa.scalar(end, col.type))))
            present = [c for c in SUMMED if c in t.column_names]
            aggs = [(c, "sum") for c in present]
            if "peak_connections" in t.column_names:
                aggs.append(("peak_connections", "max"))
            for row in t.group_by("tenant").aggregate(aggs).to_pylist():
                one = _zero()
                for c in present:
                    one[c] = row.get(f"{c}_sum") or 0
                one["peak_connections"] = row.get("peak_connections_max") or 0
                sums[row["tenant"]] = one
    return MonthSummary(bills, sums)


def tenant_month(tables: Path, tenant: str, month: str) -> tuple[dict[str, Any] | None, dict[str, float]] | None:
    """``tenant``'s ``month`` in the tables under ``tables``: its billing row (quantities and
    cost; None when the month has none yet) and its hourly counters summed over the month (plus
    ``partition_hours``, ``gb_months_stored`` and ``peak_connections``); None when the pipeline
    has written no table there."""
    if not (tables / "billing").exists() and not (tables / "hourly_usage").exists():
        return None
    summary = month_summary(tables, month)
    return summary.bills.get(tenant), dict(summary.sums.get(tenant) or _zero())


def _zero() -> dict[str, float]:
    sums: dict[str, float] = {c: 0 for c in COUNTERS}
    sums.update(partition_hours=0.0, gb_months_stored=0.0, peak_connections=0)
    return sums
