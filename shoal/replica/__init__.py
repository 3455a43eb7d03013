"""The replica layer: each broker's ``ReplicaManager`` and one ``Partition`` per hosted partition
(role, ISR, leader epoch, high watermark, local log), with the purgatories of acks=all produce and
of fetches that wait for data. Handlers and the group coordinator reach partitions only here."""

from shoal.replica.manager import ReplicaManager
from shoal.replica.partition import FollowerState, Partition
from shoal.replica.purgatory import Purgatory

__all__ = ["FollowerState", "Partition", "Purgatory", "ReplicaManager"]
