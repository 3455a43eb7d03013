"""``shoal.startup.exposure_warnings`` on configs, exactly (pure: no broker). The warnings a real
``shoal serve`` logs for the other cases: tests/e2e/test_startup_warnings.py.

Issue 24, item 7: in a cluster (etcd), an inter-broker listener that authenticates no one, with no
authorizer or with User:ANONYMOUS a super user, lets any client act as a broker (follower fetches):
docs/cluster.md's quick start did exactly that, and nothing said so."""

from __future__ import annotations

import pytest

from shoal.config import BrokerConfig
from shoal.startup import exposure_warnings

ETCD = {"shoal.metadata.store": "etcd://127.0.0.1:2379/prod"}
TWO = {"listeners": "PLAINTEXT://127.0.0.1:19092,BROKER://127.0.0.1:19192",
       "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT", "inter.broker.listener.name": "BROKER"}
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
        'password="broker-secret";')
SASL_BROKERS = {**TWO, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:SASL_PLAINTEXT",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.broker.scram-sha-512.sasl.jaas.config": JAAS, "super.users": "User:broker"}


def _warnings(**settings: str) -> list[str]:
    return [w for w in exposure_warnings(BrokerConfig.load(None, settings)) if "inter-broker" in w]


def test_the_cluster_quick_start_warns_in_one_line():
    [w] = _warnings(**ETCD, **{"listeners": "PLAINTEXT://127.0.0.1:19092"})
    assert w.startswith("inter-broker listener PLAINTEXT (127.0.0.1:19092, PLAINTEXT) authenticates no one and "
                        "there is no authorizer (authorizer.class.name): any client that reaches it may act as a "
                        "broker"), w
    assert "\n" not in w and "inter.broker.listener.name" in w


def test_anonymous_super_user_on_an_unauthenticated_inter_broker_listener_warns():
    [w] = _warnings(**ETCD, **TWO, **AUTHORIZER, **{"super.users": "User:admin;User:ANONYMOUS"})
    assert "listener BROKER (127.0.0.1:19192, PLAINTEXT)" in w and "User:ANONYMOUS is in super.users" in w


@pytest.mark.parametrize("settings", [
    {"listeners": "PLAINTEXT://127.0.0.1:19092"},  # a single node (embedded store): no followers
    {**ETCD, **TWO, **AUTHORIZER, "super.users": "User:admin"},  # ANONYMOUS holds nothing
    {**ETCD, **SASL_BROKERS},  # brokers log in (no authorizer, but no anonymous client either)
], ids=["single-node", "authorizer", "sasl-inter-broker"])
def test_no_warning_when_clients_cannot_act_as_brokers(settings):
    assert _warnings(**settings) == []


def test_etcd_without_tls_beyond_loopback_warns_in_one_line():
    def etcd_warnings(url: str) -> list[str]:
        return [w for w in exposure_warnings(BrokerConfig.load(None, {"shoal.metadata.store": url}))
                if "metadata quorum" in w]

    [w] = etcd_warnings("etcd://127.0.0.1:2379,10.0.0.2:2379/prod")
    assert w.startswith("the metadata quorum is reached over etcd:// (no TLS) at 10.0.0.2:2379: ") and "\n" not in w
    assert "etcds://" in w
    assert etcd_warnings("etcd://127.0.0.1:2379,localhost:22379/prod") == []
    assert etcd_warnings("etcds://10.0.0.2:2379/prod") == []
    assert etcd_warnings("embedded") == []
