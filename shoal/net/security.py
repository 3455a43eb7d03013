"""The client side of a listener's security (TLS, SASL PLAIN/SCRAM) from Kafka client properties:
what a broker uses to reach its peers' ``inter.broker.listener.name`` (built from its config by
:mod:`shoal.net.interbroker`) and what the admin client uses for ``--command-config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True)
class ClientSecurity:
    """How to reach a listener, from Kafka client properties (``--command-config`` files):
    ``security.protocol``, ``ssl.ca.location`` (or a PEM ``ssl.truststore.location``),
    ``ssl.certificate.location`` + ``ssl.key.location`` (mTLS), ``ssl.key.password``,
    ``ssl.endpoint.identification.algorithm`` (``https`` or empty), ``sasl.mechanism``,
    ``sasl.username``, ``sasl.password``."""

    protocol: str = "PLAINTEXT"
    props: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "ClientSecurity":
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol={protocol} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        sec = cls(protocol, dict(props))
        if sec.uses_sasl:
            if sec.sasl_mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise ValueError(f"sasl.mechanism={sec.sasl_mechanism} is not supported (PLAIN, SCRAM-SHA-256/512)")
            if not sec.sasl_username or sec.sasl_password is None:
                raise ValueError("SASL needs sasl.username and sasl.password")
        return sec

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def sasl_mechanism(self) -> str:
        return self.props.get("sasl.mechanism", self.props.get("sasl.mechanisms", "PLAIN")).upper()

    @property
    def sasl_username(self) -> str | None:
        return self.props.get("sasl.username")

    @property
    def sasl_password(self) -> str | None:
        return self.props.get("sasl.password")

    def ssl_context(self) -> "ssl.SSLContext | None":
        if not self.uses_tls:
            return None
        import ssl

        ca = self.props.get("ssl.ca.location") or self.props.get("ssl.truststore.location")
        ctx = ssl.create_default_context(cafile=ca)
        if self.props.get("ssl.endpoint.identification.algorithm", "https") == "":
            ctx.check_hostname = False
        cert = self.props.get("ssl.certificate.location")
        if cert:
            ctx.load_cert_chain(cert, self.props.get("ssl.key.location"), self.props.get("ssl.key.password"))
        return ctx
