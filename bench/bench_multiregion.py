#!/usr/bin/env python3
"""Multi-region benchmark (issue 13) on the region harness (tests/region_harness.py): datacenters
of real ``shoal serve`` processes and etcd members on loopback, every path between datacenters
through a link proxy with ``--rtt-ms`` (default 30) round trip, 1 ms inside one; real librdkafka
clients in their datacenter.

Phases:
  ff        dc1 and dc2, one broker each; a topic led in dc1 with a follower in dc2; N records of
            S bytes produced in dc1 and read by a consumer in dc2, without and with
            ``client.rack=dc2``. Cross-DC bytes per consumed byte: the consumer's (client links)
            and in all (replication included). Target: >= 90% fewer consumer bytes across.
  latency   dc1 and dc2, two brokers each; acks=all produce from dc1, one record at a time at a
            fixed rate (librdkafka's measured latency), interleaved rounds over three topics:
            single-DC (sync replicas in dc1 only), (b) sync in dc1 + observers in dc2, (a) sync
            replicas in both DCs. p50/p99 (median over rounds). Targets: (b) p99 within 5 ms of
            single-DC; (a) p99 within 5 ms of one inter-DC RTT above single-DC.
  drills    2 DC x 3 brokers + a tie-breaker etcd member: drill (a) (RF 4, 2+2, min ISR 3: acks=all
            refused while dc1 is cut, records lost) and drill (b) (placement v2 with promotion:
            time from the cut to the first acknowledged acks=all produce in dc2, records lost), each
            on a fresh cluster, ``--drill-rounds`` times.
  cycles    (not in the default phases) the long drill (b): ``--cycles`` cuts and heals of dc1 on
            one cluster while one dc2 producer writes: promotion, acknowledgements again,
            demotion per cycle; records lost at the end.

Run:  python bench/bench_multiregion.py [--phases ff,latency,drills] [--rtt-ms 30] [--records 5000]
          [--size 1000] [--rounds 3] [--latency-records 600] [--rate 100] [--drill-rounds 1]
          [--outage-s 5] [--cut reset|stall] [--cycles 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT, os.path.join(REPO_ROOT, "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

from region_drills import (ack_latencies, create_topic, follower_fetching_bytes, pct,  # noqa: E402
                           promotion_cycles, promotion_drill, stretch_drill)
from region_harness import Regions  # noqa: E402

OVERRIDES = {"replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"}


def regions(tag: str, args, brokers: dict[str, int]) -> Regions:
    workdir = Path(tempfile.mkdtemp(prefix=f"shoal-bench-mr-{tag}-"))
    r = Regions(workdir, brokers=brokers, etcd=("dc1", "dc2", "dc3"), rtt_ms=args.rtt_ms, overrides=OVERRIDES)
    r.workdir = workdir
    r.start(120)
    return r


def close(r: Regions) -> None:
    r.close()
    shutil.rmtree(r.workdir, ignore_errors=True)


def phase_ff(args) -> dict:
    r = regions("ff", args, {"dc1": 1, "dc2": 1})
    try:
        off = follower_fetching_bytes(r, "ff-off", 1, 2, "dc2", None, args.records, args.size)
        on = follower_fetching_bytes(r, "ff-on", 1, 2, "dc2", "dc2", args.records, args.size)
    finally:
        close(r)
    reduction = 1 - on["client_per_consumed"] / off["client_per_consumed"]
    print(f"ff: {args.records} x {args.size} B read in dc2 from a dc1-led topic")
    for name, x in (("leader (no client.rack)", off), ("follower (client.rack=dc2)", on)):
        print(f"  {name:28s} consumer bytes across/consumed {x['client_per_consumed']:.4f}   "
              f"all bytes across/consumed {x['total_per_consumed']:.4f} (replication {x['replication_per_consumed']:.4f})")
    print(f"  consumer cross-DC bytes reduced by {reduction:.1%} (target >= 90%: {'met' if reduction >= 0.9 else 'MISSED'})")
    return {"off": off, "on": on, "reduction": reduction}


def phase_latency(args) -> dict:
    r = regions("lat", args, {"dc1": 2, "dc2": 2})
    try:
        rtt = r.rtt("dc1", 3, samples=11)
        local_rtt = r.rtt("dc1", 2, samples=11)
        obs = {"version": 1, "replicas": [{"count": 2, "constraints": {"rack": "dc1"}}],
               "observers": [{"count": 2, "constraints": {"rack": "dc2"}}]}
        create_topic(r, "dc1", "lat-single", [1, 2], configs={"min.insync.replicas": "2"})
        create_topic(r, "dc1", "lat-observers", configs={"replica.placement": json.dumps(obs), "min.insync.replicas": "2"})
        create_topic(r, "dc1", "lat-stretch", [1, 3, 2, 4], configs={"min.insync.replicas": "3"})
        runs: dict[str, list[tuple[float, float]]] = {"single": [], "observers": [], "stretch": []}
        for _ in range(args.rounds):
            for name in runs:
                lat = ack_latencies(r.client_bootstrap("dc1"), f"lat-{name}", args.latency_records, args.rate, args.size)
                runs[name].append((pct(lat, .5), pct(lat, .99)))
    finally:
        close(r)
    med = {n: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for n, v in runs.items()}
    s99 = med["single"][1]
    b_gap, a_gap = med["observers"][1] - s99, med["stretch"][1] - s99
    print(f"latency: acks=all from dc1, {args.latency_records} records of {args.size} B at {args.rate}/s, "
          f"{args.rounds} interleaved rounds; measured RTT dc1->dc2 {rtt:.1f} ms, inside dc1 {local_rtt:.1f} ms")
    for n, (p50, p99) in med.items():
        print(f"  {n:10s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   rounds p99 {[round(x[1], 1) for x in runs[n]]}")
    s50 = med["single"][0]
    print(f"  p50: (b) observers - single {med['observers'][0] - s50:+.1f} ms, (a) stretch - single "
          f"{med['stretch'][0] - s50:+.1f} ms (one RTT: {rtt:.1f} ms)")
    print(f"  (b) observers - single p99 = {b_gap:+.1f} ms (target <= 5: {'met' if b_gap <= 5 else 'MISSED'})")
    print(f"  (a) stretch - single p99 = {a_gap:+.1f} ms vs RTT {rtt:.1f} ms (target <= RTT + 5: "
          f"{'met' if a_gap <= rtt + 5 else 'MISSED'})")
    return {"rtt_ms": rtt, "local_rtt_ms": local_rtt, "rounds": runs, "median": med, "b_gap": b_gap, "a_gap": a_gap}


def phase_drills(args) -> dict:
    out: dict = {"a": [], "b": []}
    cut = ("stall", "hang") if args.cut == "stall" else ("reset", "refuse")
    for _ in range(args.drill_rounds):
        r = regions("drill-a", args, {"dc1": 3, "dc2": 3})
        try:
            out["a"].append(stretch_drill(r, outage_s=args.outage_s, cut=cut))
        finally:
            close(r)
        r = regions("drill-b", args, {"dc1": 3, "dc2": 3})
        try:
            out["b"].append(promotion_drill(r, outage_s=args.outage_s, cut=cut))
        finally:
            close(r)
    print(f"drills: 2 DC x 3 brokers + tie-breaker etcd, dc1 cut ({'/'.join(cut)}) for >= {args.outage_s} s, "
          f"{args.drill_rounds} round(s)")
    for a in out["a"]:
        print(f"  (a) RF4 2+2 min ISR 3: leader in dc2 after {a['election_s']:.1f} s, acks=all in dc2 "
              f"{a['probe_errors'][-1]}, acknowledged during the outage {a['acked_during_outage']}, "
              f"writes resumed {a['resume_s']:.1f} s after the heal; acknowledged {a['acked']}, lost {a['lost']}")
    for b in out["b"]:
        print(f"  (b) v2 promotion: first acks=all in dc2 {b['first_acks_all_s']:.1f} s after the cut, "
              f"the running producer's first {b['producer_resumed_s']:.1f} s "
              f"(ISR {b['layout_after_cut'][2]}), acknowledged during the outage {b['acked_during_outage']}; "
              f"acknowledged {b['acked']}, lost {b['lost']}")
    lost = sum(x["lost"] for x in out["a"] + out["b"])
    print(f"  acknowledged records lost: {lost} (target 0: {'met' if lost == 0 else 'MISSED'})")
    return out


def phase_cycles(args) -> dict:
    r = regions("cycles", args, {"dc1": 3, "dc2": 3})
    try:
        out = promotion_cycles(r, args.cycles, outage_s=args.outage_s)
    finally:
        close(r)
    print(f"cycles: drill (b) {args.cycles} times on one cluster, a dc2 producer throughout")
    for i, c in enumerate(out["cycles"], 1):
        print(f"  cut {i}: observer promoted {c['promoted_s']:.1f} s, producer acknowledged again {c['acks_again_s']:.1f} s "
              f"after the cut; demoted {c['demoted_s']:.1f} s after the heal")
    print(f"  acknowledged {out['acked']}, failed {out['failed']}, lost {out['lost']} (target 0: "
          f"{'met' if out['lost'] == 0 else 'MISSED'})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="ff,latency,drills")
    ap.add_argument("--rtt-ms", type=float, default=30.0)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-records", type=int, default=600)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--drill-rounds", type=int, default=1)
    ap.add_argument("--cycles", type=int, default=3, help="cut/heal cycles of the cycles phase")
    ap.add_argument("--outage-s", type=float, default=5.0)
    ap.add_argument("--cut", choices=("reset", "stall"), default="reset",
                    help="reset: connections across reset, new ones refused; stall: bytes dropped, new ones held")
    ap.add_argument("--json")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} "
          f"{platform.python_version()}; load average {os.getloadavg()[0]:.2f} at start")
    t0 = time.monotonic()
    results = {}
    for phase in args.phases.split(","):
        results[phase] = {"ff": phase_ff, "latency": phase_latency, "drills": phase_drills,
                          "cycles": phase_cycles}[phase](args)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; {time.monotonic() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
