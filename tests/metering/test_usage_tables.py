"""Reading a tenant's month from the metering tables (``shoal.metering.tables``) as the admin API's
usage endpoint does: the same sums as adding up the month's hourly rows one by one, every tenant
read in one pass and kept until the tables' files change, naive hour_start read as UTC."""

from __future__ import annotations

import datetime as dt
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shoal.metering.record import COUNTERS
from shoal.metering.tables import month_summary, tenant_month

MONTH = "2026-11"


def hourly_rows(rng: random.Random, tenants: list[str], naive: bool) -> list[dict]:
    rows = []
    for tenant in tenants:
        # the month's first and last hours, a few between, and hours of the months around it
        for hour in (dt.datetime(2026, 11, 1, 0), dt.datetime(2026, 11, 30, 23), dt.datetime(2026, 11, 15, 7),
                     dt.datetime(2026, 10, 31, 23), dt.datetime(2026, 12, 1, 0)):
            start = hour if naive else hour.replace(tzinfo=dt.timezone.utc)
            row = {"tenant": tenant, "hour_start": start, "hour_end": start + dt.timedelta(hours=1)}
            row.update({c: rng.randrange(10**6) for c in COUNTERS})
            row.update(partition_hours=rng.random() * 10, gb_months_stored=rng.random(),
                       peak_connections=rng.randrange(100))
            rows.append(row)
    return rows


def by_hand(rows: list[dict], tenant: str) -> dict:
    mine = [r for r in rows if r["tenant"] == tenant and r["hour_start"].strftime("%Y-%m") == MONTH]
    out = {c: sum(r[c] for r in mine) for c in (*COUNTERS, "partition_hours", "gb_months_stored")}
    out["peak_connections"] = max((r["peak_connections"] for r in mine), default=0)
    return out


@pytest.mark.parametrize("naive", [True, False])
def test_a_tenants_month_is_the_sum_of_its_hours_this_month(tmp_path, naive):
    rng = random.Random(7)
    tenants = [f"lkc-{i:06d}" for i in range(30)]
    rows = hourly_rows(rng, tenants, naive)
    (tmp_path / "hourly_usage").mkdir()
    (tmp_path / "billing").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hourly_usage" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([{"tenant": tenants[0], "month": MONTH, "total": 1.5, "currency": "USD"},
                                         {"tenant": tenants[0], "month": "2026-10", "total": 9.0, "currency": "USD"}]),
                   tmp_path / "billing" / "part-0.parquet")
    for tenant in tenants:
        bill, sums = tenant_month(tmp_path, tenant, MONTH)
        assert sums == pytest.approx(by_hand(rows, tenant)), tenant
        assert (bill is not None) == (tenant == tenants[0])
    assert tenant_month(tmp_path, tenants[0], MONTH)[0]["total"] == 1.5
    # a tenant with no rows: zeros, no bill
    bill, sums = tenant_month(tmp_path, "lkc-nobody", MONTH)
    assert bill is None and set(sums.values()) == {0}


def test_the_month_is_read_once_and_again_when_the_tables_change(tmp_path):
    rng = random.Random(3)
    rows = hourly_rows(rng, ["lkc-aaaaaa", "lkc-bbbbbb"], naive=True)
    (tmp_path / "hourly_usage").mkdir()
    path = tmp_path / "hourly_usage" / "part-0.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    first = month_summary(tmp_path, MONTH)
    assert month_summary(tmp_path, MONTH) is first  # kept
    # the pipeline's next run replaces the table: read again
    more = hourly_rows(rng, ["lkc-aaaaaa"], naive=True)
    pq.write_table(pa.Table.from_pylist(rows + more), tmp_path / "hourly_usage" / "part-1.parquet")
    os.utime(path)  # (a new file is enough; this one is touched too)
    second = month_summary(tmp_path, MONTH)
    assert second is not first
    assert second.sums["lkc-aaaaaa"]["bytes_in"] == pytest.approx(
        by_hand(rows, "lkc-aaaaaa")["bytes_in"] * 2 + by_hand(more, "lkc-aaaaaa")["bytes_in"])


def test_no_tables_is_none(tmp_path):
    assert tenant_month(tmp_path, "lkc-aaaaaa", MONTH) is None
