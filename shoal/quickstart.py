"""``shoal serve --quickstart`` (what ``make serve`` runs): one broker with what a newcomer needs to
try every feature on one machine, everything bound to loopback.

- ``PLAINTEXT://127.0.0.1:9092``: the operator's listener, as plain ``shoal serve``; its
  ``User:ANONYMOUS`` is a super user (the physical view: every tenant's topics, qualified).
- ``SASL_PLAINTEXT://127.0.0.1:9093``: the tenants' listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
- ``http://127.0.0.1:9644``: the HTTP admin API (tenants, users, namespaces) with HTTP Basic
  authentication; ``http://127.0.0.1:9645/metrics``: Prometheus metrics (no authentication, loopback).
- ACLs on (``authorizer.class.name``): a tenant's ``--admin`` users may do anything in it, others
  need ACLs, as on a shared platform.
- A bootstrap admin, ``admin``, a super user whose password is generated on first start
  (``secrets``) and written to ``<first log dir>/admin.properties`` (mode 0600) as Kafka client
  properties (``shoal --command-config``, ``kcat -F``); later starts read it back. Never a fixed
  default password. The password reaches the broker as ``shoal.sasl.bootstrap.users`` in memory,
  never on a command line; the file is written only once the broker holds its directories' locks
  (so a refused second broker changes nothing).

Each default applies only where neither ``--config`` nor a flag or ``--override`` sets the key, so
ports can be moved (``--listeners``, ``--override shoal.admin.listener=...``). A listener or endpoint
off loopback is refused: ``User:ANONYMOUS`` is a super user here.

Pure functions apart from the credentials file's (:func:`read_password`, :func:`write_credentials`,
:func:`loose_permissions`) and :func:`check`, which resolves listener host names.
"""

from __future__ import annotations

import os
import secrets
import shlex
import stat
from pathlib import Path
from typing import Any, Iterable, Mapping

ADMIN_USER = "admin"
CREDENTIALS_FILE = "admin.properties"
DEFAULTS: Mapping[str, str] = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "shoal.admin.listener": "http://127.0.0.1:9644",
    "shoal.admin.authentication": "basic",
    "shoal.metrics.listener": "http://127.0.0.1:9645",
    "shoal.metrics.authentication": "none",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class QuickstartError(ValueError):
    """``str()`` is the one line for the operator."""


def overrides(given: Mapping[str, str], file_keys: Iterable[str]) -> dict[str, str]:
    """``given`` (flags and --override) with the quickstart defaults under it and under the file."""
    taken = set(given) | set(file_keys)
    out = {k: v for k, v in DEFAULTS.items() if k not in taken}
    out.update(given)
    return out


def with_admin(bootstrap_users: str | None, password: str) -> str:
    """``shoal.sasl.bootstrap.users`` with the quickstart admin added (replacing an ``admin`` entry)."""
    kept = [u for u in (bootstrap_users or "").split(",") if u.strip() and u.split(":", 1)[0].strip() != ADMIN_USER]
    return ",".join([*kept, f"{ADMIN_USER}:{password}"])


def check(config: Any) -> None:
    """QuickstartError unless every listener and endpoint is on loopback, a SASL listener serves
    the tenants and the admin API is on."""
    from shoal.admin.http_listener import parse_listener
    from shoal.admin.metrics import parse_metrics_listener
    from shoal.startup import is_loopback

    protocols = config.listener_security_protocols
    where = "the quickstart binds loopback only (User:ANONYMOUS is a super user): "
    for name, host, port in config.listeners:
        if not is_loopback(host):
            raise QuickstartError(f"listener {name}://{host}:{port} is not on loopback; {where}use 127.0.0.1, "
                                  "or run shoal serve without --quickstart")
    if not any(protocols.get(name) in SASL_PROTOCOLS for name, _h, _p in config.listeners):
        raise QuickstartError("no SASL listener for tenants: add SASL_PLAINTEXT://127.0.0.1:PORT to --listeners")
    admin = config.get("shoal.admin.listener")
    if not admin:
        raise QuickstartError("shoal.admin.listener is unset: the quickstart needs the HTTP admin API")
    endpoints = [("shoal.admin.listener", parse_listener(admin))]
    metrics = config.get("shoal.metrics.listener")
    if metrics:
        endpoints.append(("shoal.metrics.listener", parse_metrics_listener(metrics)))
    for key, (host, _port) in endpoints:
        if not is_loopback(host):
            raise QuickstartError(f"{key}={host} is not on loopback; {where}use 127.0.0.1")


def credentials_path(config: Any) -> Path:
    return Path(config.data_dir).absolute() / CREDENTIALS_FILE


def read_password(path: Path) -> str | None:
    """The admin password kept in ``path``; None when there is no file. QuickstartError when the
    file is not usable."""
    from shoal.config import parse_properties

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeError) as e:
        raise QuickstartError(f"cannot read the admin credentials {path}: {getattr(e, 'strerror', None) or e}: "
                              "fix its permissions, or delete it to have new ones generated") from None
    props = parse_properties(text)
    password = props.get("sasl.password", "")
    if props.get("sasl.username") != ADMIN_USER or not password or "," in password:
        raise QuickstartError(f"{path} holds no sasl.username={ADMIN_USER} with a sasl.password: "
                              "delete it to have new admin credentials generated")
    return password


