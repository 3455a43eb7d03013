"""The request codec: headers, round trips, and a fuzzer that may only see MalformedRequest."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol import codec
from shoal.protocol.errors import ErrorCode, error_response

# (api_key, version) pairs for a spread of APIs and both header kinds.
CASES = [(0, 3), (0, 9), (0, 12), (1, 4), (1, 12), (1, 16), (2, 1), (2, 9), (3, 0), (3, 8), (3, 12), (18, 0), (18, 3), (19, 5)]


def _frame(api_key: int, version: int, corr: int, client_id: str | None, body: bytes, flexible: bool) -> bytes:
    out = struct.pack(">hhi", api_key, version, corr)
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if flexible:
        out += b"\x00"
    return out + body


def test_header_v1_and_v2() -> None:
    h = codec.decode_header(_frame(3, 8, 77, "abc", b"", False), flexible=False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 8, 77, "abc")
    assert h.size == 8 + 2 + 3
    # v2 header with two tagged fields that must be skipped.
    raw = struct.pack(">hhi", 3, 12, 5) + b"\xff\xff" + b"\x02" + b"\x00\x01z" + b"\x01\x02zz"
    h = codec.decode_header(raw, flexible=True)
    assert h.client_id is None and h.size == len(raw)


def test_truncated_client_id_is_malformed() -> None:
    raw = struct.pack(">hhih", 3, 8, 1, 50) + b"short"
    with pytest.raises(codec.MalformedRequest):
        codec.decode_header(raw, flexible=False)


@pytest.mark.parametrize("api_key,version", CASES)
def test_round_trip_of_an_empty_request(api_key: int, version: int) -> None:
    cls = codec.request_type(api_key, version)
    body = error_response(cls, ErrorCode.none)
    frame = codec.encode_request(api_key, version, 42, "client-1", body)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, decoded = codec.decode_request(api_key, version, frame[4:])
    assert header.correlation_id == 42 and header.client_id == "client-1"
    assert decoded == body


def test_api_versions_response_uses_header_v0() -> None:
    cls = codec.response_type(18, 3)
    body = error_response(cls, ErrorCode.none)
    frame = codec.encode_response(9, 18, 3, body)
    # length, correlation id, then directly the body (no tagged-field byte of header v1).
    corr, decoded = codec.decode_response(18, 3, frame[4:])
    assert corr == 9 and decoded == body
    assert frame[8:10] == b"\x00\x00"  # error_code 0 starts the body


def test_build_drops_fields_the_version_lacks() -> None:
    mod = codec.response_module(3, 0)
    b = codec.build(mod.MetadataResponseBroker, node_id=1, host="h", port=1, rack="r")
    assert not codec.has_field(b, "rack")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), body=st.binary(max_size=200), corr=st.integers(-(2**31), 2**31 - 1))
def test_fuzz_decoder_only_raises_malformed(case, body: bytes, corr: int) -> None:
    api_key, version = case
    frame = _frame(api_key, version, corr, "fuzz", body, codec.is_flexible(api_key, version))
    try:
        header, _ = codec.decode_request(api_key, version, frame)
    except codec.MalformedRequest:
        return
    assert header.correlation_id == corr


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64), flexible=st.booleans())
def test_fuzz_header_only_raises_malformed(raw: bytes, flexible: bool) -> None:
    try:
        codec.decode_header(raw, flexible)
    except codec.MalformedRequest:
        pass


def test_huge_array_count_is_malformed_not_an_allocation() -> None:
    # Produce v9 body: transactional_id null (compact), acks, timeout, then a topic array whose
    # compact count claims four billion entries. kio's native reader would try to allocate them.
    body = b"\x00" + struct.pack(">hi", 1, 30000) + b"\xff\xff\xff\xff\x0f"
    frame = _frame(0, 9, 1, "c", body, True)
    with pytest.raises(codec.MalformedRequest, match="cannot fit"):
        codec.decode_request(0, 9, frame)


def test_unknown_tagged_field_is_malformed_not_a_crash() -> None:
    body = codec.encode_request(18, 3, 1, "c", codec.build(codec.request_type(18, 3), client_software_name="a", client_software_version="1"))[4:]
    # Replace the trailing empty tag section with one unknown tag 99 of 1 byte.
    patched = body[:-1] + b"\x01\x63\x01\x00"
    with pytest.raises(codec.MalformedRequest):
        codec.decode_request(18, 3, patched)


def _all_supported() -> list[tuple[int, int]]:
    from shoal.broker import handler_modules
    from shoal.handlers.registry import Registry

    return [(s.key, v) for s in Registry(handler_modules()).specs() for v in range(s.min_version, s.max_version + 1)]


def test_guard_accepts_every_supported_request_shape() -> None:
    for api_key, version in _all_supported():
        cls = codec.request_type(api_key, version)
        body = error_response(cls, ErrorCode.none)
        frame = codec.encode_request(api_key, version, 1, None, body)[4:]
        _, decoded = codec.decode_request(api_key, version, frame)
        assert decoded == body, (api_key, version)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_every_supported_api(data) -> None:
    api_key, version = data.draw(st.sampled_from(_all_supported()))
    body = data.draw(st.binary(max_size=120))
    frame = _frame(api_key, version, 7, "fuzz", body, codec.is_flexible(api_key, version))
    try:
        codec.decode_request(api_key, version, frame)
    except codec.MalformedRequest:
        pass
