"""ACL APIs end to end: confluent-kafka and kafka-python admin clients, ``shoal acls``, Shoal's own
client for what standard clients refuse to send, tenant separation of bindings, and enforcement.

One broker for the module (``tenancy_fixtures``): the operator (super user, physical view) on
PLAINTEXT; on SASL_PLAINTEXT tenants ``a`` and ``b`` whose users ``alice`` and ``bob`` administer
their tenant, and ``carol``, an ordinary user of the physical cluster. ACLs are enforced.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from shoal.client import AclBinding as ShoalBinding
from shoal.client import AclFilter, ClientSecurity
from shoal.client import AdminClient as ShoalAdmin
from shoal.client import KafkaError as ShoalError
from shoal.tenancy.acl import Operation, PatternType, Permission
from shoal.tenancy.acl import ResourceType as Rt
from tenancy_fixtures import MECHANISM, TenantCluster, tenant_cluster

REPO = Path(__file__).resolve().parents[2]
CAROL = ("carol", "carol-secret")
TIMEOUT = 15


@pytest.fixture(scope="module")
def cluster():
    overrides = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "shoal.sasl.bootstrap.users": ":".join(CAROL),
    }
    for c in tenant_cluster(overrides):
        async def admins(store: Any) -> None:
            await store.set_tenant_admin(c.a.user, True)
            await store.set_tenant_admin(c.b.user, True)

        c.edit_metadata(admins)  # no API makes tenant administrators yet
        yield c


def carol_conf(c: TenantCluster) -> dict[str, Any]:
    return {"bootstrap.servers": c.broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECHANISM, "sasl.username": CAROL[0], "sasl.password": CAROL[1]}


def admin(conf: dict[str, Any]) -> AdminClient:
    return AdminClient({**conf, "socket.timeout.ms": 10000})


def shoal_call(conf: dict[str, Any], fn) -> Any:
    """``await fn(client)`` with Shoal's admin client, connected with confluent-style ``conf``."""
    props = {k: v for k, v in conf.items() if k != "bootstrap.servers"}

    async def go() -> Any:
        async with ShoalAdmin(conf["bootstrap.servers"], security=ClientSecurity.from_properties(props)) as c:
            return await fn(c)

    return asyncio.run(go())


def create(a: AdminClient, bindings: list[AclBinding]) -> dict[AclBinding, Exception | None]:
    out: dict[AclBinding, Exception | None] = {}
    for binding, fut in a.create_acls(bindings, request_timeout=TIMEOUT).items():
        try:
            out[binding] = fut.result(TIMEOUT)
        except KafkaException as e:
            out[binding] = e
    return out


def describe(a: AdminClient, f: AclBindingFilter) -> set[AclBinding]:
    return set(a.describe_acls(f, request_timeout=TIMEOUT).result(TIMEOUT))


def delete(a: AdminClient, filters: list[AclBindingFilter]) -> dict[AclBindingFilter, set[AclBinding]]:
    futures = a.delete_acls(filters, request_timeout=TIMEOUT)
    return {f: set(fut.result(TIMEOUT)) for f, fut in futures.items()}


def error_code(e: BaseException | None) -> int:
    assert isinstance(e, KafkaException), e
    return e.args[0].code()


def binding(rt, name, principal, op, perm=AclPermissionType.ALLOW, pt=ResourcePatternType.LITERAL, host="*"):
    return AclBinding(rt, name, pt, principal, host, op, perm)


def filter_(rt=ResourceType.ANY, name=None, pt=ResourcePatternType.ANY, principal=None, host=None,
            op=AclOperation.ANY, perm=AclPermissionType.ANY):
    return AclBindingFilter(rt, name, pt, principal, host, op, perm)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def everything(a: AdminClient) -> set[AclBinding]:
    return describe(a, filter_())


# -- confluent-kafka ----------------------------------------------------------------------------