def new_password() -> str:
    return secrets.token_urlsafe(24)  # 192 bits; no ',' or ':' (shoal.sasl.bootstrap.users)


def credentials_text(password: str) -> str:
    return (
        "# The quickstart admin (a super user), generated by `shoal serve --quickstart` on first start.\n"
        "# Kafka client properties: shoal ... --command-config FILE, kcat -F FILE. Delete the file and\n"
        "# restart for a new password.\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={ADMIN_USER}\n"
        f"sasl.password={password}\n"
    )


def write_credentials(path: Path, password: str) -> None:
    """Create ``path`` with mode 0600 (never over an existing file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    try:
        os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
        os.write(fd, credentials_text(password).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def loose_permissions(path: Path) -> bool:
    """Whether others than the owner may read or write ``path``."""
    try:
        return bool(path.stat().st_mode & 0o077)
    except OSError:
        return False


def banner(*, plaintext: str, sasl: str, sasl_mechanisms: Iterable[str], admin_url: str,
           metrics_url: str | None, credentials: Path) -> str:
    """What the quickstart prints once the broker is up: its endpoints and the exact commands to
    create a tenant and a user and to produce and consume as that user with kcat and
    confluent-kafka. The lines after ``Try it`` are a shell script, unindented so that a copy
    pastes as it is (tests run it)."""
    cred = shlex.quote(str(credentials))
    endpoints = [
        (f"PLAINTEXT://{plaintext}", "the operator's listener: no credentials, User:ANONYMOUS is a super user"),
        (f"SASL_PLAINTEXT://{sasl}", f"the tenants' listener: SASL {', '.join(sasl_mechanisms)}"),
        (admin_url, "the HTTP admin API: tenants, users, namespaces (HTTP Basic; /openapi.json)"),
        (f"{admin_url}/ui/", "the Shoal Console: log in as a tenant's user (dana, below) or as admin"),
    ]
    if metrics_url:
        endpoints.append((f"{metrics_url}/metrics", "Prometheus metrics"))
    width = max(len(e) for e, _ in endpoints)
    lines = ["Quickstart: everything on loopback", *(f"  {e:<{width}}  {what}" for e, what in endpoints)]
    lines += [
        f"  admin, a super user: its password is in {credentials}",
        "    (generated on first start, mode 0600; Kafka client properties for --command-config and kcat -F)",
        "Try it (docs/tenancy.md's recipe then adds two isolated tenants, acme and globex, beside this one):",
        "# kcat: apt-get install kcat (make deps installs it); confluent-kafka: make serve installs it",
        f"export SHOAL_ADMIN_URL={admin_url} SHOAL_ADMIN_USER={ADMIN_USER}",
        f"export SHOAL_ADMIN_PASSWORD=\"$(sed -n 's/^sasl.password=//p' {cred})\"",
        "TENANT=$(shoal tenants create demo)    # a tenant (a logical cluster): prints its id, lkc-...",
        "echo dana-secret | shoal users create dana --tenant \"$TENANT\" --admin --password-stdin",
        "printf 'security.protocol=SASL_PLAINTEXT\\nsasl.mechanism=SCRAM-SHA-512\\nsasl.username=dana\\n"
        "sasl.password=dana-secret\\n' > dana.properties",
        f"shoal topics create orders --partitions 3 --bootstrap-server {sasl} --command-config dana.properties",
        f"echo 'k1:hello from kcat' | kcat -F dana.properties -b {sasl} -t orders -P -K:",
        f"kcat -F dana.properties -b {sasl} -t orders -C -o beginning -e -q -f '%k:%s\\n'",
        f"python3 - {sasl} dana.properties <<'EOF'    # confluent-kafka, as dana",
        "import sys, time",
        "from confluent_kafka import Consumer, Producer",
        "conf = dict(line.strip().split('=', 1) for line in open(sys.argv[2]) if '=' in line)",
        "conf['bootstrap.servers'] = sys.argv[1]",
        "p = Producer(conf)",
        "p.produce('orders', key='k2', value='hello from confluent-kafka')",
        "p.flush(10)",
        "c = Consumer({**conf, 'group.id': 'dana-app', 'auto.offset.reset': 'earliest'})",
        "c.subscribe(['orders'])",
        "seen, deadline = 0, time.time() + 60",
        "while seen < 2 and time.time() < deadline:    # kcat's record and this one",
        "    m = c.poll(1)",
        "    if m is not None and not m.error():",
        "        seen += 1",
        "        print(f'{m.key().decode()}:{m.value().decode()}')",
        "c.close()",
        "EOF",
        f"shoal topics list --bootstrap-server {plaintext}    # the operator's view: $TENANT_orders",
    ]
    return "\n".join(lines)


def script(banner_text: str) -> str:
    """The shell commands of a banner: the lines after ``Try it``."""
    return banner_text.split("\nTry it", 1)[1].split("\n", 1)[1] + "\n"
