"""Kafka's broker metrics on the Prometheus endpoint (issue 16; the list is in docs/metrics.md).

Two halves, so that a request costs a few integer updates and nothing more:

* :class:`shoal.observability.requests.BrokerMetrics` — the hot path. The connection
  (``shoal.server.connection``) calls it once when a request starts, once when its response is
  ready and once when the response is handed to the socket; it adds to plain ints and lists
  (per API key: Kafka's ``RequestMetrics`` breakdown as fixed-bucket histograms; per topic: bytes
  and messages in, bytes out, requests, failures). No prometheus_client object is touched per
  request (its ``inc()``/``observe()`` take a lock each).
* :class:`shoal.observability.collector.BrokerCollector` — the scrape. It writes those numbers
  as Prometheus text (:mod:`shoal.observability.exposition`, without prometheus_client's
  per-sample validation) and reads the rest from the broker's own state when ``/metrics`` is
  asked: connections per listener, the logs of hosted partitions, consumer lag from committed
  offsets, and the event-loop lag that :class:`shoal.observability.loop.LoopLagProbe` measures.

Everything runs on the broker's event loop (the metrics endpoint answers there too), so nothing
here is locked. Present only while ``shoal.metrics.listener`` is set (``Broker.metrics`` is None
otherwise, and the connection skips every hook).
"""

from shoal.observability.requests import BrokerMetrics

__all__ = ["BrokerMetrics"]
