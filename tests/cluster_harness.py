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

``ProxiedCluster`` (at the end) is the same cluster with every broker<->broker and client<->broker
link through a link proxy (tests/faults/linkproxy.py), for the fault-injection tests.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import signal
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from broker_process import free_port
from polling import until  # noqa: F401  (the cluster tests import it from here)
from shoal.client import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from tenancy_fixtures import Tenant, TenantBroker  # noqa: E402,F401  (the listeners and admin API)

SESSION_MS = 3000  # etcd leases are whole seconds; 3 s: a dead broker goes within ~3-4 s

# What a broker's log says when it lost its etcd lease and registered again, and when the controller
# moved leaderships because it took brokers for gone (shoal.cluster.registration, shoal.etcd.session, shoal.cluster.controller).
LEASE_LOST = "registered again under a new lease"
_MOVED = re.compile(r"^(\S+ \S+) .*moved the leadership of (\d+) partition\(s\) \(brokers gone: \[([\d, ]*)\]\)",
                    re.MULTILINE)


def log_time(stamp: str) -> float:
    """The time of a broker's log line from its first 23 characters (``2026-11-28 23:11:43,627``,
    local time, as ``shoal serve`` logs)."""
    return datetime.datetime.strptime(stamp[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def leadership_moves(log_text: str) -> list[tuple[float, int, set[int]]]:
    """(when, partitions moved, brokers taken for gone) of each controller move in a broker's log."""
    return [(log_time(m.group(1)), int(m.group(2)), {int(x) for x in m.group(3).replace(" ", "").split(",") if x})
            for m in _MOVED.finditer(log_text)]


def started_at(log_text: str, node_id: int) -> float | None:
    """When broker ``node_id`` last logged that it started (registered, serving), if it did."""
    lines = [line for line in log_text.splitlines() if f"INFO shoal.broker: broker {node_id} started:" in line]
    return log_time(lines[-1]) if lines else None


class ClusterBroker(TenantBroker):
    """A broker of the cluster: PLAINTEXT (``port``, the operator), SASL_PLAINTEXT
    (``sasl_port``) and the HTTP admin API (``admin_url``), as tests/e2e/tenancy_fixtures.py's."""

    def __init__(self, workdir: Path, url: str, node_id: int, rack: str | None,
                 overrides: dict[str, str] | None = None) -> None:
        # The balancer (on by default in a cluster) moves replicas by itself; a test of something
        # else must see its own layout, so it is off here unless a test turns it on.
        super().__init__(workdir, {"shoal.metadata.store": url, "broker.session.timeout.ms": str(SESSION_MS),
                                   "shoal.balancer.enable": "false", **(overrides or {})})
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

    def leader_of(self, topic: str, partition: int) -> int:
        """The leader Metadata (through a live broker's direct port) names; -1 when none."""
        async def go() -> int:
            async with AdminClient(self.live[0].bootstrap, timeout=10) as c:
                t = (await c.describe_topics([topic]))[topic]
                return next(p.leader for p in t.partitions if p.partition == partition)

        return run(go())

    def log_marks(self) -> dict[int, int]:
        """Where each broker's log ends now (``logs_since``)."""
        return {n: len(b.log_text()) for n, b in self.brokers.items()}

    def logs_since(self, marks: dict[int, int]) -> dict[int, str]:
        return {n: b.log_text()[marks.get(n, 0):] for n, b in self.brokers.items()}

    def close(self) -> None:
        for b in self.brokers.values():
            b.stop()


@contextmanager
def running_cluster(etcd_cluster: Any, tmp_path_factory: Any, name: str, cls: type[Cluster] | None = None,
                    metrics: bool = False, proxied: Any = None, through: tuple[int, ...] = (),
                    prefix: str | None = None, **kwargs: Any) -> Iterator[Any]:
    """A started cluster (``cls``, ``Cluster`` unless given; ``kwargs`` go to it) on a fresh prefix
    of ``etcd_cluster`` (the session's, or an ``EtcdCluster`` of the module's own) in a fresh
    directory named ``name``, closed at the end, also when it fails to start. With ``metrics``,
    every broker also serves its metrics on a port of its own; the brokers ``through`` reach etcd
    through ``proxied`` (an ``etcd_cluster.ProxiedEtcd`` of that etcd: ``proxied.cut()`` cuts them
    off). ``prefix``: the etcd prefix (a fresh one unless given). The brokers reach an etcd on TLS
    with RBAC with its ``client_settings`` (``tests/etcd_cluster.py``: the ``shoal.etcd.*``
    files), under the ``overrides`` given. The body of a module's cluster fixture::

        @pytest.fixture(scope="module")
        def cluster(etcd_cluster, tmp_path_factory):
            with running_cluster(etcd_cluster, tmp_path_factory, "racks", racks=["dc1", "dc1", "dc2"]) as c:
                yield c
    """
    prefix = prefix or f"/{name}-{uuid.uuid4().hex[:8]}"
    settings = getattr(etcd_cluster, "client_settings", {})
    if settings:
        kwargs["overrides"] = {**settings, **(kwargs.get("overrides") or {})}
    c = (cls or Cluster)(tmp_path_factory.mktemp(name), etcd_cluster.url(prefix), **kwargs)
    if metrics:
        for b in c.brokers.values():
            b.overrides["shoal.metrics.listener"] = f"http://127.0.0.1:{free_port()}"
    for n in through:
        c[n].overrides["shoal.metadata.store"] = proxied.url(prefix)
    try:
        c.start()
        yield c
    finally:
        c.close()


# -- through link proxies (tests/faults) -----------------------------------------------------------


def _client_listener(client: str) -> str:
    return "CLIENT_" + "".join(c if c.isalnum() else "_" for c in client).upper()


class ProxiedClusterBroker(ClusterBroker):
    """A ClusterBroker with, besides PLAINTEXT (direct, the operator's and the harness's own
    view) and SASL_PLAINTEXT:

    - a listener ``B<s>`` for each broker s of the cluster, advertised at the proxy port of link
      ``b<s>->b<self>``; ``inter.broker.listener.name`` is ``B<self>``. A broker looks a peer's
      endpoint up under its OWN inter-broker listener name (as Kafka's replica fetchers do), so
      broker s reaches broker d through link ``b<s>->b<d>`` only;
    - a listener ``CLIENT_<NAME>`` per client, advertised at link ``<client>->b<self>``: a client
      bootstrapped there gets every broker's address on that listener (Metadata answers with the
      listener the request came in on), so all its connections go through its own links."""

    def __init__(self, workdir: Path, url: str, node_id: int, rack: str | None,
                 overrides: dict[str, str] | None, peers: list[int], clients: list[str]) -> None:
        super().__init__(workdir, url, node_id, rack, overrides)
        self.extra = {f"B{s}": free_port() for s in peers} | {_client_listener(c): free_port() for c in clients}
        self.advertised: dict[str, int] = {}  # listener -> proxy port, set by ProxiedCluster
        protocols = self.overrides["listener.security.protocol.map"]
        self.overrides["listener.security.protocol.map"] = protocols + "".join(f",{n}:PLAINTEXT" for n in self.extra)
        self.overrides["inter.broker.listener.name"] = f"B{node_id}"

    def listeners(self) -> list[str]:
        return super().listeners() + [f"{n}://{self.host}:{p}" for n, p in self.extra.items()]

    def serve_args(self) -> list[str]:
        args = super().serve_args()
        adv = ",".join(f"{n}://{self.host}:{p}" for n, p in self.advertised.items())
        return args + (["--override", f"advertised.listeners={adv}"] if adv else [])


class ProxiedCluster(Cluster):
    """A Cluster whose broker<->broker and client<->broker traffic goes through a
    ``faults.linkproxy.LinkProxy`` (one link per direction of each pair), so a test cuts,
    slows or throttles each link apart::

        c = ProxiedCluster(tmp_path, etcd.url("/p"), clients=["producer", "consumer"])
        c.start()
        Producer({"bootstrap.servers": c.client_bootstrap("producer"), ...})
        c.links.cut("producer->b2")              # one client link (LinkProxy's modes apply)
        c.partition({1}, {2, 3})                 # broker links between the two sides, both ways
        c.cut_etcd(1)                            # with etcd=EtcdCluster: broker 1 cut off from etcd
        c.heal()                                 # every link
        c.leader_of("t", 0); c.controller()      # roles, for a nemesis

    Link names: ``b<s>->b<d>`` (broker s connecting to broker d) and ``<client>->b<d>``. The
    harness's own calls (readiness, ``describe``, ``wait_brokers``) use the direct PLAINTEXT
    port and never cross a proxy."""

    def __init__(self, workdir: Path, url: str, size: int = 3, racks: list[str | None] | None = None,
                 overrides: dict[str, str] | None = None, clients: tuple[str, ...] | list[str] = ("client",),
                 seed: int = 0, etcd: Any = None) -> None:
        from faults.linkproxy import LinkProxy

        racks = racks or [f"dc{i}" for i in range(1, size + 1)]
        self.url, self.clients = url, list(clients)
        ids = list(range(1, size + 1))
        self.brokers = {i: ProxiedClusterBroker(workdir / f"broker{i}", url, i, racks[i - 1], overrides, ids,
                                                self.clients) for i in ids}
        self.links = LinkProxy(seed)
        # the brokers' ports are only numbers until they start: a proxy must not bind one of them
        taken = {p for b in self.brokers.values()
                 for p in (b.port, b.sasl_port, int(b.admin_url.rpartition(":")[2]), *b.extra.values())}

        def link(name: str, target: tuple[str, int]) -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return self.links.add(name, target, port)

        for d, b in self.brokers.items():
            for s in ids:
                if s == d:  # a broker never needs itself through a proxy
                    b.advertised[f"B{s}"] = b.extra[f"B{s}"]
                else:
                    b.advertised[f"B{s}"] = link(f"b{s}->b{d}", (b.host, b.extra[f"B{s}"]))
            for c in self.clients:
                name = _client_listener(c)
                b.advertised[name] = link(f"{c}->b{d}", (b.host, b.extra[name]))
        self.etcd_links: dict[int, Any] = {}
        if etcd is not None:  # each broker reaches etcd through proxies of its own (cut_etcd)
            from etcd_cluster import ProxiedEtcd

            prefix = url.removeprefix("etcd://").partition("/")[2]
            for n, b in self.brokers.items():  # links b<n>->etcd:<member>, healed with the others
                self.etcd_links[n] = ProxiedEtcd(etcd, self.links, f"b{n}->etcd")
                b.overrides["shoal.metadata.store"] = self.etcd_links[n].url(prefix)

    def client_bootstrap(self, client: str, *nodes: int) -> str:
        """``bootstrap.servers`` of a client: its proxy ports to the brokers (all, or ``nodes``)."""
        return ",".join(f"127.0.0.1:{self.links.port(f'{client}->b{n}')}" for n in (nodes or self.brokers))

    def broker_links(self, a: set[int], b: set[int]) -> list[str]:
        """Every broker link between the sides ``a`` and ``b``, both directions."""
        return [f"b{s}->b{d}" for s in sorted(a) for d in sorted(b) if s != d] + \
               [f"b{s}->b{d}" for s in sorted(b) for d in sorted(a) if s != d]

    def partition(self, a: set[int], b: set[int], mode: str = "stall", new: str = "refuse") -> list[str]:
        """Cut broker<->broker links between two sides (clients keep reaching everyone); the names."""
        names = self.broker_links(a, b)
        for n in names:
            self.links.cut(n, mode=mode, new=new)
        return names

    def cut_etcd(self, node_id: int) -> None:
        """Cut one broker off from every etcd member (needs ``etcd=`` at construction)."""
        self.etcd_links[node_id].cut()

    def heal(self) -> None:
        """Every link, etcd's included."""
        self.links.heal_all()

    def controller(self) -> int:
        return self.describe()["controller_id"]

    def close(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)  # a paused broker cannot handle SIGTERM
        super().close()
        self.links.close()  # the etcd links' too
