"""N real Shoal broker processes sharing one etcd prefix: the cluster of the cluster tests.

::

    c = Cluster(tmp_path, etcd_cluster.url("/prefix"), racks=["dc1", "dc2", "dc3"])
    c.start()                       # brokers 1..N, each its own port, data dir and rack
    c[2].bootstrap                  # "127.0.0.1:PORT" of node 2
    c.kill(2)                       # SIGKILL (no shutdown: its lease expires by itself)
    c.stop(2); c.start_one(2)       # SIGTERM (lease revoked at once); start again, same dir/port
    c.wait_brokers({1, 3})          # until Metadata (through a live broker) lists exactly these
    c.wait_controller()             # until every live broker names the same live controller
    c.close()

Brokers run ``python -m shoal serve --node-id I --rack R --override shoal.metadata.store=URL``
with a short ``broker.session.timeout.ms`` (``SESSION_MS``) so a dead broker leaves quickly.
Imported as ``cluster_harness``: tests/ is on sys.path.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from shoal.client import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from tenancy_fixtures import Tenant, TenantBroker  # noqa: E402,F401  (the listeners and admin API)

SESSION_MS = 3000  # etcd leases are whole seconds; 3 s: a dead broker goes within ~3-4 s


class ClusterBroker(TenantBroker):
    """A broker of the cluster: PLAINTEXT (``port``, the operator), SASL_PLAINTEXT
    (``sasl_port``) and the HTTP admin API (``admin_url``), as tests/e2e/tenancy_fixtures.py's."""

    def __init__(self, workdir: Path, url: str, node_id: int, rack: str | None,
                 overrides: dict[str, str] | None = None) -> None:
        super().__init__(workdir, {"shoal.metadata.store": url, "broker.session.timeout.ms": str(SESSION_MS),
                                   **(overrides or {})})
        self.url, self.node_id, self.rack = url, node_id, rack

    def serve_args(self) -> list[str]:
        return super().serve_args() + ["--node-id", str(self.node_id)] + (["--rack", self.rack] if self.rack else [])

    def kill(self) -> None:
        """SIGKILL, no restart (``BrokerProcess.kill9`` restarts)."""
        self._terminate(signal.SIGKILL)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _describe(bootstrap: str) -> dict[str, Any]:
    async with AdminClient(bootstrap, timeout=10) as c:
        return await c.describe_cluster()


def until(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``cond`` (exceptions count as not yet) until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as e:  # a broker going away, a connection refused...
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s (last error: {last!r})")


class Cluster:
    def __init__(self, workdir: Path, url: str, size: int = 3, racks: list[str | None] | None = None,
                 overrides: dict[str, str] | None = None) -> None:
        racks = racks or [f"dc{i}" for i in range(1, size + 1)]
        self.url = url
        self.brokers = {
            i: ClusterBroker(workdir / f"broker{i}", url, i, racks[i - 1], overrides) for i in range(1, size + 1)
        }

    def __getitem__(self, node_id: int) -> ClusterBroker:
        return self.brokers[node_id]

    @property
    def live(self) -> list[ClusterBroker]:
        return [b for b in self.brokers.values() if b.running]

    def bootstrap(self, *nodes: int) -> str:
        return ",".join(self.brokers[n].bootstrap for n in (nodes or self.brokers))

    def start(self) -> None:
        for b in self.brokers.values():
            b.start()
        self.wait_brokers(set(self.brokers))

    def start_one(self, node_id: int) -> None:
        self.brokers[node_id].start()

    def kill(self, node_id: int) -> None:
        self.brokers[node_id].kill()

    def stop(self, node_id: int) -> None:
        self.brokers[node_id].stop()

    def describe(self, node_id: int | None = None) -> dict[str, Any]:
        b = self.brokers[node_id] if node_id is not None else self.live[0]
        return run(_describe(b.bootstrap))

    def wait_brokers(self, expected: set[int], timeout: float = 30.0) -> float:
        """Until every live broker's DescribeCluster lists exactly ``expected``; the time it took."""
        t0 = time.monotonic()
        until(lambda: all(set(self.describe(b.node_id)["brokers"]) == expected for b in self.live),
              timeout, f"brokers {sorted(expected)} listed")
        return time.monotonic() - t0

    def wait_controller(self, timeout: float = 30.0, not_: int | None = None) -> int:
        """Until every live broker names one live controller (other than ``not_``); its id."""
        def agreed() -> int | None:
            ids = {self.describe(b.node_id)["controller_id"] for b in self.live}
            live = {b.node_id for b in self.live}
            if len(ids) == 1 and (c := ids.pop()) in live and c != not_:
                return c
            return None

        return until(agreed, timeout, "one controller")

    def close(self) -> None:
        for b in self.brokers.values():
            b.stop()
