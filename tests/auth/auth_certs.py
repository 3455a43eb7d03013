"""Test PKI: a CA, a server certificate for 127.0.0.1/localhost, and client certificates (PEM)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    server_pem: Path  # certificate + key in one file (ssl.keystore.type=PEM)
    client_cert: Path
    client_key: Path
    ca_key: Path | None = None  # to sign more client certificates (make_client_cert)


def _name(**attrs: str) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _cert(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False, san=None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, client_subject: dict[str, str] | None = None) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name(CN="shoal-test-ca")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    srv_key = _key()
    srv = _cert(_name(CN="localhost"), srv_key, ca_name, ca_key,
                san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cli_key = _key()
    # x509.Name lists RDNs in certificate order; RFC 2253 prints them last to first.
    subject = client_subject or {"O": "org", "OU": "eng", "CN": "alice"}
    cli = _cert(_name(**subject), cli_key, ca_name, ca_key)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    out = Pki(directory / "ca.pem", directory / "server.crt", directory / "server.key",
              directory / "server.pem", directory / "client.crt", directory / "client.key", directory / "ca.key")
    out.ca.write_bytes(pem(ca))
    out.ca_key.write_bytes(_pem_key(ca_key))
    out.server_cert.write_bytes(pem(srv))
    out.server_key.write_bytes(_pem_key(srv_key))
    out.server_pem.write_bytes(pem(srv) + _pem_key(srv_key))
    out.client_cert.write_bytes(pem(cli))
    out.client_key.write_bytes(_pem_key(cli_key))
    return out


def make_client_cert(pki: Pki, stem: str, subject: dict[str, str]) -> tuple[Path, Path]:
    """Another client certificate signed by ``pki``'s CA: ``(<stem>.crt, <stem>.key)`` next to it."""
    assert pki.ca_key is not None, "this Pki was not made by make_pki"
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    key = _key()
    cert = _cert(_name(**subject), key, ca.subject, ca_key)
    cert_path, key_path = pki.ca.parent / f"{stem}.crt", pki.ca.parent / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(_pem_key(key))
    return cert_path, key_path


def make_server_cert(pki: Pki, stem: str, dns_names: list[str]) -> Path:
    """Another server certificate signed by ``pki``'s CA naming only ``dns_names`` (no address),
    certificate and key in one PEM file (``ssl.keystore.type=PEM``): ``<stem>.pem`` next to it."""
    assert pki.ca_key is not None, "this Pki was not made by make_pki"
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    key = _key()
    cert = _cert(_name(CN=dns_names[0]), key, ca.subject, ca_key, san=[x509.DNSName(n) for n in dns_names])
    path = pki.ca.parent / f"{stem}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + _pem_key(key))
    return path
