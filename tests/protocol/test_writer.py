"""shoal.protocol.writer must produce kio's exact bytes for every response the broker serves."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer as kio_writer
from kio.static.primitive import Records

from shoal.broker import handler_modules
from shoal.handlers.registry import Registry
from shoal.protocol import codec
from shoal.protocol.writer import entity_writer, uvarint

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

RESPONSES = sorted(
    {
        (s.key, v)
        for s in Registry(handler_modules()).specs()
        for v in range(s.min_version, s.max_version + 1)
    }
)


def _kio_bytes(entity) -> bytes:
    buf = io.BytesIO()
    kio_writer(type(entity))(buf, entity)
    return buf.getvalue()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_same_bytes_as_kio(data) -> None:
    api_key, version = data.draw(st.sampled_from(RESPONSES))
    cls = codec.response_type(api_key, version)
    entity = data.draw(st.from_type(cls))
    out = bytearray()
    entity_writer(cls)(out, entity)
    assert bytes(out) == _kio_bytes(entity)


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_uvarint_matches_kio(n: int) -> None:
    from kio.serial.writers import write_unsigned_varint

    buf = io.BytesIO()
    write_unsigned_varint(buf, n)
    assert uvarint(n) == buf.getvalue()
