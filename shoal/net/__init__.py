"""The broker-to-broker wire client: one connection to a broker (:class:`Connection`: TLS, SASL,
version negotiation, pipelined requests), the client side of a listener's security
(:class:`ClientSecurity`; a broker's own, for its ``inter.broker.listener.name``, from its config:
:mod:`shoal.net.interbroker`, with the ``sasl.jaas.config`` reader :mod:`shoal.net.jaas`), the
errors of a request, and typed builders of the requests brokers send each other
(:mod:`shoal.net.requests`: Fetch, Produce of usage records, WriteTxnMarkers, AddPartitionsToTxn,
ApiVersions). Below ``cluster`` and ``replica`` in the layer table; the admin
client (:mod:`shoal.client`) is built on it too."""

from shoal.net.connection import API_VERSIONS, Connection
from shoal.net.entities import build_entity
from shoal.net.errors import ConnectionLost, KafkaError
from shoal.net.security import ClientSecurity

__all__ = ["API_VERSIONS", "ClientSecurity", "Connection", "ConnectionLost", "KafkaError", "build_entity"]
