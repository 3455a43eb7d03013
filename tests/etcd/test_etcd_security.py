"""The TLS and RBAC settings of an etcd URL (``shoal.etcd.security``), without etcd: what each
setting that cannot be used says at start, in one line, and that no password is shown. The same
against a real etcd on TLS with RBAC: tests/cluster/test_etcd_production.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shoal.config import BrokerConfig, ConfigError
from shoal.etcd.client import EtcdClient, is_etcd_url, parse_url
from shoal.etcd.security import EtcdSecurity, EtcdSecurityError, granted_prefixes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "auth"))
from auth_certs import make_pki  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_etcds_urls():
    assert parse_url("etcds://a:1,b:2/prod") == ([("a", 1), ("b", 2)], "/prod")
    assert is_etcd_url("etcds://a:1") and is_etcd_url("etcd://a:1") and not is_etcd_url("embedded")
    BrokerConfig.load(None, {"shoal.metadata.store": "etcds://127.0.0.1:2379/p"})
    with pytest.raises(ConfigError, match="etcd\\[s\\]://"):
        BrokerConfig.load(None, {"shoal.metadata.store": "etcdx://127.0.0.1:2379"})


def test_from_config_reads_the_settings(pki, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    config = BrokerConfig.load(None, {
        "shoal.metadata.store": "etcds://127.0.0.1:2379/p", "shoal.etcd.ssl.cafile": str(pki.ca),
        "shoal.etcd.ssl.certfile": str(pki.client_cert), "shoal.etcd.ssl.keyfile": str(pki.client_key),
        "shoal.etcd.user": "shoal", "shoal.etcd.password.file": str(pw)})
    security = EtcdSecurity.from_config(str(config.get("shoal.metadata.store")), config.get)
    assert security == EtcdSecurity(True, str(pki.ca), str(pki.client_cert), str(pki.client_key), "shoal", str(pw))
    creds = security.load()
    assert creds.password == "s3cret" and creds.ca == pki.ca.read_bytes() and creds.key == pki.client_key.read_bytes()
    assert "s3cret" not in repr(creds) and b"PRIVATE" not in repr(creds).encode()
    client = EtcdClient([("127.0.0.1", 2379)], security=security)  # reads the files, connects nothing
    assert client.security.tls and client.member == 0


def test_settings_that_cannot_be_used_are_one_line(pki, tmp_path):
    other = make_pki(tmp_path / "other")
    empty, garbage, pw = tmp_path / "empty", tmp_path / "garbage.pem", tmp_path / "pw"
    empty.write_text("\n")
    garbage.write_text("not a certificate\n")
    pw.write_text("pw\n")
    cases = {
        EtcdSecurity(False, cafile=str(pki.ca)): "shoal.etcd.ssl.cafile set but shoal.metadata.store is an etcd:// URL",
        EtcdSecurity(True, certfile=str(pki.client_cert)): "shoal.etcd.ssl.certfile and shoal.etcd.ssl.keyfile go together",
        EtcdSecurity(True, user="shoal"): "shoal.etcd.user and shoal.etcd.password.file go together",
        EtcdSecurity(True, cafile=str(tmp_path / "missing.pem")):
            f"cannot read shoal.etcd.ssl.cafile {tmp_path / 'missing.pem'}: No such file or directory",
        EtcdSecurity(True, cafile=str(garbage)): f"shoal.etcd.ssl.cafile {garbage}: not a PEM bundle of CA certificates",
        EtcdSecurity(True, certfile=str(pki.client_cert), keyfile=str(other.client_key)): "KEY_VALUES_MISMATCH",
        EtcdSecurity(True, user="shoal", password_file=str(empty)): f"shoal.etcd.password.file {empty} is empty",
        EtcdSecurity(True, user="shoal", password_file=str(tmp_path)):
            f"cannot read shoal.etcd.password.file {tmp_path}: Is a directory",
    }
    for security, expected in cases.items():
        with pytest.raises(EtcdSecurityError) as e:
            security.load()
        assert expected in str(e.value) and "\n" not in str(e.value), (security, str(e.value))
    assert EtcdSecurity(True, user="shoal", password_file=str(pw)).load().password == "pw"


def test_the_granted_prefixes_are_every_key_shoal_uses():
    from shoal.cluster.load import load_key_prefix
    from shoal.quotas.demand import demand_key_prefix

    assert granted_prefixes("/prod/") == ["/prod/", load_key_prefix("/prod").decode(), demand_key_prefix("/prod").decode()]


class _RpcError(Exception):
    """What gRPC raises, as far as refusal and hint read it (a status code and details)."""

    def __init__(self, code: str, details: str) -> None:
        import grpc

        super().__init__(details)
        self._code, self._details = getattr(grpc.StatusCode, code), details

    def code(self):
        return self._code

    def details(self) -> str:
        return self._details


def test_what_etcd_answers_a_broker_it_refuses_is_one_line_and_the_rest_is_retried():
    from shoal.etcd.security import hint, refusal

    tls = EtcdSecurity(True, cafile="/ca.pem", certfile="/c.crt", keyfile="/c.key", user="shoal", password_file="/pw")
    refused = {
        ("INVALID_ARGUMENT", "etcdserver: authentication failed, invalid user ID or password"): "etcd refused user 'shoal'",
        ("PERMISSION_DENIED", "etcdserver: permission denied"): "may not read and write the prefix /p",
        ("UNAVAILABLE", "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake "
                        "failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: certificate signature failure: OK"):
            "cannot verify the etcd member's TLS certificate with shoal.etcd.ssl.cafile /ca.pem",
        ("UNAVAILABLE", "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Unwrap "
                        "failed (TSI_DATA_CORRUPTED)"): "refused the TLS client certificate shoal.etcd.ssl.certfile /c.crt",
    }
    for (code, details), expected in refused.items():
        line = refusal(_RpcError(code, details), tls, "/p")
        assert line is not None and expected in line and "\n" not in line, (details, line)
    for code, details in (("UNAVAILABLE", "etcdserver: no leader"), ("DEADLINE_EXCEEDED", "Deadline Exceeded"),
                          ("UNAVAILABLE", "failed to connect to all addresses; last error: ... Connection refused")):
        assert refusal(_RpcError(code, details), tls, "/p") is None  # in transit: retried
    plain_member = _RpcError("UNAVAILABLE", "last error: UNAVAILABLE: ipv4:127.0.0.1:1: Handshake read failed (Socket closed)")
    assert "does the member serve TLS" in hint(plain_member, tls)
    assert hint(plain_member, EtcdSecurity()) == "" and refusal(plain_member, tls, "/p") is None
