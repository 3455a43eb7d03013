"""Nulls in request bodies: the guard refuses them where the schema does not allow them.

Exhaustive over every supported API, version and field (tests/null_requests.py writes the
bodies), then a Hypothesis fuzzer mixing nulls with byte damage: the guard may only raise
GuardError, the decoder only MalformedRequest, and a body that passes never hands a handler None
where its schema promises a list, a string or bytes. Last, the rate-limited log those refusals
(and handler failures) are reported through.
"""

from __future__ import annotations

import logging
from dataclasses import fields, is_dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from null_requests import encode, frame, null_paths, nullable
from shoal.clock import ManualClock
from shoal.logutil import RateLimitedLog
from shoal.protocol import codec, guard


def _all_supported() -> list[tuple[int, int]]:
    from shoal.broker import handler_modules
    from shoal.handlers.registry import Registry

    return [(s.key, v) for s in Registry(handler_modules()).specs() for v in range(s.min_version, s.max_version + 1)]


SUPPORTED = _all_supported()


def _request(api_key: int, version: int, body: bytes) -> bytes:
    return frame(api_key, version, 3, "nulls", body, codec.is_flexible(api_key, version))[4:]


def _nones_where_forbidden(obj, path: str = "") -> list[str]:
    """Paths of fields that are None although their type does not admit None."""
    out: list[str] = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            if not nullable(f.type):
                out.append(path + f.name)
        elif is_dataclass(value):
            out += _nones_where_forbidden(value, f"{path}{f.name}.")
        elif isinstance(value, tuple):
            for item in value:
                if is_dataclass(item):
                    out += _nones_where_forbidden(item, f"{path}{f.name}[].")
    return out


def test_the_sweep_covers_every_api_with_a_non_nullable_field() -> None:
    apis = {k for k, v in SUPPORTED if any(True for _ in null_paths(codec.request_type(k, v)))}
    assert len(apis) >= 28


@pytest.mark.parametrize("api_key,version", SUPPORTED)
def test_null_where_the_schema_forbids_it_is_malformed(api_key: int, version: int) -> None:
    cls = codec.request_type(api_key, version)
    _, body = codec.decode_request(api_key, version, _request(api_key, version, encode(cls, None)))
    assert not _nones_where_forbidden(body)
    for path in null_paths(cls):
        with pytest.raises(codec.MalformedRequest, match="is null, which this version does not allow"):
            codec.decode_request(api_key, version, _request(api_key, version, encode(cls, path)))


# kio's reader refuses an explicit null in this nullable tagged field (its default is null, so
# clients leave the tag out); the request is then malformed, which is safe.
KIO_REFUSES_NULL = {(1, "cluster_id")}


@pytest.mark.parametrize("api_key,version", SUPPORTED)
def test_null_where_the_schema_allows_it_decodes_to_none(api_key: int, version: int) -> None:
    cls = codec.request_type(api_key, version)
    for path in null_paths(cls, allowed=True):
        if (api_key, path) in KIO_REFUSES_NULL:
            with pytest.raises(codec.MalformedRequest):
                codec.decode_request(api_key, version, _request(api_key, version, encode(cls, path)))
            continue
        _, body = codec.decode_request(api_key, version, _request(api_key, version, encode(cls, path)))
        *parents, last = path.split(".")
        value = body
        for name in parents:
            value = getattr(value, name)
            if isinstance(value, tuple):
                value = value[0]  # every array of these bodies has one element
        value = getattr(value, last)
        assert value is None, (api_key, version, path)
        assert not _nones_where_forbidden(body)


@st.composite
def _damaged_request(draw):
    api_key, version = draw(st.sampled_from(SUPPORTED))
    cls = codec.request_type(api_key, version)
    paths = list(null_paths(cls)) + list(null_paths(cls, allowed=True))
    target = draw(st.sampled_from(paths)) if paths and draw(st.booleans()) else None
    body = bytearray(encode(cls, target))
    for _ in range(draw(st.integers(0, 3))):  # overwrite a byte with a null-ish or random value
        if body:
            at = draw(st.integers(0, len(body) - 1))
            body[at] = draw(st.sampled_from([0x00, 0xFF, 0x01, draw(st.integers(0, 255))]))
    if draw(st.booleans()) and body:
        del body[draw(st.integers(0, len(body) - 1)):]
    return api_key, version, cls, bytes(body)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_damaged_request())
def test_fuzz_nulls_guard_raises_only_guard_error_and_passes_no_forbidden_none(case) -> None:
    api_key, version, cls, body = case
    try:
        guard.check(cls, body, 0)
    except guard.GuardError:
        pass
    try:
        _, decoded = codec.decode_request(api_key, version, _request(api_key, version, body))
    except codec.MalformedRequest:
        return
    assert not _nones_where_forbidden(decoded), (api_key, version)


# -- shoal.logutil.RateLimitedLog ----------------------------------------------------------------


def _limited(caplog, **kw) -> tuple[RateLimitedLog, ManualClock]:
    caplog.set_level(logging.INFO, logger="test.ratelimit")
    clock = ManualClock()
    return RateLimitedLog(logging.getLogger("test.ratelimit"), clock=clock, **kw), clock


def test_one_line_per_key_per_interval_then_a_count(caplog) -> None:
    rl, clock = _limited(caplog, interval_s=10.0)
    assert rl.warning("a", "bad %d", 1)
    for i in range(5):
        clock.sleep(1)
        assert not rl.warning("a", "bad %d", i)
    assert rl.warning("b", "other")  # another key is not held back
    clock.sleep(5)  # 10 s after the first line of "a"
    assert rl.warning("a", "bad again")
    assert [r.getMessage() for r in caplog.records] == [
        "bad 1", "other", f"bad again (5 more since {_hms(clock, 10)})",
    ]
    assert rl.suppressed_total == 5


def _hms(clock: ManualClock, seconds_ago: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(clock.now_ms() / 1000.0 - seconds_ago))


def test_traceback_only_on_the_lines_that_are_written(caplog) -> None:
    rl, clock = _limited(caplog, interval_s=10.0)
    for _ in range(3):
        try:
            raise TypeError("boom")
        except TypeError:
            rl.exception(("handler", 1, "TypeError"), "handler failed")
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


def test_a_global_cap_holds_back_many_keys(caplog) -> None:
    rl, clock = _limited(caplog, interval_s=10.0, max_lines=3)
    written = [rl.warning(("client", i), "x") for i in range(10)]
    assert written == [True] * 3 + [False] * 7
    clock.sleep(10)
    assert rl.warning(("client", 99), "y")
    assert caplog.records[-1].getMessage() == "y (7 other lines held back by the log rate limit)"


def test_remembers_a_bounded_number_of_keys(caplog) -> None:
    rl, clock = _limited(caplog, interval_s=10.0, max_keys=4, max_lines=1000)
    for i in range(100):
        rl.warning(i, "x")
    assert len(rl._keys) == 4


def test_disabled_level_costs_nothing(caplog) -> None:
    rl, clock = _limited(caplog)
    assert not rl.log(logging.DEBUG, "k", "quiet")
    assert rl.suppressed_total == 0 and not rl._keys