def test_confluent_kafka_round_trip(cluster):
    a = admin(cluster.operator_conf())
    t = unique("rt")
    user = f"User:{t}"
    literal = binding(ResourceType.TOPIC, t, user, AclOperation.READ)
    prefixed_deny = binding(ResourceType.TOPIC, t[:5], user, AclOperation.WRITE, AclPermissionType.DENY,
                            ResourcePatternType.PREFIXED)
    wildcard = binding(ResourceType.TOPIC, "*", user, AclOperation.DESCRIBE, host="10.1.1.1")
    group = binding(ResourceType.GROUP, t, user, AclOperation.READ)
    cluster_acl = binding(ResourceType.BROKER, "kafka-cluster", user, AclOperation.IDEMPOTENT_WRITE)
    txn = binding(ResourceType.TRANSACTIONAL_ID, t, user, AclOperation.WRITE)
    mine = [literal, prefixed_deny, wildcard, group, cluster_acl, txn]
    assert create(a, mine) == {b: None for b in mine}
    assert create(a, [literal]) == {literal: None}  # creating it again is not an error, nor a duplicate

    assert describe(a, filter_(principal=user)) == set(mine)
    assert describe(a, filter_(ResourceType.TOPIC, principal=user)) == {literal, prefixed_deny, wildcard}
    # LITERAL filter: the literal binding of that name only; MATCH: every binding that applies to it
    assert describe(a, filter_(ResourceType.TOPIC, t, ResourcePatternType.LITERAL, user)) == {literal}
    assert describe(a, filter_(ResourceType.TOPIC, t, ResourcePatternType.MATCH, user)) == {
        literal, prefixed_deny, wildcard}
    assert describe(a, filter_(ResourceType.TOPIC, t[:5], ResourcePatternType.PREFIXED, user)) == {prefixed_deny}
    assert describe(a, filter_(ResourceType.TOPIC, t + "x", ResourcePatternType.MATCH, user)) == {
        prefixed_deny, wildcard}
    assert describe(a, filter_(perm=AclPermissionType.DENY, principal=user)) == {prefixed_deny}
    assert describe(a, filter_(op=AclOperation.IDEMPOTENT_WRITE, principal=user)) == {cluster_acl}
    assert describe(a, filter_(host="10.1.1.1", principal=user)) == {wildcard}

    # delete by MATCH: the three topic bindings that apply to the name, nothing else
    f = filter_(ResourceType.TOPIC, t, ResourcePatternType.MATCH, user)
    assert delete(a, [f]) == {f: {literal, prefixed_deny, wildcard}}
    assert describe(a, filter_(principal=user)) == {group, cluster_acl, txn}
    f1, f2 = filter_(ResourceType.GROUP, principal=user), filter_(principal=user, op=AclOperation.WRITE)
    assert delete(a, [f1, f2]) == {f1: {group}, f2: {txn}}
    f = filter_(principal=user)
    assert delete(a, [f]) == {f: {cluster_acl}}
    assert delete(a, [f]) == {f: set()}
    assert describe(a, f) == set()


def test_invalid_bindings_are_refused_one_by_one(cluster):
    a = admin(cluster.operator_conf())
    user = f"User:{unique('inv')}"
    good = binding(ResourceType.TOPIC, "ok", user, AclOperation.READ)
    bad = [
        binding(ResourceType.GROUP, "g", user, AclOperation.WRITE),  # not an operation of groups
        binding(ResourceType.BROKER, "not-the-cluster", user, AclOperation.ALTER),
        binding(ResourceType.TOPIC, "*", user, AclOperation.READ, pt=ResourcePatternType.PREFIXED),
        binding(ResourceType.TOPIC, "t", user.removeprefix("User:"), AclOperation.READ),  # no Type: prefix
    ]
    result = create(a, [good, *bad])
    assert result[good] is None
    for b in bad:
        assert error_code(result[b]) == KafkaError.INVALID_REQUEST, b
    assert "is not supported for resource type GROUP" in str(result[bad[0]])
    assert describe(a, filter_(principal=user)) == {good}
    delete(a, [filter_(principal=user)])


