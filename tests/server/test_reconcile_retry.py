"""The replica manager's logs follow metadata changes; a log that cannot be created when its topic is
created (a disk error) is retried by the periodic task, not forgotten until the topic changes."""

from __future__ import annotations

import time

from broker_thread import ThreadBroker


def test_a_log_that_failed_to_create_is_retried(tmp_path) -> None:
    with ThreadBroker(tmp_path, {"log.flush.scheduler.interval.ms": "100"}) as tb:
        broker = tb.broker
        node = broker.node_id
        real = broker.logs.get_or_create
        failures = []

        def failing_once(topic, partition, config=None):
            if topic == "t" and not failures:
                failures.append(topic)
                raise OSError(28, "No space left on device")
            return real(topic, partition, config)

        broker.logs.get_or_create = failing_once
        tb.run(broker.metadata.create_topic("t", [(node,), (node,)], {}))
        assert failures == ["t"]
        assert "t" in broker.replicas._unreconciled
        deadline = time.monotonic() + 10
        while tb.call(lambda: broker.logs.get("t", 1)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tb.call(lambda: broker.logs.get("t", 0)) is not None
        assert tb.call(lambda: broker.logs.get("t", 1)) is not None
        assert not broker.replicas._unreconciled
