"""An in-memory metadata backend: the smallest complete ``MetadataBackend``.

Nothing is durable; it exists for tests (the contract suite in ``tests/metadata`` runs against it
as well as the embedded one) and as the model of what a backend does: compare the expected epoch,
apply, publish. Its commit has no ``await`` between the compare and the swap, so it needs no lock.
``before_commit`` (an async hook awaited at the start of each commit) lets tests interleave other
writers between a decision and its compare-and-swap.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Awaitable, Callable

from shoal.metadata import MetadataError, MetadataImage
from shoal.metadata.change import Change
from shoal.metadata.store import CommitConflict, DecidingStore, MetadataBackend


class MemoryBackend(MetadataBackend):
    def __init__(
        self,
        *,
        node_id: int = 1,
        cluster_id: str = "memory-cluster-id-0000",
        before_commit: Callable[[Change], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.before_commit = before_commit
        self._image: MetadataImage | None = None
        self._closed = False

    @property
    def image(self) -> MetadataImage:
        if self._image is None:
            raise RuntimeError("MemoryBackend.start() has not been awaited")
        return self._image

    async def start(self) -> None:
        if self._image is None:
            empty: Any = MappingProxyType({})
            self._image = MetadataImage(self.cluster_id, self.node_id, empty, empty, empty, empty)
        self._closed = False

    async def close(self) -> None:
        self._closed = True

    def writable(self) -> MetadataImage:
        if self._closed:
            raise MetadataError("KAFKA_STORAGE_ERROR", "metadata store is closed")
        return self.image

    async def commit(self, change: Change, expected_epoch: int) -> MetadataImage:
        if self.before_commit is not None:
            await self.before_commit(change)
        old = self.writable()
        if old.epoch != expected_epoch:
            raise CommitConflict(expected_epoch, old.epoch)
        new = change.apply(old)
        self._image = new
        self._tell(old, new)
        return new


def memory_store(**kw: object) -> DecidingStore:
    """A ``MetadataStore`` over a fresh ``MemoryBackend`` (``kw`` go to ``DecidingStore``)."""
    return DecidingStore(MemoryBackend(), **kw)  # type: ignore[arg-type]
