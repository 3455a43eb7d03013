"""A rolling upgrade from 0.14.0 under longer load: the long version of the CI test
(tests/cluster/test_rolling_upgrade.py, which runs one short roll).

Three brokers on a three-member etcd of their own start on release 0.14.0 (built from its commit
into a venv, ``tests/releases.py``), under ``--producers`` idempotent acks=all producers at
``--rate`` records/s each over ``--partitions`` partitions (RF 3) and ``--consumers`` consumers of
one committing group (``tests/faults/workload.py``). Each round rolls every broker onto this
checkout (SIGTERM, start, until every replica is in sync, then ``--hold`` seconds of load) and,
but for the last round, rolls the whole cluster back onto 0.14.0 the same way (a rollback before
finalizing). Then ``shoal.version`` 2 is finalized and the load runs ``--hold`` seconds more. The
checker (``tests/faults/checker.py``) reports lost, duplicated and misordered records, poll skips
and commits going back; the group's committed offsets must not go back across the whole run.

::

    python bench/bench_rolling_upgrade.py                          # 1 round, 10 s holds
    python bench/bench_rolling_upgrade.py --rounds 3 --hold 30 --json out.json

Prints one line a restart (seconds until every replica was in sync, acks so far) and the
checker's summary; exit code 0 when the checker is clean and no client saw a fatal error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "e2e")]

from cluster_harness import Cluster  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from faults.checker import check  # noqa: E402
from faults.run import create_topic  # noqa: E402
from faults.workload import Workload  # noqa: E402
from releases import PREVIOUS, committed, etcd_topic, installed, restart_on  # noqa: E402

TOPIC, GROUP = "rolling", "rolling-group"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="records/s per producer")
    ap.add_argument("--hold", type=float, default=10.0, help="seconds of load after each restart")
    ap.add_argument("--rounds", type=int, default=1, help="rolls forward (each but the last rolled back)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rolling-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    previous = installed(PREVIOUS, work)
    print(f"0.14.0 built and installed in {time.monotonic() - t0:.1f} s", flush=True)
    etcd = EtcdCluster(work / "etcd")
    etcd.start()
    prefix = f"/rolling-{uuid.uuid4().hex[:8]}"
    c = Cluster(work / "cluster", etcd.url(prefix))
    c.etcd, c.prefix = etcd, prefix
    steps: list[dict[str, object]] = []
    w: Workload | None = None
    try:
        for b in c.brokers.values():
            b.venv = previous
        c.start()
        create_topic(c, TOPIC, 3, args.partitions)
        bs = c.bootstrap()
        w = Workload(TOPIC, args.partitions, bs, bs, observer_bootstrap=bs, producers=args.producers,
                     consumers=args.consumers, rate=args.rate, group=GROUP)
        w.start()
        assert w.wait_acked(200, 60), "no load on 0.14.0"
        time.sleep(args.hold)
        before = committed(c, GROUP, TOPIC)

        def roll(release: str, venv: Path | None) -> None:
            for node in (1, 2, 3):
                seconds = restart_on(c, node, venv, w)
                steps.append({"broker": node, "onto": release, "in_sync_s": round(seconds, 2), "acked": w.acked})
                print(f"broker {node} onto {release}: every replica in sync after {seconds:.1f} s, "
                      f"{w.acked} acked", flush=True)
                time.sleep(args.hold)

        for r in range(args.rounds):
            roll("this checkout", None)
            if r < args.rounds - 1:
                roll("0.14.0", previous)
        out = subprocess.run([sys.executable, "-m", "shoal", "features", "upgrade", "--feature", "shoal.version=2",
                              "--bootstrap-server", c[1].bootstrap], capture_output=True, text=True, timeout=60)
        print(out.stdout.strip() or out.stderr.strip(), flush=True)
        assert out.returncode == 0 and etcd_topic(c, TOPIC) is not None
        time.sleep(args.hold)
        w.stop(flush_timeout=60, drain=3)
        w.final_read(c[1].bootstrap)
        result = check(w.history)
        after = committed(c, GROUP, TOPIC)
        kept = all(after.get(p, -1) >= o for p, o in before.items())
        print(f"checker: {result.summary()}")
        print(f"fatal client errors: {len(w.fatal)}; retriable client errors: {len(w.client_errors)}; "
              f"committed offsets kept: {kept}; total {time.monotonic() - t0:.0f} s")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "args": vars(args), "steps": steps, "acked": result.acked, "lost": len(result.lost),
                "duplicated": len(result.duplicated), "misordered": result.n_misordered,
                "send_errors": result.errors, "fatal": len(w.fatal), "offsets_kept": kept, "ok": result.ok,
            }, indent=2))
        return 0 if result.ok and not w.fatal and kept else 1
    finally:
        if w is not None:
            w.stop(flush_timeout=5, drain=0)
        c.close()
        etcd.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
