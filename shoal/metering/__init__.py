"""Metering: per-tenant usage published by every broker, aggregated on Spark, and the capacity
report (docs/metering.md).

- :mod:`~shoal.metering.record`: the usage record (schema, version, identity) and the pure window
  arithmetic.
- :mod:`~shoal.metering.counters`: usage read from the broker metrics' counters.
- :mod:`~shoal.metering.publisher`: the broker's task that writes windows to ``__shoal_usage``.
- :mod:`~shoal.metering.pipeline`: ``shoal metering run``, the PySpark Structured Streaming job.
- :mod:`~shoal.metering.capacity`: ``shoal capacity report``.
"""

from shoal.metering.record import SCHEMA_VERSION, USAGE_TOPIC, UsageRecord

__all__ = ["SCHEMA_VERSION", "USAGE_TOPIC", "UsageRecord"]
