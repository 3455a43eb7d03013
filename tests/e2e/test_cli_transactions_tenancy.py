"""``shoal transactions`` is scoped to the tenant of its credentials, as every request is: two
tenants each leave a transaction of transactional id ``tx`` open on their topic ``orders``; each
lists and describes only its own; a tenant's ``abort`` is refused (WriteTxnMarkers wants
ClusterAction, which only the operator has, as on Kafka); the operator (physical view) lists both
by their stored names and aborts tenant a's, after which a's read_committed view moves on and b's
transaction is still open. A subprocess CLI against a real broker, the producers confluent-kafka."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tenancy_fixtures import tenants  # noqa: F401  (fixture)
from test_cli_groups_tenancy import ok, props_file
from test_cli_transactions import hanging_transaction

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]


def cli(bootstrap: str, command_config: str | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    extra = ["--command-config", command_config] if command_config else []
    return subprocess.run([sys.executable, "-m", "shoal", "transactions", *args, "--bootstrap-server", bootstrap,
                           *extra, "--timeout", "20"], capture_output=True, text=True, timeout=90, env=env)


def producers(bootstrap: str, config: str | None, topic: str) -> list[dict]:
    return json.loads(ok(cli(bootstrap, config, "describe-producers", "--topic", topic, "--partition", "0",
                             "--output", "json")))["producers"]


def test_transactions_are_scoped_to_the_tenant(tenants, tmp_path):  # noqa: F811
    sasl, direct = tenants.broker.sasl_bootstrap, tenants.broker.bootstrap
    for t, n in ((tenants.a, 3), (tenants.b, 4)):
        admin = AdminClient(t.conf())  # held: a collected client fails its futures (_DESTROY)
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=20)
        hanging_transaction({**t.conf(), "transactional.id": "tx"}, "orders", n)
    a, b = props_file(tmp_path, tenants.a), props_file(tmp_path, tenants.b)

    la = json.loads(ok(cli(sasl, a, "list", "--output", "json")))
    lb = json.loads(ok(cli(sasl, b, "list", "--output", "json")))
    assert [(t["transactional_id"], t["state"]) for t in la] == [("tx", "Ongoing")]
    assert [(t["transactional_id"], t["state"]) for t in lb] == [("tx", "Ongoing")]
    assert la[0]["producer_id"] != lb[0]["producer_id"]

    da = json.loads(ok(cli(sasl, a, "describe", "--transactional-id", "tx", "--output", "json")))
    assert da["producer_id"] == la[0]["producer_id"] and da["partitions"] == [{"topic": "orders", "partition": 0}]
    (pa,) = producers(sasl, a, "orders")
    assert (pa["producer_id"], pa["current_transaction_start_offset"], pa["last_sequence"]) == (
        la[0]["producer_id"], 0, 2)

    # a tenant may not write markers (ClusterAction): one line, exit 1, nothing written
    r = cli(sasl, a, "abort", "--topic", "orders", "--partition", "0", "--start-offset", "0")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert producers(sasl, a, "orders")[0]["current_transaction_start_offset"] == 0

    # the operator sees both ids by their stored names, and aborts a's
    listed = {t["transactional_id"] for t in json.loads(ok(cli(direct, None, "list", "--output", "json")))}
    assert {f"{tenants.a.prefix}tx", f"{tenants.b.prefix}tx"} <= listed
    out = ok(cli(direct, None, "abort", "--topic", f"{tenants.a.prefix}orders", "--partition", "0",
                 "--start-offset", "0"))
    assert f"producer {la[0]['producer_id']}" in out
    assert producers(sasl, a, "orders")[0]["current_transaction_start_offset"] is None
    (pb,) = producers(sasl, b, "orders")
    assert pb["current_transaction_start_offset"] == 0  # b's is still open
