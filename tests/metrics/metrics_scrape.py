"""Scraping a broker's /metrics in the metrics tests (imported as ``metrics_scrape``)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape: every sample by (name, labels), and the declared families (``# TYPE``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, frozenset], float] = {}
        self.families: set[str] = set()
        for fam in text_string_to_metric_families(text):
            self.families.add(fam.name)
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value
        self.names = {name for name, _ in self.samples}

    def get(self, name: str, **labels: str) -> float | None:
        """The sample with exactly ``labels``, None if absent."""
        return self.samples.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        """The sample with exactly ``labels`` (0 if absent: a counter not yet incremented)."""
        return self.get(name, **labels) or 0.0

    def sum(self, name: str, **labels: str) -> float:
        """The sum of every sample of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=15) as resp:
        assert resp.status == 200
        return Scrape(resp.read().decode())
