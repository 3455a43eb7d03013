"""How numbers, sizes, durations and times read on the console's pages (Jinja2 filters)."""

from __future__ import annotations

import datetime

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "—"
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover (the loop always returns)


def rate(n: float | None) -> str:
    if n is None:
        return "—"
    if n == 0:
        return "0"
    if n < 1:
        return f"{n:.2f}"
    return f"{n:.1f}" if n < 100 else f"{n:,.0f}"


def number(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def duration_ms(value: str | int | None) -> str:
    """A retention.ms-like value: -1 is forever; else the largest whole unit that fits."""
    if value is None or value == "":
        return "—"
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return str(value)
    if ms < 0:
        return "forever"
    for size, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    if ms >= 1000:
        return f"{ms / 1000:g} s"
    return f"{ms} ms"


def when(ms: int | None) -> str:
    """Epoch milliseconds as UTC ISO-8601 (``2026-01-31 12:00:00.123Z``)."""
    if ms is None or ms < 0:
        return "—"
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_when(text: str) -> int:
    """``2026-01-31T12:00[:00[.123]][Z|+01:00]`` (a browser's datetime-local; no zone: UTC) to
    epoch milliseconds; ValueError otherwise."""
    t = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)
