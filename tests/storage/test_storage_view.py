"""``PartitionLog`` is what ``shoal.storage.view``'s protocols say it is: every member, with the
same parameters, and the read-only view's properties read-only there too."""

import inspect

from shoal.storage import LogView, PartitionLog, PartitionStorage


def _shape(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _members(proto):
    own = {k: v for k, v in vars(proto).items() if not k.startswith("_")}
    return own, [k for k in proto.__annotations__ if not k.startswith("_")]


def test_partition_log_has_every_member_of_both_protocols():
    checked = 0
    for proto in (LogView, PartitionStorage):
        members, fields = _members(proto)
        for name, member in members.items():
            impl = inspect.getattr_static(PartitionLog, name)
            if isinstance(member, property):
                assert isinstance(impl, property), name
                if member.fset is not None:
                    assert impl.fset is not None, f"{name} has no setter"
            else:
                assert _shape(impl) == _shape(member), name
            checked += 1
        for name in fields:
            assert name in PartitionLog.__init__.__code__.co_names, name
            checked += 1
    assert checked >= 29


def test_the_view_has_no_writes():
    members, _ = _members(LogView)
    assert all(m.fset is None for m in members.values() if isinstance(m, property))
    writes = {n for n in vars(PartitionStorage) if not n.startswith("_")} - {"high_watermark"}
    assert not writes & set(members)
    assert "append" in writes and "truncate_to" in writes
