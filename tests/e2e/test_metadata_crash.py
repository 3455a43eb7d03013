"""The metadata store under SIGKILL: a broker provisioning tenants, users (HTTP admin API) and
topics (CreateTopics) from several threads is killed mid-stream. After the restart every change
that was acknowledged is there, and the store is whole: it loaded, its journal was folded into
the snapshot, and every user and topic belongs to a tenant that exists.

The byte-level cases (a record torn at every offset, corruption, failed writes) are unit tests in
tests/metadata/test_journal.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.metadata.embedded import read_document
from tenancy_fixtures import TenantBroker

pytestmark = pytest.mark.timeout(120)

WORKERS = 4
KILL_AFTER = 40  # acknowledged changes before the SIGKILL (the workers keep going meanwhile)


def _provision(b: TenantBroker, worker: int, acked: dict[str, list[str]], stop: threading.Event) -> None:
    """Tenant, user, topic, over and over, until the first failure (the broker went away)."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 5000})
    i = 0
    try:
        while not stop.is_set():
            status, t = b.http("POST", "/v1/tenants", {"display_name": f"w{worker}-{i}"})
            if status != 201:
                return
            tid = t["tenant_id"]
            acked["tenants"].append(tid)
            user = f"user-{tid}"
            status, _ = b.http("POST", f"/v1/tenants/{tid}/users", {"user": user, "password": "pw"})
            if status != 201:
                return
            acked["users"].append(user)
            topic = f"{tid}_t"
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=5, request_timeout=5)[topic].result(10)
            acked["topics"].append(topic)
            i += 1
    except Exception:  # the broker was killed under this request: not acknowledged
        return


def test_kill9_during_provisioning_keeps_every_acknowledged_change():
    workdir = Path(tempfile.mkdtemp(prefix="shoal-metadata-crash-"))
    b = TenantBroker(workdir)
    b.start()
    try:
        acked: dict[str, list[str]] = {"tenants": [], "users": [], "topics": []}
        stop = threading.Event()
        threads = [threading.Thread(target=_provision, args=(b, w, acked, stop), daemon=True)
                   for w in range(WORKERS)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(map(len, acked.values())) < KILL_AFTER and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(map(len, acked.values())) >= KILL_AFTER, acked
        before_kill = {k: list(v) for k, v in acked.items()}
        b.kill9()  # SIGKILL while the workers' requests are in flight, then start again
        stop.set()
        for t in threads:
            t.join(30)
        # the journal was replayed and folded into the snapshot at start (it holds only what the
        # restarted broker did since: its registration, a worker's last requests)
        snapshot = json.loads((b.data_dir / "__metadata" / "metadata.json").read_text())
        assert set(before_kill["tenants"]) <= {t["tenant_id"] for t in snapshot["tenants"]}
        assert set(before_kill["users"]) <= set(snapshot["user_tenants"])
        assert set(before_kill["topics"]) <= {t["name"] for t in snapshot["topics"]}

        status, listing = b.http("GET", "/v1/tenants")
        assert status == 200
        tenants = {t["tenant_id"] for t in listing["tenants"]}
        assert set(acked["tenants"]) <= tenants
        users = set()
        for tid in tenants:
            status, t = b.http("GET", f"/v1/tenants/{tid}")
            assert status == 200, t
            users |= set(t["users"])
        assert set(acked["users"]) <= users
        topics = set(AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics)
        assert set(acked["topics"]) <= topics
        assert all(t.split("_", 1)[0] in tenants for t in topics if t.startswith("lkc-"))
        doc = read_document(b.data_dir)
        assert {t["tenant_id"] for t in doc["tenants"]} == tenants
        assert all(tid in tenants for tid in doc["user_tenants"].values())
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)
