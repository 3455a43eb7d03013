"""TLS server contexts for SSL and SASL_SSL listeners, from Kafka's ``ssl.*`` configs.

Each config is read per listener (``listener.name.<name>.ssl.keystore.location`` before
``ssl.keystore.location``). Key material is PEM only: either ``ssl.keystore.type=PEM`` with
``ssl.keystore.location`` a file holding the certificate chain and the private key, or Shoal's
``ssl.certificate.location`` + ``ssl.key.location``; ``ssl.key.password`` decrypts an encrypted
key. ``ssl.truststore.location`` is a PEM file of CA certificates for client certificates;
``ssl.client.auth`` = none / requested (verified when sent) / required.

Deviations: no JKS or PKCS12 stores, no inline PEM (``ssl.keystore.key``), no
``ssl.endpoint.identification.algorithm`` on the broker side (it only matters to clients).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from shoal.auth.principal import PrincipalMapper

if TYPE_CHECKING:
    from shoal.config import BrokerConfig

SSL_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")

_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(Exception):
    pass


def server_context(config: "BrokerConfig", listener: str) -> ssl.SSLContext:
    """The ``SSLContext`` of ``listener``; ``TlsConfigError`` names what is missing or unreadable."""

    def get(name: str):  # type: ignore[no-untyped-def]
        return config.for_listener(listener, name)

    cert = get("ssl.certificate.location")
    key = get("ssl.key.location")
    keystore = get("ssl.keystore.location")
    if cert is None and keystore is not None:
        cert, key = keystore, None
    if cert is None:
        raise TlsConfigError(
            f"listener {listener} needs ssl.keystore.location (PEM with certificate and key) "
            "or ssl.certificate.location and ssl.key.location"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_TLS_VERSIONS[v] for v in get("ssl.enabled.protocols")]
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    ciphers = get("ssl.cipher.suites")
    try:
        if ciphers:
            ctx.set_ciphers(":".join(ciphers))
        password = get("ssl.key.password")
        ctx.load_cert_chain(cert, key, password=password)
        truststore = get("ssl.truststore.location")
        if truststore is not None:
            ctx.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"listener {listener}: cannot load TLS material: {e}") from None
    client_auth = get("ssl.client.auth")
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    if ctx.verify_mode != ssl.CERT_NONE and get("ssl.truststore.location") is None:
        raise TlsConfigError(f"listener {listener}: ssl.client.auth={client_auth} needs ssl.truststore.location")
    return ctx


def principal_mapper(config: "BrokerConfig", listener: str) -> PrincipalMapper:
    return PrincipalMapper(config.for_listener(listener, "ssl.principal.mapping.rules"))
