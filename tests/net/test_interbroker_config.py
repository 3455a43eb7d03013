"""``shoal.net.interbroker.inter_broker_security``: the client side of the inter-broker listener,
from Kafka's broker configs, and the one-line errors when a login is missing."""

from __future__ import annotations

import pytest

from shoal.net.interbroker import InterBrokerSecurityError, inter_broker_security
from shoal.config import BrokerConfig

LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093,TLS://127.0.0.1:9094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,TLS:SSL",
}
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p w";'
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required username='s' password=x;"


def security(**overrides: str):
    return inter_broker_security(BrokerConfig.load(overrides={**LISTENERS, **overrides}))


def test_first_listener_by_default_and_plaintext():
    sec = security()
    assert sec.protocol == "PLAINTEXT" and not sec.uses_sasl and not sec.uses_tls


def test_sasl_login_from_the_listener_prefixed_jaas_first():
    sec = security(**{"inter.broker.listener.name": "INTERNAL", "sasl.jaas.config": SCRAM,
                      "listener.name.internal.plain.sasl.jaas.config": PLAIN})
    assert (sec.protocol, sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == (
        "SASL_PLAINTEXT", "PLAIN", "b", "p w")
    sec = security(**{"inter.broker.listener.name": "INTERNAL", "sasl.jaas.config": SCRAM,
                      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"})
    assert (sec.sasl_mechanism, sec.sasl_username, sec.sasl_password) == ("SCRAM-SHA-256", "s", "x")


@pytest.mark.parametrize("overrides, message", [
    ({}, "set listener.name.internal.plain.sasl.jaas.config (or sasl.jaas.config)"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
     "sasl.jaas.config: only a PlainLoginModule or ScramLoginModule"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"b\";"},
     "sasl.jaas.config: needs username and password"),
    ({"sasl.jaas.config": PLAIN, "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol=PLAIN is not among listener INTERNAL's sasl.enabled.mechanisms"),
])
def test_missing_or_unusable_login_says_what_to_set(overrides, message):
    with pytest.raises(InterBrokerSecurityError) as e:
        security(**{"inter.broker.listener.name": "INTERNAL", **overrides})
    assert message in str(e.value)


def test_tls_needs_a_truststore_and_presents_the_keystore():
    with pytest.raises(InterBrokerSecurityError, match="set ssl.truststore.location"):
        security(**{"inter.broker.listener.name": "TLS"})
    sec = security(**{"inter.broker.listener.name": "TLS", "listener.name.tls.ssl.truststore.location": "/ca.pem",
                      "ssl.keystore.location": "/server.pem", "ssl.endpoint.identification.algorithm": ""})
    assert sec.uses_tls and not sec.uses_sasl
    assert dict(sec.props) == {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem",
                               "ssl.certificate.location": "/server.pem", "ssl.endpoint.identification.algorithm": ""}
