"""The HTTP admin API's namespace, move, tenant-default and policy endpoints, routed in process
over a real embedded store (the socket layer is tested in test_http_api.py and the e2e tests)."""

from __future__ import annotations

import json

import pytest

from shoal.admin.http import AdminHttpServer
from shoal.admin.http_errors import HttpError
from shoal.config import BrokerConfig
from shoal.metadata.embedded import EmbeddedMetadataStore


@pytest.fixture
async def api(tmp_path):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    server = AdminHttpServer(store, "127.0.0.1", 0,
                             broker_config=lambda: BrokerConfig.load(None, {"log.retention.hours": "24"}))
    tid = (await store.create_tenant("T")).tenant_id
    other = (await store.create_tenant("O")).tenant_id

    async def call(method, path, body=None, *, query="", status=200, caller=None):
        raw = b"" if body is None else json.dumps(body).encode()
        try:
            got, payload = await server.route(method, path.replace("{t}", tid), raw, query, caller)
        except HttpError as e:
            got, payload = e.status, {"error": e.code, "message": e.message}
        assert got == status, payload
        return payload

    yield call, store, tid, other
    await store.close()


async def test_create_list_describe(api):
    call, store, tid, other = api
    p = tid + "_"
    assert await call("POST", "/v1/tenants/{t}/namespaces", {"name": "org:apache:kafka"}, status=201) == {
        "name": "org:apache:kafka", "created": ["org", "org:apache", "org:apache:kafka"], "configs": {}}
    assert set(store.image.namespaces) == {p + "org", p + "org:apache", p + "org:apache:kafka"}
    out = await call("POST", "/v1/tenants/{t}/namespaces", {"name": "org:x", "configs": {"retention.ms": "5"}}, status=201)
    assert out["created"] == ["org:x"]
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "org:x"}, status=409)
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "bad/ns"}, status=400)
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "a", "configs": {"retention.ms": "soon"}}, status=400)
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": 5}, status=400)
    await call("POST", "/v1/tenants/lkc-nonexi/namespaces", {"name": "a"}, status=404)
    assert p + "a" not in store.image.namespaces  # the bad config refused it before anything was made

    assert (await call("GET", "/v1/tenants/{t}/namespaces"))["namespaces"] == ["org"]
    assert (await call("GET", "/v1/tenants/{t}/namespaces", query="parent=org"))["namespaces"] == ["org:apache", "org:x"]
    assert (await call("GET", "/v1/tenants/{t}/namespaces", query="parent=org&recursive=true"))["namespaces"] == [
        "org:apache", "org:apache:kafka", "org:x"]
    await call("GET", "/v1/tenants/{t}/namespaces", query="parent=nope", status=404)
    await call("GET", "/v1/tenants/{t}/namespaces", query="recursive=maybe", status=400)
    await store.create_topic(p + "org:apache:t1", [(1,)], {})
    assert await call("GET", "/v1/tenants/{t}/namespaces/org:apache") == {
        "name": "org:apache", "configs": {}, "namespaces": ["org:apache:kafka"], "topics": ["org:apache:t1"]}
    await call("GET", "/v1/tenants/{t}/namespaces/nope", status=404)
    # another tenant sees none of it
    assert (await call("GET", f"/v1/tenants/{other}/namespaces"))["namespaces"] == []
    await call("GET", f"/v1/tenants/{other}/namespaces/org", status=404)


async def test_delete(api):
    call, store, tid, _ = api
    p = tid + "_"
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "a:b"}, status=201)
    await store.create_topic(p + "a:t1", [(1,)], {})
    await store.create_topic(p + "a:b:t2", [(1,)], {})
    await store.create_topic(p + "keep", [(1,)], {})
    out = await call("DELETE", "/v1/tenants/{t}/namespaces/a", status=409)
    assert "child namespaces (a:b)" in out["message"]
    assert await call("DELETE", "/v1/tenants/{t}/namespaces/a:b") == {
        "deleted_namespaces": ["a:b"], "deleted_topics": ["a:b:t2"]}
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "a:c:d"}, status=201)
    assert await call("DELETE", "/v1/tenants/{t}/namespaces/a", query="recursive=true") == {
        "deleted_namespaces": ["a", "a:c", "a:c:d"], "deleted_topics": ["a:t1"]}
    assert set(store.image.topics) == {p + "keep"} and not store.image.namespaces
    await call("DELETE", "/v1/tenants/{t}/namespaces/a", status=404)


