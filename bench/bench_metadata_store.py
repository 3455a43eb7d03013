"""Metadata store provisioning, A/B against another tree: the store alone, no broker, no sockets.

Provisions N tenants, then one user (with a SCRAM credential) and one topic per tenant, straight
on ``EmbeddedMetadataStore`` (each change is a durable journal append), with ``--concurrency``
commands in flight at a time (the HTTP admin API and CreateTopics handlers run several at once).
Each tree runs in its own process, alternating, ``--reps`` times; it prints the median wall and
CPU seconds per phase, and this tree's ratio to the baseline tree's.

    git worktree add /tmp/ebase <commit>   # the baseline
    python bench/bench_metadata_store.py --baseline /tmp/ebase --tenants 1000 --reps 5

CPU seconds are the steadier number on a shared machine; wall seconds include the fdatasyncs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import asyncio, json, sys, tempfile, time
from shoal.metadata import ScramCredential
from shoal.metadata.embedded import EmbeddedMetadataStore

N, CONC = int(sys.argv[1]), int(sys.argv[2])
CRED = ScramCredential("SCRAM-SHA-256", b"s" * 16, b"k" * 32, b"v" * 32, 4096)

async def phase(items, op):
    sem = asyncio.Semaphore(CONC)
    async def one(x):
        async with sem:
            return await op(x)
    w, c = time.perf_counter(), time.process_time()
    out = await asyncio.gather(*(one(x) for x in items))
    return out, time.perf_counter() - w, time.process_time() - c

async def main():
    with tempfile.TemporaryDirectory() as d:
        s = EmbeddedMetadataStore(d, node_id=1)
        await s.start()
        res = {}
        tenants, res["tenants_wall"], res["tenants_cpu"] = await phase(range(N), lambda i: s.create_tenant(f"t{i}"))
        ids = [t.tenant_id for t in tenants]
        _, res["users_wall"], res["users_cpu"] = await phase(
            ids, lambda tid: s.assign_user(f"{tid}_u", tid, CRED, new_user=True))
        _, res["topics_wall"], res["topics_cpu"] = await phase(
            ids, lambda tid: s.create_topic(f"{tid}_orders", [(1,)] * 6, {"retention.ms": "1000"}))
        res["conflicts"] = getattr(s, "conflicts", 0)
        await s.close()
    print(json.dumps(res))

asyncio.run(main())
"""


def run(tree: Path, tenants: int, concurrency: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, str(tenants), str(concurrency)], env=env, cwd=tree,
                         check=True, capture_output=True, text=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="the other tree (a git worktree)")
    ap.add_argument("--tenants", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this": HERE}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.reps):  # alternate, so load on a shared machine hits both alike
        for name, tree in trees.items():
            runs[name].append(run(tree, args.tenants, args.concurrency))
    print(f"{args.tenants} tenants, concurrency {args.concurrency}, median of {args.reps} alternating runs")
    print(f"{'phase':<16}{'baseline s':>12}{'this s':>10}{'ratio':>8}")
    for key in ("tenants_wall", "users_wall", "topics_wall", "tenants_cpu", "users_cpu", "topics_cpu"):
        a = statistics.median(r[key] for r in runs["baseline"])
        b = statistics.median(r[key] for r in runs["this"])
        print(f"{key:<16}{a:>12.3f}{b:>10.3f}{b / a:>8.2f}")
    print("lost compare-and-swaps (decided again) per run:", [r["conflicts"] for r in runs["this"]])


if __name__ == "__main__":
    main()
