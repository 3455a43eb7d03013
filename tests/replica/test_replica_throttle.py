"""Replication throttles (``shoal.replica.throttle``) exactly, on a manual clock: which partitions
a ``*.replication.throttled.replicas`` value names on a broker, that only replicas outside the
ISR count, and Kafka's windowed rate deciding when a side is over its bound."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shoal.config import LONG_MAX
from shoal.metadata import PartitionInfo, frozen_topic
from shoal.replica.throttle import FOLLOWER, LEADER, ReplicationThrottle, throttled_partitions


class Conf(dict):
    def get(self, name, default=None):  # BrokerConfig.get's shape
        return super().get(name, default)


def conf(**rates) -> Conf:
    c = Conf({"replication.quota.window.num": 2, "replication.quota.window.size.seconds": 1,
              "leader.replication.throttled.rate": LONG_MAX, "follower.replication.throttled.rate": LONG_MAX})
    c.update({f"{k}.replication.throttled.rate": v for k, v in rates.items()})
    return c


def topic(**configs):
    parts = (PartitionInfo(0, (1, 2), (1,), 1, adding=(2,)), PartitionInfo(1, (1, 2), (1, 2), 1))
    return frozen_topic(name="t", topic_id=uuid.UUID(int=1), partitions=parts, configs=configs, internal=False)


def test_throttled_partitions_on_a_broker():
    assert throttled_partitions("0:1,1:2,3:1", 1) == frozenset({0, 3})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 7) is None
    assert throttled_partitions("", 1) == frozenset() and throttled_partitions(None, 1) == frozenset()


def test_only_listed_replicas_outside_the_isr_count():
    t = topic(**{"leader.replication.throttled.replicas": "0:1,1:1", "follower.replication.throttled.replicas": "*"})
    th = ReplicationThrottle(1, lambda: conf(leader=100), lambda: 0)
    assert th.throttled(LEADER, t, t.partitions[0], 2)  # 2 is catching up
    assert not th.throttled(LEADER, t, t.partitions[1], 2)  # in sync: never held back
    assert th.leader_keys(_Image(t), 2, [("t", 0), ("t", 1), ("x", 0)]) == {("t", 0)}
    other = ReplicationThrottle(3, lambda: conf(leader=100), lambda: 0)
    assert not other.throttled(LEADER, t, t.partitions[0], 2)  # the list names broker 1 only
    assert other.throttled(FOLLOWER, t, t.partitions[0], 3)  # "*": every partition on every broker


@dataclass
class _Image:
    t: object

    @property
    def topics(self):
        return {"t": self.t}


def test_over_the_rate_as_kafkas_window():
    now = [0]
    th = ReplicationThrottle(1, lambda: conf(leader=1000), lambda: now[0])
    assert not th.exceeded(LEADER)
    th.record(LEADER, 1000)  # 1000 B over a window padded to (2 - 1) s: 1000 B/s, not above
    assert not th.exceeded(LEADER)
    th.record(LEADER, 1)
    assert th.exceeded(LEADER)
    now[0] = 2500  # the samples age out
    assert not th.exceeded(LEADER)
    unbounded = ReplicationThrottle(1, lambda: conf(), lambda: now[0])
    unbounded.record(FOLLOWER, 10**9)
    assert not unbounded.exceeded(FOLLOWER) and unbounded.leader_keys(_Image(topic()), 2, [("t", 0)]) == set()


@dataclass
class _Part:
    topic: str
    info: PartitionInfo


@dataclass
class _F:
    partition: _Part
    delayed_until: float = 0.0
    throttled: bool = False


def test_the_follower_leaves_throttled_partitions_out_while_over_its_rate():
    now = [0]
    t = topic(**{"follower.replication.throttled.replicas": "0:2"})
    th = ReplicationThrottle(2, lambda: conf(follower=10), lambda: now[0])
    ready = {("t", 0): _F(_Part("t", t.partitions[0])), ("t", 1): _F(_Part("t", t.partitions[1]))}
    assert th.follower_ready(dict(ready), _Image(t), 5.0) == ready and ready[("t", 0)].throttled
    th.record(FOLLOWER, 100)
    out = th.follower_ready(dict(ready), _Image(t), 5.0)
    assert list(out) == [("t", 1)] and ready[("t", 0)].delayed_until == 5.1
