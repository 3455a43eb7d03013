"""``shoal.metrics.node.label``: every series of /metrics labelled with the broker's node id (what
``shoal serve --processes`` turns on, several brokers on one host), parsed back by Prometheus's
own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from shoal.admin.metrics import with_label

TEXT = b"""# HELP shoal_requests requests
# TYPE shoal_requests counter
shoal_requests_total{api="Produce",tenant=""} 3.0
shoal_requests_total{api="Fetch",tenant="a b{c}"} 1.0
# HELP process_cpu_seconds_total cpu
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
# HELP shoal_x x
# TYPE shoal_x gauge
shoal_x{} 2.0
"""


def test_every_sample_gets_the_label_and_keeps_its_own() -> None:
    out = with_label(TEXT, "node_id", "7").decode()
    samples = [s for f in text_string_to_metric_families(out) for s in f.samples]
    assert len(samples) == 4
    assert all(s.labels.get("node_id") == "7" for s in samples)
    by_name = {(s.name, s.labels.get("api")): s for s in samples}
    assert by_name[("shoal_requests_total", "Fetch")].labels["tenant"] == "a b{c}"
    assert by_name[("process_cpu_seconds_total", None)].value == 1.5
    assert by_name[("shoal_x", None)].labels == {"node_id": "7"}
