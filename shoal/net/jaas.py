"""Kafka's ``sasl.jaas.config`` text, as far as Shoal reads it: the options of one login module
entry: the ``username`` and ``password`` of a ``PlainLoginModule`` or ``ScramLoginModule``, the
``ssl.*`` options of an ``OAuthBearerLoginModule`` (the truststore its JWKS endpoint is checked
with, as Kafka's ``JaasOptionsUtils`` reads them).

Used by the broker for its own inter-broker login (``shoal.net.interbroker``) and its OAUTHBEARER
listeners (``shoal.auth``), and by the Spark connector for its ``kafka.sasl.jaas.config`` option
(``shoal.spark.options``).
"""

from __future__ import annotations

import re

_ENTRY = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b")
_OPTION = re.compile(r"""([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;]+))""")


class JaasError(ValueError):
    pass


def parse_jaas(text: str, modules: tuple[str, ...] = ("PlainLoginModule", "ScramLoginModule")) -> dict[str, str]:
    """The options of ``org.apache.kafka...PlainLoginModule required username="u" password="p";``
    (quoted with " or ', backslash escapes, or bare); ``JaasError`` for a login module not among
    ``modules`` (class names without their package)."""
    body = text.strip()
    m = _ENTRY.match(body)
    if not m or m.group(1).rpartition(".")[2] not in modules:
        raise JaasError(f"only a {' or '.join(modules)} sasl.jaas.config is supported")
    out: dict[str, str] = {}
    for k, dq, sq, bare in _OPTION.findall(body[m.end():]):
        value = dq if dq or (not sq and not bare) else (sq or bare)
        out[k] = re.sub(r"\\(.)", r"\1", value)
    return out
