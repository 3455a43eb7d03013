"""Fixtures of the end-to-end tests; the broker fixtures live in tests/conftest.py."""

from __future__ import annotations

import pytest

from e2e_helpers import create_topic


@pytest.fixture
def make_topic(broker):
    def make(name: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        create_topic(broker.bootstrap, name, partitions, config)
        return name

    return make
