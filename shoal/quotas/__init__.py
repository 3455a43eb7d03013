"""Quota policy core: pure math and single-owner state, all driven by an injected clock's ms.

* :mod:`.rate` — Kafka's windowed rate (``quota.window.num`` x ``quota.window.size.seconds``).
* :mod:`.throttle` — ``QuotaUtils`` throttle time; byte-rate and request (KIP-124) sensors.
* :mod:`.precedence` — which quota applies: Kafka's eight levels, metric tags, the tenant level.
* :mod:`.fairshare` — auto-tuned tenant quotas, tenant-wide slices, broker-wide request quota.
* :mod:`.demand` — tenant-wide slices split by demand (pure), and the brokers' exchange of demand
  through etcd (``DemandExchange``: the one part of this package that does I/O, run by the broker).
* :mod:`.token_bucket` — KIP-599 controller mutation quota.

Nothing here reads the time or does I/O; broker wiring, metrics and muting live elsewhere.
"""

from shoal.quotas.fairshare import (
    DEFAULT_HEADROOM,
    TenantUsage,
    broker_request_quota,
    dynamic_quotas,
    jain_index,
    tenant_quota_slice,
    tenant_quota_slices,
    water_fill,
)
from shoal.quotas.precedence import (
    DEFAULT,
    QuotaEntityKey,
    QuotaLevel,
    QuotaSelection,
    combine_throttles,
    metric_tags_for,
    select_quota,
    select_tenant_quota,
)
from shoal.quotas.rate import RateConfig, WindowedRate
from shoal.quotas.throttle import (
    QuotaSensor,
    RequestQuotaSensor,
    bounded_throttle_time_ms,
    java_round,
    nanos_to_percentage,
    throttle_time_ms,
)
from shoal.quotas.token_bucket import (
    MutationQuota,
    ThrottlingQuotaExceeded,
    TokenBucket,
    check_and_record,
    token_throttle_time_ms,
)

__all__ = [
    "DEFAULT", "DEFAULT_HEADROOM", "MutationQuota", "QuotaEntityKey", "QuotaLevel",
    "QuotaSelection", "QuotaSensor", "RateConfig", "RequestQuotaSensor", "TenantUsage",
    "ThrottlingQuotaExceeded", "TokenBucket", "WindowedRate", "bounded_throttle_time_ms",
    "broker_request_quota", "check_and_record", "combine_throttles", "dynamic_quotas",
    "jain_index", "java_round", "metric_tags_for", "nanos_to_percentage", "select_quota",
    "select_tenant_quota", "tenant_quota_slice", "tenant_quota_slices", "throttle_time_ms",
    "token_throttle_time_ms", "water_fill",
]
