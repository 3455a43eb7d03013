"""Principals: ``User:<name>`` for SASL, the certificate subject for mTLS.

For a TLS client certificate Kafka's default principal builder uses the subject's RFC 2253 name
(``X500Principal.getName()``: RDNs last-to-first, ``CN=alice,OU=eng,O=org``), passed through
``ssl.principal.mapping.rules`` (default ``DEFAULT``: the name unchanged). ``rfc2253`` formats the
subject as Python's ``SSLObject.getpeercert()`` returns it; ``PrincipalMapper`` implements Kafka's
``SslPrincipalMapper`` rules (``RULE:pattern/replacement/[LU]``, first rule whose pattern matches
the whole name wins; no rule matching is an error, which fails the connection).

Deviation: attributes Java prints as ``OID=#hex`` are printed that way only for ``emailAddress``
(IA5String); other attribute types outside RFC 2253's keyword list keep OpenSSL's long name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

# RFC 2253 keywords (the ones Java's X500Principal.getName() prints by name).
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_AS_OID = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # IA5String


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;':
            out.append("\\" + c)
        elif (c == "#" and i == 0) or (c == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    n = len(data)
    length = bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + data).hex()


def rfc2253(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """``getpeercert()['subject']`` (RDNs in certificate order) as Java's RFC 2253 string."""
    rdns = []
    for rdn in subject:
        avas = []
        for attr, value in rdn:
            if attr in _KEYWORDS:
                avas.append(f"{_KEYWORDS[attr]}={_escape(value)}")
            elif attr in _AS_OID:
                oid, tag = _AS_OID[attr]
                avas.append(f"{oid}={_der_hex(tag, value)}")
            else:
                avas.append(f"{attr}={_escape(value)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


class MappingError(Exception):
    pass


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.default:
            return name
        assert self.pattern is not None
        if not self.pattern.fullmatch(name):
            return None
        result = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


# Kafka's SslPrincipalMapper.RULE_PARSER.
_RULE_PARSER = re.compile(
    r"\s*((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?))\s*([,\n]\s*|$)"
)


def _java_replacement(s: str) -> str:
    # Java's $1 / ${name} -> Python's \g<1> / \g<name>; a literal backslash stays literal.
    s = s.replace("\\", "\\\\")
    s = re.sub(r"\$\{(\w+)\}", r"\\g<\1>", s)
    return re.sub(r"\$(\d+)", r"\\g<\1>", s)


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` applied to an RFC 2253 distinguished name."""

    def __init__(self, rules: str | Iterable[str] = "DEFAULT") -> None:
        text = rules if isinstance(rules, str) else ",".join(rules)
        self.rules: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _RULE_PARSER.match(text, pos)
            if m is None or m.end() == pos:
                break
            pos = m.end()
            if m.group(2):
                self.rules.append(_Rule(True))
            elif m.group(3) is not None:
                try:
                    pattern = re.compile(m.group(3))
                except re.error as e:
                    raise ValueError(f"Invalid rule: {m.group(1)}: {e}") from None
                self.rules.append(_Rule(False, pattern, _java_replacement(m.group(5)), m.group(7) or ""))
            elif m.group(8):
                raise ValueError(f"Invalid rule: {m.group(8)}")
        if not self.rules:
            self.rules = [_Rule(True)]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise MappingError(f"No rules apply to {distinguished_name}, rules {self.rules}")


def principal_from_peercert(cert: dict[str, Any] | None, mapper: PrincipalMapper) -> str:
    """``User:<mapped subject>`` for a verified client certificate; ``User:ANONYMOUS`` without one."""
    if not cert or not cert.get("subject"):
        return "User:ANONYMOUS"
    return "User:" + mapper.name(rfc2253(cert["subject"]))
