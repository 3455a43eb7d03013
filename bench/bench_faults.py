#!/usr/bin/env python3
"""The long fault campaign of issue 12 ("Proof"): N randomized, seeded fault schedules against a
3-broker cluster on a real 3-member etcd, every link through a link proxy (tests/faults/).

For each schedule i (seed ``--seed + i``): a fresh topic (``--partitions``, RF ``--rf``),
idempotent acks=all producers and a committing consumer group (tests/faults/workload.py), the
schedule played by the nemesis (kill -9 + restart, SIGSTOP/SIGCONT, broker partitions, client
link cuts, etcd leader kill, slow links, a broker isolated from its peers and etcd, preferred
leader elections; one fault at a time; kill and pause also hit the leaders of an idle topic's
partitions), liveness after healing, a final read, the checkers (tests/faults/checker.py), and
that every replica of both topics is back in the ISR within 60 s. ``--auto-rebalance S`` turns on
the controller's auto leader rebalance every S seconds (``leader.imbalance.check.interval.seconds``). Each schedule's lines are printed (replay one with
``--replay FILE`` holding those lines), its result line, and at the end the table:

    | schedules | faults | acked | lost | duplicated | misordered |

plus the other checks' totals (inconsistent offsets, reads that vanished, commits backwards,
divergent replicas) and liveness failures. Exit status 1 when any check failed.

The cluster is started once for the campaign (a schedule's faults are healed before the next
starts; each gets its own topic and group). ``--rf 3`` asks RF=3 topics; after the first schedule
the run checks that followers hold the leader's bytes up to the high watermark, and says so when
they do not (replication not there: a failover then loses what only the leader had).

Run:  python bench/bench_faults.py [--schedules 20] [--seed 1] [--duration 30] [--rf 1] [--override K=V]
          [--kinds kill,pause,partition,cut-client,etcd-leader,slow] [--partitions 6]
          [--producers 2] [--consumers 2] [--rate 150] [--max-hold 4] [--replay FILE] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "e2e")):
    if p not in sys.path:
        sys.path.insert(0, p)

from cluster_harness import ProxiedCluster  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from faults.checker import row, table  # noqa: E402
from faults.nemesis import KINDS, Schedule  # noqa: E402
from faults.run import FaultRun, replicating  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of faults per schedule")
    ap.add_argument("--rf", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=150.0, help="records/s per producer")
    ap.add_argument("--max-hold", type=float, default=4.0)
    ap.add_argument("--replay", help="a file with a printed schedule's lines: run just that one")
    ap.add_argument("--override", action="append", default=[], metavar="K=V",
                    help="a broker config for every broker (repeatable), e.g. shoal.replica.fetch.pipeline.depth=4")
    ap.add_argument("--auto-rebalance", type=float, default=0, metavar="S",
                    help="leader.imbalance.check.interval.seconds (auto rebalance every S s; 0: the default, 300)")
    ap.add_argument("--idle-partitions", type=int, default=3, help="partitions of the idle topic beside each run's")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.auto_rebalance:
        args.override += ["auto.leader.rebalance.enable=true",
                          f"leader.imbalance.check.interval.seconds={args.auto_rebalance:g}"]
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds {sorted(unknown)} (known: {','.join(KINDS)})")

    if args.replay:
        schedules = [Schedule.parse(Path(args.replay).read_text())]
    else:
        schedules = [Schedule.random(args.seed + i, args.duration, [1, 2, 3], ["producer", "consumer"], kinds=kinds,
                                     partitions=args.partitions, max_hold=args.max_hold)
                     for i in range(args.schedules)]

    work = Path(tempfile.mkdtemp(prefix="shoal-bench-faults-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    cluster = ProxiedCluster(work / "cluster", etcd.url(f"/faults-{uuid.uuid4().hex[:8]}"),
                             clients=["producer", "consumer"], seed=args.seed, etcd=etcd,
                             overrides=dict(o.split("=", 1) for o in args.override) or None)
    results, per_schedule, kinds_done, liveness = [], [], Counter(), []
    t_start = time.monotonic()
    try:
        cluster.start()
        print(f"# bench_faults: {len(schedules)} schedules, seed {args.seed}, {args.duration:.0f} s each, "
              f"RF {args.rf}, kinds {','.join(kinds)}, {args.partitions} partitions, "
              f"{args.producers}x{args.rate:.0f}/s producers, {args.consumers} consumers", flush=True)
        for i, schedule in enumerate(schedules):
            run = FaultRun(cluster, etcd, rf=args.rf, partitions=args.partitions, producers=args.producers,
                           consumers=args.consumers, rate=args.rate, log=lambda s: print(s, flush=True),
                           idle_partitions=args.idle_partitions)
            print(f"## schedule {i + 1}/{len(schedules)} seed={schedule.seed} topic={run.topic}", flush=True)
            t0 = time.monotonic()
            try:
                result = run.play(schedule)
            except Exception as e:  # liveness: the cluster did not come back; the campaign goes on
                liveness.append(f"seed={schedule.seed}: {e!r}")
                print(f"LIVENESS seed={schedule.seed}: {e!r}\n{traceback.format_exc(limit=3)}", flush=True)
                run.nemesis.heal_everything()
                continue
            results.append(result)
            if i == 0 and args.rf > 1 and not replicating(cluster, run.topic, args.partitions, args.rf):
                print(f"# NOTE: RF {args.rf} asked but followers do not hold the leader's bytes up to the high "
                      f"watermark: replication is not there, so failovers lose what the leader alone had",
                      flush=True)
            kinds_done.update(e.op.kind for e in run.nemesis.events if not e.error)
            print(f"result seed={schedule.seed} faults={run.nemesis.faults} {result.summary()} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
            per_schedule.append({"seed": schedule.seed, "ops": schedule.lines(), "faults": run.nemesis.faults,
                                 "acked": result.acked, "lost": len(result.lost),
                                 "duplicated": len(result.duplicated), "misordered": result.n_misordered,
                                 "ok": result.ok, "summary": result.summary()})
    finally:
        cluster.close()
        etcd.close()
        shutil.rmtree(work, ignore_errors=True)

    faults = sum(s["faults"] for s in per_schedule)
    print()
    print(table([row(len(results), faults, results)]))
    print(f"faults by kind: {dict(sorted(kinds_done.items()))}")
    print(f"inconsistent={sum(len(r.inconsistent) for r in results)} vanished={sum(len(r.vanished) for r in results)} "
          f"poll-skips={sum(len(r.skipped) for r in results)} "
          f"commits-backwards={sum(len(r.commits_backwards) for r in results)} "
          f"divergent={sum(len(r.divergent) for r in results)} "
          f"out-of-isr={sum(len(r.out_of_isr) for r in results)} spinning={sum(len(r.spinning) for r in results)} "
          f"liveness-failures={len(liveness)} "
          f"wall={time.monotonic() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "schedules": per_schedule,
                                               "liveness": liveness}, indent=1))
    return 0 if all(r.ok for r in results) and not liveness else 1


if __name__ == "__main__":
    sys.exit(main())
