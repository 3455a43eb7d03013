"""Tenant cells: the brokers a tenant's partitions are confined to (issue 27 part 5).

A tenant's configs (``TenantInfo.configs``, the operator's ``/v1/tenants/{id}/configs`` and
``shoal tenants cell``) may hold, besides its topic config defaults:

- ``shoal.tenant.cell.brokers``: broker ids, comma-separated (``1,2``);
- ``shoal.tenant.cell.racks``: racks, comma-separated (``eu-1a,eu-1b``): every broker in them.

With either, the tenant's cell is the brokers listed plus the brokers in the racks listed (a
broker may serve several cells); new partitions of its topics are placed there only
(``shoal.cluster.planner.live_brokers``) and the balancer keeps and moves its replicas there
(``shoal.cluster.balancer.inputs``). Without them the tenant has no cell: any broker. The cell is
the operator's: a tenant's principals may not set, change or remove it (POLICY_VIOLATION), and
the keys are no topic configs: they are left out of what the tenant's topics inherit
(:func:`topic_defaults`). Pure: no image here (the layers above look brokers up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

__all__ = ["CELL_BROKERS", "CELL_CONFIGS", "CELL_RACKS", "Cell", "CellError", "cell_configs", "parse_cell",
           "topic_defaults"]

CELL_BROKERS = "shoal.tenant.cell.brokers"
CELL_RACKS = "shoal.tenant.cell.racks"
CELL_CONFIGS = frozenset({CELL_BROKERS, CELL_RACKS})


class CellError(ValueError):
    """A cell config that does not parse; ``code`` is Kafka's INVALID_CONFIG."""

    code = "INVALID_CONFIG"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Cell:
    """The brokers (``brokers``) and racks (``racks``) a tenant's cell is made of."""

    brokers: frozenset[int] = frozenset()
    racks: frozenset[str] = frozenset()

    def members(self, brokers: Iterable[tuple[int, str | None]]) -> frozenset[int]:
        """The cell's brokers among ``brokers`` (``(id, rack)``) plus those it lists by id."""
        return self.brokers | frozenset(b for b, rack in brokers if rack is not None and rack in self.racks)

    def describe(self) -> str:
        parts = []
        if self.brokers:
            parts.append(f"{CELL_BROKERS}={','.join(map(str, sorted(self.brokers)))}")
        if self.racks:
            parts.append(f"{CELL_RACKS}={','.join(sorted(self.racks))}")
        return ", ".join(parts)


def _items(name: str, raw: str) -> list[str]:
    items = [s.strip() for s in raw.split(",")]
    if not raw.strip() or any(not s for s in items):
        raise CellError(f"Invalid value {raw!r} for {name}: a comma-separated list with no empty entry")
    return items


def parse_cell(configs: Mapping[str, str]) -> Cell | None:
    """The cell a tenant's configs give, None without one; CellError for a malformed value."""
    brokers_raw, racks_raw = configs.get(CELL_BROKERS), configs.get(CELL_RACKS)
    if brokers_raw is None and racks_raw is None:
        return None
    brokers: set[int] = set()
    if brokers_raw is not None:
        for s in _items(CELL_BROKERS, brokers_raw):
            if not s.isdigit():
                raise CellError(f"Invalid value {brokers_raw!r} for {CELL_BROKERS}: broker ids (non-negative "
                                f"integers), comma-separated; {s!r} is not one")
            brokers.add(int(s))
    racks = frozenset(_items(CELL_RACKS, racks_raw)) if racks_raw is not None else frozenset()
    return Cell(frozenset(brokers), racks)


def cell_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """The cell keys among a tenant's configs."""
    return {k: v for k, v in configs.items() if k in CELL_CONFIGS}


def topic_defaults(configs: Mapping[str, str]) -> Mapping[str, str]:
    """A tenant's configs without its cell: the topic config defaults its topics inherit."""
    if not any(k in CELL_CONFIGS for k in configs):
        return configs
    return {k: v for k, v in configs.items() if k not in CELL_CONFIGS}
