"""Datacenters on loopback: broker processes and etcd members placed in regions, every path
between them through a link proxy (tests/faults/linkproxy.py) with the region's latency, so a
test cuts a whole datacenter off, or slows and throttles the links between two.

::

    r = Regions(tmp_path, brokers={"dc1": 3, "dc2": 3}, etcd=("dc1", "dc2", "dc3"))  # 2.5 DC
    r.start()
    r.client_bootstrap("dc2")           # a client in dc2: every broker through dc2's links
    r.brokers_in("dc1")                 # [1, 2, 3]
    r.cut("dc1"); r.heal("dc1")         # every link into and out of dc1, its etcd member too
    r.shape("dc1", "dc2", rtt_ms=60, bytes_per_s=1_000_000)
    r.cross_bytes("dc1", "dc2")         # bytes that crossed, by kind (replication, client, etcd)
    r.rtt("dc2", 1)                     # a measured Kafka round trip from dc2 to broker 1, in ms
    r.close()

Layout. Brokers are numbered 1..N in the order of ``brokers`` and get ``broker.rack`` = their
datacenter. Clients are named after their datacenter: broker listener ``CLIENT_DC2`` is advertised
at the proxy ports of links ``dc2->b<n>`` (``cluster_harness.ProxiedCluster``), so a client that
bootstraps there gets every broker's address on dc2's links, follower fetching's preferred read
replica included. Broker s reaches broker d through link ``b<s>->b<d>`` and etcd member i through
``b<s>->e<i>`` (its own datacenter's member first in its endpoint list: gRPC's pick_first uses
the nearest). The etcd members reach member i through ``peer->e<i>`` (the URL they dial), given
the inter-datacenter latency: members sit one per datacenter. ``etcd=("dc1", "dc2", "dc3")``
with brokers in dc1 and dc2 only is the 2.5-DC layout (dc3 holds only a tie-breaker member);
with brokers in all three it is 3 DCs.

Latency. ``rtt_ms`` (default 30) is the round trip between two datacenters, ``local_rtt_ms``
(default 1) inside one; each link delays each direction by half of it. Bandwidth is unlimited
unless ``shape`` sets it.

Cut. ``cut(dc)`` cuts every link with one end in ``dc`` and the other outside (broker links,
client links, broker-etcd links) and stops its etcd members with SIGSTOP: an etcd member's
outgoing peer connections go through the other members' shared ``peer->e<j>`` links, so a paused
process is how it is cut off from the quorum (its own brokers lose it too; they are cut off from
the quorum anyway). ``mode="reset", new="refuse"`` (default: connections fail at once, which
keeps drills short) or LinkProxy's ``"stall"`` / ``"hang"`` (packets dropped: timeouts decide).
Links inside ``dc``, and the other datacenters' links to each other, keep working.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from broker_process import free_port
from cluster_harness import ProxiedCluster
from etcd_cluster import EtcdCluster

RTT_MS = 30.0
LOCAL_RTT_MS = 1.0


class RegionEtcd(EtcdCluster):
    """An EtcdCluster whose members dial each other through ``peer->e<i>`` links."""

    def __init__(self, workdir: Path, size: int, peer_ports: dict[int, int]) -> None:
        super().__init__(workdir, size)
        self.peer_ports = peer_ports  # member -> proxy port in front of its peer port

    def advertised_peer_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.peer_ports[i]}" if i in self.peer_ports else super().advertised_peer_url(i)

    def pause(self, i: int) -> None:
        m = self.members[i]
        if m.running:
            os.killpg(m.proc.pid, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        m = self.members[i]
        if m.running:
            os.killpg(m.proc.pid, signal.SIGCONT)


class Regions(ProxiedCluster):
    def __init__(self, workdir: Path, brokers: dict[str, int] | None = None,
                 etcd: tuple[str, ...] | list[str] = ("dc1", "dc2", "dc3"), rtt_ms: float = RTT_MS,
                 local_rtt_ms: float = LOCAL_RTT_MS, overrides: dict[str, str] | None = None,
                 seed: int = 0) -> None:
        brokers = brokers or {"dc1": 3, "dc2": 3}
        workdir = Path(workdir)
        racks = [dc for dc, n in brokers.items() for _ in range(n)]
        self.prefix = f"/regions-{uuid.uuid4().hex[:8]}"
        super().__init__(workdir, "etcd://unset" + self.prefix, size=len(racks), racks=list(racks),
                         overrides=overrides, clients=list(brokers), seed=seed)
        self.dc_of: dict[int, str] = {n: racks[n - 1] for n in self.brokers}
        self.dcs = list(dict.fromkeys([*brokers, *etcd]))
        self.etcd_dc = list(etcd)
        self.rtt_ms, self.local_rtt_ms = rtt_ms, local_rtt_ms
        self.paused: set[str] = set()
        # etcd: the members' peer links first (their ports go into the members' command lines)
        peer_ports = {}
        self.etcd = RegionEtcd(workdir / "etcd", len(self.etcd_dc), {})
        for i, m in enumerate(self.etcd.members):
            peer_ports[i] = self.links.add(f"peer->e{i}", ("127.0.0.1", m.peer_port), free_port())
        self.etcd.peer_ports = peer_ports
        for n, b in self.brokers.items():
            order = sorted(range(len(self.etcd_dc)), key=lambda i: (self.etcd_dc[i] != self.dc_of[n], i))
            eps = [f"127.0.0.1:{self.links.add(f'b{n}->e{i}', ('127.0.0.1', self.etcd.members[i].client_port), free_port())}"
                   for i in order]
            b.overrides["shoal.metadata.store"] = "etcd://" + ",".join(eps) + self.prefix
        for name in self.links.names:
            a, z = self.ends(name)
            self._delay(name, self.rtt_ms if a != z or name.startswith("peer->") else self.local_rtt_ms)

    # -- where things are -------------------------------------------------------------------------

    def ends(self, link: str) -> tuple[str, str]:
        """The datacenters a link joins (its source's, its target's); a ``peer->`` link's source
        is every other member, reported as ``*``."""
        src, _, dst = link.partition("->")

        def dc(end: str) -> str:
            if end.startswith("b") and end[1:].isdigit():
                return self.dc_of[int(end[1:])]
            if end.startswith("e") and end[1:].isdigit():
                return self.etcd_dc[int(end[1:])]
            if end == "peer":
                return "*"
            return end  # a client, named after its datacenter

        return dc(src), dc(dst)

    @staticmethod
    def kind(link: str) -> str:
        src, _, dst = link.partition("->")
        if src == "peer":
            return "etcd_peer"
        if dst.startswith("e"):
            return "etcd"
        return "replication" if src.startswith("b") and src[1:].isdigit() else "client"

    def brokers_in(self, dc: str) -> list[int]:
        return [n for n, d in self.dc_of.items() if d == dc]

    def links_between(self, a: str, b: str) -> list[str]:
        return [n for n in self.links.names if set(self.ends(n)) == {a, b} and a != b]

    def crossing(self, dc: str) -> list[str]:
        """Links with one end in ``dc`` and the other outside (``peer->`` links excluded)."""
        return [n for n in self.links.names
                if (e := self.ends(n)) and "*" not in e and e[0] != e[1] and dc in e]

    # -- shaping and faults -----------------------------------------------------------------------

    def _delay(self, name: str, rtt_ms: float) -> None:
        self.links.delay(name, rtt_ms / 2)

    def shape(self, a: str, b: str, rtt_ms: float | None = None, bytes_per_s: float | None = None,
              kinds: tuple[str, ...] = ("replication", "client")) -> list[str]:
        """Latency and/or bandwidth (each link and direction) of the links between ``a`` and
        ``b`` of the given kinds; the names."""
        names = [n for n in self.links_between(a, b) if self.kind(n) in kinds]
        for n in names:
            if rtt_ms is not None:
                self._delay(n, rtt_ms)
            self.links.bandwidth(n, bytes_per_s)
        return names

    def cut(self, dc: str, mode: str = "reset", new: str = "refuse") -> list[str]:
        """Cut ``dc`` off from every other datacenter (see the module doc); the links cut."""
        names = self.crossing(dc)
        for n in names:
            self.links.cut(n, mode=mode, new=new)
        for i, d in enumerate(self.etcd_dc):
            if d == dc:
                self.links.cut(f"peer->e{i}", mode=mode, new=new)
                self.etcd.pause(i)
        self.paused.add(dc)
        return names

    def heal(self, dc: str | None = None) -> None:
        """Undo ``cut(dc)`` (every cut when ``dc`` is None)."""
        for d in ([dc] if dc else list(self.paused)):
            for i, e in enumerate(self.etcd_dc):
                if e == d:
                    self.etcd.resume(i)
            self.paused.discard(d)
        if dc is None:
            self.links.heal_all()
            return
        for n in self.crossing(dc) + [f"peer->e{i}" for i, e in enumerate(self.etcd_dc) if e == dc]:
            self.links.heal(n)

    # -- measures ---------------------------------------------------------------------------------

    def cross_bytes(self, a: str, b: str) -> dict[str, int]:
        """Bytes forwarded so far (both directions) over the links between ``a`` and ``b``, by
        kind, and from ``a`` to ``b`` / ``b`` to ``a`` (the way the bytes flowed)."""
        out = {"replication": 0, "client": 0, "etcd": 0, f"{a}->{b}": 0, f"{b}->{a}": 0}
        for n in self.links_between(a, b):
            s = self.links.stats(n)
            out[self.kind(n)] += s["up_bytes"] + s["down_bytes"]
            src, dst = self.ends(n)
            out[f"{src}->{dst}"] += s["up_bytes"]
            out[f"{dst}->{src}"] += s["down_bytes"]
        out["total"] = out["replication"] + out["client"] + out["etcd"]
        return out

    def rtt(self, client_dc: str, node: int, samples: int = 5, timeout: float = 10.0) -> float:
        """The shortest time (ms) of ``samples`` Kafka ApiVersions v0 round trips from a client in
        ``client_dc`` to broker ``node``, over one connection through their link: the link's delay
        is a floor the machine's load only adds to, so the minimum is what measures the link (a
        median at load 12-19 put a 1 ms local link above 20 ms)."""
        port = self.links.port(f"{client_dc}->b{node}")
        body = struct.pack(">hhih", 18, 0, 1, 3) + b"rtt"
        times = []
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            for _ in range(samples + 1):
                t0 = time.perf_counter()
                s.sendall(struct.pack(">i", len(body)) + body)
                _recv(s, struct.unpack(">i", _recv(s, 4))[0])
                times.append((time.perf_counter() - t0) * 1000)
        return min(times[1:])  # the first one also pays the connect

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        self.etcd.start(timeout)
        for b in self.brokers.values():
            b.start()
        self.wait_brokers(set(self.brokers), timeout)

    def close(self) -> None:
        for i in range(len(self.etcd_dc)):
            self.etcd.resume(i)
        try:
            super().close()
        finally:
            self.etcd.close()


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def regions_info(r: Regions) -> dict[str, Any]:
    """Where everything is, for a test's failure message or a benchmark's report."""
    return {"brokers": {dc: r.brokers_in(dc) for dc in r.dcs}, "etcd": r.etcd_dc, "rtt_ms": r.rtt_ms,
            "local_rtt_ms": r.local_rtt_ms}