async def test_move(api):
    call, store, tid, _ = api
    p = tid + "_"
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "eu"}, status=201)
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "us"}, status=201)
    t = await store.create_topic(p + "eu:orders", [(1,), (1,)], {"retention.ms": "7"})
    await store.create_topic(p + "eu:refunds", [(1,)], {})
    await store.create_topic(p + "us:refunds", [(1,)], {})
    out = await call("POST", "/v1/tenants/{t}/topics/eu:orders/move", {"namespace": "us"})
    assert out == {"namespace": "us", "moved": [{"from": "eu:orders", "to": "us:orders", "topic_id": str(t.topic_id)}]}
    moved = store.image.topics[p + "us:orders"]
    assert moved.topic_id == t.topic_id and dict(moved.configs) == {"retention.ms": "7"} and len(moved.partitions) == 2
    await call("POST", "/v1/tenants/{t}/topics/us:orders/move", {"namespace": "nowhere"}, status=404)
    await call("POST", "/v1/tenants/{t}/topics/ghost/move", {"namespace": "us"}, status=404)
    await call("POST", "/v1/tenants/{t}/topics/eu:refunds/move", {"namespace": "us"}, status=409)
    await call("POST", "/v1/tenants/{t}/topics/eu:refunds/move", {}, status=400)
    out = await call("POST", "/v1/tenants/{t}/topics/us:orders/move", {"namespace": ""})
    assert out["moved"][0]["to"] == "orders"
    # KIP-37's --from-namespace/--to-namespace: every topic directly in the namespace
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "archive"}, status=201)
    out = await call("POST", "/v1/tenants/{t}/namespaces/us/move", {"to": "archive"})
    assert [m["to"] for m in out["moved"]] == ["archive:refunds"]
    assert sorted(n[len(p):] for n in store.image.topics) == ["archive:refunds", "eu:refunds", "orders"]


async def test_configs_with_origins(api):
    call, store, tid, _ = api
    p = tid + "_"
    await call("POST", "/v1/tenants/{t}/namespaces", {"name": "payments:eu"}, status=201)
    out = await call("PUT", "/v1/tenants/{t}/namespaces/payments/configs", {"configs": {"retention.ms": "1000"}})
    assert out["configs"] == {"retention.ms": "1000"}
    out = await call("PATCH", "/v1/tenants/{t}/namespaces/payments:eu/configs",
                     {"set": {"retention.ms": "2000", "segment.ms": "99"}})
    assert out["configs"] == {"retention.ms": "2000", "segment.ms": "99"}
    out = await call("PATCH", "/v1/tenants/{t}/namespaces/payments:eu/configs", {"delete": ["segment.ms"]})
    assert out["configs"] == {"retention.ms": "2000"}
    await call("PATCH", "/v1/tenants/{t}/namespaces/payments:eu/configs", {"set": {"bogus": "1"}}, status=400)
    await call("PUT", "/v1/tenants/{t}/namespaces/payments:eu/configs", {"configs": {"retention.ms": 5}}, status=400)
    out = await call("PATCH", "/v1/tenants/{t}/configs", {"set": {"log.retention.hours": "1", "flush.ms": "42"}})
    assert out["configs"] == {"flush.ms": "42", "retention.ms": "3600000"}
    await call("PATCH", "/v1/tenants/{t}/configs", {"set": {"num.io.threads": "8"}}, status=400)
    assert (await call("GET", "/v1/tenants/{t}/configs"))["configs"] == {"flush.ms": "42", "retention.ms": "3600000"}

    await store.create_topic(p + "payments:eu:orders", [(1,)], {"cleanup.policy": "compact"})
    out = await call("GET", "/v1/tenants/{t}/topics/payments:eu:orders/configs")
    eff = {e["name"]: e for e in out["effective"]}
    assert out["configs"] == {"cleanup.policy": "compact"}
    assert (eff["cleanup.policy"]["value"], eff["cleanup.policy"]["source"]) == ("compact", "TOPIC")
    assert (eff["retention.ms"]["value"], eff["retention.ms"]["source"]) == ("2000", "NAMESPACE payments:eu")
    assert [(l["origin"], l["where"], l["value"]) for l in eff["retention.ms"]["layers"]][:3] == [
        ("NAMESPACE", "payments:eu", "2000"), ("NAMESPACE", "payments", "1000"), ("TENANT_DEFAULT", None, "3600000")]
    assert (eff["flush.ms"]["value"], eff["flush.ms"]["source"]) == ("42", "TENANT_DEFAULT")
    assert eff["segment.ms"]["source"] == "DEFAULT log.roll.hours"  # Kafka's default is in hours
    out = await call("GET", "/v1/tenants/{t}/namespaces/payments/configs")
    eff = {e["name"]: e for e in out["effective"]}
    assert eff["retention.ms"]["source"] == "NAMESPACE payments" and eff["flush.ms"]["source"] == "TENANT_DEFAULT"
    await call("GET", "/v1/tenants/{t}/topics/ghost/configs", status=404)


