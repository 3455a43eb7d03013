"""Connection limits (KIP-402) and connection creation rates (KIP-612): the decisions of Kafka's
``ConnectionQuotas``, with time passed in (``now_ms``) and no sockets.

The acceptor (:mod:`shoal.server.limits`) calls, for each socket it accepts:

1. :meth:`ConnectionQuotas.connection_rate_throttle_ms` — records the attempt in the broker-wide
   and the listener's creation-rate sensors and returns how long to delay it (Kafka's
   ``recordConnectionAndGetThrottleTimeMs``): the larger of the two throttles, each
   ``QuotaUtils.boundedThrottleTime`` capped at one quota window. The inter-broker listener
   (when the broker has more than one listener) skips the broker-wide rate.
2. :meth:`ConnectionQuotas.slot_available` — while false (or while the delay lasts) the acceptor
   stops accepting on that listener, as Kafka's ``waitForConnectionSlot``: the listener is at its
   ``listener.name.<l>.max.connections``, or — except on the inter-broker listener — the broker
   is at ``max.connections``.
3. :meth:`ConnectionQuotas.admit` — the per-IP checks of Kafka's ``inc``: an IP over its
   ``connection_creation_rate`` quota is *throttled* (the attempt is un-recorded from the IP,
   listener and broker rates, and the socket is closed after the throttle time); an IP already at
   ``max.connections.per.ip`` (or its override) is *refused* (closed at once); else the
   connection is counted.
4. :meth:`ConnectionQuotas.release` when it closes.

:meth:`ConnectionQuotas.max_connections_exceeded` tells a non-inter-broker listener to close one
of its connections because the inter-broker listener took the broker over ``max.connections``
(KIP-402: inter-broker connections are always accepted).

Kafka's quirks kept: the rate of an attempt that waited is recorded when it arrived; a quota of
``INT_MAX`` means unlimited but is still recorded (so lowering it later sees the history); the
per-IP check is ``count >= max`` on the count *before* this connection.

Cost: the acceptor calls this for every connection, so recording an attempt skips the
measurement while the number of attempts a sensor has ever recorded proves it cannot be over its
bound (:func:`attempts_within_bound`) — always, with the default unlimited rates. The verdicts
are exactly those of measuring every time.

Not thread-safe: one event loop owns it. ``stats`` are plain counters for metrics.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from shoal.quotas.rate import RateConfig
from shoal.quotas.throttle import QuotaSensor

INT_MAX = 2**31 - 1
UNLIMITED = INT_MAX  # Kafka's default for every connection limit and rate


def parse_ip_overrides(text: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``"hostName:100,127.0.0.1:200"`` -> a dict.

    An IPv6 address keeps its colons (the count follows the last one). Raises ValueError with
    the offending entry."""
    out: dict[str, int] = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().lstrip("+").isdigit():
            raise ValueError(f"invalid entry {entry!r}: expected HOST:COUNT")
        value = int(count)
        if value > INT_MAX:
            raise ValueError(f"invalid entry {entry!r}: count above {INT_MAX}")
        out[host] = value
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerLimits:
    """``listener.name.<l>.max.connections`` and ``.max.connection.creation.rate`` (each falls
    back to the broker-wide value, as Kafka's ``valuesWithPrefixOverride``)."""

    max_connections: int = UNLIMITED
    max_connection_creation_rate: float = UNLIMITED


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimitsConfig:
    max_connections: int = UNLIMITED  # broker-wide, the inter-broker listener excepted
    max_connections_per_ip: int = UNLIMITED
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # by IP
    max_connection_creation_rate: float = UNLIMITED  # broker-wide
    listeners: Mapping[str, ListenerLimits] = field(default_factory=dict)
    inter_broker_listener: str | None = None
    rate: RateConfig = RateConfig()  # quota.window.num x quota.window.size.seconds

    def __post_init__(self) -> None:
        for name, value in (("max.connections", self.max_connections),
                            ("max.connections.per.ip", self.max_connections_per_ip),
                            ("max.connection.creation.rate", self.max_connection_creation_rate)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def max_for_ip(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    TOO_MANY = "too many connections from this IP"  # refused: close at once
    THROTTLED = "IP connection creation rate over its quota"  # close after throttle_ms


class Admission(NamedTuple):
    verdict: Verdict
    throttle_ms: int = 0  # THROTTLED: close the socket after this long
    limit: float = 0  # the limit that refused or throttled it


_ACCEPTED = Admission(Verdict.ACCEPTED)


@dataclass(slots=True)
class ListenerStats:
    """Counters per listener, for metrics (all monotonic except ``connections``)."""

    connections: int = 0  # open now
    accepted: int = 0
    rate_throttled: int = 0  # accepts delayed by the broker/listener creation rate
    rate_throttle_ms: int = 0  # sum of those delays
    blocked: int = 0  # accepts that waited for a free slot (listener or broker limit)
    refused_per_ip: int = 0  # closed at once: max.connections.per.ip
    ip_throttled: int = 0  # closed after a delay: the IP's connection_creation_rate
    closed_excess: int = 0  # closed to make room for inter-broker connections


def _rate_sensor(bound: float, rate: RateConfig) -> QuotaSensor:
    # Connection-rate throttles are capped at one quota window (ConnectionQuotas.maxThrottleTimeMs).
    return QuotaSensor(float(bound), rate, max_throttle_ms=rate.window_ms)


def attempts_within_bound(sensor: QuotaSensor) -> int:
    """How many attempts (values of 1) ``sensor`` can have recorded in all and still be certain
    to measure no more than its bound, so that recording one more needs no measurement.

    The measured rate is ``sum / W``. The sum is at most the number of attempts ever recorded
    (values are 1, or -1 to take one back). W (Kafka's ``Rate.windowSize``: the time since the
    oldest sample started, padded to ``samples - 1`` whole windows) is at least
    ``(samples - 1) * window_ms``; one window less if the clock stepped back; never under 1 ms.
    Half of ``bound * W_min`` keeps float rounding in ``sum / W`` far from the bound.
    """
    if sensor.bound is None:
        return INT_MAX
    cfg = sensor.config
    shortest_window_ms = max((cfg.samples - 2) * cfg.window_ms, 1)
    return max(0, int(sensor.bound * shortest_window_ms / 2000))


class ConnectionQuotas:
    """Connection counts per IP, listener and broker, and the creation-rate sensors."""

    def __init__(self, config: ConnectionLimitsConfig,
                 ip_rates: Mapping[str | None, float] | None = None) -> None:
        self.config = config
        self.ip_counts: dict[str, int] = {}
        self.total = 0
        self.stats: dict[str, ListenerStats] = {}
        self._broker_rate = _rate_sensor(config.max_connection_creation_rate, config.rate)
        self._listener_rate: dict[str, QuotaSensor] = {}
        # Attempts recorded by the broker (key None) and listener sensors, and how many each can
        # record before a measurement could find it over its bound (attempts_within_bound).
        self._attempts: dict[str | None, int] = {}
        self._safe_attempts: dict[str | None, int] = {}
        self._ip_rate: dict[str, QuotaSensor] = {}
        self._ip_quota: dict[str, float] = {}
        self._default_ip_quota: float = UNLIMITED
        self.reconfigure(config)
        self.set_ip_rates(ip_rates or {})

    # -- configuration -------------------------------------------------------------------------

    def reconfigure(self, config: ConnectionLimitsConfig) -> None:
        """New limits; counts and rate history are kept (Kafka updates metric configs in place).
        A listener missing from ``config.listeners`` gets the broker-wide values."""
        self.config = config
        self._broker_rate.bound = float(config.max_connection_creation_rate)
        self._safe_attempts[None] = attempts_within_bound(self._broker_rate)
        for name in config.listeners:
            self.stats.setdefault(name, ListenerStats())
        for name in self.stats:
            bound = float(self.listener_limits(name).max_connection_creation_rate)
            sensor = self._listener_rate.get(name)
            if sensor is None:
                sensor = self._listener_rate[name] = _rate_sensor(bound, config.rate)
            else:
                sensor.bound = bound
            self._safe_attempts[name] = attempts_within_bound(sensor)

    def listener_limits(self, listener: str) -> ListenerLimits:
        limits = self.config.listeners.get(listener)
        if limits is None:
            return ListenerLimits(max_connections=self.config.max_connections,
                                  max_connection_creation_rate=self.config.max_connection_creation_rate)
        return limits

    def set_ip_rates(self, rates: Mapping[str | None, float]) -> None:
        """Per-IP ``connection_creation_rate`` quotas: IP -> rate, ``None`` -> the default."""
        self._ip_quota = {ip: float(v) for ip, v in rates.items() if ip is not None}
        self._default_ip_quota = float(rates.get(None, UNLIMITED))
        for ip, sensor in self._ip_rate.items():
            sensor.bound = self.ip_rate_quota(ip)

    def ip_rate_quota(self, ip: str) -> float:
        return self._ip_quota.get(ip, self._default_ip_quota)

    def _stats(self, listener: str) -> ListenerStats:
        stats = self.stats.get(listener)
        if stats is None:
            stats = self.stats[listener] = ListenerStats()
            sensor = self._listener_rate[listener] = _rate_sensor(
                float(self.listener_limits(listener).max_connection_creation_rate), self.config.rate)
            self._safe_attempts[listener] = attempts_within_bound(sensor)
        return stats

    def _record_attempt(self, key: str | None, sensor: QuotaSensor, now_ms: int) -> int:
        """``sensor.record(1.0, now_ms)``, without the measurement while it cannot throttle."""
        n = self._attempts[key] = self._attempts.get(key, 0) + 1
        if n <= self._safe_attempts[key]:
            sensor.record(1.0, now_ms, check=False)
            return 0
        return sensor.record(1.0, now_ms)

    # -- decisions -----------------------------------------------------------------------------

    def is_protected(self, listener: str) -> bool:
        """The inter-broker listener, when the broker has another one (Kafka's
        ``protectedListener``): exempt from the broker-wide count and rate."""
        return listener == self.config.inter_broker_listener and len(self.stats) > 1

    def connection_rate_throttle_ms(self, listener: str, now_ms: int) -> int:
        """Record one connection attempt; the delay before accepting it (0: none)."""
        stats = self._stats(listener)
        broker_ms = 0 if self.is_protected(listener) else self._record_attempt(None, self._broker_rate, now_ms)
        throttle_ms = max(broker_ms, self._record_attempt(listener, self._listener_rate[listener], now_ms), 0)
        if throttle_ms > 0:
            stats.rate_throttled += 1
            stats.rate_throttle_ms += throttle_ms
        return throttle_ms

    def slot_available(self, listener: str) -> bool:
        stats = self._stats(listener)
        if stats.connections >= self.listener_limits(listener).max_connections:
            return False
        if self.is_protected(listener):
            return True
        return self.total < self.config.max_connections

    def note_blocked(self, listener: str) -> None:
        """The acceptor had to wait for a slot (a counter for metrics)."""
        self._stats(listener).blocked += 1

    def admit(self, listener: str, ip: str, now_ms: int) -> Admission:
        """The per-IP checks; counts the connection when ACCEPTED."""
        stats = self._stats(listener)
        quota = self.ip_rate_quota(ip)
        if quota != UNLIMITED:
            sensor = self._ip_rate.get(ip)
            if sensor is None:
                sensor = self._ip_rate[ip] = _rate_sensor(quota, self.config.rate)
            throttle_ms = sensor.record(1.0, now_ms)
            if throttle_ms > 0:
                # Un-record it everywhere: this connection will not be accepted.
                sensor.record(-1.0, now_ms, check=False)
                if not self.is_protected(listener):
                    self._broker_rate.record(-1.0, now_ms, check=False)
                self._listener_rate[listener].record(-1.0, now_ms, check=False)
                stats.ip_throttled += 1
                return Admission(Verdict.THROTTLED, throttle_ms, quota)
        limit = self.config.max_for_ip(ip)
        if self.ip_counts.get(ip, 0) >= limit:
            stats.refused_per_ip += 1
            return Admission(Verdict.TOO_MANY, 0, limit)
        self.ip_counts[ip] = self.ip_counts.get(ip, 0) + 1
        self.total += 1
        stats.connections += 1
        stats.accepted += 1
        return _ACCEPTED

    def release(self, listener: str, ip: str) -> None:
        """A counted connection closed."""
        count = self.ip_counts.get(ip, 0)
        if count <= 0:
            raise ValueError(f"no connection counted for {ip}")
        if count == 1:
            del self.ip_counts[ip]
        else:
            self.ip_counts[ip] = count - 1
        self.total -= 1
        self._stats(listener).connections -= 1

    def max_connections_exceeded(self, listener: str) -> bool:
        """This listener should close a connection: the broker is over ``max.connections``
        because of inter-broker connections (never true for the inter-broker listener)."""
        return self.total > self.config.max_connections and not self.is_protected(listener)

    def ip_sensor(self, ip: str) -> QuotaSensor | None:
        return self._ip_rate.get(ip)

    @property
    def ip_sensor_count(self) -> int:
        return len(self._ip_rate)

    def forget_idle_ips(self, now_ms: int) -> None:
        """Drop the rate sensors of IPs with no connection and nothing in their window (keeps the
        map from growing with every address ever seen)."""
        for ip in [ip for ip, s in self._ip_rate.items() if ip not in self.ip_counts
                   and s.rate.total(now_ms) <= 0]:
            del self._ip_rate[ip]
