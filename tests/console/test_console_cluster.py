"""The console on a 3-broker cluster on etcd (tests/cluster_harness.py), logged in through broker 1
only: a topic of three single-replica partitions, each led by another broker, takes a test record
in each partition and shows each one back (Produce and Fetch reach each partition's leader), its
partitions' sizes come from every broker (DescribeLogDirs), and groups coordinated by different
brokers show their committed offsets and lag (FindCoordinator, then the coordinator). The operator
sees the three brokers and their racks.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from confluent_kafka import Consumer, TopicPartition

from cluster_harness import running_cluster
from console_harness import ADMIN, ADMIN_PASSWORD, Browser, ConsoleServer, tenant_console
from tenancy_fixtures import Tenant

from shoal.client import AdminClient, ClientSecurity

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(etcd_cluster, tmp_path_factory):
    with running_cluster(etcd_cluster, tmp_path_factory, "console", size=3,
                         overrides={"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                                    "super.users": f"User:ANONYMOUS;User:{ADMIN}"}) as c:
        yield c


@pytest.fixture(scope="module")
def console(cluster):
    with tenant_console(cluster[1]) as c:
        yield c


def _login(server: ConsoleServer, user: str, password: str) -> Browser:
    b = Browser(server.url)
    assert b.login(user, password).status_code == 200
    return b


async def _coordinators(tenant: Tenant, groups: list[str]) -> set[int]:
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
             "sasl.password": tenant.users["alice"]}
    async with AdminClient(tenant.broker.sasl_bootstrap, security=ClientSecurity.from_properties(props)) as c:
        return {(await c.find_coordinator(g))[0] for g in groups}


async def _open_connections() -> list[int]:
    """How many open Kafka connections (every one, referenced or leaked) go to each broker port."""
    import gc
    from collections import Counter

    from shoal.net import Connection

    return sorted(Counter(c.port for c in gc.get_objects() if isinstance(c, Connection) and not c.closed).values())


def test_partitions_and_groups_on_other_brokers(cluster, console):
    server, tenant = console
    alice = _login(server, "alice", tenant.users["alice"])
    r = alice.post("topics", {"name": "spread", "partitions": "3", "replication_factor": "1"})
    assert r.status_code == 200 and "Topic spread created." in r.text, r.text[-2000:]
    rows = re.findall(r'<tr[^>]*>\s*<td class="num"><a [^>]*>(\d)</a></td>\s*<td class="num">(\d)</td>', r.text)
    leaders = {int(p): int(leader) for p, leader in rows}
    assert sorted(leaders) == [0, 1, 2] and set(leaders.values()) == {1, 2, 3}, leaders  # one on each broker

    for p in range(3):
        r = alice.post("topics/spread/produce", {"partition": str(p), "key": f"key-{p}", "value": f"on broker {leaders[p]}"})
        assert f"Produced a record to spread-{p} at offset 0." in r.text, (p, r.text[-1500:])
        page = alice.get(f"topics/spread/messages?partition={p}").text
        assert f'<pre class="text">on broker {leaders[p]}</pre>' in page and f"key-{p}" in page

    detail = alice.get("topics/spread").text
    sizes = re.findall(r'<td class="num">([^<]*)</td>\s*</tr>', detail.split('id="partitions"')[1].split("</table>")[0])
    assert len(sizes) == 3 and all(s.endswith("B") and s != "0 B" for s in sizes), sizes  # every broker's log dir

    groups = [f"readers-{i}" for i in range(6)]
    conf = tenant.conf("alice")
    for i, g in enumerate(groups):
        c = Consumer({**conf, "group.id": g, "enable.auto.commit": False})
        try:
            c.assign([TopicPartition("spread", i % 3, 0)])
            c.commit(offsets=[TopicPartition("spread", i % 3, 0)], asynchronous=False)
        finally:
            c.close()
    assert len(asyncio.run(_coordinators(tenant, groups))) > 1  # the page must ask more than one broker
    page = alice.get("groups").text
    for g in groups:
        assert re.search(rf'{g}</a></td>\s*<td><span class="state empty">Empty</span></td>\s*<td>classic</td>'
                         r'\s*<td class="num">0</td>\s*<td class="num">1</td>', page), g
        assert re.search(r'id="total-lag">1<', alice.get(f"groups/{g}").text), g

    # the pages' concurrent requests to other brokers opened one connection to each, no more
    assert server.run(_open_connections()) == [1, 1, 1]

    admin = _login(server, ADMIN, ADMIN_PASSWORD)
    brokers = admin.get("operator").text.split('id="brokers"')[1].split("</table>")[0]
    assert re.findall(r'<td>(dc\d)</td>', brokers) == ["dc1", "dc2", "dc3"]
