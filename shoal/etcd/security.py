"""How a broker reaches a production etcd (issue 28, part 3): TLS and etcd's RBAC.

``etcds://HOST:PORT[,...][/PREFIX]`` is gRPC over TLS: the members' certificates are verified with
``shoal.etcd.ssl.cafile`` (a PEM CA bundle; the system's roots when unset), and the broker presents
``shoal.etcd.ssl.certfile``/``keyfile`` to members that run with ``--client-cert-auth``. With
``shoal.etcd.user`` the client authenticates (etcd's Authenticate RPC, the password read from
``shoal.etcd.password.file``) and sends the token with every request (``EtcdClient``); it reads
the file again whenever it authenticates again (a rotated password needs no restart).

Every secret comes from a file named in the config, never from a command line; the files are read
and checked once, when the client is made (``EtcdSecurity.load``), so a broker with an unreadable
file, a key that is not its certificate's or a user without a password file does not start, in
one line (``EtcdSecurityError``). ``refusal`` turns what etcd answers a broker it will not serve (a
certificate it cannot verify, a wrong password, a user without permission on the prefix) into one
line that names the cause and the setting to fix: a broker that gets one of those while starting
stops with it instead of retrying forever (``shoal.metadata.etcd``). Nothing here logs a password
or a token.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
import stat
from typing import Callable

log = logging.getLogger(__name__)

TLS_SCHEME = "etcds://"
PLAIN_SCHEME = "etcd://"
SETTINGS = ("shoal.etcd.ssl.cafile", "shoal.etcd.ssl.certfile", "shoal.etcd.ssl.keyfile",
            "shoal.etcd.user", "shoal.etcd.password.file")


def granted_prefixes(prefix: str) -> list[str]:
    """The key prefixes a Shoal cluster on ``prefix`` reads and writes, which its etcd user's role
    must be granted (``etcdctl role grant-permission ROLE --prefix=true readwrite P`` for each):
    the metadata under ``<prefix>/``, and beside it, outside the metadata watch, the brokers' load
    reports (``shoal.cluster.load.load_key_prefix``) and quota demands
    (``shoal.quotas.demand.demand_key_prefix``)."""
    p = prefix.rstrip("/")
    return [p + "/", p + ".balancer-load/", p + ".quota-demand/"]


class EtcdSecurityError(ValueError):
    """A TLS or RBAC setting that cannot be used, or etcd refusing this broker: one line."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    """What ``EtcdSecurity.load`` read: PEM bytes for gRPC, the user and its password."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = dataclasses.field(default=None, repr=False)
    user: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class EtcdSecurity:
    """The TLS and RBAC settings of an etcd URL (``from_config``): file names, not contents."""

    tls: bool = False
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    user: str | None = None
    password_file: str | None = None

    @classmethod
    def from_config(cls, url: str, get: Callable[[str], object]) -> "EtcdSecurity":
        """The settings for ``url`` from a broker config's ``get``."""
        def opt(name: str) -> str | None:
            v = get(name)
            return str(v).strip() or None if v is not None else None

        return cls(url.startswith(TLS_SCHEME), *(opt(n) for n in SETTINGS))

    def load(self) -> Credentials:
        """Read and check the files (EtcdSecurityError, one line, for any that cannot be used)."""
        tls_files = [n for n, v in zip(SETTINGS[:3], (self.cafile, self.certfile, self.keyfile)) if v]
        if tls_files and not self.tls:
            raise EtcdSecurityError(
                f"{', '.join(tls_files)} set but shoal.metadata.store is an etcd:// URL: write etcds:// for TLS")
        if bool(self.certfile) != bool(self.keyfile):
            raise EtcdSecurityError("shoal.etcd.ssl.certfile and shoal.etcd.ssl.keyfile go together: set both or neither")
        if bool(self.user) != bool(self.password_file):
            raise EtcdSecurityError(
                "shoal.etcd.user and shoal.etcd.password.file go together: set both (the password in the file) or neither")
        ca = cert = key = None
        if self.cafile:
            ca = _read("shoal.etcd.ssl.cafile", self.cafile)
            try:
                ssl.create_default_context(cadata=ca.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as e:
                raise EtcdSecurityError(
                    f"shoal.etcd.ssl.cafile {self.cafile}: not a PEM bundle of CA certificates ({_ssl_why(e)})") from None
        if self.certfile and self.keyfile:
            cert = _read("shoal.etcd.ssl.certfile", self.certfile)
            key = _read("shoal.etcd.ssl.keyfile", self.keyfile)
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(self.certfile, self.keyfile, password=_no_password)
            except (ssl.SSLError, ValueError, TypeError) as e:
                raise EtcdSecurityError(
                    f"shoal.etcd.ssl.certfile {self.certfile} and shoal.etcd.ssl.keyfile {self.keyfile}: not a PEM "
                    f"certificate and its unencrypted private key ({_ssl_why(e)})") from None
        password = None
        if self.password_file:
            raw = _read("shoal.etcd.password.file", self.password_file)
            password = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not password:
                raise EtcdSecurityError(f"shoal.etcd.password.file {self.password_file} is empty: write the password of "
                                        f"etcd user {self.user!r} in it")
            _warn_if_readable_by_others(self.password_file)
        if password is not None and not self.tls:
            log.warning("the etcd password of user %r goes over etcd:// in clear: use etcds:// (TLS)", self.user)
        return Credentials(ca, cert, key, self.user, password)


    def reread_password(self) -> str | None:
        """The password file's password now (None: no user, or the file cannot be read or is
        empty now: the caller keeps the one it has, and this logs why)."""
        if not self.password_file:
            return None
        try:
            with open(self.password_file, "rb") as f:
                password = f.read().decode("utf-8", "replace").rstrip("\r\n")
        except OSError as e:
            log.warning("cannot read shoal.etcd.password.file %s (%s): authenticating with the password read before",
                        self.password_file, e.strerror or e)
            return None
        return password or None


def _no_password() -> str:
    raise TypeError("the key is encrypted (Shoal reads unencrypted PEM keys: protect the file instead)")


def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise EtcdSecurityError(f"cannot read {setting} {path}: {e.strerror or e}") from None


def _ssl_why(e: BaseException) -> str:
    return (getattr(e, "reason", None) or str(e) or type(e).__name__).splitlines()[0]


def _warn_if_readable_by_others(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("shoal.etcd.password.file %s can be read by other users (mode %o): chmod 600 it",
                    path, stat.S_IMODE(mode))


def _status(e: BaseException) -> tuple[str, str]:
    code = getattr(e, "code", None)
    details = getattr(e, "details", None)
    name = getattr(code() if callable(code) else None, "name", "")
    return name, str((details() if callable(details) else None) or e)


def stale_token(e: BaseException) -> bool:
    """etcd no longer takes the token (expired, its member restarted, the user's password or
    roles changed): authenticate again."""
    name, text = _status(e)
    return name == "UNAUTHENTICATED" or "auth store is old" in text


def refusal(e: BaseException, security: EtcdSecurity, prefix: str) -> str | None:
    """One line when ``e`` is etcd refusing this broker for good (a certificate, a password, a
    permission): what is wrong and what to fix. None for anything else (worth retrying)."""
    name, text = _status(e)
    line = text.splitlines()[0] if text else name
    if name == "INVALID_ARGUMENT" and "authentication failed" in text:
        return (f"etcd refused user {security.user!r}: {line}: check the password in shoal.etcd.password.file "
                f"{security.password_file} and that the user exists (etcdctl user get {security.user})")
    if name == "PERMISSION_DENIED":
        if not security.user:
            return (f"etcd refused the request ({line}): its authentication is on; set shoal.etcd.user and "
                    "shoal.etcd.password.file to a user whose role may read and write the prefix")
        return (f"etcd user {security.user!r} may not read and write the prefix {prefix} ({line}): grant its role "
                "readwrite on " + ", ".join(granted_prefixes(prefix)) + " (etcdctl role grant-permission ROLE "
                "--prefix=true readwrite PREFIX, for each)")
    if name == "FAILED_PRECONDITION" and "authentication is not enabled" in text:
        return (f"etcd's authentication is off, but shoal.etcd.user is {security.user!r}: enable it "
                "(etcdctl auth enable) or unset shoal.etcd.user and shoal.etcd.password.file")
    if not security.tls:
        return None
    lower = text.lower()
    if "hostname verification" in lower:
        return (f"the etcd member's TLS certificate does not name the host in shoal.metadata.store ({line}): "
                "use the name or address its certificate has as a subject alternative name")
    if "handshake failed" in lower and ("certificate" in lower or "verify" in lower):
        where = f"shoal.etcd.ssl.cafile {security.cafile}" if security.cafile else "the system's CA certificates"
        return f"cannot verify the etcd member's TLS certificate with {where} ({_tls_reason(line)}): set the CA that signed it"
    if "tsi_data_corrupted" in lower or "bad_certificate" in lower or "unknown_ca" in lower:
        if security.certfile:
            return (f"the etcd member refused the TLS client certificate shoal.etcd.ssl.certfile {security.certfile} "
                    f"({_tls_reason(line)}): it must be signed by a CA in etcd's --trusted-ca-file")
        return (f"the etcd member wants a TLS client certificate (--client-cert-auth; {_tls_reason(line)}): "
                "set shoal.etcd.ssl.certfile and shoal.etcd.ssl.keyfile")
    return None


def hint(e: BaseException, security: EtcdSecurity) -> str:
    """What to check, appended to why etcd could not be reached, when the failure looks like a
    plain member on an ``etcds://`` URL (its handshake read failed: the member closed the
    connection on the TLS hello); "" otherwise."""
    _, text = _status(e)
    if security.tls and "handshake read failed" in text.lower():
        return " (does the member serve TLS on that port? etcds:// needs its https:// client URLs)"
    return ""


def _tls_reason(line: str) -> str:
    """The end of gRPC's 'failed to connect to all addresses; last error: ...: <reason>'."""
    reason = line.rsplit("ipv4:", 1)[-1].partition(": ")[2] or line
    return reason.removesuffix(": OK")
