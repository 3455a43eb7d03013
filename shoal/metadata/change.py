"""A metadata change as a value: what one decision changes, section by section.

KRaft's control managers answer ``ControllerResult(records, response)``; here a decision
(``shoal.metadata.rules``) answers a ``Result(change, response)``: the ``Change`` a backend commits
(and persists as ``Change.to_json()``), and what the caller gets back once it is committed.
"""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType
from typing import Any, Callable, Generic, Mapping, TypeVar

from shoal.metadata import (
    AclEntry,
    BrokerInfo,
    FinalizedFeatures,
    IdentityPool,
    MetadataImage,
    NamespaceInfo,
    QuotaEntity,
    ScramCredential,
    TenantInfo,
    TopicInfo,
    TopicsDelta,
)
from shoal.metadata import codec

T = TypeVar("T")


def _copy(section: Mapping[Any, Any]) -> dict[Any, Any]:
    """A dict copy of an image section: the copy of its dict when it wraps one (a table copy,
    keys not hashed again: uuid.UUID hashes in Python), else built item by item."""
    out = section.copy() if isinstance(section, (dict, MappingProxyType)) else None
    return out if isinstance(out, dict) else dict(section)


def _patched(section: Mapping[Any, Any], changes: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """``section`` with ``changes`` (key -> value, None: removed); itself when there are none."""
    if not changes:
        return section
    out = _copy(section)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return MappingProxyType(out)


@dataclasses.dataclass
class Change:
    """What one mutation changes, section by section: key -> new value, ``None`` for a removal
    (``tenant_admins``: user -> admin or not; ``broker_configs`` replaces them all). ``apply``
    makes the next image, sharing every section and entry it does not touch; ``to_json`` is the
    record a backend persists (the embedded journal's line, which its ``_replay`` applies to a
    snapshot document).

    A change is decided against one image (``shoal.metadata.rules``) and is only meaningful
    applied to that image: a backend commits it if its current image is still that one (same
    ``epoch``), else the caller decides again. ``apply`` is pure (it never changes the change)
    and a backend applies a change once; a backend that persists a change persists
    ``settle(image)`` of it, which adds the former names the change makes stale to
    ``renamed_topics`` as removals, so a replay of the record drops them too."""

    brokers: dict[int, BrokerInfo] = dataclasses.field(default_factory=dict)  # ephemeral
    broker_configs: Mapping[str, str] | None = None
    broker_overrides: dict[int, Mapping[str, str] | None] = dataclasses.field(default_factory=dict)
    topics: dict[str, TopicInfo | None] = dataclasses.field(default_factory=dict)
    scram_credentials: dict[str, Mapping[str, ScramCredential] | None] = dataclasses.field(default_factory=dict)
    tenants: dict[str, TenantInfo | None] = dataclasses.field(default_factory=dict)
    user_tenants: dict[str, str | None] = dataclasses.field(default_factory=dict)
    tenant_admins: dict[str, bool] = dataclasses.field(default_factory=dict)
    namespaces: dict[str, NamespaceInfo | None] = dataclasses.field(default_factory=dict)
    identity_pools: dict[str, IdentityPool | None] = dataclasses.field(default_factory=dict)
    acls_removed: set[AclEntry] = dataclasses.field(default_factory=set)
    acls_added: list[AclEntry] = dataclasses.field(default_factory=list)
    client_quotas: dict[QuotaEntity, Mapping[str, float] | None] = dataclasses.field(default_factory=dict)
    renamed_topics: dict[str, uuid.UUID | None] = dataclasses.field(default_factory=dict)
    next_producer_id: int | None = None  # a producer id block was given out below this
    features: FinalizedFeatures | None = None  # the finalized feature levels, all of them

    def settle(self, old: MetadataImage) -> "Change":
        """This change with the former names it makes stale (their topic went, or a topic takes
        the name again) added to ``renamed_topics`` as removals; itself when there are none.
        Pure, and cheap: it looks only at the topics the change names and the former names."""
        if not self.topics:
            return self
        changed = self.topics
        added_ids = {t.topic_id for t in changed.values() if t is not None}
        gone_ids = set()
        for name in changed:
            prev = old.topics.get(name)
            if prev is not None and old.topics_by_id.get(prev.topic_id) is prev:
                gone_ids.add(prev.topic_id)

        def stale(name: str, topic_id: uuid.UUID) -> bool:
            named = changed[name] is not None if name in changed else name in old.topics
            alive = topic_id in added_ids or (topic_id in old.topics_by_id and topic_id not in gone_ids)
            return named or not alive

        current = _patched(old.renamed_topics, self.renamed_topics)
        drop = {n: None for n, i in current.items() if stale(n, i)}
        if not drop:
            return self
        return dataclasses.replace(self, renamed_topics={**self.renamed_topics, **drop})

    def apply(self, old: MetadataImage) -> MetadataImage:
        """The image after this change, ``epoch + 1``. Former names that no longer name their
        topic (it went, or a topic took the name again) are dropped (``settle``)."""
        topics, by_id, delta = old.topics, old.topics_by_id, old.topics_delta
        renamed = self.renamed_topics
        if self.topics:
            topics = _patched(old.topics, self.topics)
            delta = TopicsDelta(old.topics, topics, frozenset(self.topics))
            ids: dict[uuid.UUID, TopicInfo] = _copy(old.topics_by_id)
            for name in self.topics:
                prev = old.topics.get(name)
                if prev is not None and ids.get(prev.topic_id) is prev:
                    del ids[prev.topic_id]
            ids.update((t.topic_id, t) for t in self.topics.values() if t is not None)
            by_id = MappingProxyType(ids)
            renamed = self.settle(old).renamed_topics
        admins = old.tenant_admins
        if self.tenant_admins:
            admins = (admins | {u for u, a in self.tenant_admins.items() if a}) - {
                u for u, a in self.tenant_admins.items() if not a
            }
        acls = old.acls
        if self.acls_removed or self.acls_added:
            kept = [a for a in old.acls if a not in self.acls_removed]
            present = set(kept)
            for a in self.acls_added:
                if a not in present:
                    kept.append(a)
                    present.add(a)
            acls = tuple(kept)
        return dataclasses.replace(
            old,
            epoch=old.epoch + 1,
            brokers=_patched(old.brokers, self.brokers),
            topics=topics,
            topics_by_id=by_id,
            topics_delta=delta,
            broker_configs=old.broker_configs if self.broker_configs is None
            else MappingProxyType(dict(self.broker_configs)),
            scram_credentials=_patched(old.scram_credentials, self.scram_credentials),
            tenants=_patched(old.tenants, self.tenants),
            user_tenants=_patched(old.user_tenants, self.user_tenants),
            tenant_admins=admins,
            namespaces=_patched(old.namespaces, self.namespaces),
            identity_pools=_patched(old.identity_pools, self.identity_pools),
            broker_overrides=_patched(old.broker_overrides, self.broker_overrides),
            acls=acls,
            client_quotas=_patched(old.client_quotas, self.client_quotas),
            renamed_topics=_patched(old.renamed_topics, renamed),
            next_producer_id=old.next_producer_id if self.next_producer_id is None else self.next_producer_id,
            features=old.features if self.features is None else self.features,
        )

    def to_json(self) -> dict[str, object]:
        """The persisted part (brokers are ephemeral), only the sections that change."""
        rec: dict[str, object] = {}
        if self.next_producer_id is not None:
            rec["next_producer_id"] = self.next_producer_id
        if self.broker_configs is not None:
            rec["broker_configs"] = dict(sorted(self.broker_configs.items()))
        if self.features is not None:
            rec["features"] = codec.features_to_json(self.features)
        sections: tuple[tuple[str, Mapping[Any, Any], Callable[[Any], object]], ...] = (
            ("topics", self.topics, codec.topic_to_json),
            ("scram_credentials", self.scram_credentials, codec.user_credentials_to_json),
            ("tenants", self.tenants, codec.tenant_to_json),
            ("user_tenants", self.user_tenants, str),
            ("namespaces", self.namespaces, lambda ns: dict(sorted(ns.configs.items()))),
            ("identity_pools", self.identity_pools, codec.identity_pool_to_json),
            ("renamed_topics", self.renamed_topics, str),
            ("broker_overrides", self.broker_overrides, lambda v: dict(sorted(v.items()))),
        )
        for key, changes, to_json in sections:
            if changes:
                rec[key] = {k: None if v is None else to_json(v) for k, v in changes.items()}
        if self.tenant_admins:
            rec["tenant_admins"] = dict(self.tenant_admins)
        if self.acls_removed:
            rec["acls_removed"] = [codec.acl_to_json(a) for a in self.acls_removed]
        if self.acls_added:
            rec["acls_added"] = [codec.acl_to_json(a) for a in self.acls_added]
        if self.client_quotas:
            rec["client_quotas"] = [
                [[list(e) for e in entity], None if v is None else dict(sorted(v.items()))]
                for entity, v in self.client_quotas.items()
            ]
        return rec



@dataclasses.dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """What a decision answers: the change to commit (None: nothing to change, the state already
    is what the command asks for) and the response the caller gets once it is committed."""

    change: Change | None
    response: T


def unchanged(response: T) -> Result[T]:
    """The answer of a command that finds nothing to change."""
    return Result(None, response)
