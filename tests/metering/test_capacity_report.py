"""``shoal capacity report`` end to end on tables shaped as the pipeline writes them: broker 1 is
hot (driven by one tenant), 2 and 3 are not; the page names the hot broker, the tenant, the
recommended broker count and a move plan taken from a live broker's partitions, and it renders in
headless Chromium (Debian's ``chromium``) with its three plots decoded (their natural size is read
by the browser) and no network (everything is inline)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from broker_thread import ThreadBroker

pytestmark = pytest.mark.timeout(300)
MB = 10**6
A, B = "lkc-aaaaaa", "lkc-bbbbbb"
T0 = 1_795_000_000_000


def write_tables(usage: Path, hours: int = 3) -> None:
    """An hour of 10 s windows: broker 1 takes 60 MB/s in from tenant A (producer capacity
    100 MB/s at 300 MB/s write and RF 3: 60%, 90% in the last quarter); 2 and 3 take 10 MB/s from B."""
    broker_rows, tenant_rows, hourly = [], [], []
    for i in range(360):
        start, end = T0 + i * 10_000, T0 + (i + 1) * 10_000
        for broker, tenant, rate in ((1, A, 90 if i >= 270 else 60), (2, B, 10), (3, B, 10)):
            b_in = rate * MB * 10
            broker_rows.append(dict(broker=broker, incarnation=1, seq=i, window_start=start, window_end=end,
                                    bytes_in=b_in, messages_in=b_in // 1000, bytes_out=b_in, requests=100,
                                    request_time_us=1_000_000, throttle_time_ms=0, throttled_requests=0,
                                    partitions_led=4, storage_bytes=10**9, replica_storage_bytes=3 * 10**9,
                                    connections=5, published=dt.datetime.fromtimestamp(end / 1000, dt.timezone.utc)))
            tenant_rows.append(dict(broker=broker, window_end=end, tenant=tenant, bytes_in=b_in, bytes_out=b_in,
                                    throttle_time_ms=0, request_time_us=1_000_000))
    hour = dt.datetime.fromtimestamp(T0 // 3_600_000 * 3600, dt.timezone.utc)
    for k in range(hours):
        for tenant, n, throttle in ((A, 200 * 10**9, 40_000 * (k + 1)), (B, 70 * 10**9, 0)):
            hourly.append(dict(tenant=tenant, hour_start=hour + dt.timedelta(hours=k),
                               hour_end=hour + dt.timedelta(hours=k + 1), bytes_in=n, messages_in=n // 1000,
                               bytes_out=n, requests=1000, request_time_us=10**6, throttle_time_ms=throttle,
                               throttled_requests=throttle // 100, partition_hours=4.0, gb_months_stored=0.01,
                               peak_connections=5, records=360))
    for name, rows in (("broker_usage", broker_rows), ("tenant_usage", tenant_rows), ("hourly_usage", hourly)):
        (usage / name).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), str(usage / name / "part-0.parquet"))


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Debian's chromium is not installed (apt-get install chromium)")


def test_report_renders_with_plots_and_a_plan(tmp_path):
    usage = tmp_path / "usage"
    write_tables(usage)
    out, plan = tmp_path / "report.html", tmp_path / "moves.json"
    with ThreadBroker(tmp_path / "broker", {"shoal.metering.enable": "false"}) as tb:
        admin = AdminClient({"bootstrap.servers": tb.bootstrap})
        fs = admin.create_topics([NewTopic(f"{A}_orders", 4, 1), NewTopic(f"{B}_events", 2, 1)])
        for f in fs.values():
            f.result(15)
        r = subprocess.run([sys.executable, "-m", "shoal", "capacity", "report", "--usage", str(usage), "--out", str(out),
                            "--disk-write-mbps", "300", "--read-mbps", "900", "--replication-factor", "3",
                            "--headroom", "0.3", "--bootstrap-server", tb.bootstrap, "--plan-out", str(plan)],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hot: [1]" in r.stdout, r.stdout
    assert "1 host: 127.0.0.1 1 process;" in r.stdout, r.stdout  # processes per host, from the live cluster
    page = out.read_text()
    assert "<tr><td>127.0.0.1</td><td>1</td><td>1</td>" in page
    assert "http://" not in page and "https://" not in page  # readable offline
    # broker 1: p95 90% of its producer capacity -> HOT, tenant A drives all of it
    row = re.search(r"<tr class='hot'><td>1</td>.*?</tr>", page).group(0)
    assert "90.0%" in row and f"{A} 100%" in row
    assert "<tr class=''><td>2</td>" in page
    # cluster p95 load 0.9 + 0.1 + 0.1 = 1.1 broker-capacities / 0.7 -> 2, at least RF 3
    assert '<b id="recommended">3</b>' in page
    moves = json.loads(plan.read_text())
    assert moves["version"] == 1 and moves["partitions"]
    assert all(p["topic"] == f"{A}_orders" and 1 not in p["replicas"] for p in moves["partitions"])
    assert json.loads(re.search(r'<pre id="plan">(.*?)</pre>', page, re.S).group(1).replace("&quot;", '"')) == moves

    # Chromium: the three images decode (naturalWidth > 0), and a screenshot for a human to look at
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", "<script>document.title = Array.from(document.images)"
                                  ".map(i => i.id + ':' + i.naturalWidth + 'x' + i.naturalHeight).join(' ');"
                                  "</script></body>"))
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", f"--user-data-dir={tmp_path / 'chrome'}"]
    dom = subprocess.run([*base, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    title = re.search(r"<title>(.*?)</title>", dom.stdout).group(1)
    sizes = dict(item.split(":") for item in title.split())
    assert set(sizes) == {"plot-utilization", "plot-usage", "plot-throttle"}, title
    for size in sizes.values():
        w, h = map(int, size.split("x"))
        assert w > 300 and h > 100, title
    shot = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,2600", out.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000


def test_processes_per_host_are_counted(tmp_path):
    from shoal.metering.capacity import Capacity, analyse, render_html

    usage = tmp_path / "usage"
    write_tables(usage)
    report = analyse(usage, Capacity(300 * 10**6, 900 * 10**6, 3), 0.3, hosts={1: "a", 2: "a", 3: "b"})
    assert report.hosts == {"a": [1, 2], "b": [3]}
    assert report.hosts_line() == "2 hosts: a 2 processes, b 1 process"
    assert "<tr><td>a</td><td>2</td><td>1, 2</td>" in render_html(report)
    assert "unknown" in analyse(usage, Capacity(300 * 10**6, 900 * 10**6, 3), 0.3).hosts_line()


def test_plots_of_one_hour_span_that_hour_and_no_tenant_data_says_so(tmp_path):
    """Issue 24: one hour of data drew the tenant plots over 2025-2029 (matplotlib widens a date axis
    whose points are one instant to four years); with no tenant data they were empty axes."""
    import shutil as sh

    import matplotlib.dates as mdates

    from shoal.metering.capacity import Capacity, analyse, figures

    def span(fig) -> dt.timedelta:
        lo, hi = mdates.num2date(fig.axes[0].get_xlim())
        return hi - lo

    def texts(fig) -> list[str]:
        return [t.get_text() for t in fig.axes[0].texts]

    write_tables(tmp_path / "usage", hours=1)
    cap = Capacity(disk_write_bps=300 * MB, read_bps=900 * MB, replication_factor=3, request_threads=1)
    figs = figures(analyse(tmp_path / "usage", cap, 0.3))
    assert span(figs["usage"]) == span(figs["throttle"]) == dt.timedelta(hours=1)  # the hour, half an hour each side
    assert span(figs["utilization"]) == dt.timedelta(seconds=3590 + 120)  # the windows, a minute each side
    assert not any(texts(f) for f in figs.values())

    sh.rmtree(tmp_path / "usage" / "hourly_usage")
    figs = figures(analyse(tmp_path / "usage", cap, 0.3))
    assert texts(figs["usage"]) == texts(figs["throttle"]) == ["no data: no tenant usage yet"]
    assert not figs["usage"].axes[0].lines and figs["utilization"].axes[0].lines