def test_cluster_authorization(cluster):
    carol = admin(carol_conf(cluster))
    b = binding(ResourceType.TOPIC, unique("carol"), "User:carol", AclOperation.READ)
    assert error_code(create(carol, [b])[b]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' error code (an empty list, no error); Shoal's client shows it
    assert describe(carol, filter_()) == set()
    with pytest.raises(ShoalError) as refused:
        shoal_call(carol_conf(cluster), lambda c: c.describe_acls())
    assert refused.value.code_name == "CLUSTER_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException) as e:
        delete(carol, [filter_()])
    assert error_code(e.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # DESCRIBE on the cluster lets her describe, not create; ALTER lets her create (and implies DESCRIBE)
    root = admin(cluster.operator_conf())
    describe_cluster = binding(ResourceType.BROKER, "kafka-cluster", "User:carol", AclOperation.DESCRIBE)
    alter_cluster = binding(ResourceType.BROKER, "kafka-cluster", "User:carol", AclOperation.ALTER)
    try:
        assert create(root, [describe_cluster]) == {describe_cluster: None}
        assert describe(carol, filter_(principal="User:carol")) == {describe_cluster}
        assert error_code(create(carol, [b])[b]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert create(root, [alter_cluster]) == {alter_cluster: None}
        assert create(carol, [b]) == {b: None}
    finally:
        delete(root, [filter_(principal="User:carol")])
    assert describe(root, filter_(principal="User:carol")) == set()


def test_namespace_bindings_only_for_filters_that_name_namespace(cluster):
    op = cluster.operator_conf()
    ns_name = unique("payments") + ":eu"
    ns_binding = ShoalBinding(Rt.NAMESPACE, ns_name, PatternType.LITERAL, "User:nsuser", "*", Operation.READ,
                              Permission.ALLOW)
    topic_binding = binding(ResourceType.TOPIC, ns_name + ":orders", "User:nsuser", AclOperation.READ)
    assert shoal_call(op, lambda c: c.create_acls([ns_binding])) == {ns_binding: None}
    a = admin(op)
    create(a, [topic_binding])
    # standard clients never see the code they cannot parse, and ANY never deletes it
    assert describe(a, filter_(principal="User:nsuser")) == {topic_binding}
    f = filter_(principal="User:nsuser")
    assert delete(a, [f]) == {f: {topic_binding}}
    assert shoal_call(op, lambda c: c.describe_acls(AclFilter(principal="User:nsuser"))) == []
    named = AclFilter(Rt.NAMESPACE, principal="User:nsuser")
    assert shoal_call(op, lambda c: c.describe_acls(named)) == [ns_binding]
    child = AclFilter(Rt.NAMESPACE, ns_name + ":x", PatternType.MATCH)
    assert shoal_call(op, lambda c: c.describe_acls(child)) == [ns_binding]
    assert shoal_call(op, lambda c: c.delete_acls([named])) == {named: [ns_binding]}
    assert shoal_call(op, lambda c: c.describe_acls(named)) == []


def test_bad_codes_get_invalid_request_and_the_broker_lives(cluster):
    async def go(c: ShoalAdmin) -> tuple:
        created = await c.create_acls([
            ShoalBinding(99, "t", 3, "User:x", "*", 3, 3),
            ShoalBinding(2, "t", 0, "User:x", "*", 3, 3),
            ShoalBinding(2, "t", 3, "User:x", "*", 77, 3),
            ShoalBinding(2, "t", 3, "User:x", "*", 3, 9),
        ], raise_errors=False)
        with pytest.raises(ShoalError) as described:
            await c.describe_acls(AclFilter(resource_type=0))
        deleted = await c.delete_acls([AclFilter(operation=0), AclFilter(principal="User:nobody")],
                                      raise_errors=False)
        return created, described.value, deleted, await c.describe_cluster()

    created, described, deleted, described_cluster = shoal_call(cluster.operator_conf(), go)
    assert [e.code_name for e in created.values()] == ["INVALID_REQUEST"] * 4
    assert [e.message for e in created.values()] == [
        "Invalid resource type 99", "Invalid pattern type UNKNOWN",
        "Operation 77 is not supported for resource type TOPIC", "Invalid permission type 9"]
    assert (described.code_name, described.message) == (
        "INVALID_REQUEST", "Invalid resource type UNKNOWN in the filter")
    first, second = deleted.values()
    assert (first.code_name, first.message) == ("INVALID_REQUEST", "Invalid operation UNKNOWN in the filter")
    assert second == []
    assert described_cluster["brokers"]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version(cluster, version):
    from shoal.client import build_entity
    from shoal.protocol.codec import request_type

    name = unique(f"v{version}")
    creation = {"resource_type": 2, "resource_name": name, "resource_pattern_type": 4, "principal": "User:v",
                "host": "*", "operation": 4, "permission_type": 2}
    flt = AclFilter(Rt.TOPIC, name + "-x", PatternType.MATCH).fields()

    async def go(c: ShoalAdmin) -> tuple:
        def req(key: int, body: dict) -> Any:
            return build_entity(request_type(key, version), body)

        created = await c.request(30, req(30, {"creations": [creation]}))
        described = await c.request(29, req(29, flt))
        deleted = await c.request(31, req(31, {"filters": [flt]}))
        return created, described, deleted

    created, described, deleted = shoal_call(cluster.operator_conf(), go)
    assert [r.error_code for r in created.results] == [0]
    assert described.error_code == 0
    assert [(r.resource_type, r.resource_name, r.pattern_type, [(a.principal, a.operation, a.permission_type)
                                                                 for a in r.acls]) for r in described.resources] == [
        (2, name, 4, [("User:v", 4, 2)])]
    assert [[(m.resource_name, m.pattern_type, m.host) for m in r.matching_acls] for r in deleted.filter_results] == [
        [(name, 4, "*")]]


def test_create_and_delete_are_logged_with_principal_and_address(cluster):
    a = admin(cluster.a.conf())  # tenant a's administrator
    t = unique("logged")
    b = binding(ResourceType.TOPIC, t, "User:logged", AclOperation.WRITE, AclPermissionType.DENY)
    create(a, [b])
    delete(a, [filter_(ResourceType.TOPIC, t)])
    lines = [line for line in cluster.broker.log_text().splitlines() if f"name={t}," in line]
    entry = (f"(pattern=ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL), entry=(principal="
             "User:logged, host=*, operation=WRITE, permissionType=DENY))")
    who = f"by User:{cluster.a.user} from 127.0.0.1:"
    assert len(lines) == 2, lines
    assert f"ACL created {who}" in lines[0] and f"in tenant {cluster.a.tenant_id}: {entry}" in lines[0]
    assert f"ACL deleted {who}" in lines[1] and entry in lines[1]


def test_without_an_authorizer_the_apis_answer_security_disabled(broker):
    a = admin({"bootstrap.servers": broker.bootstrap})
    b = binding(ResourceType.TOPIC, "t", "User:x", AclOperation.READ)
    assert error_code(create(a, [b])[b]) == KafkaError.SECURITY_DISABLED
    with pytest.raises(KafkaException) as e:
        delete(a, [filter_()])
    assert error_code(e.value) == KafkaError.SECURITY_DISABLED
    with pytest.raises(ShoalError) as refused:
        shoal_call({"bootstrap.servers": broker.bootstrap}, lambda c: c.describe_acls())
    assert refused.value.code_name == "SECURITY_DISABLED"


# -- kafka-python -------------------------------------------------------------------------------


def test_kafka_python_round_trip(cluster):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KRt

    t = unique("kp")
    user = f"User:{t}"
    c = KafkaAdminClient(**cluster.b.kafka_python(), request_timeout_ms=15000)  # tenant b's administrator
    try:
        read = ACL(user, "*", ACLOperation.READ, ACLPermissionType.ALLOW, ResourcePattern(KRt.TOPIC, t))
        deny = ACL(user, "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                   ResourcePattern(KRt.TOPIC, t[:4], ACLResourcePatternType.PREFIXED))
        bad = ACL(user, "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, ResourcePattern(KRt.GROUP, t))
        result = c.create_acls([read, deny, bad])
        assert result["succeeded"] == [read, deny]
        assert [e.errno for e in result["failed"]] == [42]  # INVALID_REQUEST

        def by_principal():
            return ACLFilter(user, None, ACLOperation.ANY, ACLPermissionType.ANY,
                             ResourcePatternFilter(KRt.ANY, None, ACLResourcePatternType.ANY))

        found, err = c.describe_acls(by_principal())
        assert sorted(found, key=str) == sorted([read, deny], key=str) and err.errno == 0
        match = ACLFilter(user, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(KRt.TOPIC, t, ACLResourcePatternType.MATCH))
        assert sorted(c.describe_acls(match)[0], key=str) == sorted([read, deny], key=str)
        deleted = c.delete_acls([by_principal()])
        assert len(deleted) == 1 and sorted(deleted[0][1], key=str) == sorted([read, deny], key=str)
        assert deleted[0][2].errno == 0
        assert c.describe_acls(by_principal())[0] == []
    finally:
        c.close()


# -- shoal acls ---------------------------------------------------------------------------------


def run_cli(bootstrap: str, props: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    config = ["--command-config", str(props)] if props else []
    return subprocess.run(
        [sys.executable, "-m", "shoal", "acls", *args, "--bootstrap-server", bootstrap, *config],
        capture_output=True, text=True, env=env, timeout=60,
    )


def props_file(tmp_path: Path, conf: dict[str, Any]) -> Path:
    p = tmp_path / f"{conf['sasl.username']}.properties"
    p.write_text("".join(f"{k}={v}\n" for k, v in conf.items() if k != "bootstrap.servers"))
    return p


def test_cli_round_trip(cluster, tmp_path):
    """``shoal acls`` as tenant a's administrator, over SASL (``--command-config``)."""
    props = props_file(tmp_path, cluster.a.conf())

    def cli(*args: str) -> subprocess.CompletedProcess:
        return run_cli(cluster.broker.sasl_bootstrap, props, *args)

    t = unique("cli")
    user = f"User:{t}"
    r = cli("add", "--allow-principal", user, "--operation", "Read", "--operation", "describe-configs",
            "--topic", t, "--group", t)
    assert r.returncode == 2 and "GROUP does not support operation DESCRIBE_CONFIGS" in r.stderr  # checked locally
    r = cli("add", "--allow-principal", user, "--operation", "Read", "--topic", t, "--group", t)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:",
        f" \t(principal={user}, host=*, operation=READ, permissionType=ALLOW)",
    ]
    r = cli("add", "--deny-principal", user, "--host", "10.9.9.9", "--topic", t[:4], "--resource-pattern-type",
            "prefixed", "--operation", "Write")
    assert r.returncode == 0, r.stderr
    r = cli("add", "--allow-principal", user, "--producer", "--topic", t, "--namespace", t + ":ns")
    assert r.returncode == 0, r.stderr

    r = cli("list", "--topic", t, "--resource-pattern-type", "match")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:\n"
        f" \t(principal={user}, host=*, operation=READ, permissionType=ALLOW)\n"
        f" \t(principal={user}, host=*, operation=WRITE, permissionType=ALLOW)\n"
        f" \t(principal={user}, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        f" \t(principal={user}, host=*, operation=CREATE, permissionType=ALLOW)\n\n"
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t[:4]}, patternType=PREFIXED)`:\n"
        f" \t(principal={user}, host=10.9.9.9, operation=WRITE, permissionType=DENY)\n\n"
    )
    r = cli("list", "--principal", user)
    assert r.returncode == 0, r.stderr
    assert "resourceType=GROUP" in r.stdout and "resourceType=NAMESPACE" not in r.stdout  # --producer: none
    r = cli("list")
    assert r.returncode == 0 and f"name={t}, patternType=LITERAL" in r.stdout, r.stderr
    # the operator's physical view has none of the tenant's bindings
    r = run_cli(cluster.broker.bootstrap, None, "list", "--principal", user)
    assert r.returncode == 0 and r.stdout == "", r.stdout

    r = cli("remove", "--topic", t, "--allow-principal", user, "--operation", "Write")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`:",
        f" \t(principal={user}, host=*, operation=WRITE, permissionType=ALLOW)",
        "",
    ]
    r = cli("remove", "--topic", t, "--group", t, "--topic", t[:4], "--resource-pattern-type", "any")
    assert r.returncode == 0 and r.stdout.count(f"principal={user}") == 5, r.stdout
    r = cli("list", "--principal", user)
    assert r.returncode == 0 and r.stdout == "", r.stdout
    r = cli("remove", "--topic", t)
    assert r.returncode == 0 and r.stdout.strip() == "No ACL matched; nothing removed."


def test_cli_errors(cluster, tmp_path):
    sasl, plain = cluster.broker.sasl_bootstrap, cluster.broker.bootstrap
    r = run_cli(sasl, props_file(tmp_path, carol_conf(cluster)), "list")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(plain, None, "remove", "--allow-principal", "User:x")
    assert r.returncode == 2 and "give the resources" in r.stderr
    r = run_cli(plain, None, "add", "--topic", "t", "--allow-principal", "User:x", "--resource-pattern-type", "match")
    assert r.returncode == 2 and "literal or prefixed" in r.stderr
    r = run_cli(plain, None, "add", "--topic", "t", "--allow-principal", "User:x", "--operation", "Fly")
    assert r.returncode == 2 and "unknown operation 'Fly'" in r.stderr
    r = run_cli(plain, None, "add", "--topic", "*", "--allow-principal", "User:x", "--resource-pattern-type",
                "prefixed")
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr and "wildcard" in r.stderr
    r = run_cli(sasl, props_file(tmp_path, {**carol_conf(cluster), "sasl.password": "nope"}), "list")
    assert r.returncode == 3 and "Traceback" not in r.stderr


# -- tenants --------------------------------------------------------------------------------------


def test_tenants_see_and_delete_only_their_own_bindings(cluster):
    ta, tb, root = admin(cluster.a.conf()), admin(cluster.b.conf()), admin(cluster.operator_conf())
    reader = f"User:{unique('reader')}"
    mine_a = [binding(ResourceType.TOPIC, "orders", reader, AclOperation.READ),
              binding(ResourceType.GROUP, "app", reader, AclOperation.READ)]
    mine_b = [binding(ResourceType.TOPIC, "orders", reader, AclOperation.READ),  # the same, in B
              binding(ResourceType.TOPIC, "pay", reader, AclOperation.WRITE, pt=ResourcePatternType.PREFIXED)]
    physical = binding(ResourceType.TOPIC, "orders", reader, AclOperation.WRITE)
    assert create(ta, mine_a) == {x: None for x in mine_a}
    assert create(tb, mine_b) == {x: None for x in mine_b}
    assert create(root, [physical]) == {physical: None}
    mine = filter_(principal=reader)
    try:
        assert describe(ta, mine) == set(mine_a)
        assert describe(tb, mine) == set(mine_b)
        assert describe(root, mine) == {physical}
        # B deletes all its bindings of that principal: only its own go
        assert delete(tb, [mine]) == {mine: set(mine_b)}
        assert describe(tb, mine) == set()
        assert describe(ta, mine) == set(mine_a)
        assert describe(root, mine) == {physical}
        # a MATCH filter on a name both use finds only the caller's
        f = filter_(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, reader)
        assert delete(ta, [f]) == {f: {mine_a[0]}}
        assert describe(ta, mine) == {mine_a[1]}
        assert describe(root, mine) == {physical}
    finally:
        delete(ta, [mine])
        delete(root, [mine])


# -- enforcement (needs the produce/metadata handlers to authorize) ----------------------------


def produce_one(conf: dict[str, Any], topic: str) -> int:
    """Produce one message; the delivery error code (0 when delivered)."""
    p = Producer({**conf, "message.timeout.ms": 8000, "retries": 0})
    outcome: list[int] = []
    p.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err.code() if err else 0))
    p.flush(TIMEOUT)
    assert outcome, "no delivery report"
    return outcome[0]


@pytest.mark.parametrize("view", ["physical", "tenant"])
def test_produce_needs_write_and_a_deny_takes_it_away(cluster, view):
    if view == "physical":
        acl_admin, producer, principal = admin(cluster.operator_conf()), carol_conf(cluster), "User:carol"
    else:
        user = cluster.a.add_user(unique("writer"))
        acl_admin, producer, principal = admin(cluster.a.conf()), cluster.a.conf(user), f"User:{user}"
    topic = unique("enforced")
    acl_admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=TIMEOUT)[topic].result(TIMEOUT)
    allow = binding(ResourceType.TOPIC, topic, principal, AclOperation.WRITE)
    deny = binding(ResourceType.TOPIC, topic[:6], principal, AclOperation.WRITE, AclPermissionType.DENY,
                   ResourcePatternType.PREFIXED)
    try:
        assert produce_one(producer, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert create(acl_admin, [allow]) == {allow: None}
        assert produce_one(producer, topic) == 0
        assert create(acl_admin, [deny]) == {deny: None}
        assert produce_one(producer, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        delete(acl_admin, [filter_(principal=principal)])
