"""How a broker connects to the other brokers: the security of ``inter.broker.listener.name``.

A follower fetches from its leader on the leader's ``inter.broker.listener.name`` endpoint
(``shoal.replica.fetcher``), speaking that listener's security protocol
(``listener.security.protocol.map``), as Kafka's brokers do:

- **SASL** (SASL_PLAINTEXT, SASL_SSL): the mechanism is ``sasl.mechanism.inter.broker.protocol``
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's default GSSAPI is not supported), the
  credentials the ``username``/``password`` of
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else of ``sasl.jaas.config``
  (Kafka's ``PlainLoginModule`` / ``ScramLoginModule`` entries). The user must exist (a SCRAM
  credential: ``shoal.sasl.bootstrap.users`` makes it at start-up) and, with an authorizer,
  hold CLUSTER_ACTION on the cluster (``super.users``), or leaders refuse its fetches.
- **TLS** (SSL, SASL_SSL): the leader's certificate is checked against the listener's
  ``ssl.truststore.location`` (its host name too unless
  ``ssl.endpoint.identification.algorithm`` is empty); the broker presents its own key store
  (``ssl.keystore.location``, or ``ssl.certificate.location`` + ``ssl.key.location``) as its
  client certificate, so mTLS listeners map it to a principal as any client's.

``inter_broker_security`` is checked at start-up: a broker that could not log in to its peers
does not start (one line that says which setting is missing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.net.jaas import JaasError, parse_jaas
from shoal.net import ClientSecurity

if TYPE_CHECKING:
    from shoal.config import BrokerConfig
    from shoal.metadata import BrokerInfo


class InterBrokerSecurityError(ValueError):
    pass


def inter_broker_listener(config: "BrokerConfig") -> str:
    """``inter.broker.listener.name``, else the first listener (Kafka requires it be set when
    there are several; Shoal takes the first)."""
    name = config.get("inter.broker.listener.name")
    if name:
        return str(name)
    listeners = config.listeners
    return listeners[0][0] if listeners else "PLAINTEXT"


def _jaas(config: "BrokerConfig", listener: str, mechanism: str) -> tuple[str, str | None]:
    """(the setting's name, its text) of the broker's own SASL login."""
    prefixed = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    value = config.raw(prefixed)
    if value is not None:
        return prefixed, str(value)
    value = config.for_listener(listener, "sasl.jaas.config")
    return "sasl.jaas.config", None if value is None else str(value)


def inter_broker_endpoint(config: "BrokerConfig", broker: "BrokerInfo") -> tuple[str, int]:
    """Where ``broker`` takes inter-broker connections: its ``inter.broker.listener.name``
    endpoint, else its first (a follower's fetches, the controller's held connection)."""
    listener = config.get("inter.broker.listener.name") or (broker.endpoints[0][0] if broker.endpoints else "")
    return broker.endpoint(str(listener))


def listener_tls_client(config: "BrokerConfig", listener: str) -> dict[str, str] | None:
    """Kafka client properties for TLS to one of the broker's own listeners (a follower's fetches
    to its peers', the console's logins to its own, ``shoal.broker``): the listener's
    ``ssl.truststore.location`` checks the certificate (its host name too unless
    ``ssl.endpoint.identification.algorithm`` is empty), the broker's key store is its client
    certificate (mTLS listeners). None without a truststore: nothing to check the certificate with."""
    truststore = config.for_listener(listener, "ssl.truststore.location")
    if truststore is None:
        return None
    props = {"ssl.ca.location": str(truststore)}
    cert = config.for_listener(listener, "ssl.certificate.location")
    key = config.for_listener(listener, "ssl.key.location")
    if cert is None:
        cert, key = config.for_listener(listener, "ssl.keystore.location"), None
    if cert is not None:
        props["ssl.certificate.location"] = str(cert)
        if key is not None:
            props["ssl.key.location"] = str(key)
        password = config.for_listener(listener, "ssl.key.password")
        if password is not None:
            props["ssl.key.password"] = str(password)
    props["ssl.endpoint.identification.algorithm"] = str(config.get("ssl.endpoint.identification.algorithm"))
    return props


def inter_broker_security(config: "BrokerConfig") -> ClientSecurity:
    """The client side of the inter-broker listener; ``InterBrokerSecurityError`` says what is
    missing."""
    listener = inter_broker_listener(config)
    protocol = config.listener_security_protocols.get(listener, listener).upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise InterBrokerSecurityError(f"inter.broker.listener.name={listener}: unknown security protocol {protocol}")
    props: dict[str, str] = {"security.protocol": protocol}
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
        enabled = [m.upper() for m in config.for_listener(listener, "sasl.enabled.mechanisms")]
        if mechanism not in enabled:
            raise InterBrokerSecurityError(
                f"sasl.mechanism.inter.broker.protocol={mechanism} is not among listener {listener}'s "
                f"sasl.enabled.mechanisms ({', '.join(enabled)})")
        setting, text = _jaas(config, listener, mechanism)
        if text is None:
            raise InterBrokerSecurityError(
                f"the inter-broker listener {listener} is {protocol}: set listener.name.{listener.lower()}."
                f"{mechanism.lower()}.sasl.jaas.config (or sasl.jaas.config) to the broker's login, e.g. "
                f'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="...";')
        try:
            options = parse_jaas(text)
        except JaasError as e:
            raise InterBrokerSecurityError(f"{setting}: {e}") from None
        if not options.get("username") or options.get("password") is None:
            raise InterBrokerSecurityError(f"{setting}: needs username and password")
        props.update({"sasl.mechanism": mechanism, "sasl.username": options["username"],
                      "sasl.password": options["password"]})
    if protocol in ("SSL", "SASL_SSL"):
        tls = listener_tls_client(config, listener)
        if tls is None:
            raise InterBrokerSecurityError(
                f"the inter-broker listener {listener} is {protocol}: set ssl.truststore.location to the CA "
                "that signed the brokers' certificates")
        props.update(tls)
    try:
        return ClientSecurity.from_properties(props)
    except ValueError as e:
        raise InterBrokerSecurityError(f"inter-broker listener {listener}: {e}") from None
