"""KIP-37 namespaces, pure: names, hierarchy, delete and move plans, config inheritance and what
DescribeConfigs reports for it. Exact examples plus Hypothesis properties."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest
from hypothesis import given, strategies as st

from shoal.config import BrokerConfig, ConfigSource, describe_topic_configs, log_config
from shoal.metadata import MetadataImage, NamespaceInfo, PartitionInfo, TenantInfo, TopicInfo
from shoal.metadata import inheritance
from shoal.metadata.inheritance import namespace_of
from shoal.tenancy import namespaces as ns

TID = "lkc-abc123"
P = TID + "_"
OTHER = "lkc-zzz999"


def image(topics=(), namespaces=None, tenants=None) -> MetadataImage:
    """``topics``: physical names or (name, configs); ``namespaces``: physical name -> configs."""
    infos = {}
    for t in topics:
        name, configs = (t, {}) if isinstance(t, str) else t
        infos[name] = TopicInfo(name, uuid.uuid4(), (PartitionInfo(0, (1,), (1,), 1),), MappingProxyType(dict(configs)))
    tenants = tenants if tenants is not None else {TID: {}, OTHER: {}}
    return MetadataImage(
        cluster_id="c", controller_id=1, brokers={}, topics=infos,
        topics_by_id={t.topic_id: t for t in infos.values()}, broker_configs={},
        tenants={tid: TenantInfo(tid, tid, 0, MappingProxyType(dict(c))) for tid, c in tenants.items()},
        namespaces={n: NamespaceInfo(n, MappingProxyType(dict(c))) for n, c in (namespaces or {}).items()},
    )


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "payments:eu", "org:apache:kafka", "a.b-c_d:x", "A9"])
def test_legal_namespaces(name):
    assert ns.namespace_name_error(name) is None


@pytest.mark.parametrize("name, why", [
    ("", "can't be empty"),
    ("a::b", "empty tier"),
    (":a", "empty tier"),
    ("a:", "empty tier"),
    ("a:..", 'cannot be "." or ".."'),
    ("a/b", "character other than"),
    ("a b", "character other than"),
    ("x" * 248, "longer than 247"),
])
def test_illegal_namespaces(name, why):
    assert why in ns.namespace_name_error(name)


@pytest.mark.parametrize("name", ["orders", "payments:eu:orders", "a:b", "a.b:c_d-e", "x" * 249])
def test_legal_topics(name):
    assert ns.topic_name_error(name) is None


@pytest.mark.parametrize("name, why", [
    (None, "can't be empty"),
    ("", "can't be empty"),
    ("..", 'cannot be "." or ".."'),
    ("x" * 250, "longer than 249"),
    ("bad/name", "other than ASCII alphanumerics, '.', '_' and '-'"),  # Kafka's own message
    ("a:bad/name", "and the namespace separator ':'"),
    ("a:", "namespace separator"),
    (":t", "can't be empty"),
    ("a::t", "empty tier"),
    ("a:..", "namespace separator"),
])
def test_illegal_topics(name, why):
    assert why in ns.topic_name_error(name)


def test_prefix_shortens_the_limit():
    assert ns.topic_name_error("x" * 238, ns.MAX_TOPIC_NAME_LENGTH - len(P)) is None
    assert "longer than 238" in ns.topic_name_error("x" * 239, ns.MAX_TOPIC_NAME_LENGTH - len(P))


def test_ancestors_and_parent():
    assert ns.ancestors("org:apache:kafka") == ["org", "org:apache", "org:apache:kafka"]
    assert ns.ancestors("") == []
    assert ns.parent_of("org:apache:kafka") == "org:apache" and ns.parent_of("org") == ""
    assert namespace_of("payments:eu:orders") == "payments:eu" and namespace_of("orders") == ""


# -- hierarchy -----------------------------------------------------------------------------------


def test_children_and_topics_are_scoped():
    img = image(
        topics=[P + "a:t1", P + "a:b:t2", P + "t0", OTHER + "_a:t9", "a:phys"],
        namespaces={P + "a": {}, P + "a:b": {}, P + "a:b:c": {}, P + "z": {}, OTHER + "_a": {}, "a": {}},
    )
    assert ns.children(img, P) == ["a", "z"]
    assert ns.children(img, P, "a") == ["a:b"]
    assert ns.children(img, P, "a", recursive=True) == ["a:b", "a:b:c"]
    assert ns.children(img, P, "a:b:c") == []
    assert ns.topics_in(img, P, "a") == ["a:t1"]
    assert ns.topics_in(img, P, "a", recursive=True) == ["a:b:t2", "a:t1"]
    assert ns.topics_in(img, P, "") == ["t0"]
    # the physical view sees its own namespaces, not the tenants'
    assert ns.children(img, "") == ["a"]
    assert ns.topics_in(img, "", "a") == ["a:phys"]


def test_plan_create_lists_missing_tiers():
    img = image(namespaces={P + "org": {}})
    assert ns.plan_create(img, P, "org:apache:kafka") == [P + "org:apache", P + "org:apache:kafka"]
    assert ns.plan_create(img, P, "org") == []
    with pytest.raises(ns.NamespaceError) as e:
        ns.plan_create(img, P, "bad/ns")
    assert e.value.code == "INVALID_REQUEST"


def test_plan_delete():
    img = image(
        topics=[P + "a:t1", P + "a:b:t2", P + "t0", P + "ab:t3"],
        namespaces={P + "a": {}, P + "a:b": {}, P + "ab": {}},
    )
    with pytest.raises(ns.NamespaceError) as e:
        ns.plan_delete(img, P, "a")
    assert e.value.code == "NAMESPACE_NOT_EMPTY" and "a:b" in e.value.message
    plan = ns.plan_delete(img, P, "a", recursive=True)
    assert plan == ns.DeletePlan((P + "a", P + "a:b"), (P + "a:b:t2", P + "a:t1"))
    assert ns.plan_delete(img, P, "a:b") == ns.DeletePlan((P + "a:b",), (P + "a:b:t2",))
    for missing in ("nope", ""):
        with pytest.raises(ns.NamespaceError) as e:
            ns.plan_delete(img, P, missing)
        assert e.value.code == "RESOURCE_NOT_FOUND"


def test_plan_move():
    img = image(
        topics=[P + "a:orders", P + "b:x", P + "a:x", P + "plain", P + "b:my_t", P + "a:my.t"],
        namespaces={P + "a": {}, P + "b": {}},
    )
    assert ns.plan_move(img, P, ["a:orders"], "b") == [(P + "a:orders", P + "b:orders")]
    assert ns.plan_move(img, P, ["a:orders"], "") == [(P + "a:orders", P + "orders")]
    assert ns.plan_move(img, P, ["plain"], "a") == [(P + "plain", P + "a:plain")]
    assert ns.plan_move(img, P, ["a:orders"], "a") == []
    cases = [
        (["a:orders"], "nope", "INVALID_TOPIC_EXCEPTION"),
        (["ghost"], "b", "UNKNOWN_TOPIC_OR_PARTITION"),
        (["a:x"], "b", "TOPIC_ALREADY_EXISTS"),
        (["a:my.t"], "b", "INVALID_TOPIC_EXCEPTION"),  # collides with b:my_t
        (["a:x", "b:x"], "", "INVALID_REQUEST"),  # both would be "x"
    ]
    for topics, target, code in cases:
        with pytest.raises(ns.NamespaceError) as e:
            ns.plan_move(img, P, topics, target)
        assert e.value.code == code, (topics, target, e.value.message)
    # moving topics that swap places with each other's names is fine: a:x -> b:x while b:x -> ""
    assert ns.plan_move(img, P, ["b:x"], "") == [(P + "b:x", P + "x")]


def test_missing_namespace_error():
    img = image(namespaces={P + "a": {}})
    assert ns.missing_namespace_error(img, P + "a:t", P) is None
    assert ns.missing_namespace_error(img, P + "t", P) is None
    assert ns.missing_namespace_error(img, P + "a:b:t", P) == "Namespace 'a:b' does not exist"
    assert ns.missing_namespace_error(img, "x:t") == "Namespace 'x' does not exist"


# -- config inheritance --------------------------------------------------------------------------

BROKER = BrokerConfig.load(None, {"log.retention.hours": "24"})


def inheritance_image():
    return image(
        topics=[(P + "payments:eu:orders", {"cleanup.policy": "compact"}), (P + "plain", {}),
                ("untenanted", {"segment.ms": "5000"})],
        namespaces={
            P + "payments": {"retention.ms": "1000", "segment.bytes": "2000000", "max.message.bytes": "100"},
            P + "payments:eu": {"retention.ms": "2000"},
        },
        tenants={TID: {"retention.ms": "9", "segment.bytes": "3000000", "min.insync.replicas": "2", "flush.ms": "7777"}},
    )


def test_layers_in_precedence_order():
    img = inheritance_image()
    layers = inheritance.config_layers(img, P + "payments:eu:orders")
    assert [(l.origin, l.where) for l in layers] == [
        ("TOPIC", None), ("NAMESPACE", "payments:eu"), ("NAMESPACE", "payments"), ("TENANT_DEFAULT", None)]
    assert [l.label for l in layers] == ["TOPIC", "NAMESPACE payments:eu", "NAMESPACE payments", "TENANT_DEFAULT"]
    assert inheritance.inherited_overrides(layers) == {
        "cleanup.policy": "compact", "retention.ms": "2000", "segment.bytes": "2000000",
        "max.message.bytes": "100", "min.insync.replicas": "2", "flush.ms": "7777"}
    assert [l.origin for l in inheritance.config_layers(img, P + "plain")] == ["TOPIC", "TENANT_DEFAULT"]
    assert inheritance.topic_overrides(img, "untenanted") == {"segment.ms": "5000"}
    assert inheritance.topic_overrides(img, "ghost") == {}


def test_effective_config_names_each_origin():
    img = inheritance_image()
    eff = {e.name: e for e in ns.effective_topic_config(img, P + "payments:eu:orders", BROKER)}
    assert (eff["cleanup.policy"].value, eff["cleanup.policy"].label) == ("compact", "TOPIC")
    assert (eff["retention.ms"].value, eff["retention.ms"].label) == ("2000", "NAMESPACE payments:eu")
    assert eff["retention.ms"].layers == (
        ("NAMESPACE", "payments:eu", "2000"), ("NAMESPACE", "payments", "1000"), ("TENANT_DEFAULT", None, "9"),
        ("BROKER_STATIC", "log.retention.hours", "24"), ("DEFAULT", "log.retention.hours", "168"))
    assert (eff["segment.bytes"].value, eff["segment.bytes"].label) == ("2000000", "NAMESPACE payments")
    assert (eff["min.insync.replicas"].value, eff["min.insync.replicas"].label) == ("2", "TENANT_DEFAULT")
    assert (eff["segment.ms"].value, eff["segment.ms"].origin) == ("604800000", "DEFAULT")
    plain = {e.name: e for e in ns.effective_topic_config(img, P + "plain", BROKER)}
    # the broker value in the topic's unit, and which broker config gave it
    assert (plain["retention.ms"].value, plain["retention.ms"].label) == ("9", "TENANT_DEFAULT")
    bare = {e.name: e for e in ns.effective_topic_config(image(topics=["t"]), "t", BROKER)}
    assert (bare["retention.ms"].value, bare["retention.ms"].label) == ("86400000", "BROKER_STATIC log.retention.hours")


def test_log_config_applies_inherited_values():
    img = inheritance_image()
    cfg = log_config(BROKER, inheritance.topic_overrides(img, P + "payments:eu:orders"))
    assert cfg.retention_ms == 2000 and cfg.segment_bytes == 2000000 and cfg.max_message_bytes == 100
    assert "compact" in cfg.cleanup_policy and cfg.flush_ms == 7777


def test_describe_layered_reports_sources_clients_accept():
    img = inheritance_image()
    entries = {e.name: e for e in ns.describe_layered(BROKER, inheritance.config_layers(img, P + "payments:eu:orders"))}
    r = entries["retention.ms"]
    assert r.value == "2000" and r.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG and not r.is_default
    assert [(s.name, s.value, s.source) for s in r.synonyms] == [
        ("retention.ms", "2000", 3), ("retention.ms", "1000", 3), ("retention.ms", "9", 3),
        ("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)]
    assert r.documentation.startswith("inherited from namespace payments:eu; ")
    assert entries["min.insync.replicas"].documentation.startswith("tenant default; ")
    c = entries["cleanup.policy"]  # the topic's own value, as plain Kafka reports it
    assert c.value == "compact" and c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    plain = {e.name: e for e in describe_topic_configs(BROKER, {})}
    assert entries["segment.ms"] == plain["segment.ms"]  # nothing inherited: untouched
    assert all(int(e.source) in range(0, 9) for e in entries.values())


def test_describe_layered_of_a_namespace_and_of_nothing():
    img = inheritance_image()
    entries = {e.name: e for e in ns.describe_layered(BROKER, inheritance.namespace_layers(img, P + "payments:eu"), own="NAMESPACE")}
    # the namespace's own value is its "dynamic" config; the parent's is inherited
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [s.value for s in entries["retention.ms"].synonyms[:3]] == ["2000", "1000", "9"]
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("2000000", 3)
    assert ns.describe_layered(BROKER, []) == describe_topic_configs(BROKER, {})


def test_tenant_defaults_by_broker_names():
    assert ns.tenant_default_key("retention.ms", "5") == ("retention.ms", "5")
    assert ns.tenant_default_key("log.retention.ms", "5") == ("retention.ms", "5")
    assert ns.tenant_default_key("log.retention.hours", "2") == ("retention.ms", "7200000")
    assert ns.tenant_default_key("log.retention.hours", "-1") == ("retention.ms", "-1")
    assert ns.tenant_default_key("log.segment.bytes", None) == ("segment.bytes", None)
    for bad, code in (("num.io.threads", "POLICY_VIOLATION"), ("nonsense", "POLICY_VIOLATION")):
        with pytest.raises(ns.NamespaceError) as e:
            ns.tenant_default_key(bad, "1")
        assert e.value.code == code
    with pytest.raises(ns.NamespaceError) as e:
        ns.tenant_default_key("log.retention.hours", "x")
    assert e.value.code == "INVALID_CONFIG"
    (e,) = ns.describe_tenant_defaults({"retention.ms": "5"})
    assert (e.name, e.value, e.source) == ("retention.ms", "5", 3)
    assert [(s.name, s.value) for s in e.synonyms] == [("retention.ms", "5"), ("log.retention.ms", "5")]


# -- properties ----------------------------------------------------------------------------------

tier = st.text(alphabet="abcXY09._-", min_size=1, max_size=6).filter(lambda t: t not in (".", ".."))
namespace = st.lists(tier, min_size=1, max_size=4).map(":".join)
configs = st.dictionaries(st.sampled_from(["retention.ms", "segment.ms", "flush.ms"]),
                          st.integers(1, 10**6).map(str), max_size=3)


@given(namespace)
def test_generated_namespaces_are_legal_and_chain_up(name):
    assert ns.namespace_name_error(name) is None
    chain = ns.ancestors(name)
    assert chain[-1] == name and len(chain) == name.count(":") + 1
    assert all(ns.parent_of(b) == a for a, b in zip(chain, chain[1:]))
    assert ns.topic_name_error(name + ":t") is None


@given(st.text(max_size=12))
def test_names_never_crash_the_validators(text):
    assert ns.namespace_name_error(text) is None or isinstance(ns.namespace_name_error(text), str)
    assert ns.topic_name_error(text) is None or isinstance(ns.topic_name_error(text), str)


@given(st.lists(namespace, max_size=6, unique=True), namespace, st.booleans())
def test_recursive_delete_removes_exactly_the_subtree(existing, target, add_target):
    names = set(existing) | ({target} if add_target else set())
    closed = {a for n in names for a in ns.ancestors(n)}  # creation always makes every tier
    img = image(topics=[P + n + ":t" for n in closed], namespaces={P + n: {} for n in closed})
    if target not in closed:
        with pytest.raises(ns.NamespaceError):
            ns.plan_delete(img, P, target, recursive=True)
        return
    plan = ns.plan_delete(img, P, target, recursive=True)
    gone = {n[len(P):] for n in plan.namespaces}
    assert gone == {n for n in closed if n == target or ns.is_under(n, target)}
    assert {t[len(P):] for t in plan.topics} == {n + ":t" for n in gone}
    has_children = any(ns.is_under(n, target) for n in closed)
    if has_children:
        with pytest.raises(ns.NamespaceError):
            ns.plan_delete(img, P, target)
    else:
        assert ns.plan_delete(img, P, target) == plan


@given(st.lists(configs, min_size=1, max_size=4), configs)
def test_resolution_takes_the_highest_layer_that_sets_a_config(ns_configs, tenant):
    chain = ["n0"]
    for i in range(1, len(ns_configs)):
        chain.append(f"{chain[-1]}:n{i}")
    img = image(
        topics=[P + chain[-1] + ":t"],
        namespaces={P + n: c for n, c in zip(chain, ns_configs)},
        tenants={TID: tenant},
    )
    eff = {e.name: e for e in ns.effective_topic_config(img, P + chain[-1] + ":t", BROKER)}
    merged = inheritance.topic_overrides(img, P + chain[-1] + ":t")
    for name in ("retention.ms", "segment.ms", "flush.ms"):
        setters = [(n, c[name]) for n, c in reversed(list(zip(chain, ns_configs))) if name in c]
        if setters:
            assert (eff[name].origin, eff[name].where, eff[name].value) == ("NAMESPACE", *setters[0])
        elif name in tenant:
            assert (eff[name].origin, eff[name].value) == ("TENANT_DEFAULT", tenant[name])
        else:
            assert eff[name].origin in ("BROKER_STATIC", "DEFAULT") and name not in merged
        if name in merged:
            assert merged[name] == eff[name].value


def test_changed_config_prefixes():
    a = image(namespaces={P + "a": {"retention.ms": "1"}, P + "a:b": {}}, tenants={TID: {}, OTHER: {"flush.ms": "1"}})
    assert inheritance.changed_config_prefixes(a, a) == ()
    b = image(namespaces={P + "a": {"retention.ms": "2"}, P + "a:b": {}, P + "c": {}},
              tenants={TID: {}, OTHER: {"flush.ms": "2"}})
    assert inheritance.changed_config_prefixes(a, b) == (P + "a:", OTHER + "_")  # a new empty namespace changes nothing


@given(st.lists(st.tuples(st.sampled_from(["x", "x:y", "z"]), configs), max_size=3),
       st.lists(st.tuples(st.sampled_from(["x", "x:y", "z"]), configs), max_size=3), configs, configs)
def test_topics_outside_the_changed_prefixes_keep_their_configs(before, after, t1, t2):
    topics = [P + "x:y:t", P + "x:t", P + "z:t", P + "t", OTHER + "_x:t", "plain"]
    old = image(topics=topics, namespaces={P + n: c for n, c in before}, tenants={TID: t1, OTHER: {}})
    new = image(topics=topics, namespaces={P + n: c for n, c in after}, tenants={TID: t2, OTHER: {}})
    changed = inheritance.changed_config_prefixes(old, new)
    for t in topics:
        if not t.startswith(changed):
            assert inheritance.topic_overrides(old, t) == inheritance.topic_overrides(new, t), (t, changed)
