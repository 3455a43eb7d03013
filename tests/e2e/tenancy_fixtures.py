"""A broker with two tenants, for the tenancy tests (imported as ``tenancy_fixtures``).

``TenantCluster`` runs one ``shoal serve`` subprocess (tests/broker_process.py) with

- a SASL_PLAINTEXT listener for the tenants' clients (SCRAM users made through the admin API);
- a PLAINTEXT listener for the operator: principal ``User:ANONYMOUS``, a super user, the
  physical view (``operator_conf``);
- the HTTP admin API (``shoal.admin.listener``), through which tenants ``a`` and ``b`` are made,
  each with one user (more with :meth:`Tenant.add_user`).

Use the ``tenants`` fixture (module scope) as it is, or make one with other broker settings::

    from tenancy_fixtures import tenant_cluster, tenants  # noqa: F401  (fixtures)

    @pytest.fixture(scope="module")
    def acl_tenants():
        yield from tenant_cluster({"authorizer.class.name": "shoal"})

    def test_x(tenants):
        Consumer({**tenants.a.conf(), "group.id": "g"})        # confluent-kafka, tenant a
        KafkaConsumer(**tenants.b.kafka_python())              # kafka-python, tenant b
        AIOKafkaConsumer(**tenants.a.aiokafka())               # aiokafka, tenant a
        AdminClient(tenants.operator_conf())                   # the physical view

Metadata the wire and HTTP APIs cannot set yet (tenant ACLs, tenant administrators) is written
with :meth:`TenantCluster.edit_metadata`: the broker stops, the coroutine edits its embedded store,
the broker starts again on the same ports.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from broker_process import BrokerProcess, free_port, http_json

OPERATOR = "User:ANONYMOUS"
MECHANISM = "SCRAM-SHA-512"


class TenantBroker(BrokerProcess):
    """A BrokerProcess with PLAINTEXT (``port``, the operator), SASL_PLAINTEXT (``sasl_port``)
    and the HTTP admin API (``admin_url``)."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        super().__init__(workdir)
        self.sasl_port = free_port()
        self.admin_url = f"http://127.0.0.1:{free_port()}"
        self.overrides = {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "shoal.admin.listener": self.admin_url,
            "super.users": OPERATOR,
            "group.initial.rebalance.delay.ms": "0",
            **(overrides or {}),
        }

    @property
    def sasl_bootstrap(self) -> str:
        return f"{self.host}:{self.sasl_port}"

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.host}:{self.sasl_port}"]

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin API call: (HTTP status, decoded JSON body)."""
        return http_json(self.admin_url, method, path, body)


class TlsTenantBroker(TenantBroker):
    """A TenantBroker with two TLS listeners more, on a test CA (tests/auth/auth_certs.py):
    SASL_SSL (``sasl_ssl_port``) and MTLS, SSL with a required client certificate
    (``mtls_port``). A certificate's CN is its principal's user (``ssl.principal.mapping.rules``),
    so a user assigned to a tenant (a password is not needed) logs in with ``client_cert(user)``."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        certs = str(Path(__file__).resolve().parent.parent / "auth")
        if certs not in sys.path:
            sys.path.insert(0, certs)
        from auth_certs import make_pki

        self.pki = make_pki(workdir / "pki")
        self.sasl_ssl_port, self.mtls_port = free_port(), free_port()
        tls = {
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.server_pem),
            "ssl.truststore.location": str(self.pki.ca),
            "listener.name.mtls.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        }
        super().__init__(workdir, {**tls, **(overrides or {})})

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_SSL://{self.host}:{self.sasl_ssl_port}",
                                      f"MTLS://{self.host}:{self.mtls_port}"]

    def client_cert(self, user: str) -> tuple[Path, Path]:
        """(certificate, key) of a client certificate whose subject is ``CN=<user>``."""
        from auth_certs import make_client_cert

        return make_client_cert(self.pki, f"client-{user}", {"CN": user})


