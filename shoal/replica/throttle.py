"""Replication throttles (KIP-73, Kafka's ``ReplicationQuotaManager``): bound the bandwidth a
reassignment's catching-up replicas take, so that moving a partition does not starve clients.

Which replicas: the topic configs ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` list ``partition:broker`` pairs (or ``*``: every
partition); a broker throttles a partition of a topic on one side when the list of that side
names the partition with this broker's id (Kafka's ``parseThrottledPartitions``), and only for a
replica outside the ISR (an in-sync follower is never held back: Kafka's
``shouldLeaderThrottle`` / ``shouldFollowerThrottle``).

How much: ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (bytes/s,
dynamic broker configs; Long.MAX_VALUE: unbounded), measured as Kafka's windowed ``Rate`` over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``
(:class:`shoal.quotas.rate.WindowedRate`). While a side's rate of throttled bytes is above its
bound, the leader leaves throttled partitions out of a follower's Fetch response (no records;
offsets still answered), and the follower leaves them out of its Fetch requests.

Single-threaded: called on the event loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol, TypeVar

from shoal.config import LONG_MAX
from shoal.quotas.rate import RateConfig, WindowedRate

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import MetadataImage, PartitionInfo, TopicInfo
    from shoal.replica.partition import Partition


class FollowerFetch(Protocol):
    """A follower's fetch state of one partition, as ``ReplicationThrottle.follower_ready`` reads
    and marks it (``shoal.replica.fetcher``)."""

    partition: Partition
    throttled: bool
    delayed_until: float


F = TypeVar("F", bound=FollowerFetch)

LEADER, FOLLOWER = "leader", "follower"
_ALL = "*"


def throttled_partitions(raw: str | None, node_id: int) -> frozenset[int] | None:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``node_id``;
    None for ``*`` (all of them). Malformed items are ignored (the value was validated when set)."""
    items = [i.strip() for i in (raw or "").split(",") if i.strip()]
    if items == [_ALL]:
        return None
    out = set()
    for item in items:
        p, sep, b = item.partition(":")
        if sep and p.isdigit() and b.isdigit() and int(b) == node_id:
            out.add(int(p))
    return frozenset(out)


class ReplicationThrottle:
    """The two replication quotas of one broker (leader side, follower side)."""

    def __init__(self, node_id: int, config: Callable[[], "BrokerConfig"], now_ms: Callable[[], int]) -> None:
        self.node_id = node_id
        self._config = config
        self._now_ms = now_ms
        self._rates: dict[str, WindowedRate] = {}
        self._parsed: dict[tuple[str, int], tuple[str | None, frozenset[int] | None]] = {}

    def _rate(self, side: str) -> WindowedRate:
        cfg = self._config()
        rc = RateConfig(samples=int(cfg.get("replication.quota.window.num")),
                        window_ms=int(cfg.get("replication.quota.window.size.seconds")) * 1000)
        rate = self._rates.get(side)
        if rate is None or rate.config != rc:
            rate = self._rates[side] = WindowedRate(rc)
        return rate

    def bound(self, side: str) -> int:
        return int(self._config().get(f"{side}.replication.throttled.rate"))

    def listed(self, side: str, topic: "TopicInfo", index: int) -> bool:
        """Whether ``topic``'s ``<side>.replication.throttled.replicas`` names partition ``index``
        on this broker."""
        raw = topic.configs.get(f"{side}.replication.throttled.replicas")
        if not raw:
            return False
        key = (side, id(topic.configs))
        cached = self._parsed.get(key)
        if cached is None or cached[0] != raw:
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            cached = self._parsed[key] = (raw, throttled_partitions(raw, self.node_id))
        parts = cached[1]
        return parts is None or index in parts

    def throttled(self, side: str, topic: "TopicInfo", pinfo: "PartitionInfo", replica: int) -> bool:
        """Whether ``replica``'s replication of this partition counts against ``side``'s quota:
        listed, and ``replica`` (the follower) not in the ISR."""
        return replica not in pinfo.isr and self.listed(side, topic, pinfo.partition)

    def exceeded(self, side: str) -> bool:
        """Whether ``side``'s throttled bytes are above its rate now (Kafka's isQuotaExceeded)."""
        bound = self.bound(side)
        if bound >= LONG_MAX:
            return False
        return self._rate(side).measure(self._now_ms()) > bound

    def record(self, side: str, n: int) -> None:
        if n > 0 and self.bound(side) < LONG_MAX:
            self._rate(side).record(n, self._now_ms())

    # -- the two sides ---------------------------------------------------------------------

    def leader_keys(self, image: MetadataImage, replica_id: int, keys: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Leader side: the partitions of a follower's fetch (``keys``) whose replication to
        ``replica_id`` is throttled."""
        if self.bound(LEADER) >= LONG_MAX:
            return set()
        out = set()
        for name, index in keys:
            topic = image.topics.get(name)
            if topic is not None and 0 <= index < len(topic.partitions) and self.throttled(
                    LEADER, topic, topic.partitions[index], replica_id):
                out.add((name, index))
        return out

    def follower_ready(self, ready: dict[tuple[str, int], F], image: MetadataImage, now: float,
                       pause_s: float = 0.1) -> dict[tuple[str, int], F]:
        """Follower side: ``ready`` (key -> fetch state with ``partition``, ``throttled`` and
        ``delayed_until``) without the throttled partitions while over the follower rate; those
        wait ``pause_s`` (loop time) before they are looked at again."""
        if self.bound(FOLLOWER) >= LONG_MAX:
            for f in ready.values():
                f.throttled = False
            return ready
        exceeded = None
        out: dict[tuple[str, int], F] = {}
        for key, f in ready.items():
            part = f.partition
            topic = image.topics.get(part.topic)
            f.throttled = topic is not None and self.throttled(FOLLOWER, topic, part.info, self.node_id)
            if f.throttled:
                if exceeded is None:
                    exceeded = self.exceeded(FOLLOWER)
                if exceeded:
                    f.delayed_until = now + pause_s
                    continue
            out[key] = f
        return out
