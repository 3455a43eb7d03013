"""SCRAM credentials in the embedded metadata store: durable, hashes only; bootstrap users."""

from __future__ import annotations

import pytest

from shoal.auth import ensure_bootstrap_users
from shoal.auth.scram import verify_password
from shoal.config import BrokerConfig
from shoal.metadata import MetadataError
from shoal.metadata.embedded import EmbeddedMetadataStore


async def test_credentials_persist_and_delete(tmp_path):
    s = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s.start()
    await s.set_scram_credential("alice", "SCRAM-SHA-256", b"salt", b"sk", b"svk", 4096)
    await s.close()
    s2 = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s2.start()
    c = s2.image.scram_credentials["alice"]["SCRAM-SHA-256"]
    assert (c.salt, c.stored_key, c.server_key, c.iterations) == (b"salt", b"sk", b"svk", 4096)
    await s2.delete_scram_credential("alice", "SCRAM-SHA-256")
    assert "alice" not in s2.image.scram_credentials
    with pytest.raises(MetadataError) as e:
        await s2.delete_scram_credential("alice", "SCRAM-SHA-256")
    assert e.value.code == "RESOURCE_NOT_FOUND"


async def test_bootstrap_users_are_hashed_and_kept(tmp_path):
    s = EmbeddedMetadataStore(tmp_path, node_id=1)
    await s.start()
    config = BrokerConfig({"shoal.sasl.bootstrap.users": "alice:sup3rsecret"})
    await ensure_bootstrap_users(config, s)
    creds = s.image.scram_credentials["alice"]
    assert set(creds) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert all(verify_password(c, "sup3rsecret") for c in creds.values())
    epoch = s.image.epoch
    await ensure_bootstrap_users(config, s)  # unchanged password: nothing rewritten
    assert s.image.epoch == epoch
    assert b"sup3rsecret" not in s.path.read_bytes()