@dataclass
class Tenant:
    """One logical cluster and its users (user -> password), with client settings for each."""

    broker: TenantBroker
    tenant_id: str
    users: dict[str, str] = field(default_factory=dict)

    @property
    def user(self) -> str:
        return next(iter(self.users))

    @property
    def prefix(self) -> str:
        return self.tenant_id + "_"

    def add_user(self, user: str, password: str | None = None, *, admin: bool = False) -> str:
        """A SCRAM user of this tenant (``admin``: a tenant administrator)."""
        password = password or f"{user}-secret"
        status, body = self.broker.http(
            "POST", f"/v1/tenants/{self.tenant_id}/users",
            {"user": user, "password": password, "mechanism": MECHANISM, "admin": admin},
        )
        assert status == 201, body
        self.users[user] = password
        return user

    def conf(self, user: str | None = None) -> dict[str, Any]:
        """confluent-kafka (librdkafka) settings."""
        user = user or self.user
        return {
            "bootstrap.servers": self.broker.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user],
        }

    def kafka_python(self, user: str | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments."""
        user = user or self.user
        return dict(
            bootstrap_servers=self.broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=MECHANISM, sasl_plain_username=user, sasl_plain_password=self.users[user],
        )

    aiokafka = kafka_python  # aiokafka takes the same keyword arguments


@dataclass
class TenantCluster:
    broker: TenantBroker
    a: Tenant
    b: Tenant

    def operator_conf(self) -> dict[str, Any]:
        """confluent-kafka settings of the operator (PLAINTEXT, physical view, super user)."""
        return {"bootstrap.servers": self.broker.bootstrap}

    def create_tenant(self, display_name: str, user: str) -> Tenant:
        status, body = self.broker.http("POST", "/v1/tenants", {"display_name": display_name})
        assert status == 201, body
        t = Tenant(self.broker, body["tenant_id"])
        t.add_user(user)
        return t

    def delete_tenant(self, tenant: Tenant) -> None:
        status, body = self.broker.http("DELETE", f"/v1/tenants/{tenant.tenant_id}")
        assert status == 200, body

    def edit_metadata(self, edit: Callable[[Any], Awaitable[None]]) -> None:
        """Stop the broker, ``await edit(store)`` on its EmbeddedMetadataStore, start it again."""
        from shoal.metadata.embedded import EmbeddedMetadataStore

        self.broker.stop()
        path = self.broker.data_dir / "__metadata" / "metadata.json"
        node_id = int(json.loads(path.read_text()).get("node_id") or 1)

        async def run() -> None:
            store = EmbeddedMetadataStore(path, node_id=node_id)
            await store.start()
            try:
                await edit(store)
            finally:
                await store.close()

        asyncio.run(run())
        self.broker.start()


def tenant_cluster(overrides: dict[str, str] | None = None, broker_class: type[TenantBroker] | None = None):
    """Generator for a module fixture: a started TenantCluster with tenants ``a`` (user
    ``alice``) and ``b`` (user ``bob``); stopped and removed afterwards. ``broker_class``:
    :class:`TenantBroker` (default) or :class:`TlsTenantBroker`."""
    workdir = Path(tempfile.mkdtemp(prefix="shoal-tenancy-"))
    broker = (broker_class or TenantBroker)(workdir, overrides)
    broker.start()
    try:
        cluster = TenantCluster(broker, None, None)  # type: ignore[arg-type]
        cluster.a = cluster.create_tenant("Tenant A", "alice")
        cluster.b = cluster.create_tenant("Tenant B", "bob")
        yield cluster
    finally:
        broker.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def tenants():
    """Two tenants on one SASL_PLAINTEXT + PLAINTEXT broker (see the module docstring)."""
    yield from tenant_cluster()


def metrics(cluster: TenantCluster) -> str:
    """The broker's Prometheus text (its ``shoal.metrics.listener`` must be set)."""
    url = cluster.broker.overrides["shoal.metrics.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample of ``name`` with exactly ``labels`` from Prometheus text, None if absent."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return None
