"""What a handler sees of the world: its broker's services (``shoal.services``) and who is asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from shoal.auth.sasl import SaslSession
    from shoal.protocol.codec import RequestHeader
    from shoal.quotas.manager import ClientQuotaManager
    from shoal.replica.read import ReplicaOrder
    from shoal.replica.sessions import ReplicaSession
    from shoal.services import Services
    from shoal.tenancy.scope import Scope


class ConnectionControls(Protocol):
    """What a handler may use of the connection its request came on
    (``shoal.server.connection.KafkaConnection``), and nothing else of it."""

    principal: str
    sasl: "SaslSession | None"  # SASL listeners: the connection's login
    client_software: tuple[str, str] | None  # ApiVersions v3+: (name, version)
    replica_session: "ReplicaSession | None"  # a follower's fetch session (shoal.replica.sessions)
    replica_order: "ReplicaOrder | None"  # the order of a follower's pipelined fetches
    closers: list[Callable[[], None]]  # called when the connection closes
    zero_copy: bool  # plaintext: a Fetch's record sets may be sent from their files (sendfile)

    def bind_principal(self, principal: str) -> None:
        """The connection is now ``principal``'s (a SASL login; request memory shares)."""


@dataclass
class RequestContext:
    services: "Services"
    header: "RequestHeader"
    client_address: str  # "host:port" of the peer
    listener: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    tenant: str | None = None  # the connection's tenant id (None: the physical cluster)
    # names and authorization of this request's view (built from the rest when not given)
    scope: "Scope" = None  # type: ignore[assignment]
    # Filled by handlers that want the connection muted / response delayed (quotas): the
    # connection combines it with the request-time throttle, sets the response's throttle_time
    # and mutes the connection (shoal.server.connection, KIP-219).
    throttle_ms: int = 0
    request_size: int = 0  # quotas: bytes of the request frame (what Produce quotas count)
    handling_ns: int = 0  # quotas: time spent on the request so far (KIP-124), when measured
    step_start_ns: int = 0
    quota_id: Any = None  # quotas: (tenant, user, client-id), set when first needed
    # Set by a handler (Produce with acks=0) when no response must be sent.
    no_response: bool = False
    # The connection's controls (None: a request made without one, in tests or internally).
    connection: ConnectionControls | None = None
    # Set by a handler: close the connection once this response is sent (a failed login, a
    # produce the broker must not answer on).
    close_after: bool = False
    # quotas: the quota whose throttle ``throttle_ms`` is (shoal.quotas.manager)
    throttle_quota: "ClientQuotaManager | None" = None
    _replica: bool | None = field(default=None, repr=False)  # is_replica's answer, once asked

    def __post_init__(self) -> None:
        if self.scope is None:
            from shoal.tenancy.scope import Scope

            self.scope = Scope(
                self.services.metadata.image, self.services.config, self.principal,
                self.client_address.rpartition(":")[0], self.tenant,
            )

    def thread_ns(self, now_ns: int) -> int:
        """The request's time on the broker's thread so far (KIP-124's request time): the steps
        its handler has run (``handling_ns``) and the one running now, since ``step_start_ns``.
        Not the time it waited between them (in a purgatory, a long poll, for a rebalance): that
        is Kafka's remote time, which its request quota does not charge either. Valid while the
        request is timed (a request quota is active, or the broker's metrics or metering count)."""
        return self.handling_ns + now_ns - self.step_start_ns

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    def is_replica(self, replica_id: int) -> bool:
        """Whether a request that names ``replica_id`` (Fetch, OffsetsForLeaderEpoch) is a
        replica's: decided once per request from who asks, never from the field alone. A
        replica is a broker of the physical cluster, a principal holding CLUSTER_ACTION there
        (Kafka's ``isFromFollower`` plus its CLUSTER_ACTION check); a tenant's principal, or
        one without the right, that sets ``replica_id`` >= 0 is a consumer and is served,
        metered and throttled as one. A fetch session's incremental fetches name no topics,
        so no per-topic check can stand in for this one."""
        if replica_id < 0:
            return False
        known = self._replica
        if known is None:
            from shoal.tenancy.acl import Operation

            scope = self.scope
            known = self._replica = bool(scope.physical_view and scope.allowed_cluster(Operation.CLUSTER_ACTION))
        return known
