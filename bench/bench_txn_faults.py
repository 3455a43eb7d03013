#!/usr/bin/env python3
"""The transactional fault campaign of issue 14: N randomized, seeded fault schedules against a
3-broker cluster on a real 3-member etcd, every link through a link proxy (tests/faults/), each
while a consume-transform-produce pipeline runs exactly once through Kafka transactions
(tests/faults/txn_workload.py).

For each schedule i (seed ``--seed + i``): fresh input and output topics (``--partitions``, RF
``--rf``), ``--records`` input records, ``--workers`` transactional workers in one group, the
schedule played by the nemesis (``txn_schedule``: ``bench_faults``' kinds, with kill and pause
aimed at the transaction coordinator, the group coordinator or an output partition's leader half
of the time), liveness (the input is consumed after healing), the final read_committed read, the
checker (tests/faults/txn_checker.py). Each schedule's lines and result line are printed (replay
one with ``--replay FILE``), and at the end the table:

    | schedules | faults | inputs | committed outputs | lost | duplicated | misordered | aborted seen |

Exit status 1 when any check or liveness failed.

Run:  python bench/bench_txn_faults.py [--schedules 10] [--seed 1] [--duration 30] [--rf 3]
          [--kinds kill,pause,partition,cut-client,etcd-leader,slow] [--partitions 3] [--records 1500]
          [--workers 2] [--batch 10] [--pause 0.3] [--max-hold 4] [--replay FILE] [--json out.json]
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
from faults.nemesis import KINDS, Schedule  # noqa: E402
from faults.txn_checker import table  # noqa: E402
from faults.txn_workload import TxnRun, txn_schedule  # noqa: E402

DEFAULT_KINDS = ("kill", "pause", "partition", "cut-client", "etcd-leader", "slow")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedules", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of faults per schedule")
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=1500, help="input records per schedule")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=10, help="records per transaction at most")
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds between a worker's transactions (paces the pipeline so that the faults find it busy)")
    ap.add_argument("--max-hold", type=float, default=4.0)
    ap.add_argument("--done-timeout", type=float, default=180.0)
    ap.add_argument("--replay", help="a file with a printed schedule's lines: run just that one")
    ap.add_argument("--json")
    args = ap.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds {sorted(unknown)} (known: {','.join(KINDS)})")

    if args.replay:
        schedules = [Schedule.parse(Path(args.replay).read_text())]
    else:
        schedules = [txn_schedule(args.seed + i, args.duration, [1, 2, 3], ["producer", "consumer"], kinds,
                                  args.partitions, max_hold=args.max_hold) for i in range(args.schedules)]

    work = Path(tempfile.mkdtemp(prefix="shoal-bench-txn-faults-"))
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    cluster = ProxiedCluster(work / "cluster", etcd.url(f"/txn-faults-{uuid.uuid4().hex[:8]}"),
                             clients=["producer", "consumer"], seed=args.seed, etcd=etcd)
    rows, per_schedule, kinds_done, liveness = [], [], Counter(), []
    t_start = time.monotonic()
    try:
        cluster.start()
        print(f"# bench_txn_faults: {len(schedules)} schedules, seed {args.seed}, {args.duration:.0f} s each, "
              f"RF {args.rf}, kinds {','.join(kinds)}, {args.partitions} partitions, {args.records} records, "
              f"{args.workers} workers, transactions of <= {args.batch}", flush=True)
        for i, schedule in enumerate(schedules):
            run = TxnRun(cluster, etcd, rf=args.rf, partitions=args.partitions, records=args.records,
                         workers=args.workers, batch=args.batch, pause=args.pause,
                         log=lambda s: print(s, flush=True))
            print(f"## schedule {i + 1}/{len(schedules)} seed={schedule.seed} input={run.input_topic}", flush=True)
            t0 = time.monotonic()
            try:
                result = run.play(schedule, done_timeout=args.done_timeout)
            except Exception as e:  # liveness: the pipeline did not finish; the campaign goes on
                liveness.append(f"seed={schedule.seed}: {e!r}")
                print(f"LIVENESS seed={schedule.seed}: {e!r}\n{traceback.format_exc(limit=3)}", flush=True)
                run.nemesis.heal_everything()
                continue
            pl = run.pipeline
            rows.append((1, run.nemesis.faults, result))
            kinds_done.update(e.op.kind for e in run.nemesis.events if not e.error)
            print(f"result seed={schedule.seed} faults={run.nemesis.faults} commits={pl.commits} "
                  f"restarts={len(pl.restarts)} wedged={pl.wedged} {result.summary()} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
            per_schedule.append({"seed": schedule.seed, "ops": schedule.lines(), "faults": run.nemesis.faults,
                                 "commits": pl.commits, "wedged": pl.wedged,
                                 "restarts": [(r.worker, r.reason) for r in pl.restarts],
                                 "ok": result.ok, "summary": result.summary()})
    finally:
        cluster.close()
        etcd.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(table(rows))
    print(f"faults by kind: {dict(sorted(kinds_done.items()))}")
    print(f"foreign={sum(len(r.foreign) for _, _, r in rows)} offsets-wrong={sum(len(r.offsets) for _, _, r in rows)} "
          f"restarts={sum(len(s['restarts']) for s in per_schedule)} wedged={sum(s['wedged'] for s in per_schedule)} "
          f"liveness-failures={len(liveness)} "
          f"wall={time.monotonic() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "schedules": per_schedule,
                                               "liveness": liveness}, indent=1))
    return 0 if all(r.ok for _, _, r in rows) and not liveness else 1


if __name__ == "__main__":
    sys.exit(main())
