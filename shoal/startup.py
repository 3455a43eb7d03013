"""What an operator must hear when a broker starts: exposure that gives secrets away, and what
acks=all means on a single node. Pure functions of the config (and the metadata image); the
``serve`` command (shoal.cli.serve) logs the warnings and prints the durability note in its banner.

- PLAIN over a listener without TLS (SASL_PLAINTEXT with PLAIN in ``sasl.enabled.mechanisms``)
  on an address other hosts can reach sends every password in clear text.
- The HTTP admin API (``shoal.admin.listener``) with ``shoal.admin.authentication=none`` on such
  an address lets anyone who can reach it create tenants, users and admins.
- In a cluster (etcd), an inter-broker listener that authenticates no one (PLAINTEXT, SSL without
  ``ssl.client.auth=required``) with no authorizer, or with ``User:ANONYMOUS`` a super user, lets
  any client that reaches it act as a broker (follower fetches). This one warns on loopback too:
  every process on the host reaches a loopback listener.
- The metadata quorum reached over ``etcd://`` (no TLS) at a non-loopback address: everything in
  etcd (credentials, ACLs, tenants) crosses the network in clear; ``etcds://`` (issue 28).
- acks=all is not fsync (Kafka's default too: ``log.flush.interval.messages`` is Long.MAX and
  replication is the durability story). On a single node with replication factor 1, a power
  loss or kernel crash can lose acknowledged records; a killed process cannot (the data is in
  the page cache). ``log.flush.interval.messages=1`` fsyncs before acknowledging.

A loopback address (127.0.0.0/8, ::1, ``localhost``) gets no warning of the first two; a wildcard (``0.0.0.0``,
``::``, empty) or any other address does. Host names are resolved (the listener was just bound to
them, so this costs nothing new); one that resolves only to loopback addresses counts as loopback.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def exposure_warnings(config: Any) -> list[str]:
    """One line per listener or endpoint that exposes secrets or admin rights to the network."""
    out: list[str] = []
    protocols = config.listener_security_protocols
    for name, host, port in config.listeners:
        if protocols.get(name) != "SASL_PLAINTEXT" or is_loopback(host):
            continue
        if "PLAIN" in tuple(config.for_listener(name, "sasl.enabled.mechanisms")):
            out.append(
                f"listener {name} ({host or '*'}:{port}) accepts SASL PLAIN without TLS on a non-loopback "
                f"address: passwords cross the network in clear text. Use SASL_SSL, or only SCRAM "
                f"mechanisms in listener.name.{name.lower()}.sasl.enabled.mechanisms"
            )
    admin = config.get("shoal.admin.listener")
    if admin and str(config.get("shoal.admin.authentication")).lower() == "none":
        from shoal.admin.http_listener import parse_listener

        host, _port = parse_listener(admin)
        if not is_loopback(host):
            out.append(
                f"the HTTP admin API (shoal.admin.listener={admin}) has shoal.admin.authentication=none "
                f"on a non-loopback address: anyone who can reach it can create tenants, users and "
                f"admins. Set shoal.admin.authentication=basic, or bind it to 127.0.0.1"
            )
    found = inter_broker_exposure(config)
    if found:
        out.append(found)
    etcd = etcd_exposure(config)
    if etcd:
        out.append(etcd)
    return out


def etcd_exposure(config: Any) -> str | None:
    """The metadata quorum reached over ``etcd://`` (no TLS) at a non-loopback address: every
    SCRAM hash, ACL and tenant crosses the network in clear, and no certificate says the member
    is etcd. None for ``etcds://``, loopback members and the embedded store."""
    from shoal.etcd.client import parse_url

    url = str(config.get("shoal.metadata.store") or "")
    if not url.startswith("etcd://"):
        return None
    exposed = [f"{h}:{p}" for h, p in parse_url(url)[0] if not is_loopback(h)]
    if not exposed:
        return None
    return (f"the metadata quorum is reached over etcd:// (no TLS) at {', '.join(exposed)}: the cluster's "
            "credentials, ACLs and tenants cross the network in clear, to whoever answers there. Use etcds:// with "
            "shoal.etcd.ssl.* and an etcd user (docs/cluster.md, etcd in production)")


def inter_broker_exposure(config: Any) -> str | None:
    """The warning when any client that reaches the inter-broker listener may act as a broker.

    A leader takes a follower's fetches (and the controller's and brokers' other requests) from
    whoever holds CLUSTER_ACTION on the cluster. On a listener that authenticates nobody (PLAINTEXT,
    or SSL without ``ssl.client.auth=required``) every client is ``User:ANONYMOUS``, which holds it
    when there is no authorizer (everything is allowed) or when it is a super user: the cluster
    quick start's settings. Only a cluster (``shoal.metadata.store=etcd://`` or ``etcds://``) has followers; a
    single node's listeners are described by the other warnings. None when nothing is exposed."""
    from shoal.etcd.client import is_etcd_url
    from shoal.net.interbroker import inter_broker_listener
    from shoal.tenancy.scope import super_users

    if not is_etcd_url(str(config.get("shoal.metadata.store") or "")):
        return None
    listener = inter_broker_listener(config)
    protocol = config.listener_security_protocols.get(listener, listener)
    client_auth = str(config.for_listener(listener, "ssl.client.auth") or "none").lower()
    if not (protocol == "PLAINTEXT" or (protocol == "SSL" and client_auth != "required")):
        return None
    authorizer = config.get("authorizer.class.name")
    if authorizer and "User:ANONYMOUS" not in super_users(config):
        return None
    why = "User:ANONYMOUS is in super.users" if authorizer else "there is no authorizer (authorizer.class.name)"
    where = next((f"{h or '*'}:{p}" for n, h, p in config.listeners if n == listener), "?")
    return (f"inter-broker listener {listener} ({where}, {protocol}) authenticates no one and {why}: any client "
            f"that reaches it may act as a broker (follower fetches, CLUSTER_ACTION). Give the brokers their own "
            f"listener (inter.broker.listener.name) with SASL or ssl.client.auth=required and an authorizer, "
            f"reachable by the brokers only (docs/cluster.md)")


def durability_note(config: Any, image: Any) -> str | None:
    """The banner's durability line when acknowledged records can be lost to a power failure:
    a single broker, topics (or the default) with replication factor 1, and no fsync per
    message. None when records are fsynced before they are acknowledged or when replicated."""
    flush = int(config.get("log.flush.interval.messages"))
    if len(image.brokers) > 1:
        return None
    rf1 = int(config.get("default.replication.factor")) == 1 or any(
        t.replication_factor == 1 for t in image.topics.values()
    )
    if not rf1:
        return None
    if flush == 1:
        return ("durability: log.flush.interval.messages=1: every acknowledged record is fsynced "
                "before the answer (single node, replication factor 1)")
    return (
        "durability: single node, replication factor 1, no fsync per record (Kafka's default). "
        "acks=all means the record is in the OS page cache: a killed broker loses nothing, but a "
        "power loss or kernel crash can lose acknowledged records. For fsync before every "
        "acknowledgement set log.flush.interval.messages=1 (it costs produce throughput; see "
        "README, Durability)"
    )
