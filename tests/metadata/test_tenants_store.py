"""Tenants (logical clusters) in the embedded metadata store: ids, users, deletion, durability."""

from __future__ import annotations

import re

import pytest

from shoal.auth.scram import make_credential
from shoal.metadata import MetadataError
from shoal.metadata.embedded import EmbeddedMetadataStore, new_tenant_id


async def _store(path, **kw) -> EmbeddedMetadataStore:
    s = EmbeddedMetadataStore(path, node_id=1, **kw)
    await s.start()
    return s


def test_tenant_id_format():
    ids = {new_tenant_id() for _ in range(200)}
    assert all(re.fullmatch(r"lkc-[0-9a-z]{6}", i) for i in ids)
    assert len(ids) > 190  # random


async def test_create_list_and_persist(tmp_path):
    s = await _store(tmp_path, now_ms=lambda: 1234)
    a = await s.create_tenant("Payments")
    b = await s.create_tenant("Payments")  # display names need not be unique
    assert a.tenant_id != b.tenant_id and a.display_name == "Payments" and a.created_ms == 1234
    cred = make_credential("SCRAM-SHA-512", "pw")
    await s.assign_user("alice", a.tenant_id, cred)
    await s.close()
    s2 = await _store(tmp_path)
    assert s2.image.tenants == {a.tenant_id: a, b.tenant_id: b}
    assert s2.image.user_tenants == {"alice": a.tenant_id}
    assert s2.image.scram_credentials["alice"]["SCRAM-SHA-512"] == cred


async def test_ids_are_unique_even_when_the_source_repeats(tmp_path):
    ids = iter(["lkc-aaaaaa", "lkc-aaaaaa", "lkc-bbbbbb"])
    s = await _store(tmp_path, new_tenant_id=lambda: next(ids))
    assert (await s.create_tenant("a")).tenant_id == "lkc-aaaaaa"
    assert (await s.create_tenant("b")).tenant_id == "lkc-bbbbbb"


async def test_assign_and_remove_user(tmp_path):
    s = await _store(tmp_path)
    a = await s.create_tenant("a")
    b = await s.create_tenant("b")
    with pytest.raises(MetadataError) as e:
        await s.assign_user("alice", "lkc-000000")
    assert e.value.code == "RESOURCE_NOT_FOUND"
    await s.assign_user("alice", a.tenant_id)
    epoch = s.image.epoch
    await s.assign_user("alice", a.tenant_id)  # idempotent
    assert s.image.epoch == epoch
    with pytest.raises(MetadataError) as e:
        await s.assign_user("alice", b.tenant_id)
    assert e.value.code == "DUPLICATE_RESOURCE"
    await s.assign_user("alice", a.tenant_id, make_credential("SCRAM-SHA-256", "pw"))
    assert set(s.image.scram_credentials["alice"]) == {"SCRAM-SHA-256"}
    await s.remove_user("alice")
    assert "alice" not in s.image.user_tenants and "alice" not in s.image.scram_credentials
    with pytest.raises(MetadataError) as e:
        await s.remove_user("alice")
    assert e.value.code == "RESOURCE_NOT_FOUND"


async def test_delete_tenant_removes_its_users_only(tmp_path):
    s = await _store(tmp_path)
    a = await s.create_tenant("a")
    b = await s.create_tenant("b")
    cred = make_credential("SCRAM-SHA-512", "pw")
    await s.assign_user("alice", a.tenant_id, cred)
    await s.assign_user("bob", b.tenant_id, cred)
    await s.set_scram_credential("ops", cred.mechanism, cred.salt, cred.stored_key, cred.server_key, 4096)
    assert (await s.delete_tenant(a.tenant_id)) == a
    assert set(s.image.tenants) == {b.tenant_id}
    assert dict(s.image.user_tenants) == {"bob": b.tenant_id}
    assert set(s.image.scram_credentials) == {"bob", "ops"}
    with pytest.raises(MetadataError) as e:
        await s.delete_tenant(a.tenant_id)
    assert e.value.code == "RESOURCE_NOT_FOUND"
    await s.close()
    s2 = await _store(tmp_path)
    assert set(s2.image.tenants) == {b.tenant_id} and set(s2.image.scram_credentials) == {"bob", "ops"}


async def test_old_files_without_tenants_load(tmp_path):
    s = await _store(tmp_path)
    await s.close()
    import json

    doc = json.loads(s.path.read_text())
    del doc["tenants"], doc["user_tenants"]
    s.path.write_text(json.dumps(doc))
    s2 = await _store(tmp_path)
    assert dict(s2.image.tenants) == {} and dict(s2.image.user_tenants) == {}


async def test_new_user_refuses_existing_users(tmp_path):
    s = await _store(tmp_path)
    a = await s.create_tenant("a")
    cred = make_credential("SCRAM-SHA-512", "pw")
    await s.set_scram_credential("ops", cred.mechanism, cred.salt, cred.stored_key, cred.server_key, 4096)
    for user in ("ops", "alice"):
        if user == "alice":
            await s.assign_user("alice", a.tenant_id, cred, new_user=True)
        with pytest.raises(MetadataError) as e:
            await s.assign_user(user, a.tenant_id, cred, new_user=True)
        assert e.value.code == "DUPLICATE_RESOURCE"
    assert "ops" not in s.image.user_tenants
