"""shoal.cluster.routing: who serves a partition, and KIP-951's hint for the client."""

from __future__ import annotations

from types import MappingProxyType

from shoal.cluster import routing
from shoal.metadata import BrokerInfo, MetadataImage, PartitionInfo
from shoal.protocol.codec import response_module

PRODUCE, FETCH = 0, 1


def _image() -> MetadataImage:
    brokers = {
        1: BrokerInfo(1, "h1", 9092, "dc1", (("PLAINTEXT", "h1", 9092), ("SASL", "h1", 9192))),
        2: BrokerInfo(2, "h2", 9093, "dc2", (("PLAINTEXT", "h2", 9093), ("SASL", "h2", 9193))),
    }
    empty = MappingProxyType({})
    return MetadataImage("c", 1, MappingProxyType(brokers), empty, empty, empty)


def test_current_leader_by_version():
    p = PartitionInfo(0, (2, 1), (2, 1), leader=2, leader_epoch=7)
    cl = routing.current_leader(response_module(PRODUCE, 10), p)["current_leader"]
    assert (cl.leader_id, cl.leader_epoch) == (2, 7)
    assert routing.current_leader(response_module(PRODUCE, 9), p) == {}  # no field before v10
    assert routing.current_leader(response_module(FETCH, 11), p) == {}
    assert routing.current_leader(response_module(FETCH, 12), p)["current_leader"].leader_id == 2


def test_node_endpoints_on_the_clients_listener_live_leaders_only():
    image = _image()
    eps = routing.node_endpoints(response_module(PRODUCE, 12), image, [2, 2, 1, -1, 7], "SASL")
    assert [(e.node_id, e.host, e.port, e.rack) for e in eps] == [(1, "h1", 9192, "dc1"), (2, "h2", 9193, "dc2")]
    assert routing.node_endpoints(response_module(PRODUCE, 9), image, [2], "SASL") == ()
    assert routing.node_endpoints(response_module(FETCH, 15), image, [2], "SASL") == ()
    assert len(routing.node_endpoints(response_module(FETCH, 16), image, [2], "PLAINTEXT")) == 1
