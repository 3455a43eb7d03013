"""The authorizer's decision (``shoal.tenancy.acl.authorize``), binding filters and binding
validation: exact examples of every rule (Kafka's operation implications, deny wins, literal /
wildcard / prefixed patterns, ``User:*`` and host ``*``, ``allow.everyone.if.no.acl.found``, the
KIP-37 namespace gate) and Hypothesis properties over small random sets of bindings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.metadata import AclEntry
from shoal.tenancy.acl import (
    SUPPORTED_OPERATIONS,
    Operation as Op,
    PatternType as Pt,
    Permission as Perm,
    ResourceType as Rt,
    authorize,
    binding_error,
    binding_matches_filter,
    filter_error,
    format_entry,
    format_pattern,
    pattern_matches,
)
from shoal.metadata.inheritance import namespace_chain, namespace_of

ALICE, BOB, ANYONE = "User:alice", "User:bob", "User:*"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"
CONCRETE_OPS = [op for op in Op if op not in (Op.UNKNOWN, Op.ANY)]


def acl(rt=Rt.TOPIC, name="orders", op=Op.READ, perm=Perm.ALLOW, principal=ALICE, host="*", pt=Pt.LITERAL,
        tenant=None) -> AclEntry:
    return AclEntry(tenant, int(rt), name, int(pt), principal, host, int(op), int(perm))


def can(acls, op=Op.READ, rt=Rt.TOPIC, name="orders", principal=ALICE, host=HOST, allow_if_no_acls=False) -> bool:
    return authorize(acls, principal, host, op, rt, name, allow_if_no_acls=allow_if_no_acls)


# -- operations and their implications (Kafka's AclOperation javadoc) ----------------------------

# The ALLOWed operations that grant each asked operation.
GRANTED_BY = {op: {op, Op.ALL} for op in CONCRETE_OPS}
GRANTED_BY[Op.DESCRIBE] = {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}
GRANTED_BY[Op.DESCRIBE_CONFIGS] = {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}


@pytest.mark.parametrize("asked", CONCRETE_OPS, ids=lambda o: o.name)
def test_allow_implications(asked):
    granting = {held for held in CONCRETE_OPS if can([acl(op=held)], op=asked)}
    assert granting == GRANTED_BY[asked]


@pytest.mark.parametrize("asked", CONCRETE_OPS, ids=lambda o: o.name)
def test_deny_implies_nothing_but_all(asked):
    # An ALLOW ALL is in place; only a DENY of the asked operation itself or of ALL takes it away.
    denying = {held for held in CONCRETE_OPS if not can([acl(op=Op.ALL), acl(op=held, perm=Perm.DENY)], op=asked)}
    assert denying == {asked, Op.ALL}


def test_deny_of_read_leaves_describe_granted_by_read():
    acls = [acl(op=Op.READ), acl(op=Op.READ, perm=Perm.DENY)]
    assert not can(acls, op=Op.READ)
    assert can(acls, op=Op.DESCRIBE)  # the ALLOW READ still implies DESCRIBE; the DENY does not reach it


# -- deny wins ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deny",
    [
        acl(perm=Perm.DENY),
        acl(perm=Perm.DENY, name="*"),
        acl(perm=Perm.DENY, name="ord", pt=Pt.PREFIXED),
        acl(perm=Perm.DENY, principal=ANYONE),
        acl(perm=Perm.DENY, host=HOST),
        acl(perm=Perm.DENY, op=Op.ALL),
    ],
    ids=["literal", "wildcard", "prefixed", "any-principal", "this-host", "all-ops"],
)
def test_a_matching_deny_beats_any_allow(deny):
    allows = [acl(), acl(op=Op.ALL), acl(name="*"), acl(name="o", pt=Pt.PREFIXED), acl(principal=ANYONE)]
    assert can(allows)
    for order in (allows + [deny], [deny] + allows):
        assert not can(order)
        assert not can(order, allow_if_no_acls=True)


def test_a_deny_that_does_not_match_the_request_leaves_it_allowed():
    for deny in (
        acl(perm=Perm.DENY, principal=BOB),
        acl(perm=Perm.DENY, host=OTHER_HOST),
        acl(perm=Perm.DENY, op=Op.WRITE),
        acl(perm=Perm.DENY, name="orders2"),
        acl(perm=Perm.DENY, name="orders2", pt=Pt.PREFIXED),
        acl(perm=Perm.DENY, rt=Rt.GROUP),
    ):
        assert can([acl(), deny]), deny


# -- patterns, principals, hosts --------------------------------------------------------------


@pytest.mark.parametrize(
    "pt,pattern,name,matches",
    [
        (Pt.LITERAL, "orders", "orders", True),
        (Pt.LITERAL, "orders", "orders2", False),
        (Pt.LITERAL, "orders", "order", False),
        (Pt.LITERAL, "*", "orders", True),
        (Pt.LITERAL, "*", "*", True),
        (Pt.PREFIXED, "ord", "orders", True),
        (Pt.PREFIXED, "orders", "orders", True),  # a prefix of itself
        (Pt.PREFIXED, "orders-", "orders", False),
        (Pt.PREFIXED, "*", "orders", False),  # PREFIXED * is not a wildcard
        (Pt.PREFIXED, "Ord", "orders", False),  # case-sensitive
        (Pt.MATCH, "orders", "orders", False),  # never stored: matches nothing
        (Pt.ANY, "orders", "orders", False),
    ],
)
def test_pattern_matches(pt, pattern, name, matches):
    assert pattern_matches(pt, pattern, name) is matches
    assert can([acl(name=pattern, pt=pt)], name=name) is matches


def test_a_binding_applies_only_to_its_resource_type():
    assert not can([acl(rt=Rt.GROUP)], rt=Rt.TOPIC)
    assert can([acl(rt=Rt.GROUP)], rt=Rt.GROUP)
    assert not can([acl(rt=Rt.TRANSACTIONAL_ID, op=Op.WRITE)], rt=Rt.TOPIC, op=Op.WRITE)


def test_principals_and_hosts():
    assert can([acl(principal=ANYONE)])
    assert can([acl(principal=ANYONE)], principal=BOB)
    assert not can([acl(principal=BOB)])
    assert not can([acl(principal="Group:alice")])  # the principal type is part of the name
    assert can([acl(host=HOST)])
    assert not can([acl(host=HOST)], host=OTHER_HOST)
    assert can([acl(host="*")], host=OTHER_HOST)


# -- allow.everyone.if.no.acl.found -------------------------------------------------------------


def test_allow_everyone_if_no_acl_found():
    assert not can([])
    assert can([], allow_if_no_acls=True)
    # bindings elsewhere do not count
    assert can([acl(name="other"), acl(rt=Rt.GROUP), acl(name="x", pt=Pt.PREFIXED)], allow_if_no_acls=True)
    # any binding on the resource, for anyone, turns the default off: Kafka's rule
    assert not can([acl(principal=BOB)], allow_if_no_acls=True)
    assert not can([acl(op=Op.WRITE)], allow_if_no_acls=True)
    assert not can([acl(name="ord", pt=Pt.PREFIXED, principal=BOB)], allow_if_no_acls=True)
    assert not can([acl(name="*", principal=BOB, perm=Perm.DENY)], allow_if_no_acls=True)


# -- KIP-37 namespace gate ----------------------------------------------------------------------

TOPIC = "payments:eu:orders"


def ns(name="payments", op=Op.READ, perm=Perm.ALLOW, principal=ALICE, pt=Pt.LITERAL, host="*") -> AclEntry:
    return acl(rt=Rt.NAMESPACE, name=name, op=op, perm=perm, principal=principal, pt=pt, host=host)


def test_namespace_of_and_chain():
    assert namespace_of(TOPIC) == "payments:eu"
    assert namespace_of("orders") == ""
    assert namespace_chain("payments:eu") == ["payments", "payments:eu"]
    assert namespace_chain("") == []


def test_deny_on_a_parent_namespace_beats_allow_on_the_topic():
    topic_allow = acl(name=TOPIC)
    assert can([topic_allow], name=TOPIC)
    for deny in (ns(perm=Perm.DENY), ns("payments:eu", perm=Perm.DENY), ns(perm=Perm.DENY, op=Op.ALL),
                 ns("pay", perm=Perm.DENY, pt=Pt.PREFIXED), ns("*", perm=Perm.DENY, principal=ANYONE)):
        assert not can([topic_allow, deny], name=TOPIC), deny
        assert not can([deny, topic_allow, ns("payments:eu")], name=TOPIC), deny


def test_namespace_allow_grants_its_topics_and_groups():
    for grant in (ns(), ns("payments:eu"), ns("pay", pt=Pt.PREFIXED), ns("*"), ns(principal=ANYONE), ns(op=Op.ALL)):
        assert can([grant], name=TOPIC), grant
        assert can([grant], rt=Rt.GROUP, name="payments:eu:consumers"), grant
    # the allow's implications hold through the namespace
    assert can([ns(op=Op.WRITE)], name=TOPIC, op=Op.DESCRIBE)
    # even when the topic has bindings of its own that do not grant it
    assert can([ns(), acl(name=TOPIC, principal=BOB)], name=TOPIC)


def test_namespace_bindings_without_an_allow_for_the_caller_deny():
    # a namespace that has bindings for the operation gates its entities: no namespace ALLOW, no access
    for other in (ns(principal=BOB), ns(host=OTHER_HOST), ns("payments:eu", principal=BOB)):
        assert not can([other, acl(name=TOPIC)], name=TOPIC), other
        assert not can([other], name=TOPIC, allow_if_no_acls=True), other


def test_namespace_bindings_that_cannot_decide_the_operation_do_not_gate_it():
    topic_allow = acl(name=TOPIC)
    assert can([ns(op=Op.WRITE, principal=BOB), topic_allow], name=TOPIC)  # WRITE does not grant READ
    assert can([ns(op=Op.READ, principal=BOB, perm=Perm.DENY), acl(name=TOPIC, op=Op.DESCRIBE)], name=TOPIC,
               op=Op.DESCRIBE)  # a DENY of READ says nothing about DESCRIBE
    assert can([ns(op=Op.WRITE, principal=BOB)], name=TOPIC, allow_if_no_acls=True)


def test_namespace_bindings_cover_only_their_subtree():
    topic_allow = acl(name=TOPIC)
    for unrelated in (ns("payments:e", principal=BOB), ns("payments:eu:orders", principal=BOB),
                      ns("billing", perm=Perm.DENY), ns("payments:us", perm=Perm.DENY)):
        assert can([unrelated, topic_allow], name=TOPIC), unrelated
    # topics outside any namespace and transactional ids are never gated
    assert can([ns("*", perm=Perm.DENY, op=Op.ALL), acl()], name="orders")
    assert can([ns("*", perm=Perm.DENY, op=Op.ALL), acl(rt=Rt.TRANSACTIONAL_ID, name=TOPIC, op=Op.WRITE)],
               rt=Rt.TRANSACTIONAL_ID, name=TOPIC, op=Op.WRITE)


def test_namespace_resource_itself_is_covered_by_its_parents():
    assert can([ns("payments", op=Op.CREATE)], rt=Rt.NAMESPACE, name="payments:eu", op=Op.CREATE)
    assert not can([ns("payments:eu", op=Op.CREATE)], rt=Rt.NAMESPACE, name="payments", op=Op.CREATE)
    assert not can([ns("payments", op=Op.ALL), ns("payments:eu", perm=Perm.DENY, op=Op.DELETE)],
                   rt=Rt.NAMESPACE, name="payments:eu:x", op=Op.DELETE)


# -- filters (DescribeAcls / DeleteAcls) --------------------------------------------------------


def matches(a, rt=Rt.ANY, name=None, pt=Pt.ANY, principal=None, host=None, op=Op.ANY, perm=Perm.ANY) -> bool:
    return binding_matches_filter(a, rt, name, pt, principal, host, op, perm)


def test_filter_any_matches_every_standard_binding_but_not_namespace_ones():
    for a in (acl(), acl(rt=Rt.GROUP, pt=Pt.PREFIXED), acl(rt=Rt.CLUSTER, name="kafka-cluster", op=Op.ALTER)):
        assert matches(a)
    assert not matches(ns())
    assert matches(ns(), rt=Rt.NAMESPACE)
    assert not matches(acl(), rt=Rt.NAMESPACE)
    assert not matches(acl(), rt=Rt.GROUP)


def test_filter_fields():
    a = acl(name="orders", principal=ALICE, host=HOST, op=Op.WRITE, perm=Perm.DENY)
    assert matches(a, principal=ALICE) and not matches(a, principal=ANYONE)  # no wildcard semantics
    assert matches(a, host=HOST) and not matches(a, host="*")
    assert matches(a, op=Op.WRITE) and not matches(a, op=Op.ALL)
    assert matches(a, perm=Perm.DENY) and not matches(a, perm=Perm.ALLOW)
    assert matches(a, name="orders") and not matches(a, name="order")


def test_filter_pattern_types():
    literal, star, prefixed = acl(name="orders"), acl(name="*"), acl(name="ord", pt=Pt.PREFIXED)
    both = (literal, star, prefixed)
    assert [matches(a, rt=Rt.TOPIC, name="orders", pt=Pt.LITERAL) for a in both] == [True, False, False]
    assert [matches(a, rt=Rt.TOPIC, name="ord", pt=Pt.PREFIXED) for a in both] == [False, False, True]
    assert [matches(a, rt=Rt.TOPIC, name="orders", pt=Pt.ANY) for a in both] == [True, False, False]
    assert [matches(a, rt=Rt.TOPIC, name="ord", pt=Pt.ANY) for a in both] == [False, False, True]
    assert [matches(a, rt=Rt.TOPIC, name="orders", pt=Pt.MATCH) for a in both] == [True, True, True]
    assert [matches(a, rt=Rt.TOPIC, name="ordinal", pt=Pt.MATCH) for a in both] == [False, True, True]
    assert [matches(a, rt=Rt.TOPIC, name=None, pt=Pt.MATCH) for a in both] == [True, True, True]
    assert [matches(a, rt=Rt.TOPIC, name=None, pt=Pt.LITERAL) for a in both] == [True, True, False]
    # MATCH on a namespace: the bindings of the namespace and of those above it
    assert [matches(n, rt=Rt.NAMESPACE, name="payments:eu", pt=Pt.MATCH)
            for n in (ns("payments"), ns("payments:eu"), ns("payments:e"), ns("pay", pt=Pt.PREFIXED),
                      ns("payments:eu:x"))] == [True, True, False, True, False]


# -- validation -----------------------------------------------------------------------------------


def error(rt=Rt.TOPIC, name="orders", pt=Pt.LITERAL, principal=ALICE, host="*", op=Op.READ, perm=Perm.ALLOW):
    return binding_error(AclEntry(None, rt, name, pt, principal, host, op, perm))


def test_valid_bindings():
    assert error() is None
    assert error(name="*") is None
    assert error(pt=Pt.PREFIXED, name="ord") is None
    assert error(rt=Rt.CLUSTER, name="kafka-cluster", op=Op.IDEMPOTENT_WRITE) is None
    assert error(rt=Rt.NAMESPACE, name="payments:eu", op=Op.ALL, perm=Perm.DENY) is None
    assert error(principal="User:*", host="10.1.2.3") is None
    for rt, ops in SUPPORTED_OPERATIONS.items():
        name = "kafka-cluster" if rt == Rt.CLUSTER else "r"
        assert all(error(rt=rt, name=name, op=op) is None for op in ops | {Op.ALL})
        refused = set(CONCRETE_OPS) - ops - {Op.ALL}
        assert all("not supported" in error(rt=rt, name=name, op=op) for op in refused)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(rt=Rt.UNKNOWN), "Invalid resource type UNKNOWN"),
        (dict(rt=Rt.ANY), "Invalid resource type ANY"),
        (dict(rt=42), "Invalid resource type 42"),
        (dict(pt=Pt.MATCH), "Invalid pattern type MATCH"),
        (dict(pt=Pt.ANY), "Invalid pattern type ANY"),
        (dict(pt=Pt.UNKNOWN), "Invalid pattern type UNKNOWN"),
        (dict(op=Op.ANY), "Operation ANY is not supported for resource type TOPIC"),
        (dict(op=Op.UNKNOWN), "Operation UNKNOWN is not supported"),
        (dict(op=99), "Operation 99 is not supported"),
        (dict(rt=Rt.GROUP, op=Op.WRITE), "Operation WRITE is not supported for resource type GROUP"),
        (dict(perm=Perm.ANY), "Invalid permission type ANY"),
        (dict(perm=Perm.UNKNOWN), "Invalid permission type UNKNOWN"),
        (dict(name=""), "Resource name should not be empty"),
        (dict(rt=Rt.CLUSTER, name="c", op=Op.ALTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (dict(pt=Pt.PREFIXED, name="*"), "A PREFIXED pattern cannot name the wildcard"),
        (dict(principal="alice"), "Could not parse principal 'alice'"),
        (dict(principal="User:"), "Could not parse principal"),
        (dict(principal=":alice"), "Could not parse principal"),
        (dict(host=""), "Host should not be empty"),
    ],
)
def test_invalid_bindings(kwargs, message):
    assert message in error(**kwargs)


def test_filter_validation():
    assert filter_error(Rt.ANY, Pt.ANY, Op.ANY, Perm.ANY) is None
    assert filter_error(Rt.NAMESPACE, Pt.MATCH, Op.READ, Perm.DENY) is None
    assert filter_error(Rt.UNKNOWN, Pt.ANY, Op.ANY, Perm.ANY) == "Invalid resource type UNKNOWN in the filter"
    assert filter_error(Rt.ANY, 9, Op.ANY, Perm.ANY) == "Invalid pattern type 9 in the filter"
    assert filter_error(Rt.ANY, Pt.ANY, Op.UNKNOWN, Perm.ANY) == "Invalid operation UNKNOWN in the filter"
    assert filter_error(Rt.ANY, Pt.ANY, Op.ANY, -1) == "Invalid permission type -1 in the filter"


def test_formats_are_kafkas():
    assert format_pattern(Rt.TOPIC, "orders", Pt.PREFIXED) == (
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)")
    assert format_entry(ALICE, "*", Op.DESCRIBE_CONFIGS, Perm.DENY) == (
        "(principal=User:alice, host=*, operation=DESCRIBE_CONFIGS, permissionType=DENY)")


# -- properties -----------------------------------------------------------------------------------

NAMES = ["orders", "ord", "*", "payments", "payments:eu", "payments:eu:orders", "payments:e", "pay"]
ENTITY_NAMES = ["orders", "payments:eu:orders", "payments:eu", "pay"]
TYPES = [Rt.TOPIC, Rt.GROUP, Rt.TRANSACTIONAL_ID, Rt.NAMESPACE]

bindings = st.builds(
    acl,
    rt=st.sampled_from(TYPES),
    name=st.sampled_from(NAMES),
    op=st.sampled_from(CONCRETE_OPS),
    perm=st.sampled_from([Perm.ALLOW, Perm.DENY]),
    principal=st.sampled_from([ALICE, BOB, ANYONE]),
    host=st.sampled_from(["*", HOST, OTHER_HOST]),
    pt=st.sampled_from([Pt.LITERAL, Pt.PREFIXED]),
)
requests = st.fixed_dictionaries({
    "op": st.sampled_from(CONCRETE_OPS),
    "rt": st.sampled_from([Rt.TOPIC, Rt.GROUP, Rt.TRANSACTIONAL_ID]),
    "name": st.sampled_from(ENTITY_NAMES),
    "host": st.sampled_from([HOST, OTHER_HOST]),
    "allow_if_no_acls": st.booleans(),
})
acl_lists = st.lists(bindings, max_size=8)


@given(acl_lists, bindings, requests)
def test_adding_a_deny_never_turns_deny_into_allow(acls, extra, req):
    deny = acl(Rt(extra.resource_type), extra.resource_name, Op(extra.operation), Perm.DENY, extra.principal,
               extra.host, Pt(extra.pattern_type))
    if not can(acls, **req):
        assert not can(acls + [deny], **req)


@given(acl_lists, requests, st.sampled_from([ALICE, ANYONE]), st.sampled_from(["*", "exact"]),
       st.sampled_from(["literal", "wildcard", "prefix"]), st.sampled_from(["entity", "namespace"]))
def test_a_deny_of_all_that_matches_always_denies(acls, req, principal, host, how, where):
    name = req["name"]
    if where == "namespace":
        parents = namespace_chain(namespace_of(name))
        if req["rt"] not in (Rt.TOPIC, Rt.GROUP) or not parents:
            return
        rt, target = Rt.NAMESPACE, parents[0]
    else:
        rt, target = req["rt"], name
    pattern = {"literal": (target, Pt.LITERAL), "wildcard": ("*", Pt.LITERAL), "prefix": (target[:2], Pt.PREFIXED)}
    pname, pt = pattern[how]
    deny = acl(rt, pname, Op.ALL, Perm.DENY, principal, req["host"] if host == "exact" else "*", pt)
    assert not can(acls + [deny], **req)
    assert not can([deny] + acls, **req)


@given(acl_lists, requests, st.sampled_from(["entity", "namespace"]))
def test_adding_an_allow_that_grants_the_request_never_turns_allow_into_deny(acls, req, where):
    if where == "namespace" and req["rt"] in (Rt.TOPIC, Rt.GROUP) and namespace_of(req["name"]):
        grant = acl(Rt.NAMESPACE, namespace_of(req["name"]), req["op"], Perm.ALLOW, ALICE, "*")
    else:
        grant = acl(req["rt"], req["name"], req["op"], Perm.ALLOW, ALICE, "*")
    if can(acls, **req):
        assert can(acls + [grant], **req)


@given(acl_lists, bindings, requests)
def test_without_namespace_bindings_and_default_allow_an_allow_never_turns_allow_into_deny(acls, extra, req):
    # (With them it can: a namespace ALLOW for someone else gates the namespace's topics, and any
    # binding on a resource turns allow.everyone.if.no.acl.found off for it, as in Kafka.)
    acls = [a for a in acls if a.resource_type != Rt.NAMESPACE]
    if extra.resource_type == Rt.NAMESPACE:
        return
    allow = acl(Rt(extra.resource_type), extra.resource_name, Op(extra.operation), Perm.ALLOW, extra.principal,
                extra.host, Pt(extra.pattern_type))
    req = {**req, "allow_if_no_acls": False}
    if can(acls, **req):
        assert can(acls + [allow], **req)


@given(acl_lists, requests, st.randoms(use_true_random=False))
def test_the_decision_does_not_depend_on_binding_order(acls, req, rnd):
    shuffled = list(acls)
    rnd.shuffle(shuffled)
    assert can(shuffled, **req) == can(acls, **req) == can(acls[::-1], **req)


@given(acl_lists, requests)
def test_bindings_of_other_types_do_not_matter(acls, req):
    # Only bindings of the resource's own type, and NAMESPACE ones for topics and groups, count.
    counted = {req["rt"]} | ({Rt.NAMESPACE} if req["rt"] in (Rt.TOPIC, Rt.GROUP) else set())
    relevant = [a for a in acls if a.resource_type in counted]
    assert can(acls, **req) == can(relevant, **req)


@given(acl_lists, requests)
def test_the_allow_everyone_default_only_widens(acls, req):
    strict = can(acls, **{**req, "allow_if_no_acls": False})
    assert not strict or can(acls, **{**req, "allow_if_no_acls": True})


@given(bindings, st.sampled_from(ENTITY_NAMES))
def test_match_filter_selects_exactly_the_bindings_that_apply(a, name):
    """A MATCH filter on a name returns a binding iff the authorizer would consult it for that name."""
    rt = Rt(a.resource_type)
    if rt == Rt.NAMESPACE:
        # a namespace binding applies to the namespace's whole subtree
        applies = can([acl(Rt.NAMESPACE, a.resource_name, Op.ALL, Perm.ALLOW, ALICE, "*", Pt(a.pattern_type))],
                      rt=Rt.NAMESPACE, name=name)
    else:
        applies = pattern_matches(a.pattern_type, a.resource_name, name)
    assert matches(a, rt=rt, name=name, pt=Pt.MATCH) == applies

