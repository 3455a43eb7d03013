"""Principals from certificates: RFC 2253 names as Kafka prints them; ssl.principal.mapping.rules."""

from __future__ import annotations

import ssl

import pytest

pytest.importorskip("cryptography")
from auth_certs import make_pki  # noqa: E402

from shoal.auth.principal import MappingError, PrincipalMapper, principal_from_peercert, rfc2253  # noqa: E402


def test_rfc2253_from_a_real_certificate(tmp_path):
    pki = make_pki(tmp_path)
    decoded = ssl._ssl._test_decode_cert(str(pki.client_cert))  # what getpeercert() returns
    assert rfc2253(decoded["subject"]) == "CN=alice,OU=eng,O=org"
    assert principal_from_peercert(decoded, PrincipalMapper()) == "User:CN=alice,OU=eng,O=org"
    assert principal_from_peercert({}, PrincipalMapper()) == "User:ANONYMOUS"


def test_rfc2253_escaping_and_multivalued():
    subject = ((("countryName", "US"),), (("organizationName", "A, B+C"),), (("commonName", "x"), ("userId", "7")))
    assert rfc2253(subject) == "CN=x+UID=7,O=A\\, B\\+C,C=US"
    assert rfc2253(((("emailAddress", "a@b"),),)) == "1.2.840.113549.1.9.1=#1603614062"


@pytest.mark.parametrize(
    "rules,dn,expected",
    [
        ("DEFAULT", "CN=alice,OU=eng,O=org", "CN=alice,OU=eng,O=org"),
        ("RULE:^CN=(.*?),OU=eng.*$/$1/,DEFAULT", "CN=alice,OU=eng,O=org", "alice"),
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/U", "CN=alice,OU=eng,O=org", "ALICE@ENG"),
        ("RULE:^CN=(.*?),OU=ops.*$/$1/,DEFAULT", "CN=alice,OU=eng,O=org", "CN=alice,OU=eng,O=org"),
        ("RULE:^CN=([^,]*).*$/$1/L", "CN=Bob,O=x", "bob"),
    ],
)
def test_mapping_rules(rules, dn, expected):
    assert PrincipalMapper(rules).name(dn) == expected


def test_no_rule_applies():
    with pytest.raises(MappingError):
        PrincipalMapper("RULE:^CN=(.*?),OU=ops$/$1/").name("CN=a,OU=eng")
