"""The checker of the transactional pipeline (``faults.txn_workload``): pure, on what was read,
never on the broker's own view.

Input: each input partition's values in offset order (what the seeding producer had acknowledged,
read back), each output partition's values as a read_committed consumer got them from offset 0
(plus, to report, how many a read_uncommitted read saw), and the group's committed offsets. The
pipeline maps input value ``v`` of partition ``p`` to output value ``v + SUFFIX`` in partition
``p``. Exactly once means, per partition:

- ``lost``: an input value whose output is not in the committed view;
- ``duplicated``: an output value that appears more than once (an aborted or unfinished
  transaction's output showing, or a transaction replayed after its offsets were committed);
- ``misordered``: the committed outputs, restricted to the first appearance of each, are not in
  input order;
- ``foreign``: an output value that is no input's transform, or is in another partition;
- ``offsets``: the group's committed offset of an input partition is not its end (the pipeline
  consumed everything, so the offsets committed with the last transaction must say so).

``aborted_seen`` (read_uncommitted records not in the committed view) is reported, not judged:
faults make transactions abort, so it shows the checker had something to filter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SUFFIX = "|out"


@dataclass
class TxnResult:
    inputs: int = 0
    outputs: int = 0
    lost: list[tuple[int, str]] = field(default_factory=list)
    duplicated: list[tuple[int, str]] = field(default_factory=list)
    misordered: list[tuple[int, int]] = field(default_factory=list)  # (partition, first index out of order)
    foreign: list[tuple[int, str]] = field(default_factory=list)
    offsets: list[tuple[int, int | None, int]] = field(default_factory=list)  # (partition, committed, end)
    aborted_seen: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.misordered or self.foreign or self.offsets)

    def summary(self) -> str:
        return (f"inputs={self.inputs} outputs={self.outputs} lost={len(self.lost)} "
                f"duplicated={len(self.duplicated)} misordered={len(self.misordered)} foreign={len(self.foreign)} "
                f"offsets-wrong={len(self.offsets)} aborted-seen={self.aborted_seen}"
                + ("" if self.ok else f" FIRST: {self._first()}"))

    def _first(self) -> str:
        for name in ("lost", "duplicated", "misordered", "foreign", "offsets"):
            items = getattr(self, name)
            if items:
                return f"{name} {items[:3]}"
        return ""


def check_pipeline(inputs: dict[int, list[str]], committed_view: dict[int, list[str]],
                   committed_offsets: dict[int, int | None] | None = None,
                   uncommitted_count: int | None = None, input_ends: dict[int, int] | None = None) -> TxnResult:
    """Exactly once, in order, per partition (see the module doc). ``input_ends``: each input
    partition's log end offset (default: its number of values, a log written without transactions
    from offset 0)."""
    r = TxnResult(inputs=sum(len(v) for v in inputs.values()),
                  outputs=sum(len(v) for v in committed_view.values()))
    where = {v: p for p, vs in inputs.items() for v in vs}
    for p in sorted(set(inputs) | set(committed_view)):
        ins = inputs.get(p, [])
        outs = committed_view.get(p, [])
        counts = Counter(outs)
        r.duplicated += [(p, v) for v, n in counts.items() if n > 1]
        origin = []
        for v in dict.fromkeys(outs):  # first appearances, in read order
            src = v[:-len(SUFFIX)] if v.endswith(SUFFIX) else None
            if src is None or where.get(src) != p:
                r.foreign.append((p, v))
            else:
                origin.append(src)
        seen = set(origin)
        r.lost += [(p, v) for v in ins if v not in seen]
        rank = {v: i for i, v in enumerate(ins)}
        order = [rank[v] for v in origin]
        bad = next((i for i in range(1, len(order)) if order[i] < order[i - 1]), None)
        if bad is not None:
            r.misordered.append((p, bad))
        if committed_offsets is not None:
            got = committed_offsets.get(p)
            end = len(ins) if input_ends is None else input_ends.get(p, len(ins))
            if got != end:
                r.offsets.append((p, got, end))
    if uncommitted_count is not None:
        r.aborted_seen = max(0, uncommitted_count - r.outputs)
    return r


def table(rows: list[tuple[int, int, TxnResult]]) -> str:
    """``| schedules | faults | inputs | outputs | lost | duplicated | misordered | aborted seen |``
    summed over (schedules, faults, result) rows."""
    head = "| schedules | faults | inputs | committed outputs | lost | duplicated | misordered | aborted seen |"
    line = "|---|---|---|---|---|---|---|---|"
    s = sum(x[0] for x in rows)
    f = sum(x[1] for x in rows)
    rs = [x[2] for x in rows]
    body = (f"| {s} | {f} | {sum(r.inputs for r in rs)} | {sum(r.outputs for r in rs)} | "
            f"{sum(len(r.lost) for r in rs)} | {sum(len(r.duplicated) for r in rs)} | "
            f"{sum(len(r.misordered) for r in rs)} | {sum(r.aborted_seen for r in rs)} |")
    return "\n".join((head, line, body))
