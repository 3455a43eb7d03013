"""A producer that never pauses and remembers every acknowledgement, for kill -9 runs (imported as
``acked_producer``; tests/e2e/test_durability_flush.py and bench/bench_durability.py)::

    with AckedProducer(bootstrap, topic) as p:
        assert p.wait_for_more(200)
        broker.kill9()
        ...
    assert not p.lost(stored)   # stored: offset -> value read back from the broker
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer


class AckedProducer:
    def __init__(self, bootstrap: str, topic: str, partition: int = 0) -> None:
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.acked: dict[int, bytes] = {}
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        with self._lock:
            if err:
                self.failed.append(str(err))
            else:
                self.acked[msg.offset()] = msg.value()

    def _run(self) -> None:
        p = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 1, "message.timeout.ms": 60000,
            "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
        })
        i = 0
        while not self._stop.is_set():
            try:
                p.produce(self.topic, value=f"m{i}".encode(), partition=self.partition, on_delivery=self._on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0.001)
        p.flush(60)

    def __enter__(self) -> "AckedProducer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_for_more(self, n: int, timeout: float = 30.0) -> bool:
        """Wait until ``n`` more records than now are acknowledged; False on timeout."""
        target = len(self.acked) + n
        deadline = time.monotonic() + timeout
        while len(self.acked) < target and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.acked) >= target

    def stop(self, timeout: float = 90.0) -> None:
        """Stop sending and wait for the outstanding deliveries."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def lost(self, stored: dict[int, bytes]) -> dict[int, bytes]:
        """Acknowledged records that are missing or different in ``stored`` (offset -> value)."""
        return {o: v for o, v in self.acked.items() if stored.get(o) != v}
