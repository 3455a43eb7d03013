"""shoal.console.operator_data without a broker: the admin API in process (a real AdminHttpServer
over a real embedded store, as the console mounted on the admin listener calls it), the ISR
changes the console remembers, utilization against capacity, tenants' stored topic names."""

from __future__ import annotations

import pytest

from shoal.admin.http import AdminHttpServer
from shoal.client import ClusterMetadata, PartitionDescription, TopicDescription
from shoal.config import BrokerConfig
from shoal.console import operator_data as data
from shoal.metadata.embedded import EmbeddedMetadataStore


@pytest.fixture
async def server(tmp_path):
    store = EmbeddedMetadataStore(tmp_path, node_id=1)
    await store.start()
    config = BrokerConfig.load(None, {"super.users": "User:root"})
    yield AdminHttpServer(store, "127.0.0.1", 0, broker_config=lambda: config)
    await store.close()


async def test_in_process_admin_api_creates_a_tenant_and_its_administrator(server):
    api = data.InProcessAdminApi(server)
    tid, admin = await data.create_tenant(api, "root", "", "Tenant Z", "zed", "zed-secret-1")
    assert admin == "zed"
    got = await api.call("root", "", "GET", f"/v1/tenants/{tid}")
    assert got["display_name"] == "Tenant Z" and got["users"] == ["zed"] and got["admins"] == ["zed"]
    with pytest.raises(data.PartlyCreated) as e:  # the user exists: the API's 409, the tenant made
        await data.create_tenant(api, "root", "", "Tenant Y", "zed", "x")
    assert e.value.status == 409 and "was created, but not its administrator zed: User 'zed'" in e.value.message
    assert [t["display_name"] for t in (await api.call("root", "", "GET", "/v1/tenants"))["tenants"]] == \
        ["Tenant Z", "Tenant Y"]
    with pytest.raises(data.AdminApiError) as e:
        await api.call("root", "", "GET", "/v1/tenants/lkc-zzzzzz")
    assert e.value.status == 404
    # as the user: a tenant's administrator gets its own tenant and nothing else, another user nothing
    assert (await api.call("zed", "", "GET", f"/v1/tenants/{tid}"))["tenant_id"] == tid
    for user, path in (("zed", "/v1/tenants"), ("zed", "/v1/cluster/load"), ("nobody", f"/v1/tenants/{tid}")):
        with pytest.raises(data.AdminApiError) as e:
            await api.call(user, "", "GET", path)
        assert e.value.status == 403
    load, why = await data.cluster_load(api, "root", "")
    assert load is None and why == "404: this broker does not measure load"
    status, why = await data.balancer_status(None, "root", "")
    assert status is None and "--admin-api" in (why or "")


def _md(isr: tuple[int, ...], brokers: dict[int, tuple[str, int, str | None]]) -> ClusterMetadata:
    t = TopicDescription("t", None, False, (PartitionDescription(0, 1, 0, (1, 2, 3), isr),))
    return ClusterMetadata("c", 1, brokers, {"t": t})


def test_isr_watch_keeps_the_changes_it_saw_and_the_brokers_last_seen():
    clock = iter([1.0, 2.0, 3.0, 4.0])
    w = data.IsrWatch(clock=lambda: next(clock))
    three = {1: ("h1", 1, "dc1"), 2: ("h2", 2, "dc2"), 3: ("h3", 3, "dc3")}
    w.saw(_md((1, 2, 3), three))
    w.saw(_md((2, 1, 3), three))  # the same set: no change
    w.saw(_md((1, 2), {1: three[1], 2: three[2]}))
    w.saw(_md((1, 2, 3), three))
    assert [(c.at_ms, c.before, c.after) for c in w.changes] == [(4000, (1, 2), (1, 2, 3)), (3000, (2, 1, 3), (1, 2))]
    assert w.brokers[3] == ("h3", 3, "dc3")


def test_utilization_and_tenant_names():
    load = {"capacity": {"disk_bytes": 1000, "disk_used_bytes": 250, "network_in_bytes_per_second": 100,
                         "network_out_bytes_per_second": 0},
            "bytes_in_per_second": 50, "bytes_out_per_second": 10, "replication_bytes_out_per_second": 5}
    assert data.utilization(load) == {"disk": 0.25, "network_in": 0.5, "network_out": None}  # 0: unknown
    assert data.utilization(None) == {}
    assert data.tenant_of("lkc-abc123_orders_v2") == ("lkc-abc123", "orders_v2")
    assert data.tenant_of("orders") is None and data.tenant_of("lkc-abc123") is None
