"""Per-tenant create-topic policy (KIP-108 style): pure checks, no I/O.

A tenant's policy (``TenantInfo.policy``, set through the HTTP admin API) is a JSON object; every
key is optional and an absent key sets no limit:

  max.partitions.per.topic  int >= 1   partitions of one topic (CreateTopics, CreatePartitions)
  max.partitions            int >= 0   partitions of all the tenant's topics together
  max.topics                int >= 0   number of the tenant's topics
  topic.name.prefix         string     required prefix of a new topic's name, as the tenant names
                                       it (the whole name, namespace included: ``team-a:`` works)
  allowed.configs           [string]   the topic configs a CreateTopics may set (others refused)
  config.ranges             {name: [min, max]}   numeric bounds (inclusive; null = open) of the
                                       values a CreateTopics sets for those configs
  min.replication.factor    int >= 1
  max.replication.factor    int >= 1

``check_create`` / ``check_partitions`` return None or the message of the first limit broken
(it names the key); the admin handlers answer POLICY_VIOLATION with it, validate_only too.
``validate_policy`` is what the admin API accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from shoal.config import TOPIC_CONFIGS
from shoal.metadata import tenant_prefix

if TYPE_CHECKING:
    from shoal.metadata import MetadataImage

MAX_PARTITIONS_PER_TOPIC = "max.partitions.per.topic"
MAX_PARTITIONS = "max.partitions"
MAX_TOPICS = "max.topics"
TOPIC_NAME_PREFIX = "topic.name.prefix"
ALLOWED_CONFIGS = "allowed.configs"
CONFIG_RANGES = "config.ranges"
MIN_REPLICATION_FACTOR = "min.replication.factor"
MAX_REPLICATION_FACTOR = "max.replication.factor"

# key -> smallest value allowed for the integer limits
_INT_KEYS = {
    MAX_PARTITIONS_PER_TOPIC: 1,
    MAX_PARTITIONS: 0,
    MAX_TOPICS: 0,
    MIN_REPLICATION_FACTOR: 1,
    MAX_REPLICATION_FACTOR: 1,
}
POLICY_KEYS = frozenset({*_INT_KEYS, TOPIC_NAME_PREFIX, ALLOWED_CONFIGS, CONFIG_RANGES})
_NUMERIC_TYPES = ("int", "long", "short", "double")


@dataclass(frozen=True, slots=True)
class TenantState:
    """What the tenant has now: its topic count and their partitions in total."""

    topics: int = 0
    partitions: int = 0


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """One topic a CreateTopics asks for, as the tenant names it."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def tenant_state(image: "MetadataImage", tenant_id: str) -> TenantState:
    prefix = tenant_prefix(tenant_id)
    topics = partitions = 0
    for name, t in image.topics.items():
        if name.startswith(prefix):
            topics += 1
            partitions += len(t.partitions)
    return TenantState(topics, partitions)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def validate_policy(policy: Any) -> str | None:
    """Why ``policy`` is not a valid policy document, or None."""
    if not isinstance(policy, Mapping):
        return "a policy is a JSON object"
    for key, value in policy.items():
        if key not in POLICY_KEYS:
            return f"unknown policy key '{key}' (known: {', '.join(sorted(POLICY_KEYS))})"
        if key in _INT_KEYS:
            lo = _INT_KEYS[key]
            if not _is_int(value) or value < lo:
                return f"'{key}' must be an integer >= {lo}"
        elif key == TOPIC_NAME_PREFIX:
            if not isinstance(value, str) or not value:
                return f"'{key}' must be a non-empty string"
        elif key == ALLOWED_CONFIGS:
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                return f"'{key}' must be a list of topic config names"
            unknown = [n for n in value if n not in TOPIC_CONFIGS]
            if unknown:
                return f"'{key}' names unknown topic configs: {', '.join(unknown)}"
        else:  # CONFIG_RANGES
            if not isinstance(value, Mapping):
                return f"'{key}' must map topic config names to [min, max]"
            for name, bounds in value.items():
                d = TOPIC_CONFIGS.get(name)
                if d is None or d.type not in _NUMERIC_TYPES:
                    return f"'{key}': '{name}' is not a numeric topic config"
                if (
                    not isinstance(bounds, list) or len(bounds) != 2
                    or not all(b is None or _is_number(b) for b in bounds)
                ):
                    return f"'{key}': the range of '{name}' must be [min, max] (numbers or null)"
                if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
                    return f"'{key}': the range of '{name}' has min > max"
    lo, hi = policy.get(MIN_REPLICATION_FACTOR), policy.get(MAX_REPLICATION_FACTOR)
    if lo is not None and hi is not None and lo > hi:
        return f"'{MIN_REPLICATION_FACTOR}' is above '{MAX_REPLICATION_FACTOR}'"
    return None