async def test_a_tenants_cell_is_the_operators_to_set_and_no_topic_default(api):
    call, store, tid, _ = api
    cell = {"shoal.tenant.cell.brokers": "1,2"}
    out = await call("PATCH", "/v1/tenants/{t}/configs", {"set": {**cell, "retention.ms": "5"}})
    assert out["configs"] == {**cell, "retention.ms": "5"}
    await store.create_topic(tid + "_orders", [(1,)], {})
    out = await call("GET", "/v1/tenants/{t}/topics/orders/configs")
    names = {e["name"] for e in out["effective"]}
    assert "retention.ms" in names and "shoal.tenant.cell.brokers" not in names  # not inherited by topics
    for bad in ({"shoal.tenant.cell.brokers": "1,x"}, {"shoal.tenant.cell.racks": ""}):
        out = await call("PATCH", "/v1/tenants/{t}/configs", {"set": bad}, status=400)
        assert out["error"] == "bad_request" and "comma-separated" in out["message"]
    # the tenant's administrator: its defaults yes, its cell no (set, changed or removed)
    out = await call("PUT", "/v1/tenants/{t}/configs", {"configs": {"retention.ms": "6"}}, caller=tid)
    assert out["configs"] == {**cell, "retention.ms": "6"}  # a PUT without the cell keeps it
    for body in ({"set": {"shoal.tenant.cell.brokers": "3"}}, {"delete": ["shoal.tenant.cell.brokers"]},
                 {"set": {"shoal.tenant.cell.racks": "a"}}, {"configs": {"shoal.tenant.cell.brokers": "3"}}):
        out = await call("PUT" if "configs" in body else "PATCH", "/v1/tenants/{t}/configs", body, caller=tid,
                         status=403)
        assert out["message"].startswith("Replica placement is the platform operator's: a tenant's principals "
                                         "cannot set or change shoal.tenant.cell.")
    assert dict(store.image.tenants[tid].configs) == {**cell, "retention.ms": "6"}
    # the operator moves it (one call) and removes it
    out = await call("PATCH", "/v1/tenants/{t}/configs", {"set": {"shoal.tenant.cell.brokers": "3,4"}})
    assert out["configs"]["shoal.tenant.cell.brokers"] == "3,4"
    out = await call("PATCH", "/v1/tenants/{t}/configs", {"delete": ["shoal.tenant.cell.brokers"]})
    assert out["configs"] == {"retention.ms": "6"}


async def test_policy(api):
    call, store, tid, _ = api
    assert await call("GET", "/v1/tenants/{t}/policy") == {"tenant_id": tid, "policy": {}}
    policy = {"max.partitions.per.topic": 3, "config.ranges": {"retention.ms": [1000, None]}}
    assert (await call("PUT", "/v1/tenants/{t}/policy", {"policy": policy}))["policy"] == policy
    out = await call("PUT", "/v1/tenants/{t}/policy", {"policy": {"max.topic": 1}}, status=400)
    assert "unknown policy key 'max.topic'" in out["message"]
    await call("DELETE", "/v1/tenants/{t}/policy", status=405)
    assert dict(store.image.tenants[tid].policy) == policy
