"""The console's ACLs page on a broker with ACLs on (``authorizer.class.name=shoal``): tenant A's
administrator ``ann`` adds, lists and removes ACLs of her tenant and tenant B's administrator
``ben`` never sees them (nor she his); a user of A without rights is refused by the broker, which
the page shows; a bad form is refused with the reason and changes nothing."""

from __future__ import annotations

import re

import pytest

from console_harness import Browser, ConsoleCluster, console_cluster


@pytest.fixture(scope="module")
def cc():
    gen = console_cluster({"authorizer.class.name": "shoal"})
    cc = next(gen)
    cc.cluster.a.add_user("ann", "ann-secret", admin=True)
    cc.cluster.b.add_user("ben", "ben-secret", admin=True)
    yield cc
    for _ in gen:
        pass


def _login(cc: ConsoleCluster, user: str, password: str) -> Browser:
    b = Browser(cc.url)
    assert b.login(user, password).url.endswith("/ui/topics")
    return b


def _rows(page: str) -> list[list[str]]:
    table = page.split('id="acls"', 1)[1].split("</table>")[0] if 'id="acls"' in page else ""
    return [re.sub(r"<[^>]+>", " ", row).split() for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)][1:]


def test_a_tenant_administrator_manages_its_acls_and_sees_no_other_tenants(cc):
    ann, ben = _login(cc, "ann", "ann-secret"), _login(cc, "ben", "ben-secret")
    acl = {"permission": "ALLOW", "principal": "User:alice", "operation": "READ", "resource_type": "TOPIC",
           "pattern_type": "PREFIXED", "resource_name": "orders-"}
    r = ann.post("acls", acl)
    assert "ACL added: ALLOW User:alice READ on TOPIC orders-." in r.text
    assert ["TOPIC", "PREFIXED", "orders-", "User:alice", "*", "READ", "ALLOW", "Remove"] in _rows(r.text)
    r = ben.post("acls", {**acl, "principal": "User:bob", "operation": "WRITE", "resource_name": "ledger"})
    assert "ACL added" in r.text
    ann_page, ben_page = ann.get("acls").text, ben.get("acls").text
    assert _rows(ann_page) == [["TOPIC", "PREFIXED", "orders-", "User:alice", "*", "READ", "ALLOW", "Remove"]]
    assert _rows(ben_page) == [["TOPIC", "PREFIXED", "ledger", "User:bob", "*", "WRITE", "ALLOW", "Remove"]]
    assert "ledger" not in ann_page and "User:bob" not in ann_page and cc.cluster.b.tenant_id not in ann_page
    assert cc.cluster.a.tenant_id not in ben_page
    # bad forms: refused with the reason, nothing added
    for bad, reason in (({**acl, "principal": "alice"}, "a principal is User:"),
                        ({**acl, "operation": "FLY"}, "operation must be one of"),
                        ({**acl, "resource_name": ""}, "name the resource")):
        r = ann.post("acls", bad)
        assert f"ACL not added: {reason}" in r.text and len(_rows(r.text)) == 1
    # removing B's ACL from A's console removes nothing of B's
    r = ann.post("acls/delete", {**acl, "principal": "User:bob", "operation": "WRITE", "resource_name": "ledger"})
    assert "No such ACL" in r.text
    assert len(_rows(ben.get("acls").text)) == 1
    r = ann.post("acls/delete", acl)
    assert "ACL removed." in r.text and _rows(r.text) == []


def test_a_user_without_rights_is_refused_by_the_broker(cc):
    alice = _login(cc, "alice", cc.password("alice"))
    r = alice.get("acls")
    assert r.status_code == 502 and "CLUSTER_AUTHORIZATION_FAILED" in r.text
    r = alice.post("acls", {"permission": "ALLOW", "principal": "User:alice", "operation": "ALL",
                            "resource_type": "CLUSTER", "pattern_type": "LITERAL"})
    assert "ACL not added: CLUSTER_AUTHORIZATION_FAILED" in r.text  # then the page itself is refused again
    assert r.status_code == 502 and r.url.endswith("/ui/acls")
