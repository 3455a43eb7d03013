"""SCRAM credentials (RFC 5802, RFC 7677): what the broker stores instead of passwords.

A credential is ``(salt, StoredKey, ServerKey, iterations)`` for one mechanism:

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

AlterUserScramCredentials sends ``SaltedPassword`` (never the password), so the broker derives the
two keys from it and forgets it. PLAIN is checked against the same credential by recomputing
``StoredKey`` from the offered password. Pure functions: no I/O, no clock; the salt source is an
argument so tests are exact.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Callable

from shoal.metadata import ScramCredential

# Mechanism names and their AlterUserScramCredentials / DescribeUserScramCredentials ids.
MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES: dict[int, str] = {v: k for k, v in MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# Kafka's ScramMechanism: minimum 4096 iterations; AlterUserScramCredentials refuses more than 16384.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


def hash_name(mechanism: str) -> str:
    return _HASHES[mechanism]().name


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def keys_from_salted_password(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """``(StoredKey, ServerKey)`` from ``SaltedPassword``."""
    h = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = h(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return stored_key, server_key


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    stored_key, server_key = keys_from_salted_password(mechanism, salted)
    return ScramCredential(mechanism, bytes(salt), stored_key, server_key, int(iterations))


def make_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> ScramCredential:
    """A fresh credential for ``password`` (random 32-byte salt unless one is given)."""
    if salt is None:
        salt = random_bytes(32)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Does ``password`` produce this credential? (PLAIN against a SCRAM credential.)"""
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    stored_key, _ = keys_from_salted_password(credential.mechanism, salted)
    return hmac.compare_digest(stored_key, credential.stored_key)


def check_iterations(iterations: int) -> str | None:
    """Kafka's UNACCEPTABLE_CREDENTIAL reasons for an iteration count, or None when acceptable."""
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: minimum is {MIN_ITERATIONS}"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: maximum is {MAX_ITERATIONS}"
    return None


def parse_bootstrap_users(value: str | None) -> list[tuple[str, str]]:
    """``shoal.sasl.bootstrap.users``: ``alice:secret,bob:pw`` as ``[(user, password), ...]``.

    A password may contain ``:`` (the first one separates); users and passwords cannot contain
    ``,``.
    """
    out: list[tuple[str, str]] = []
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        user, sep, password = item.partition(":")
        if not sep or not user or not password:
            raise ValueError("shoal.sasl.bootstrap.users wants USER:PASSWORD[,USER:PASSWORD...]")
        out.append((user, password))
    return out