def _partition_limits(policy: Mapping[str, Any], state: TenantState, name: str, total: int, added: int) -> str | None:
    per_topic = policy.get(MAX_PARTITIONS_PER_TOPIC)
    if per_topic is not None and total > per_topic:
        return (f"Topic '{name}' would have {total} partitions; the tenant's policy allows at most "
                f"{per_topic} per topic ({MAX_PARTITIONS_PER_TOPIC}).")
    limit = policy.get(MAX_PARTITIONS)
    if limit is not None and state.partitions + added > limit:
        return (f"The tenant would have {state.partitions + added} partitions; its policy allows at most "
                f"{limit} ({MAX_PARTITIONS}).")
    return None


def check_create(policy: Mapping[str, Any], state: TenantState, request: CreateRequest) -> str | None:
    """None if the tenant may create ``request``, else the message of the first limit it breaks."""
    if not policy:
        return None
    invalid = _invalid(policy)
    if invalid is not None:
        return invalid
    prefix = policy.get(TOPIC_NAME_PREFIX)
    if prefix and not request.name.startswith(prefix):
        return f"Topic name '{request.name}' must start with '{prefix}' ({TOPIC_NAME_PREFIX})."
    max_topics = policy.get(MAX_TOPICS)
    if max_topics is not None and state.topics + 1 > max_topics:
        return f"The tenant has {state.topics} topics; its policy allows at most {max_topics} ({MAX_TOPICS})."
    why = _partition_limits(policy, state, request.name, request.partitions, request.partitions)
    if why is not None:
        return why
    rf = request.replication_factor
    lo, hi = policy.get(MIN_REPLICATION_FACTOR), policy.get(MAX_REPLICATION_FACTOR)
    if lo is not None and rf < lo:
        return f"Replication factor {rf} is below the tenant's minimum {lo} ({MIN_REPLICATION_FACTOR})."
    if hi is not None and rf > hi:
        return f"Replication factor {rf} is above the tenant's maximum {hi} ({MAX_REPLICATION_FACTOR})."
    allowed = policy.get(ALLOWED_CONFIGS)
    if allowed is not None:
        refused = sorted(n for n in request.configs if n not in allowed)
        if refused:
            return f"Config(s) {', '.join(refused)} may not be set on create ({ALLOWED_CONFIGS})."
    ranges = policy.get(CONFIG_RANGES) or {}
    for name in sorted(request.configs):
        bounds = ranges.get(name)
        if bounds is None:
            continue
        try:
            value = float(request.configs[name])
        except (TypeError, ValueError):
            return f"Config {name}={request.configs[name]} is not a number ({CONFIG_RANGES})."
        lo_v, hi_v = bounds
        if (lo_v is not None and value < lo_v) or (hi_v is not None and value > hi_v):
            return (f"Config {name}={request.configs[name]} is outside the tenant's range "
                    f"[{_bound(lo_v, '-inf')}, {_bound(hi_v, 'inf')}] ({CONFIG_RANGES}).")
    return None


def check_partitions(policy: Mapping[str, Any], state: TenantState, name: str, current: int, new_count: int) -> str | None:
    """CreatePartitions: None if ``name`` may grow from ``current`` to ``new_count`` partitions."""
    if not policy:
        return None
    invalid = _invalid(policy)
    if invalid is not None:
        return invalid
    return _partition_limits(policy, state, name, new_count, max(new_count - current, 0))


def _invalid(policy: Mapping[str, Any]) -> str | None:
    # The admin API validates a policy before storing it; one stored otherwise refuses, not crashes.
    why = validate_policy(policy)
    return None if why is None else f"The tenant's create-topic policy is invalid ({why}); ask the operator."


def _bound(b: Any, open_end: str) -> str:
    if b is None:
        return open_end
    return str(int(b)) if float(b).is_integer() else str(b)
