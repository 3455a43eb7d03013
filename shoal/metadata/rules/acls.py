"""ACL rules: bindings are a set (adding one that exists, or removing one that does not, is a
no-op), kept in the order they were added."""

from __future__ import annotations

from shoal.metadata import AclEntry, MetadataImage
from shoal.metadata.change import Change, Result, unchanged


def alter_acls(image: MetadataImage, add: list[AclEntry], remove: list[AclEntry]) -> Result[None]:
    """Remove ``remove`` and add ``add`` in one change (a binding in both ends up present)."""
    present = set(image.acls)
    removed = present.intersection(remove)
    present -= removed
    added = [a for a in dict.fromkeys(add) if a not in present]
    if not (removed or added):
        return unchanged(None)
    return Result(Change(acls_removed=removed, acls_added=added), None)
