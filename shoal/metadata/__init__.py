"""The cluster's durable state behind one interface.

Reads go to an immutable ``MetadataImage`` (a snapshot, like KRaft's MetadataImage): handlers read
it synchronously and never see a half-applied change. Writes are async methods that return when
the change is durable and the new image is published; listeners are told of each new image.

Writes are decided by pure rules (``shoal.metadata.rules``: image + command -> change) and
committed by a backend by compare-and-swap (``shoal.metadata.store``). Backends: ``embedded``
(single node, a local file store, no etcd) now; ``etcd`` (the quorum of a multi-node cluster)
later, behind the same interface. Nothing here assumes a single node: every
partition has replicas, an ISR, a leader and a leader epoch.
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Container, Iterable, Mapping, Sequence, TypeVar

if TYPE_CHECKING:
    from shoal.metadata.change import Result

_T = TypeVar("_T")


class MetadataError(Exception):
    """A mutation the store refuses; ``code`` is the Kafka error code name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # (listener name, host, port) per advertised listener; host/port above are the first one.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # (feature, min level, max level) this broker's release supports (shoal.metadata.features)
    features: tuple[tuple[str, int, int], ...] = ()
    # broker.host: the machine it runs on (shoal serve --processes runs several per host); "" when
    # not given, then the advertised host stands for it (``machine``).
    host_id: str = ""

    @property
    def machine(self) -> str:
        """The host placement spreads replicas over: ``broker.host``, else the advertised host."""
        return self.host_id or self.host

    def endpoint(self, listener: str) -> tuple[str, int]:
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1 when there is none
    leader_epoch: int = 0
    partition_epoch: int = 0
    # An ongoing reassignment (KIP-455; KRaft's PartitionRegistration addingReplicas /
    # removingReplicas): ``replicas`` is then target + the current replicas not in it.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # Observers (the multi-region document; ``replica.placement``): replicas that replicate
    # asynchronously, at the end of ``replicas``; never in the ISR, never leader.
    observers: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def sync_replicas(self) -> tuple[int, ...]:
        """The replicas that may be in the ISR and lead (all but the observers)."""
        if not self.observers:
            return self.replicas
        return tuple(r for r in self.replicas if r not in self.observers)


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's ISR change as its leader proposes it (an item of Kafka's AlterPartition):
    fenced by the leader epoch and the partition epoch it was decided on. ``min_isr``: the leader's
    ``min.insync.replicas``, given for an observer promotion only."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    min_isr: int | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)  # only the topic's own overrides
    internal: bool = False

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def frozen_topic(
    *,
    name: str,
    topic_id: uuid.UUID,
    partitions: tuple[PartitionInfo, ...],
    configs: Mapping[str, str],
    internal: bool,
) -> TopicInfo:
    """A ``TopicInfo`` as images hold it: its configs in a read-only copy."""
    return TopicInfo(
        name=name,
        topic_id=topic_id,
        partitions=partitions,
        configs=MappingProxyType(dict(configs)),
        internal=internal,
    )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A SCRAM credential (auth): salted hashes only, never the password."""

    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


_NO_CREDENTIALS: Mapping[str, Mapping[str, ScramCredential]] = MappingProxyType({})


# -- tenants: logical clusters -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """A tenant (logical cluster): ``tenant_id`` is ``lkc-`` + 6 random lowercase base36 chars."""

    tenant_id: str
    display_name: str
    created_ms: int
    # The tenant's own defaults for topic configs (``retention.ms`` ...): below namespaces, above
    # the broker. Keys are topic config names.
    configs: Mapping[str, str] = field(default_factory=dict)
    # Create-topic policy (KIP-108 style), see ``shoal.tenancy.policy``; JSON-able values only.
    policy: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IdentityPool:
    """An OAuth identity pool (SASL/OAUTHBEARER): a token from ``issuer`` whose claims pass
    ``claim_filter`` authenticates as a principal of ``tenant_id`` named by its
    ``principal_claim``. ``pool_id`` is ``pool-`` + 6 random lowercase base36 chars. The rules
    (filter shapes, matching) are ``shoal.tenancy.identity_pools``'s."""

    pool_id: str
    tenant_id: str
    issuer: str
    # {} (every token of the issuer), {"claim": C, "equals": V} or {"claim": C, "contains": V}
    claim_filter: Mapping[str, str] = field(default_factory=dict)
    principal_claim: str = "sub"
    display_name: str = ""


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """A KIP-37 namespace (``payments:eu``); ``name`` is physical (tenant-qualified)."""

    name: str
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL binding, with Kafka's numeric codes (``shoal.tenancy.acl`` names them).

    ``tenant`` is the logical cluster the binding belongs to (None: the physical cluster);
    ``resource_name`` and ``principal`` are as that tenant's clients see them (unqualified).
    """

    tenant: str | None
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


# A client quota entity: sorted ((entity_type, name or None for the default), ...), entity types
# "user", "client-id", "ip" as Kafka's, plus Shoal's "tenant". Names are physical.
@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """The cluster's finalized feature levels (KIP-584; ``shoal.metadata.features``): feature ->
    level, and the image epoch of the change that set them (ApiVersions' FinalizedFeaturesEpoch;
    -1: never set)."""

    levels: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    epoch: int = -1


NO_FEATURES = FinalizedFeatures()

QuotaEntity = tuple[tuple[str, "str | None"], ...]


def tenant_prefix(tenant_id: str) -> str:
    """The prefix of every physical name a tenant owns: topics, groups, transactional ids,
    namespaces and the SCRAM users it creates (``lkc-3f9a2c_users``)."""
    return tenant_id + "_"


def owner_tenant(physical: str, tenants: Container[str]) -> str | None:
    """The tenant whose prefix ``physical`` carries, if that tenant exists."""
    if len(physical) > 11 and physical[10] == "_" and physical.startswith("lkc-"):
        tid = physical[:10]
        if tid in tenants:
            return tid
    return None


_NO_TENANTS: Mapping[str, TenantInfo] = MappingProxyType({})
_NO_USER_TENANTS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TopicsDelta:
    """How a store made an image's ``topics`` (``after``) from its predecessor's (``before``):
    ``names`` holds every topic added, removed or replaced. See ``changed_topics``."""

    before: Mapping[str, TopicInfo]
    after: Mapping[str, TopicInfo]
    names: frozenset[str]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerInfo]
    topics: Mapping[str, TopicInfo]
    topics_by_id: Mapping[uuid.UUID, TopicInfo]
    broker_configs: Mapping[str, str]  # dynamic cluster-wide overrides (AlterConfigs on broker)
    epoch: int = 0  # bumps on every change
    # auth: user -> mechanism -> credential (SCRAM salted hashes only)
    scram_credentials: Mapping[str, Mapping[str, ScramCredential]] = field(
        default_factory=lambda: _NO_CREDENTIALS
    )
    # tenants: tenant id -> TenantInfo; SCRAM user -> tenant id. A user without a mapping belongs
    # to no tenant (the operator view).
    tenants: Mapping[str, TenantInfo] = field(default_factory=lambda: _NO_TENANTS)
    user_tenants: Mapping[str, str] = field(default_factory=lambda: _NO_USER_TENANTS)
    # users that administer their tenant (tenant super users)
    tenant_admins: frozenset[str] = frozenset()
    # OAuth identity pools by pool id (SASL/OAUTHBEARER tokens -> a tenant's principals)
    identity_pools: Mapping[str, IdentityPool] = field(default_factory=lambda: MappingProxyType({}))
    # namespaces by physical name (tenant-qualified)
    namespaces: Mapping[str, NamespaceInfo] = field(default_factory=lambda: MappingProxyType({}))
    # per-broker dynamic configs (AlterConfigs on broker "<node id>"): node id -> overrides
    broker_overrides: Mapping[int, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    acls: tuple[AclEntry, ...] = ()
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # tenancy (KIP-37 moves): former physical name -> topic id, for topics renamed by
    # ``rename_topic``, while that topic exists and no topic has the name again. The group
    # coordinator moves committed offsets still under a former name (a crash, or a partition of
    # __consumer_offsets not loaded when the rename happened) when it loads them.
    renamed_topics: Mapping[str, uuid.UUID] = field(default_factory=lambda: MappingProxyType({}))
    # The first producer id no block has been given out for (``allocate_producer_ids``), as
    # KRaft's ProducerIdsImage: ids below it are never handed out again.
    next_producer_id: int = 0
    # The finalized feature levels (UpdateFeatures, ``shoal features``; shoal.metadata.features)
    features: FinalizedFeatures = NO_FEATURES
    # Set by the store when this image's topics changed: lets ``changed_topics`` skip a diff.
    topics_delta: TopicsDelta | None = field(default=None, compare=False, repr=False)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)


def changed_topics(
    old: MetadataImage, new: MetadataImage
) -> dict[str, tuple[TopicInfo | None, TopicInfo | None]]:
    """Name -> (topic in ``old``, topic in ``new``) of each topic added, removed or replaced
    between two images; None where there is none. Costs the topics that changed when ``new``
    shares ``old``'s topics mapping or records how it was made from it (``topics_delta``), one
    pass over both mappings otherwise."""
    before, after = old.topics, new.topics
    if before is after:
        return {}
    delta = new.topics_delta
    names: Iterable[str]
    if delta is not None and delta.before is before and delta.after is after:
        names = delta.names
    else:
        names = [n for n, t in after.items() if before.get(n) is not t] + [n for n in before if n not in after]
    out = {}
    for n in names:
        a, b = before.get(n), after.get(n)
        if a is not b:
            out[n] = (a, b)
    return out


def topic_renames(old: MetadataImage, new: MetadataImage) -> dict[str, str]:
    """Old name -> new name of the topics ``new`` holds under another name (same topic id)."""
    out = {}
    for _, topic in changed_topics(old, new).values():
        if topic is None:
            continue
        prev = old.topics_by_id.get(topic.topic_id)
        if prev is not None and prev.name != topic.name:
            out[prev.name] = topic.name
    return out


def former_topic_names(image: MetadataImage) -> dict[str, str]:
    """Former name -> current name of every renamed topic the image remembers
    (``renamed_topics``; a name taken again by another topic is not former any more)."""
    return {
        name: image.topics_by_id[topic_id].name
        for name, topic_id in image.renamed_topics.items()
        if name not in image.topics and topic_id in image.topics_by_id
    }


class MetadataStore(abc.ABC):
    """Durable cluster metadata. Implementations must be safe to call from one event loop.

    The implementation is ``shoal.metadata.store.DecidingStore``: each command is a pure rule
    (``shoal.metadata.rules``) decided on the current image and committed by a backend
    (embedded files, etcd) by compare-and-swap against that image's epoch, decided again on
    conflict. See ``docs/metadata.md``."""

    @property
    @abc.abstractmethod
    def image(self) -> MetadataImage: ...

    @abc.abstractmethod
    async def decide_and_commit(self, decide: Callable[[MetadataImage], Result[_T]]) -> _T:
        """Run ``decide`` (a rule) on the newest image and commit its change; its response."""

    @property
    @abc.abstractmethod
    def new_uuid(self) -> Callable[[], uuid.UUID]:
        """The topic-id source the rules are given (for callers' own decisions)."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def register_broker(self, info: BrokerInfo) -> None: ...

    @abc.abstractmethod
    async def create_topic(
        self,
        name: str,
        assignments: list[tuple[int, ...]],
        configs: Mapping[str, str],
        *,
        internal: bool = False,
        observers: Sequence[tuple[int, ...]] | None = None,
    ) -> TopicInfo:
        """Create a topic with one replica list per partition (leader = first replica;
        ``observers``: each partition's observers, replica.placement).

        Raises MetadataError("TOPIC_ALREADY_EXISTS", ...) if it exists.
        """

    @abc.abstractmethod
    async def delete_topic(self, name: str) -> TopicInfo:
        """Raises MetadataError("UNKNOWN_TOPIC_OR_PARTITION", ...) if it does not exist."""

    @abc.abstractmethod
    async def add_partitions(self, name: str, assignments: list[tuple[int, ...]]) -> TopicInfo: ...

    @abc.abstractmethod
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace the topic's overrides with ``configs`` (callers compute incremental changes)."""

    @abc.abstractmethod
    async def alter_topic_configs(self, name: str, updates: Mapping[str, str | None]) -> TopicInfo:
        """Set (a value) or delete (None) each named key of the topic's overrides, against its
        configs as they are when the change commits (concurrent alterations all land)."""

    @abc.abstractmethod
    async def update_partition(
        self,
        name: str,
        partition: int,
        *,
        leader: int | None = None,
        isr: tuple[int, ...] | None = None,
        replicas: tuple[int, ...] | None = None,
    ) -> PartitionInfo:
        """Change a partition's leader/ISR/replicas: a leader change bumps ``leader_epoch``, any
        change ``partition_epoch``. UNKNOWN_TOPIC_OR_PARTITION for an unknown partition."""

    @abc.abstractmethod
    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        """Replace the dynamic cluster-wide broker config overrides."""

    @abc.abstractmethod
    async def update_features(self, updates: Sequence[tuple[str, int, int]], validate_only: bool = False) -> None:
        """Finalize feature levels: (feature, level, upgrade type) each, all or none
        (``shoal.metadata.rules.features``; INVALID_UPDATE_VERSION)."""

    @abc.abstractmethod
    async def finalize_missing_features(self, defaults: Mapping[str, int]) -> None:
        """Finalize ``defaults`` for the feature families the cluster has no level for."""

    @abc.abstractmethod
    def subscribe(self, listener: Callable[[MetadataImage, MetadataImage], None]) -> None:
        """Call ``listener(old, new)`` after each published change."""

    @abc.abstractmethod
    async def allocate_producer_ids(self, count: int) -> tuple[int, int]:
        """Reserve the next ``count`` producer ids for the caller: ``(first_id, count)``.

        Kafka's AllocateProducerIds: brokers take blocks (of 1000) from the cluster's durable
        store, so ids are unique across brokers and restarts; the reservation is durable before
        this returns, and ids of a block a broker did not use are never handed out again.
        """

    # -- auth: SCRAM credentials ------------------------------------------------------------

    @abc.abstractmethod
    async def set_scram_credential(
        self,
        user: str,
        mechanism: str,
        salt: bytes,
        stored_key: bytes,
        server_key: bytes,
        iterations: int,
    ) -> None:
        """Create or replace ``user``'s credential for ``mechanism`` (durable on return)."""

    @abc.abstractmethod
    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        """Raises MetadataError("RESOURCE_NOT_FOUND", ...) if there is no such credential."""

    # -- tenants: logical clusters ----------------------------------------------------------

    @abc.abstractmethod
    async def create_tenant(self, display_name: str) -> TenantInfo:
        """A new tenant with a fresh random, unique id (durable on return)."""

    @abc.abstractmethod
    async def delete_tenant(self, tenant_id: str) -> TenantInfo:
        """Delete a tenant and everything it owns, in one change: its users (mapped or
        tenant-qualified) with their SCRAM credentials, its topics and namespaces (physical names
        with the tenant's prefix), its ACLs and its client quotas. (Groups live in the group
        coordinator; the broker deletes them when it sees the tenant go.)

        Raises MetadataError("RESOURCE_NOT_FOUND", ...) for an unknown tenant.
        """

    @abc.abstractmethod
    async def assign_user(
        self,
        user: str,
        tenant_id: str,
        credential: ScramCredential | tuple[ScramCredential, ...] | None = None,
        *,
        new_user: bool = False,
    ) -> None:
        """Make ``user`` a member of ``tenant_id``; with ``credential`` (one, or a tuple of one per
        mechanism), also store it, atomically.

        Raises MetadataError("RESOURCE_NOT_FOUND", ...) for an unknown tenant and
        MetadataError("DUPLICATE_RESOURCE", ...) when the user belongs to another tenant, or (with
        ``new_user``) when the user already has a mapping or any credential.
        """

    @abc.abstractmethod
    async def remove_user(self, user: str) -> None:
        """Delete ``user``'s SCRAM credentials and tenant mapping.

        Raises MetadataError("RESOURCE_NOT_FOUND", ...) when there is neither.
        """

    @abc.abstractmethod
    async def update_tenant(
        self,
        tenant_id: str,
        *,
        display_name: str | None = None,
        configs: Mapping[str, str] | None = None,
        policy: Mapping[str, object] | None = None,
    ) -> TenantInfo:
        """Replace what is given (``configs``/``policy`` replace the whole mapping)."""

    @abc.abstractmethod
    async def set_tenant_admin(self, user: str, admin: bool) -> None:
        """Make ``user`` (mapped to a tenant) an administrator of its tenant, or not."""

    @abc.abstractmethod
    async def create_identity_pool(
        self, tenant_id: str, issuer: str, claim_filter: Mapping[str, str] | None, *,
        principal_claim: str = "sub", display_name: str = "",
    ) -> IdentityPool:
        """An OAuth identity pool of ``tenant_id`` (``shoal.metadata.rules.identity_pools``)."""

    @abc.abstractmethod
    async def delete_identity_pool(self, pool_id: str) -> IdentityPool:
        """Remove an identity pool; RESOURCE_NOT_FOUND for an unknown one."""

    # -- namespaces (KIP-37) ----------------------------------------------------------------

    @abc.abstractmethod
    async def create_namespaces(self, names: list[str]) -> None:
        """Create the physical namespaces that do not exist yet (callers pass every ancestor)."""

    @abc.abstractmethod
    async def delete_namespaces(self, names: list[str], topics: list[str]) -> None:
        """Delete namespaces and topics together, in one change."""

    @abc.abstractmethod
    async def set_namespace_configs(self, name: str, configs: Mapping[str, str]) -> NamespaceInfo:
        """Replace a namespace's configs; RESOURCE_NOT_FOUND for an unknown namespace."""

    @abc.abstractmethod
    async def rename_topic(self, old: str, new: str) -> TopicInfo:
        """Rename a topic, keeping its id, partitions and configs (namespace moves); the old
        name goes into the image's ``renamed_topics`` in the same change."""

    # -- ACLs and client quotas -------------------------------------------------------------

    @abc.abstractmethod
    async def alter_acls(self, add: list[AclEntry], remove: list[AclEntry]) -> None:
        """Add and remove ACL bindings in one change (adding an existing one is a no-op)."""

    @abc.abstractmethod
    async def alter_client_quotas(
        self, changes: list[tuple[QuotaEntity, Mapping[str, float | None]]]
    ) -> None:
        """Set (float) or remove (None) quota values per entity, all in one change."""
