"""SASL and SCRAM credential APIs.

- SaslHandshake (key 17) v0-v1: picks the mechanism of this connection's ``SaslSession``;
  UNSUPPORTED_SASL_MECHANISM (with the enabled list) and then the connection closes.
- SaslAuthenticate (key 36) v0-v2: one SASL token each way; v1+ carries ``session_lifetime_ms``
  from ``connections.max.reauth.ms`` (KIP-368). A failure answers SASL_AUTHENTICATION_FAILED with
  the same message for an unknown user, a wrong password or a malformed token, logs one
  rate-limited line (client address, listener, mechanism, user), and closes the connection after
  the response. OAUTHBEARER refuses a token with an error challenge first (``shoal.auth.oauthbearer``):
  the line, with why the token was refused, is logged then. Failed-login backoff (``shoal.auth.backoff``), per client address and user: an
  attempt on a user with recent failures from that address waits for the next slot before its
  password is checked (refused unchecked when the line is full), and a failure is answered after
  the current delay (``connection.failed.authentication.delay.ms`` doubling up to
  ``shoal.login.failure.delay.max.ms``); both are asyncio sleeps, other connections go on. The
  account is never locked: its owner on another address is checked at once.
- DescribeUserScramCredentials (key 50) v0 and AlterUserScramCredentials (key 51) v0: the
  metadata store's SCRAM credentials. Upsertions carry the client's salted password; only
  StoredKey/ServerKey are kept.

The gate that refuses other requests before authentication is in the network layer
(``KafkaConnection._dispatch`` asks ``SaslSession.gate``).

Deviations from Kafka:
- SaslHandshake v0 is answered (librdkafka only enables SASL when the broker lists v0), but the
  unframed raw SASL tokens a v0-only client would send next are not: such a client's connection
  closes as malformed. Every maintained client uses v1 with SaslAuthenticate.
- On a listener without SASL, both APIs answer ILLEGAL_SASL_STATE.
- Who may touch whose credential (``shoal.tenancy.principals``): Kafka asks for ALTER (DESCRIBE)
  on the cluster, and lets anyone do anything without an authorizer. Shoal lets a caller touch
  credentials other than its own only when it is a super user, an administrator of its tenant,
  granted ALTER (DESCRIBE) on the cluster by an ACL, or in the physical view of a broker with
  neither authorizer nor ``super.users``. Anyone may alter its own credential over a connection
  that authenticated with SASL as that user (no old password: Kafka's API has no field for it;
  the authenticated session stands for it), and describe it by name. Otherwise: per user
  CLUSTER_AUTHORIZATION_FAILED (alter), top-level CLUSTER_AUTHORIZATION_FAILED (describe), before
  anything that depends on whether the user exists. ``ANONYMOUS`` and, outside the operator, a
  tenant's ``lkc-xxxxxx_`` names get UNACCEPTABLE_CREDENTIAL in the physical view.
- Alter results are per user, all-or-nothing for that user's operations in the request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shoal.auth.backoff import login_key, wait_turn
from shoal.auth.sasl import AuthenticationFailed
from shoal.auth.scram import MECHANISM_NAMES, MECHANISMS, check_iterations, keys_from_salted_password
from shoal.handlers.registry import api
from shoal.metadata import MetadataError, owner_tenant
from shoal.protocol.codec import build, response_module
from shoal.protocol.errors import ErrorCode
from shoal.tenancy.acl import Operation
from shoal.tenancy.principals import may_access_credential, operator_user_error, tenant_qualified
from shoal.tenancy.scope import principal_user, super_users

if TYPE_CHECKING:
    from shoal.auth.sasl import SaslSession
    from shoal.handlers.context import ConnectionControls, RequestContext
    from shoal.handlers.messages import (
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
        SaslHandshakeRequest, SaslHandshakeResponse,
    )
    from shoal.metadata import MetadataImage

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51

_NO_THROTTLE = datetime.timedelta(0)

log = logging.getLogger("shoal.auth")


def _session(ctx: RequestContext) -> tuple[SaslSession | None, ConnectionControls | None]:
    conn = ctx.connection
    return (conn.sasl if conn is not None else None), conn


@api(SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    mod = response_module(SASL_HANDSHAKE, ctx.api_version)
    session, _conn = _session(ctx)
    if session is None:
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = session.handshake(request.mechanism)
    if error is not None:
        ctx.close_after = True
        log.warning(
            "SASL handshake from %s on %s refused (%s): mechanism %r, enabled %s",
            ctx.client_address, ctx.listener, error, request.mechanism, ",".join(session.enabled),
        )
    return build(
        mod.SaslHandshakeResponse,
        error_code=ErrorCode.none if error is None else getattr(ErrorCode, error.lower()),
        mechanisms=tuple(session.enabled),
    )


@api(SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    mod = response_module(SASL_AUTHENTICATE, ctx.api_version)
    session, conn = _session(ctx)

    def reply(code: ErrorCode, message: str | None = None, data: bytes = b"", lifetime_ms: int = 0) -> Any:
        return build(
            mod.SaslAuthenticateResponse,
            error_code=code,
            error_message=message,
            auth_bytes=data,
            session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
        )

    if session is None:
        return reply(ErrorCode.illegal_sasl_state, "SASL is not enabled on this listener")
    now = ctx.services.clock.now_ms
    clock = ctx.services.clock

    def mono() -> int:  # the backoff's time: monotonic ms
        return int(clock.monotonic() * 1000)

    security = ctx.services.listener_security.get(ctx.listener)
    backoff = security.backoff if security is not None else None
    claimed: str | None = None
    refused = False
    try:
        server = session.begin_step()
        token = bytes(request.auth_bytes)
        try:
            claimed = server.claimed(token) if backoff is not None else None
            # failed-login backoff: this address's attempts on the user are spaced
            if claimed is not None and backoff is not None:
                key = login_key(ctx.client_address, claimed)
                if not await wait_turn(backoff, key, mono):
                    refused = True
                    raise AuthenticationFailed(server.mechanism)
            if server.expensive:  # PLAIN: PBKDF2 off the event loop
                out = await asyncio.to_thread(server.evaluate, token)
            else:
                out = server.evaluate(token)
        except AuthenticationFailed:
            session.fail()
            raise
        rejection = getattr(server, "rejection", None)  # OAUTHBEARER: a refused token, before its error challenge
        if rejection is not None and security is not None:
            security.failure_log.warning(
                ("sasl", ctx.client_address), "failed authentication from %s on %s with SASL mechanism %s: %s",
                ctx.client_address, ctx.listener, server.mechanism, rejection)
        out, lifetime = session.end_step(server, out, now())
    except AuthenticationFailed as e:
        delay = 0
        if claimed is not None and security is not None and backoff is not None:  # (claimed: only with a backoff)
            key = login_key(ctx.client_address, claimed)
            if refused:
                delay = backoff.delay_ms(backoff.failures(key, mono()))
            else:
                delay = backoff.failed(key, mono())
            security.failure_log.warning(
                ("sasl", claimed), "failed authentication from %s on %s with SASL mechanism %s as %r "
                "(%d failures in a row from there%s; answered after %d ms)", ctx.client_address, ctx.listener,
                e.mechanism, claimed, backoff.failures(key, mono()),
                ", refused unchecked" if refused else "", delay)
        elif security is not None and not e.logged:
            security.failure_log.warning(
                ("sasl", ctx.client_address), "failed authentication from %s on %s with SASL mechanism %s",
                ctx.client_address, ctx.listener, e.mechanism)
        ctx.close_after = True
        if delay:  # the answer (and the close) waits; other connections go on
            await asyncio.sleep(delay / 1000)
        return reply(ErrorCode.sasl_authentication_failed, str(e))
    if claimed is not None and backoff is not None and session.authenticated:
        backoff.succeeded(login_key(ctx.client_address, claimed))
    principal = session.principal  # (set once authenticated)
    if session.authenticated and conn is not None and principal is not None and conn.principal != principal:
        conn.bind_principal(principal)
    return reply(ErrorCode.none, None, out, lifetime)


def _access(ctx: RequestContext, operation: int) -> tuple[bool, str | None]:
    """(may the caller touch credentials other than its own, the stored user name it
    authenticated as with SASL or None); see ``shoal.tenancy.principals``."""
    scope = ctx.scope
    config = ctx.services.config
    if config.get("authorizer.class.name"):
        granted = scope.allowed_cluster(operation)  # True for super users and tenant admins
    else:
        granted = scope.physical_view and not config.get("super.users")
    session, _conn = _session(ctx)
    own = principal_user(ctx.principal) if session is not None and session.authenticated else None
    return scope.superuser or granted, own


def _may(access: tuple[bool, str | None], target: str) -> bool:
    others, own = access
    return may_access_credential(admin=others, granted=False, own=own, target=target)


@api(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse:
    mod = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
    image = ctx.services.metadata.image
    scope = ctx.scope
    access = _access(ctx, Operation.DESCRIBE)
    # Without the right to see others, a caller may describe itself, by name, and nothing else
    # (the same refusal whether the other names exist or not).
    if not access[0] and (
        not request.users or not all(_may(access, scope.physical_user(image, u.name)) for u in request.users)
    ):
        return mod.DescribeUserScramCredentialsResponse(
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=None,
            results=(),
        )
    creds = {}
    for physical, by_mech in image.scram_credentials.items():  # the scope's users, as it names them
        visible = scope.visible_user(image, physical)
        if visible is not None:
            creds[visible] = by_mech
    if request.users:
        names = [u.name for u in request.users]
    else:
        names = sorted(creds)
    results = []
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    for name in dict.fromkeys(names):
        if seen[name] > 1:
            code, message, infos = (
                ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
                (),
            )
        elif name not in creds:
            code, message, infos = (
                ErrorCode.resource_not_found,
                "Attempt to describe a user credential that does not exist",
                (),
            )
        else:
            code, message = ErrorCode.none, None
            infos = tuple(
                mod.CredentialInfo(mechanism=MECHANISMS[m], iterations=c.iterations)
                for m, c in sorted(creds[name].items(), key=lambda kv: MECHANISMS.get(kv[0], 99))
                if m in MECHANISMS
            )
        results.append(
            mod.DescribeUserScramCredentialsResult(
                user=name, error_code=code, error_message=message, credential_infos=infos
            )
        )
    return mod.DescribeUserScramCredentialsResponse(
        throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results)
    )


def _validate_alter(request: AlterUserScramCredentialsRequest, image: MetadataImage,
                    physical: Callable[[str], str]) -> dict[str, tuple[ErrorCode, str | None] | None]:
    """Per user: None when all its operations may be applied, else (error, message).
    ``physical(name)`` is the stored name of the user the client names."""
    errors: dict[str, tuple[ErrorCode, str | None] | None] = {}
    pairs: dict[tuple[str, int], int] = {}
    named: Sequence[Any] = (*request.deletions, *request.upsertions)  # (two entity types: a tuple joins them to object)
    for op in named:
        errors.setdefault(op.name, None)
        pairs[(op.name, int(op.mechanism))] = pairs.get((op.name, int(op.mechanism)), 0) + 1

    def fail(user: str, code: ErrorCode, message: str) -> None:
        if errors.get(user) is None:
            errors[user] = (code, message)

    for (user, _mech), count in pairs.items():
        if count > 1:
            fail(user, ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
    for op in named:
        if not op.name:
            fail(op.name, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif int(op.mechanism) not in MECHANISM_NAMES:
            fail(op.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    for op in request.deletions:
        mech = MECHANISM_NAMES.get(int(op.mechanism))
        if mech is not None and mech not in image.scram_credentials.get(physical(op.name), {}):
            fail(op.name, ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    for op in request.upsertions:
        why = check_iterations(int(op.iterations))
        if why is not None:
            fail(op.name, ErrorCode.unacceptable_credential, why)
        elif not op.salt or not op.salted_password:
            fail(op.name, ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
    return errors


def _reserved_user(ctx: RequestContext, image: MetadataImage, name: str, operator: bool) -> str | None:
    """Why the user the caller calls ``name`` may get no credential from it
    (``shoal.tenancy.principals``): none in a tenant (its users are stored qualified, whatever
    their name); in the physical view, ANONYMOUS, and a name shaped like a tenant's user unless
    that tenant exists and the caller is the ``operator`` (a super user, or anyone on a broker with
    neither authorizer nor super.users: Kafka's default)."""
    scope = ctx.scope
    if not scope.physical_view:
        return None
    if operator and tenant_qualified(name) and owner_tenant(name, image.tenants) is not None:
        return None  # the operator sets a tenant user's password
    return operator_user_error(name, super_users(ctx.services.config), into_tenant=False)


@api(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext,
                                       request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    mod = response_module(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
    store = ctx.services.metadata
    scope = ctx.scope

    def physical(name: str) -> str:
        return scope.physical_user(store.image, name)

    errors = _validate_alter(request, store.image, physical)
    access = _access(ctx, Operation.ALTER)
    for user in errors:
        if not _may(access, physical(user)):  # before anything that depends on the user existing
            errors[user] = (ErrorCode.cluster_authorization_failed, None)
        elif errors[user] is None:
            why = _reserved_user(ctx, store.image, user, access[0])
            if why is not None:
                errors[user] = (ErrorCode.unacceptable_credential, why)
    results = []
    for user, err in errors.items():
        if err is None:
            stored = physical(user)
            try:
                for op in request.deletions:
                    if op.name == user:
                        await store.delete_scram_credential(stored, MECHANISM_NAMES[int(op.mechanism)])
                for up in request.upsertions:
                    if up.name == user:
                        mech = MECHANISM_NAMES[int(up.mechanism)]
                        stored_key, server_key = keys_from_salted_password(mech, bytes(up.salted_password))
                        await store.set_scram_credential(
                            stored, mech, bytes(up.salt), stored_key, server_key, int(up.iterations)
                        )
            except MetadataError as e:
                err = (getattr(ErrorCode, e.code.lower(), ErrorCode.unknown_server_error), e.message)
        if err is None:
            log.info("SCRAM credentials of user %s altered by %s from %s", stored, ctx.principal, ctx.client_address)
        results.append(
            mod.AlterUserScramCredentialsResult(
                user=user,
                error_code=ErrorCode.none if err is None else err[0],
                error_message=None if err is None else err[1],
            )
        )
    return mod.AlterUserScramCredentialsResponse(throttle_time=_NO_THROTTLE, results=tuple(results))
