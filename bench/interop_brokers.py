"""The Shoal brokers that other people's test suites run against (bench/interop_librdkafka.py,
bench/interop_kafka_python.py): one broker on the embedded metadata store, or three brokers on a
real three-member etcd, all on loopback.

::

    with Target("cluster", workdir) as t:    # or "single"
        t.bootstrap                          # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        t.first                              # "127.0.0.1:P1" (a client that takes one address)

``first_node_id`` numbers the brokers from there (1 by default; kafka-python's tests assume a
broker 0, the id of their own fixture's broker). ``advertise`` sets ``advertised.listeners``
explicitly, as a properties file does (kafka-python's fixture writes it). ``extra`` adds settings.

Both use the brokers of the cluster tests (tests/cluster_harness.py, tests/etcd_cluster.py):
PLAINTEXT for the suites (principal ``User:ANONYMOUS``, a super user as in those tests), a SASL
listener and the HTTP admin API beside it. The settings are those of librdkafka's own default test
scenario (``tests/scenarios/default.json``: 4 partitions, auto-created topics, replication factor
3) and of its broker template (an ACL authorizer, ``allow.everyone.if.no.acl.found=true``), with
``min.insync.replicas=2`` on the cluster so that acks=all waits for a follower.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e")):
    if p not in sys.path:
        sys.path.insert(0, p)

from cluster_harness import Cluster, ClusterBroker  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from tenancy_fixtures import TenantBroker  # noqa: E402

# What both suites' own brokers have (librdkafka's trivup broker, kafka-python's fixture): an ACL
# authorizer that lets everyone in while a resource has no ACL at all. Shoal's authorizer answers to
# any class name. (Their brokers' clients are not super users; here User:ANONYMOUS is, as in the
# cluster tests, for the brokers' own PLAINTEXT connections to each other.)
COMMON = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
SINGLE = {**COMMON, "default.replication.factor": "1", "offsets.topic.replication.factor": "1"}
CLUSTER = {
    **COMMON,
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "min.insync.replicas": "2",
}


class Target:
    """``kind`` "single" (one broker, embedded store) or "cluster" (3 brokers on a 3-member etcd)."""

    def __init__(self, kind: str, workdir: Path | None = None, extra: dict[str, str] | None = None,
                 first_node_id: int = 1, advertise: bool = False) -> None:
        assert kind in ("single", "cluster"), kind
        self.kind = kind
        self.first_node_id = first_node_id
        self.advertise = advertise
        self._own = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"shoal-interop-{kind}-"))
        self.extra = extra or {}
        self.etcd: EtcdCluster | None = None
        self.cluster: Cluster | None = None
        self.single: TenantBroker | None = None

    @property
    def brokers(self) -> list[TenantBroker]:
        if self.cluster is not None:
            return list(self.cluster.brokers.values())
        return [self.single] if self.single is not None else []

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def first(self) -> str:
        return self.brokers[0].bootstrap

    def _advertised(self, b: TenantBroker) -> None:
        if self.advertise:  # as in a properties file: a static config, not the listeners' default
            b.overrides["advertised.listeners"] = f"PLAINTEXT://{b.bootstrap},SASL_PLAINTEXT://{b.sasl_bootstrap}"

    def start(self) -> "Target":
        if self.kind == "single":
            self.single = TenantBroker(self.workdir / "broker",
                                       {**SINGLE, "node.id": str(self.first_node_id), **self.extra})
            self._advertised(self.single)
            self.single.start()
        else:
            self.etcd = EtcdCluster(self.workdir / "etcd")
            self.etcd.start()
            url, overrides = self.etcd.url("/interop"), {**CLUSTER, **self.extra}
            self.cluster = Cluster(self.workdir / "cluster", url, overrides=overrides)
            # the harness numbers its brokers 1..3; racks are named as librdkafka's test clusters
            # name them (0101_fetch_from_follower sets client.rack to "RACK<id of a follower>")
            ids = range(self.first_node_id, self.first_node_id + 3)
            self.cluster.brokers = {
                i: ClusterBroker(self.workdir / "cluster" / f"broker{i}", url, i, f"RACK{i}", overrides) for i in ids
            }
            for b in self.cluster.brokers.values():
                self._advertised(b)
            self.cluster.start()
        return self

    def logs(self) -> list[Path]:
        return [b.log_path for b in self.brokers]

    def errors(self) -> list[str]:
        """Distinct exceptions in the brokers' logs ("broker N: AttributeError: ..."), with counts:
        a handler that raised answered UNKNOWN_SERVER_ERROR, which a suite may not notice."""
        found: dict[str, int] = {}
        for i, b in enumerate(self.brokers, 1):
            lines = b.log_text().splitlines()
            for k, line in enumerate(lines):
                if line.startswith("Traceback (most recent call last)"):
                    end = next((x for x in lines[k + 1:k + 200] if x and not x.startswith(" ")), "?")
                    key = f"broker {b.node_id if hasattr(b, 'node_id') else i}: {end[:200]}"
                    found[key] = found.get(key, 0) + 1
        return [f"{k} (x{n})" for k, n in sorted(found.items())]

    def crashed(self) -> list[str]:
        """Brokers whose process is gone (a broker must never crash on a client's input)."""
        return [b.bootstrap for b in self.brokers if b.proc is not None and b.proc.poll() is not None]

    def close(self, keep: Path | None = None) -> None:
        """Stop everything; with ``keep``, copy the broker logs there first. SIGINT and SIGTERM
        wait until it is done (a second Ctrl-C would leave brokers and etcd running)."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._close(keep)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _close(self, keep: Path | None) -> None:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for i, b in enumerate(self.brokers, 1):
                try:
                    shutil.copy(b.log_path, keep / f"broker{i}.log")
                except OSError:
                    pass
        if self.cluster is not None:
            self.cluster.close()
        if self.single is not None:
            self.single.stop()
        if self.etcd is not None:
            self.etcd.close()
        if self._own:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Target":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def describe_machine() -> str:
    import os
    import platform

    load = os.getloadavg()
    return (f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
