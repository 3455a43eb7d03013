"""An in-process broker on its own event loop in a background thread.

For tests that drive it with blocking clients (confluent-kafka, kafka-python, plain sockets) and
also need to look inside it (counters, metadata store)::

    with ThreadBroker(tmp_path, {"max.connections": "2"}) as tb:
        tb.bootstrap                       # "127.0.0.1:<port>" of the first listener
        tb.port("OTHER")                   # port of a named listener
        tb.run(tb.broker.metadata.set_broker_configs({...}))   # a coroutine, on the broker's loop
        tb.broker.connection_limits.stats  # read counters (plain ints)

Listeners default to one ``PLAINTEXT://127.0.0.1:0`` (a free port).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Coroutine, Mapping

from shoal.broker import Broker
from shoal.config import BrokerConfig


class ThreadBroker:
    def __init__(self, data_dir: Path, overrides: Mapping[str, str] | None = None) -> None:
        props = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir),
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(overrides or {})
        self.config = BrokerConfig.load(None, props)
        self.loop = asyncio.new_event_loop()
        self.broker: Broker | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="shoal-thread-broker", daemon=True)

    def start(self) -> "ThreadBroker":
        self._thread.start()
        self.broker = Broker(self.config)
        self.run(self.broker.start(), timeout=30)
        return self

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 15) -> Any:
        """Run ``coro`` on the broker's loop and return its result."""
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def call(self, fn, *args: Any, timeout: float = 15) -> Any:
        """Call a plain function on the broker's loop (for state that is not thread-safe)."""
        async def invoke() -> Any:
            return fn(*args)
        return self.run(invoke(), timeout)

    def port(self, listener: str | None = None) -> int:
        assert self.broker is not None
        for l in self.broker.listeners:
            if listener is None or l.name == listener:
                return l.port
        raise KeyError(listener)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port()}"

    def stop(self) -> None:
        if self.broker is not None:
            try:
                self.run(self.broker.stop(), timeout=30)
            finally:
                self.broker = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> "ThreadBroker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
