"""The ``regions`` fixture: datacenters of broker processes and etcd members on loopback joined by
link proxies (tests/region_harness.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def regions(tmp_path):
    """A factory: ``regions(brokers={"dc1": 3, "dc2": 3}, etcd=("dc1", "dc2", "dc3"), rtt_ms=30,
    overrides={...})`` starts (bounded by ``timeout``) and returns a ``region_harness.Regions``;
    every one made is closed at the end of the test."""
    from etcd_cluster import require_etcd
    from region_harness import Regions

    made: list[Regions] = []

    def make(timeout: float = 90.0, **kw) -> Regions:
        require_etcd()
        r = Regions(tmp_path / f"regions{len(made)}", **kw)
        made.append(r)
        r.start(timeout)
        return r

    yield make
    for r in made:
        r.close()
