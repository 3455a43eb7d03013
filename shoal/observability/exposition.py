"""Prometheus text exposition (format 0.0.4) written directly, for the broker metrics' many series.

prometheus_client's ``generate_latest`` validates every metric and label name of every sample
against a regular expression and builds a sample object per line: for a broker with a few dozen
APIs and topics (~1,000 lines, mostly histogram buckets) that took 30-45 ms of the event loop per
scrape on the loaded test machine. Names here are the broker's own constants, so they are
checked once, when a family is declared; label values are escaped; the bucket bounds are
rendered once per histogram.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _escape_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        v = v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def _escape_help(doc: str) -> str:
    return doc.replace("\\", r"\\").replace("\n", r"\n")


def _number(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return f"{int(v)}.0" if abs(v) < 1e15 else repr(float(v))
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class TextExposition:
    """Collects families as text; :meth:`text` is the exposition. Each ``*_family`` call checks
    the names once and returns a function that adds one sample (label values in ``labels``'
    order)."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def _declare(self, name: str, doc: str, kind: str, labels: Sequence[str]) -> None:
        if not _NAME.match(name) or not all(_LABEL.match(l) for l in labels):
            raise ValueError(f"invalid metric or label name in {name}{list(labels)}")
        self._parts.append(f"# HELP {name} {_escape_help(doc)}\n# TYPE {name} {kind}\n")

    @staticmethod
    def _labels(labels: Sequence[str], values: Sequence[str]) -> str:
        if not labels:
            return ""
        return "{" + ",".join(f'{k}="{_escape_value(str(v))}"' for k, v in zip(labels, values)) + "}"

    def gauge(self, name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]) -> None:
        self._simple(name, doc, "gauge", labels, rows)

    def counter(self, name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]) -> None:
        """``name`` without ``_total``; the samples get it."""
        self._simple(name + "_total", doc, "counter", labels, rows)

    def _simple(self, sample: str, doc: str, kind: str, labels: Sequence[str],
                rows: Iterable[tuple[Sequence[str], float]]) -> None:
        self._declare(sample, doc, kind, labels)  # (a counter's TYPE line names it with _total, as
        fmt = self._labels                           # prometheus_client's text writer does)
        self._parts.append("".join(f"{sample}{fmt(labels, values)} {_number(v)}\n" for values, v in rows))

    def histogram(self, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float],
                  rows: Iterable[tuple[Sequence[str], Sequence[int], float]]) -> None:
        """``rows``: (label values, bucket counts — not cumulative, one more than ``bounds``: the
        last is +Inf —, sum)."""
        self._declare(name, doc, "histogram", labels)
        les = [f'le="{_number(float(b))}"' for b in bounds] + ['le="+Inf"']
        out = []
        for values, counts, total in rows:
            base = ",".join(f'{k}="{_escape_value(str(v))}"' for k, v in zip(labels, values))
            sep = "," if base else ""
            acc = 0
            for le, n in zip(les, counts):
                acc += n
                out.append(f"{name}_bucket{{{base}{sep}{le}}} {acc}.0\n")
            lab = "{" + base + "}" if base else ""
            out.append(f"{name}_count{lab} {acc}.0\n{name}_sum{lab} {_number(total)}\n")
        self._parts.append("".join(out))

    def text(self) -> str:
        return "".join(self._parts)
