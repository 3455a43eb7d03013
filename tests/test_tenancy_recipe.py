"""docs/tenancy.md opens with a copy-paste recipe from nothing to two isolated tenants (issue 16):
its shell block runs, as it is in the document, against a broker started as ``make serve`` starts
it (``shoal serve --quickstart``) on free ports, with the real ``shoal`` CLI, kcat and
confluent-kafka; then tenant B (globex, bob) is checked not to see tenant A's (acme, alice) topic
or records, through confluent-kafka and kafka-python.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from broker_process import REPO
from quickstart_broker import QuickstartBroker, tool_path
from shoal import quickstart

pytestmark = pytest.mark.timeout(240)

MARKER = "<!-- tests/test_tenancy_recipe.py runs the next block"


def recipe() -> str:
    doc = (REPO / "docs" / "tenancy.md").read_text()
    after = doc.split(MARKER, 1)[1].split("\n", 1)[1]
    assert after.startswith("```sh\n"), "the marker must sit right above the recipe's shell block"
    return after[len("```sh\n"):].split("\n```\n", 1)[0] + "\n"


def test_the_recipe_opens_the_page():
    doc = (REPO / "docs" / "tenancy.md").read_text()
    first_section = doc.split("\n## ", 2)[1]
    assert first_section.startswith("From nothing to two isolated tenants") and MARKER in first_section


@pytest.fixture(scope="module")
def qb(tmp_path_factory):
    b = QuickstartBroker(tmp_path_factory.mktemp("shoal-recipe"))
    b.start()
    b.banner()  # up, with its credentials written
    yield b
    b.stop()


def test_recipe_two_isolated_tenants(qb, tmp_path):
    """As a user meets it: the banner's commands first, then the recipe, in one directory (issue 24:
    both made tenant acme and user alice, and the recipe stopped at "User 'alice' already exists")."""
    env = tool_path(tmp_path)
    sasl = f"127.0.0.1:{qb.sasl_port}"
    first = subprocess.run(["bash", "-euo", "pipefail", "-c", quickstart.script(qb.banner())], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=200)
    assert first.returncode == 0, first.stdout + first.stderr
    env.update(SHOAL_SASL_BOOTSTRAP=sasl, SHOAL_BOOTSTRAP=qb.bootstrap, SHOAL_DATA=str(qb.data_dir),
               SHOAL_ADMIN_URL=f"http://127.0.0.1:{qb.admin_port}")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe()], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stderr, r.stderr
    out = r.stdout.splitlines()
    acme = re.search(r"user alice created in tenant (lkc-[0-9a-z]{6})", r.stdout).group(1)
    globex = re.search(r"user bob created in tenant (lkc-[0-9a-z]{6})", r.stdout).group(1)
    assert acme != globex
    # each reads only its own orders
    assert [l for l in out if " reads " in l] == ["alice reads a1:order from alice", "bob reads b1:order from bob"]
    assert "bob: no topic payments" in out
    assert f"alice sees cluster {acme} topics ['orders', 'payments']" in out
    assert f"bob sees cluster {globex} topics ['orders']" in out
    assert {f"{acme}_orders", f"{acme}_payments", f"{globex}_orders"} <= set(out)  # the operator's view

    # a second tenant named acme (the recipe run again) is created, with a warning naming the first
    again = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe().split("\nGLOBEX=", 1)[0]], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stderr.splitlines() == [
        f"shoal tenants create: warning: tenant {acme} is also named 'acme': display names need not be unique, "
        "tell these tenants apart by id"], again.stderr

    # tenant B, on its own, through two client libraries: alice's topics are nowhere
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    bob = {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.username": "bob", "sasl.password": "bob-secret"}
    c = Consumer({**bob, "group.id": "bob-check", "enable.auto.commit": False})
    try:
        md = c.list_topics(timeout=10)
        assert sorted(md.topics) == ["orders"] and len(md.topics["orders"].partitions) == 1
        assert c.list_topics("payments", timeout=10).topics["payments"].error.code() == \
            KafkaError.UNKNOWN_TOPIC_OR_PART
        assert c.list_topics(f"{acme}_orders", timeout=10).topics[f"{acme}_orders"].error is not None
        c.assign([TopicPartition("orders", 0, 0)])
        records = [m for m in (c.poll(5) for _ in range(3)) if m is not None and not m.error()]
        assert [(m.key(), m.value()) for m in records] == [(b"b1", b"order from bob")]
    finally:
        c.close()

    from kafka import KafkaConsumer

    kc = KafkaConsumer(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                       sasl_plain_username="bob", sasl_plain_password="bob-secret", request_timeout_ms=20000)
    try:
        assert kc.topics() == {"orders"}
        assert not kc.partitions_for_topic("payments")  # None or an empty set: unknown
    finally:
        kc.close()


def test_a_tenant_administrator_sets_its_topic_defaults_not_broker_defaults(qb, tmp_path):
    """Issue 24: on a tenant user's connection the BROKER resource is the tenant's topic defaults,
    so `shoal configs alter --broker-defaults` is refused there and points to --tenant-defaults,
    which says what it changed; the physical cluster's view refuses --tenant-defaults."""
    from broker_process import http_json
    from shoal.config import parse_properties

    env = tool_path(tmp_path)
    admin = ("admin", parse_properties(qb.credentials.read_text())["sasl.password"])
    api = f"http://127.0.0.1:{qb.admin_port}"
    tid = http_json(api, "POST", "/v1/tenants", {"display_name": "defaults-co"}, auth=admin)[1]["tenant_id"]
    assert http_json(api, "POST", f"/v1/tenants/{tid}/users", {"user": "dee", "password": "dee-pw", "admin": True},
                     auth=admin)[0] == 201
    props = tmp_path / "dee.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=dee\n"
                     "sasl.password=dee-pw\n")

    def configs(*args: str, bootstrap: str = f"127.0.0.1:{qb.sasl_port}", tenant: bool = True):
        extra = ["--command-config", str(props)] if tenant else []
        return subprocess.run(["shoal", "configs", *args, "--bootstrap-server", bootstrap, *extra],
                              env=env, capture_output=True, text=True, timeout=60)

    for which in (["--broker-defaults"], ["--broker", "1"]):
        r = configs("alter", *which, "--add-config", "retention.ms=1000")
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert f"tenant {tid}" in r.stderr and "--tenant-defaults" in r.stderr and len(r.stderr.splitlines()) == 1
    assert http_json(api, "GET", f"/v1/tenants/{tid}/configs", auth=admin)[1]["configs"] == {}
    r = configs("alter", "--tenant-defaults", "--add-config", "retention.ms=86400000")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Completed updating the default config for the topics of tenant {tid} "
                               "(retention.ms=86400000)"), r.stdout
    r = configs("describe", "--tenant-defaults")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == f"Default configs for the topics of tenant {tid} are:"
    assert "  retention.ms=86400000 " in r.stdout, r.stdout
    r = configs("describe", "--tenant-defaults", bootstrap=qb.bootstrap, tenant=False)
    assert r.returncode == 2 and "admin API" in r.stderr, r.stderr
