"""KIP-599 controller mutation quota per (user, client-id): Kafka's ``ControllerMutationQuotaManager``.

The quota is ``controller_mutation_rate`` (mutations per second) on the user / client-id quota
entities of ``MetadataImage.client_quotas``, chosen with Kafka's eight levels of precedence in the
caller's scope (:func:`shoal.quotas.entities.quota_index`: a tenant's own entities, or the
physical view's), and recorded in a :class:`~shoal.quotas.token_bucket.TokenBucket` per
metric-tag pair (so a user quota is shared by all the user's client-ids, as for byte rates),
sized by ``controller.quota.window.num`` x ``controller.quota.window.size.seconds``. A change of
the quota value applies to the existing bucket in place (its tokens are kept).

Tenant level (the multi-tenancy document: "quotas on topic operations per logical cluster"): a
tenant-wide ``controller_mutation_rate`` (entity ``("tenant", T)``, else the tenant default) is
a second bucket every principal of the tenant records into; a request is held to both. It is
not sliced over brokers: topic mutations are the controller's work, of which there is one.

A mutation is one partition: CreateTopics charges each new topic's partition count,
CreatePartitions the partitions added, DeleteTopics the deleted topic's partitions — only for
topics that passed validation, never for ``validate_only``.

Strict quotas from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3 (clients of these
versions handle THROTTLING_QUOTA_EXCEEDED): a topic arriving while a bucket is negative is
rejected with that error (and nothing recorded). Older versions get a permissive quota:
everything is accepted and recorded. In both cases the response carries the throttle time and
the request's ``ctx.throttle_ms`` asks the connection layer to mute the client for it (Kafka's
``sendResponseMaybeThrottleWithControllerQuota``). Without any ``controller_mutation_rate`` for
the caller, the quota is unbounded (nothing recorded).

Not thread-safe: the broker's event loop owns the manager.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping

from shoal.quotas.entities import MUTATION_KEY, QuotaIndex, quota_index, quota_user
from shoal.quotas.precedence import select_quota, select_tenant_quota
from shoal.quotas.rate import DEFAULT_NUM_SAMPLES, DEFAULT_WINDOW_MS
from shoal.quotas.token_bucket import MutationQuota, ThrottlingQuotaExceeded, TokenBucket

THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
STRICT_SINCE = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}  # KIP-599


class UnboundedMutationQuota:
    """Kafka's ``UnboundedControllerMutationQuota``: records nothing, never throttles."""

    strict = False
    is_exceeded = False

    def record(self, permits: float) -> None:
        pass

    def throttle_time_ms(self) -> int:
        return 0


UNBOUNDED = UnboundedMutationQuota()


class RequestMutationQuota:
    """One request's quota on the caller's bucket(s) — its (user, client-id) bucket and its
    tenant's — strict or permissive, reading ``clock``."""

    __slots__ = ("quotas", "strict", "clock")

    def __init__(self, quotas: list[MutationQuota], clock: Any) -> None:
        self.quotas = quotas
        self.strict = quotas[0].strict
        self.clock = clock

    @property
    def is_exceeded(self) -> bool:
        return any(q.is_exceeded for q in self.quotas)

    def record(self, permits: float) -> None:
        """Charge ``permits`` mutations; strict: raises :class:`ThrottlingQuotaExceeded` (and
        records nowhere) if any bucket is negative."""
        now_ms = self.clock.now_ms()
        if self.strict:
            throttle_ms = -1
            for q in self.quotas:
                if q.bucket.measure(now_ms) < 0:
                    try:
                        q.record(permits, now_ms)
                    except ThrottlingQuotaExceeded as e:
                        throttle_ms = max(throttle_ms, e.throttle_time_ms)
            if throttle_ms >= 0:
                raise ThrottlingQuotaExceeded(throttle_ms)
        for q in self.quotas:
            q.record(permits, now_ms)

    def throttle_time_ms(self) -> int:
        now_ms = self.clock.now_ms()
        return max(q.throttle_time_ms(now_ms) for q in self.quotas)


class MutationQuotaManager:
    """Buckets per (scope, metric tags) and per tenant, and the configured values."""

    def __init__(self, *, samples: int = DEFAULT_NUM_SAMPLES, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.index = QuotaIndex()
        self.buckets: dict[tuple[str | None, str, str], TokenBucket] = {}
        self.tenant_buckets: dict[str, TokenBucket] = {}
        self._source: Any = None

    @property
    def enabled(self) -> bool:
        return not self.index.empty

    def update(self, client_quotas: Mapping[Any, Mapping[str, float]]) -> None:
        """Follow the configured quotas (cheap when ``client_quotas`` is the same object)."""
        if client_quotas is self._source:
            return
        self._source = client_quotas
        self.index = quota_index(client_quotas, MUTATION_KEY)

    def _bucket(self, buckets: dict, key: Any, quota: float) -> TokenBucket:
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = TokenBucket(quota, samples=self.samples, window_ms=self.window_ms)
        else:
            bucket.quota = quota
        return bucket

    def buckets_for(self, tenant: str | None, user: str, client_id: str) -> list[TokenBucket]:
        """The caller's buckets with their current quotas: (user, client-id) then tenant."""
        out = []
        selection = select_quota(self.index.scopes.get(tenant, {}), user, client_id)
        if selection.value is not None:
            tags = (tenant, *selection.metric_tags(user, client_id))
            out.append(self._bucket(self.buckets, tags, selection.value))
        if tenant is not None:
            value, _entity = select_tenant_quota(self.index.tenants, tenant)
            if value is not None:
                out.append(self._bucket(self.tenant_buckets, tenant, value))
        return out

    def new_quota_for(self, tenant: str | None, user: str, client_id: str, *,
                      strict: bool) -> list[MutationQuota]:
        """Fresh per-request quotas (Kafka's ``newStrictQuotaFor``/``newPermissiveQuotaFor``);
        empty (unbounded) when no quota applies."""
        return [MutationQuota(b, strict=strict) for b in self.buckets_for(tenant, user, client_id)]


# -- handler glue (duck-typed RequestContext, so handlers stay one-liners) --------------------

def request_quota(ctx: Any, api_key: int) -> RequestMutationQuota | UnboundedMutationQuota:
    """The mutation quota of this request (unbounded when the broker has no manager)."""
    svc = ctx.services
    manager: MutationQuotaManager | None = getattr(svc, "mutation_quotas", None)
    if manager is None:
        return UNBOUNDED
    manager.update(svc.metadata.image.client_quotas)
    if not manager.enabled:
        return UNBOUNDED
    strict = ctx.api_version >= STRICT_SINCE[api_key]
    quotas = manager.new_quota_for(ctx.scope.tenant_id, quota_user(ctx.principal), ctx.client_id or "",
                                   strict=strict)
    return RequestMutationQuota(quotas, svc.clock) if quotas else UNBOUNDED


def response_throttle(ctx: Any, quota: RequestMutationQuota | UnboundedMutationQuota) -> datetime.timedelta:
    """The response's ``throttle_time``; also asks the connection layer to mute for it."""
    throttle_ms = quota.throttle_time_ms()
    if throttle_ms > 0:
        ctx.throttle_ms = max(ctx.throttle_ms, throttle_ms)
    return datetime.timedelta(milliseconds=throttle_ms)


__all__ = [
    "MutationQuotaManager", "RequestMutationQuota", "STRICT_SINCE", "THROTTLING_QUOTA_EXCEEDED_MESSAGE",
    "ThrottlingQuotaExceeded", "UNBOUNDED", "UnboundedMutationQuota", "request_quota", "response_throttle",
]
