"""What an admin command says to do when the broker refuses it for who it is: one line in place
of a bare error code or "connection closed".

- wire commands (``shoal topics|configs|groups|acls|quotas|scram|cluster``):
  a listener that needs SASL when no credentials were given (the broker closes the connection; a
  second connection's SaslHandshake tells whether the listener speaks SASL and which mechanisms),
  refused credentials (SASL_AUTHENTICATION_FAILED), a mechanism the listener does not offer,
  credentials sent to a listener without SASL (ILLEGAL_SASL_STATE), and the *_AUTHORIZATION_FAILED
  codes (the principal, ``super.users``, ``shoal acls add``);
- HTTP admin API commands (``shoal tenants|users|namespaces``): 401 (``SHOAL_ADMIN_USER`` and
  ``SHOAL_ADMIN_PASSWORD``) and 403 (``super.users``, tenant administrators).

:func:`explain` and :func:`http_hint` are pure; :func:`explain_lost` may open one connection.
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
    from shoal.cli_users import _client_props

    try:
        return _client_props(getattr(args, "command_config", None))
    except (OSError, ValueError):
        return {}


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
                f"(a user's SCRAM credential is set with `shoal scram set` or `shoal users create`)")
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
    found = hint(getattr(error, "code_name", ""), props_of(args), getattr(args, "command_config", None))
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


def explain_lost(error: Any, args: Any) -> str:
    """A lost connection, explained when the listener needs SASL the client did not use."""
    text = getattr(error, "message", None) or str(error)
    props = props_of(args)
    if props.get("security.protocol", "PLAINTEXT").upper().startswith("SASL") or text.startswith("cannot connect"):
        return text
    try:
        mechanisms = asyncio.run(sasl_mechanisms(args.bootstrap_server, min(float(args.timeout), 10.0)))
    except Exception:  # the hint is a courtesy; the error stands without it
        mechanisms = None
    if not mechanisms:
        return text
    return (f"{text}: the listener at {args.bootstrap_server} requires SASL authentication "
            f"(mechanisms {', '.join(mechanisms)}): give --command-config FILE with {SASL_PROPS}")


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
