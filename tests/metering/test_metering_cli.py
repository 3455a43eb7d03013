"""``shoal metering run`` and ``shoal capacity report`` refuse bad arguments with one line and
exit status 2, before starting Spark or reading anything."""

from __future__ import annotations

import subprocess
import sys


def shoal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=60)


def test_bad_rate_card(tmp_path):
    card = tmp_path / "rates.json"
    card.write_text('{"gb_in": 0.05, "gb_stored": 1}')
    r = shoal("metering", "run", "--bootstrap-server", "127.0.0.1:1", "--output", str(tmp_path / "o"),
              "--rate-card", str(card), "--once")
    assert r.returncode == 2
    assert r.stderr.strip() == "shoal metering run: unknown rate card fields ['gb_stored'] (known: ['currency', " \
                               "'gb_in', 'gb_month_stored', 'gb_out', 'partition_hour'])"
    r = shoal("metering", "run", "--bootstrap-server", "127.0.0.1:1", "--output", str(tmp_path / "o"),
              "--rate-card", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read rate card" in r.stderr and len(r.stderr.splitlines()) == 1


def test_capacity_report_without_tables_or_with_bad_headroom(tmp_path):
    r = shoal("capacity", "report", "--usage", str(tmp_path), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "no broker_usage table" in r.stderr and len(r.stderr.splitlines()) == 1
    (tmp_path / "broker_usage").mkdir()
    r = shoal("capacity", "report", "--usage", str(tmp_path), "--out", str(tmp_path / "r.html"), "--headroom", "1")
    assert r.returncode == 2 and "--headroom must be in [0, 1)" in r.stderr
    assert not (tmp_path / "r.html").exists()
