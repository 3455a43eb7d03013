"""Start-up warnings an operator needs (issue 10, items 13 and 14), from a real ``shoal serve``.

- SASL PLAIN on a listener without TLS bound to a non-loopback address: one WARNING line.
- The HTTP admin API with ``shoal.admin.authentication=none`` on a non-loopback address: one
  WARNING line.
- The banner's durability line on a single node with replication factor 1: acknowledged records
  are not fsynced unless ``log.flush.interval.messages=1`` (and then it says so).

The same settings on loopback (or with TLS-free SCRAM only, or with authentication) warn nothing.
Wildcard addresses (0.0.0.0) are what "non-loopback" means here: reachable from other hosts.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from broker_process import BrokerProcess, free_port
from shoal.startup import is_loopback

pytestmark = pytest.mark.timeout(90)

PLAIN_WARNING = "accepts SASL PLAIN without TLS on a non-loopback address"
ADMIN_WARNING = "shoal.admin.authentication=none on a non-loopback address"
POWER_LOSS = "a power loss or kernel crash can lose acknowledged records"
FSYNCED = "every acknowledged record is fsynced before the answer"


class ExposedBroker(BrokerProcess):
    """PLAINTEXT on loopback (readiness), SASL_PLAINTEXT and the admin API on ``host``."""

    def __init__(self, workdir: Path, host: str, overrides: dict[str, str]) -> None:
        super().__init__(workdir, overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "shoal.admin.listener": f"http://{host}:{free_port()}",
            **overrides,
        })
        self.exposed_host = host

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.exposed_host}:{free_port()}"]


def _start_log(host: str, **overrides: str) -> str:
    """The broker's output from start to ready (its banner and start-up lines), then stopped."""
    workdir = Path(tempfile.mkdtemp(prefix="shoal-startup-"))
    b = ExposedBroker(workdir, host, overrides)
    try:
        b.start()
        # The banner follows readiness; its durability line comes after the warnings.
        deadline = time.monotonic() + 20
        while "durability:" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        return b.log_text()
    finally:
        b.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _warnings(log: str) -> list[str]:
    return [l for l in log.splitlines() if " WARNING " in l]


def test_plain_and_open_admin_on_a_wildcard_address_warn_once_each():
    log = _start_log("0.0.0.0")
    warnings = _warnings(log)
    assert sum(PLAIN_WARNING in w for w in warnings) == 1, log
    assert sum(ADMIN_WARNING in w for w in warnings) == 1, log
    assert sum(POWER_LOSS in l for l in log.splitlines()) == 1, log  # single node, RF 1


def test_the_same_on_loopback_warns_nothing_and_fsync_per_record_is_announced():
    log = _start_log("127.0.0.1", **{"log.flush.interval.messages": "1"})
    assert not [w for w in _warnings(log) if PLAIN_WARNING in w or ADMIN_WARNING in w], log
    assert FSYNCED in log and POWER_LOSS not in log, log


def test_scram_only_and_an_authenticated_admin_api_on_a_wildcard_address_warn_nothing():
    log = _start_log("0.0.0.0", **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "shoal.admin.authentication": "basic",
    })
    assert not [w for w in _warnings(log) if PLAIN_WARNING in w or ADMIN_WARNING in w], log
    assert "is up" in log


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.1.2.3", False), ("192.168.0.1", False),
])
def test_is_loopback(host: str, loopback: bool):
    assert is_loopback(host) is loopback
