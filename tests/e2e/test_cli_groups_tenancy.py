"""``shoal groups`` is scoped to the tenant of its credentials, as every request is: two tenants
with a group ``g`` on a topic ``orders`` each see, describe and reset only their own; the operator
(the physical view) sees both by their stored names. A subprocess CLI against a real broker, the
offsets committed by confluent-kafka."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tenancy_fixtures import Tenant, tenants  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def cli(bootstrap: str, command_config: str | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    extra = ["--command-config", command_config] if command_config else []
    return subprocess.run([sys.executable, "-m", "shoal", "groups", *args, "--bootstrap-server", bootstrap,
                           *extra, "--timeout", "15"], capture_output=True, text=True, timeout=60, env=env)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    return r.stdout


def props_file(tmp_path: Path, t: Tenant) -> str:
    path = tmp_path / f"{t.tenant_id}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in t.conf().items() if k != "bootstrap.servers"))
    return str(path)


def setup_tenant(t: Tenant, produced: int, committed: int) -> None:
    admin = AdminClient(t.conf())
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=15)
    p = Producer(t.conf())
    for i in range(produced):
        p.produce("orders", value=b"%d" % i, partition=0)
    assert p.flush(15) == 0
    c = Consumer({**t.conf(), "group.id": "g", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("orders", 0, committed)], asynchronous=False)
    finally:
        c.close()


def test_groups_are_scoped_to_the_tenant(tenants, tmp_path):  # noqa: F811
    sasl = tenants.broker.sasl_bootstrap
    setup_tenant(tenants.a, 10, 4)
    setup_tenant(tenants.b, 30, 25)
    a, b = props_file(tmp_path, tenants.a), props_file(tmp_path, tenants.b)

    assert ok(cli(sasl, a, "list")).split() == ["g"]
    assert ok(cli(sasl, b, "list")).split() == ["g"]
    (da,) = json.loads(ok(cli(sasl, a, "describe", "g", "--output", "json")))
    (db,) = json.loads(ok(cli(sasl, b, "describe", "g", "--output", "json")))
    assert [(r["topic"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in da["offsets"]] == [
        ("orders", 4, 10, 6)]
    assert [(r["topic"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in db["offsets"]] == [
        ("orders", 25, 30, 5)]

    # b resets its own group; a's is untouched
    ok(cli(sasl, b, "reset-offsets", "g", "--topic", "orders", "--to-earliest", "--execute"))
    (db,) = json.loads(ok(cli(sasl, b, "describe", "g", "--output", "json")))
    (da,) = json.loads(ok(cli(sasl, a, "describe", "g", "--output", "json")))
    assert (db["offsets"][0]["current_offset"], da["offsets"][0]["current_offset"]) == (0, 4)

    # the operator sees both groups by their stored names
    listed = ok(cli(tenants.broker.bootstrap, None, "list")).split()
    assert {f"{tenants.a.prefix}g", f"{tenants.b.prefix}g"} <= set(listed)

    # a deletes its group; b's stays
    ok(cli(sasl, a, "delete", "g"))
    assert ok(cli(sasl, a, "list")).split() == []
    assert ok(cli(sasl, b, "list")).split() == ["g"]
