"""What an admin command says to do when the broker refuses it for who it is: one line in place
of a bare error code or "connection closed".

- wire commands (``shoal topics|configs|groups|acls|quotas|scram|cluster``):
  a listener that needs SASL when no credentials were given (the broker closes the connection; a
  second connection's SaslHandshake tells whether the listener speaks SASL and which mechanisms),
  refused credentials (SASL_AUTHENTICATION_FAILED), a mechanism the listener does not offer,
  credentials sent to a listener without SASL (ILLEGAL_SASL_STATE), and the *_AUTHORIZATION_FAILED
  codes (the principal, ``super.users``, ``shoal acls add``);
  a plaintext client on a TLS listener (a TLS handshake on a second connection tells) and a TLS
  client on a plaintext one (a plaintext ApiVersions tells);
- HTTP admin API commands (``shoal tenants|users|namespaces``): 401 (``SHOAL_ADMIN_USER`` and
  ``SHOAL_ADMIN_PASSWORD``) and 403 (``super.users``, tenant administrators);
- refused config changes (``shoal configs``, ``shoal topics create|alter --config``): an unknown
  name (the closest known one), a static config (the file and a restart), a value of the wrong
  type (the type and default), a broker asked for another's configs.

:func:`explain`, :func:`http_hint` and :func:`config_hint` are pure; :func:`explain_lost` may open
two connections.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

AUTHORIZATION_FAILED = (
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
)
# Refusals while connecting (exit status 3, as an unreachable broker): the credentials or the
# security protocol do not fit the listener.
CONNECT_ERRORS = ("SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE", "UNSUPPORTED_SASL_MECHANISM")
SASL_PROPS = "security.protocol=SASL_PLAINTEXT (SASL_SSL on TLS), sasl.mechanism, sasl.username, sasl.password"


def props_of(args: Any) -> dict[str, str]:
    """The ``--command-config`` properties of ``args`` ({} when none or unreadable)."""
    try:
        return client_props(getattr(args, "command_config", None))
    except (OSError, ValueError):
        return {}


def client_props(path: str | None) -> dict[str, str]:
    """The Kafka client properties in the ``--command-config`` file (``{}`` without one). Here,
    not in ``cli.common`` (which re-exports it): common imports this module."""
    if path is None:
        return {}
    from shoal.config import parse_properties

    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def _principal(props: Mapping[str, str]) -> str:
    if props.get("security.protocol", "PLAINTEXT").upper().startswith("SASL") and props.get("sasl.username"):
        return f"User:{props['sasl.username']}"
    return "User:ANONYMOUS"


def hint(code_name: str, props: Mapping[str, str], command_config: str | None) -> str | None:
    """What to do about a wire error ``code_name`` met with these client properties, or None."""
    where = command_config or "the --command-config file"
    if code_name == "SASL_AUTHENTICATION_FAILED":
        return (f"the broker refused the credentials of user {props.get('sasl.username', '?')!r} "
                f"({props.get('sasl.mechanism', 'PLAIN').upper()}): check sasl.username and sasl.password in {where} "
                f"(a user's SCRAM credentials are set with `shoal scram set` or `shoal users create`, both "
                f"mechanisms unless --mechanism named one; `shoal scram describe USER` lists those it has)")
    if code_name == "UNSUPPORTED_SASL_MECHANISM":
        return (f"this listener does not offer sasl.mechanism={props.get('sasl.mechanism', 'PLAIN').upper()}: "
                f"set one of its sasl.enabled.mechanisms in {where}")
    if code_name == "ILLEGAL_SASL_STATE":
        return (f"this listener does not use SASL: set security.protocol=PLAINTEXT (or SSL) in {where}, "
                f"or connect to the broker's SASL listener")
    if code_name in AUTHORIZATION_FAILED:
        who = _principal(props)
        if who == "User:ANONYMOUS":
            return (f"this connection is not authenticated ({who}): connect to the SASL listener with "
                    f"--command-config ({SASL_PROPS}) as a user that may do this, or add {who} to super.users "
                    f"in the broker config")
        return (f"{who} may not do this: add it to super.users in the broker config, or grant it an ACL "
                f"(`shoal acls add --allow-principal {who} ...` as a super user)")
    return None


def explain(error: Any, args: Any) -> str:
    """``error`` (a KafkaError) and what to do, as one line (without the command's name)."""
    text = str(error)
    code = getattr(error, "code_name", "")
    found = hint(code, props_of(args), getattr(args, "command_config", None))
    if found is None and code in ("INVALID_CONFIG", "INVALID_REQUEST") and getattr(args, "topics_command", None):
        # shoal topics create|alter --config K=V: the topic config names and types
        keys = [str(c).split("=", 1)[0].strip() for c in (getattr(args, "config", None) or [])]
        found = config_hint(code, getattr(error, "message", None) or text, keys, topic=True)
    return f"{text}: {found}" if found else text


async def sasl_mechanisms(bootstrap: str, timeout: float) -> list[str] | None:
    """The mechanisms of a listener that speaks SASL, or None (it does not, or cannot be asked):
    a SaslHandshake on a fresh connection, as a client would begin."""
    from shoal.client import AdminClient, KafkaError, build_entity
    from shoal.protocol import codec

    client = AdminClient(bootstrap, client_id="shoal-cli-probe", timeout=timeout)
    try:
        await client.connect()
        conn = client._conn()
        version = conn.version_for(17)
        body = build_entity(codec.request_type(17, version), {"mechanism": "PLAIN"})
        resp = await conn.send(17, version, body)
    except (KafkaError, OSError, asyncio.TimeoutError):
        return None
    finally:
        await client.close()
    code = int(resp.error_code)
    if code in (0, 33):  # NONE, UNSUPPORTED_SASL_MECHANISM: a SASL listener, listing its mechanisms
        return list(resp.mechanisms) or ["PLAIN"]
    return None


async def speaks_tls(bootstrap: str, timeout: float) -> bool:
    """Whether the listener at ``bootstrap`` (its first address) speaks TLS: a TLS handshake that
    completes, or that the server ends with a TLS alert (it wants a client certificate). A
    plaintext Kafka listener closes the connection on a ClientHello instead."""
    import ssl

    host, _sep, port = bootstrap.split(",")[0].strip().rpartition(":")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only asking whether it speaks TLS, not trusting it
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port), ssl=ctx), timeout)
    except ssl.SSLError as e:
        return "ALERT" in str(e.reason or "").upper()
    except (OSError, ValueError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


async def speaks_plaintext(bootstrap: str, timeout: float) -> bool:
    """Whether the listener at ``bootstrap`` answers a plaintext ApiVersions (it has no TLS)."""
    from shoal.client import AdminClient, KafkaError

    client = AdminClient(bootstrap, client_id="shoal-cli-probe", timeout=timeout)
    try:
        await client.connect()
        return True
    except (KafkaError, OSError, asyncio.TimeoutError):
        return False
    finally:
        await client.close()


def explain_lost(error: Any, args: Any) -> str:
    """A lost connection, explained when the listener needs SASL the client did not use, or speaks
    TLS to a client that does not."""
    text = getattr(error, "message", None) or str(error)
    props = props_of(args)
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    timeout = min(float(args.timeout), 10.0)
    if protocol in ("SSL", "SASL_SSL"):
        # the TLS handshake failed: is it a listener without TLS (it answers a plaintext ApiVersions)?
        try:
            plain = asyncio.run(speaks_plaintext(args.bootstrap_server, timeout))
        except Exception:
            plain = False
        if not plain:
            return text
        wanted = "SASL_PLAINTEXT" if protocol == "SASL_SSL" else "PLAINTEXT"
        where = getattr(args, "command_config", None) or "the --command-config file"
        return (f"{text.rstrip(': ')}: this listener does not speak TLS: set security.protocol={wanted} in "
                f"{where}, or connect to the broker's TLS listener")
    if text.startswith("cannot connect"):
        return text
    if protocol == "PLAINTEXT":
        try:
            mechanisms = asyncio.run(sasl_mechanisms(args.bootstrap_server, timeout))
        except Exception:  # the hint is a courtesy; the error stands without it
            mechanisms = None
        if mechanisms:
            return (f"{text}: the listener at {args.bootstrap_server} requires SASL authentication "
                    f"(mechanisms {', '.join(mechanisms)}): give --command-config FILE with {SASL_PROPS}")
    try:
        tls = asyncio.run(speaks_tls(args.bootstrap_server, timeout))
    except Exception:
        tls = False
    if tls:
        wanted = "SASL_SSL" if protocol == "SASL_PLAINTEXT" else "SSL"
        return (f"{text}: this listener speaks TLS: use --command-config with security.protocol={wanted} "
                f"(and ssl.ca.location, the CA that signed the broker's certificate)")
    return text


def http_hint(status: int, user: str | None) -> str | None:
    """What to do about an HTTP admin API refusal."""
    if status == 401 and not user:
        return ("the admin API requires authentication: set SHOAL_ADMIN_USER and SHOAL_ADMIN_PASSWORD "
                "(a user in super.users, or a tenant administrator for its own tenant)")
    if status == 401:
        return f"the admin API refused the credentials of SHOAL_ADMIN_USER={user}: check SHOAL_ADMIN_PASSWORD"
    if status == 403:
        return (f"User:{user or 'ANONYMOUS'} may not do this: add it to super.users in the broker config "
                f"(a tenant administrator manages only its own tenant)")
    return None


# -- configs: what to do about a refused config change (shoal configs, shoal topics alter) ------

_TYPE_WORDS = {
    "int": "an integer", "short": "an integer", "long": "an integer", "double": "a number",
    "boolean": "true or false", "list": "a comma-separated list", "string": "a string",
    "password": "a string", "class": "a class name",
}


def _closest(name: str, known: Any) -> str | None:
    import difflib

    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return near[0] if near else None


def config_hint(code_name: str, message: str, keys: list[str], *, topic: bool = False) -> str | None:
    """What to do about ``code_name``/``message`` answered to a change of ``keys``: an unknown name
    (the closest known one), a static config (it is read-only at run time: the file and a restart),
    a value of the wrong type (the type it takes and its default), a broker asked for another
    broker's configs. Pure; None when there is nothing to add."""
    import re

    from shoal.config import BROKER_CONFIGS, TOPIC_CONFIGS, format_value

    known: Any = TOPIC_CONFIGS if topic else BROKER_CONFIGS
    kind = "topic" if topic else "broker"
    m = re.search(r"Unexpected broker id, expected (\d+)", message)
    if m:
        return (f"a broker describes and alters only its own configs: send this to that broker "
                f"(its address as --bootstrap-server), or use --broker {m.group(1)} here, or --broker-defaults")
    named = re.findall(r"'([^']+)'", message) if "Cannot update these configs dynamically" in message else []
    m = re.search(r"(?:for configuration |Unknown topic config name: )(\S+?)(?::|$)", message)
    if m:
        named = [m.group(1)]
    parts = []
    for key in named or (keys if len(keys) == 1 else []):
        d = known.get(key)
        if d is None:
            near = _closest(key, known)
            parts.append(f"{key} is not a {kind} config" + (f": did you mean {near}?" if near else
                         f" (`shoal configs describe --broker ID --all` lists the broker's)" if not topic else ""))
        elif not topic and not d.dynamic and code_name == "INVALID_REQUEST":
            parts.append(f"{key} is a static broker config, read-only while the broker runs: set it in the "
                         f"broker's server.properties (--config) or with `shoal serve --override {key}=...` "
                         f"and restart the broker")
        elif code_name == "INVALID_CONFIG":
            fallback = BROKER_CONFIGS.get(d.broker) if topic else d  # a topic's default is its broker config's
            default = format_value(fallback.type, fallback.default) if fallback is not None else None
            parts.append(f"{key} takes {_TYPE_WORDS.get(d.type, d.type)}"
                         + (f" (default {default})" if default not in (None, "") else ""))
    return "; ".join(parts) or None
