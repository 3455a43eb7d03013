#!/usr/bin/env python3
"""Fairness and convergence of the auto-tuned tenant quotas (issue 5; the multi-tenancy document).

Two parts:

simulated (default: 4 and 100 tenants)
    The broker's own pieces on an injected clock, no sockets: per tenant the broker's tenant
    sensor (``shoal.quotas.sensor.Sensor``, Kafka's windowed rate with warm-up pacing) bounded by
    the tenant's configured quota and capped (paced) at its dynamic quota when tuned, and
    the ``shoal.quotas.autotune.AutoTuner`` reading those sensors every tuning interval. Each
    tenant is a producer that sends ``--chunk`` bytes as fast as its demand allows and, as the
    broker mutes a throttled connection, sends nothing until its throttle time has passed.
    Configured quotas (the weights) and demands are drawn with ``--seed``; the broker-wide
    limit is ``--limit-fraction`` of the demand that fits the configured quotas.

real (``--real``, 4 tenants)
    A Shoal broker (``python -m shoal serve``) with a SASL listener for tenants, 4 tenants
    provisioned through the HTTP admin API (bench_tenants.start_world), tenant-wide produce
    quotas 1:2:3:4 x ``--real-quota`` set with AlterClientQuotas, and a broker-wide produce
    limit; one confluent-kafka producer process per tenant producing as fast as it can.

Reported per run
    ideal      the weighted max-min fair allocation of the limit over the true demands
               (``fairshare.water_fill`` with demands capped at the configured quotas);
    Jain       Jain's index of achieved / ideal over all tenants, and of achieved / weight over
               the saturated tenants (the "weighted shares"), both over the last ``--tail``
               seconds; target >= 0.99;
    settled    (simulated) the first tuning time after which every tenant's quota in effect stays
               within 5% of its final value (or 0.2% of the limit);
    converged  the first time after which the achieved rates, averaged over ``--smooth`` s (two
               quota windows: Kafka's throttling lets a greedy client send in bursts about one
               quota window apart), keep Jain(achieved / ideal) >= 0.99 and their sum within 5%
               above the limit; counted from the start of the load;
    worst      the largest |achieved / ideal - 1| over the tail;
    usage      sum of achieved rates over the tail / limit.

Run:  python bench/bench_fairness.py [--tenants 4,100] [--seconds 120] [--real] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import types
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
for p in (HERE, REPO_ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

from shoal.quotas.autotune import AutoTuner, TenantActivity  # noqa: E402
from shoal.quotas.fairshare import jain_index, water_fill  # noqa: E402
from shoal.quotas.rate import RateConfig  # noqa: E402
from shoal.quotas.sensor import Sensor  # noqa: E402

MB = 1_000_000


# --------------------------------------------------------------------------
# scenario and scoring
# --------------------------------------------------------------------------

@dataclass
class Scenario:
    quotas: dict[str, float]  # configured per-broker tenant quotas (the weights), bytes/s
    demand: dict[str, float]  # what each tenant would send without quotas, bytes/s
    limit: float  # broker-wide produce limit, bytes/s

    @property
    def ideal(self) -> dict[str, float]:
        capped = {t: min(self.demand[t], self.quotas[t]) for t in self.quotas}
        if sum(capped.values()) <= self.limit:
            return capped
        return water_fill(self.limit, capped, self.quotas)


def scenario(n: int, seed: int, limit_fraction: float) -> Scenario:
    if n == 4:  # the picture: weights 1:2:3:4, two light and two saturating tenants
        quotas = {f"t{i}": q * MB for i, q in enumerate((10, 20, 30, 40))}
        demand = {"t0": 2 * MB, "t1": 40 * MB, "t2": 5 * MB, "t3": 80 * MB}
    else:
        rng = random.Random(seed)
        quotas = {f"t{i:03d}": rng.randint(1, 20) * MB for i in range(n)}
        demand = {t: q * rng.choice((0.05, 0.2, 0.5, 1.5, 3.0)) for t, q in quotas.items()}
    fits = sum(min(demand[t], quotas[t]) for t in quotas)
    return Scenario(quotas, demand, limit_fraction * fits)


def quota_convergence(history: list[tuple[float, dict[str, float]]], limit: float,
                      tolerance: float = 0.05) -> float | None:
    """The time from which every tenant's quota in effect stays within ``tolerance`` of its final
    value, or within 0.2% of the limit of it (a tenant sending 50 KB/s in 64 KiB requests has a
    noisy rate), i.e. the tuner has settled."""
    if not history:
        return None
    final = history[-1][1]
    settled = None
    for t, quotas in reversed(history):
        if any(abs(q / final[k] - 1) > tolerance and abs(q - final[k]) > 0.002 * limit
               for k, q in quotas.items()):
            break
        settled = t
    return settled


def score(sc: Scenario, series: dict[str, list[float]], tail: int, smooth: int) -> dict:
    """``series``: per tenant, bytes achieved in each 1-s bucket."""
    ideal = sc.ideal
    tenants = list(sc.quotas)
    seconds = len(next(iter(series.values())))
    lam = max((ideal[t] / sc.quotas[t] for t in tenants), default=0.0)
    saturated = [t for t in tenants if ideal[t] < min(sc.demand[t], sc.quotas[t]) * 0.999
                 or math.isclose(ideal[t] / sc.quotas[t], lam, rel_tol=1e-6)]

    def avg(t: str, end: int, width: int) -> float:
        lo = max(0, end - width)
        return sum(series[t][lo:end]) / max(1, end - lo)

    def fair_at(end: int) -> bool:
        achieved = {t: avg(t, end, smooth) for t in tenants}
        ok = jain_index([achieved[t] / ideal[t] for t in tenants if ideal[t] > 0]) >= 0.99
        return ok and sum(achieved.values()) <= sc.limit * 1.05

    converged = None
    for end in range(seconds, smooth - 1, -1):
        if not fair_at(end):
            break
        converged = end
    tail_rates = {t: avg(t, seconds, tail) for t in tenants}
    return {
        "tenants": len(tenants),
        "limit_MBps": sc.limit / MB,
        "jain_ideal": jain_index([tail_rates[t] / ideal[t] for t in tenants if ideal[t] > 0]),
        "jain_weighted": jain_index([tail_rates[t] / sc.quotas[t] for t in saturated]) if saturated else 1.0,
        "saturated": len(saturated),
        "worst_dev": max(abs(tail_rates[t] / ideal[t] - 1) for t in tenants if ideal[t] > 0),
        "usage_of_limit": sum(tail_rates.values()) / sc.limit,
        "converged_s": None if converged is None else converged - smooth,
        "tail": {t: (tail_rates[t] / MB, ideal[t] / MB) for t in tenants} if len(tenants) <= 8 else None,
    }


# --------------------------------------------------------------------------
# simulated: the broker's sensors and tuner on an injected clock
# --------------------------------------------------------------------------

def simulate(sc: Scenario, seconds: int, interval_ms: int, chunk: int,
             tick_ms: int = 5) -> tuple[dict[str, list[float]], list[tuple[float, dict[str, float]]]]:
    rate_cfg = RateConfig()  # quota.window.num 11 x 1 s, as the broker
    sensors = {t: Sensor(q, rate_cfg, pacing=True) for t, q in sc.quotas.items()}
    usage = {t: 0.0 for t in sc.quotas}

    class Usage:
        def usage_by_tenant(self):
            return dict(usage)

        def muted_since(self, since_ms):
            return {t for t, s in sensors.items() if s.muted_until_ms > since_ms}

    tuner = AutoTuner("produce", sc.quotas.get, TenantActivity(300_000), Usage())
    tuner.limit = sc.limit
    muted_until = {t: 0 for t in sc.quotas}
    credit = {t: 0.0 for t in sc.quotas}  # bytes the tenant's demand allows it to have sent
    buckets = {t: [0.0] * seconds for t in sc.quotas}
    quotas_in_effect: list[tuple[float, dict[str, float]]] = []
    now = 1_700_000_000_000
    start = now
    next_tune = now + interval_ms
    while now < start + seconds * 1000:
        second = (now - start) // 1000
        for t, sensor in sensors.items():
            credit[t] = min(credit[t] + sc.demand[t] * tick_ms / 1000.0, max(chunk, sc.demand[t]))
            while credit[t] >= chunk and now >= muted_until[t]:
                credit[t] -= chunk
                buckets[t][second] += chunk
                quota_ms, pacing_ms = sensor.record(chunk, now)
                throttle = max(quota_ms, pacing_ms)
                if throttle > 0:
                    muted_until[t] = now + throttle
        if now >= next_tune:
            for t, sensor in sensors.items():
                usage[t] = sensor.rate.measure_used(now)  # as ClientQuotaManager.tenant_usage
            tuner.tune(now, tuner.record_activity(now))
            for t, sensor in sensors.items():
                sensor.cap = tuner.dynamic_tenant_quota(t)  # as the quota manager: paced
            quotas_in_effect.append(((now - start) / 1000, {t: s.cap or s.bound for t, s in sensors.items()}))
            next_tune += interval_ms
        now += tick_ms
    return buckets, quotas_in_effect


# --------------------------------------------------------------------------
# real: a broker, 4 tenants, 4 producer processes
# --------------------------------------------------------------------------

def produce_flat_out(conf: dict, topic: str, seconds: float, size: int, t0: float) -> list[int]:
    """A confluent-kafka producer sending ``size``-byte messages as fast as it can from
    monotonic time ``t0`` for ``seconds``: bytes delivered in each second (by delivery time)."""
    from confluent_kafka import Producer

    buckets = [0] * int(seconds + 1)
    p = Producer({"linger.ms": 5, "acks": 1, "queue.buffering.max.kbytes": 16384, **conf})
    payload = os.urandom(size)

    def done(err, msg):
        if err is None:
            i = int(time.monotonic() - t0)
            if 0 <= i < len(buckets):
                buckets[i] += len(msg.value())

    while time.monotonic() < t0:
        time.sleep(0.001)
    while time.monotonic() - t0 < seconds:
        try:
            p.produce(topic, payload, on_delivery=done)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
    p.flush(30)
    return buckets[: int(seconds)]


def _producer(bootstrap: str, security: dict, topic: str, seconds: float, size: int, t0: float, out) -> None:
    out.put((topic, produce_flat_out({"bootstrap.servers": bootstrap, **security}, topic, seconds, size, t0)))


def run_real(args) -> tuple[Scenario, dict[str, list[float]]]:
    import asyncio

    import bench_tenants
    from shoal.client import AdminClient

    workdir = tempfile.mkdtemp(prefix="shoal-fairness-")
    limit = args.real_limit * MB
    shoal_args = ["--override", f"shoal.broker.produce.byte.rate.limit={int(limit)}",
                  "--override", f"shoal.quota.autotune.interval.ms={args.interval_ms}"]
    wargs = types.SimpleNamespace(shoal_cmd=f"{sys.executable} -m shoal", shoal_arg=shoal_args,
                                  startup_timeout=60, seed=args.seed, clients=4, topics_per_tenant=0,
                                  partitions=1, provision_concurrency=4)
    world = bench_tenants.start_world(4, wargs, workdir)
    try:
        quotas = {}
        alters = []
        for i, tenant in enumerate(world.tenants):
            quotas[tenant.tenant_id] = (i + 1) * args.real_quota * MB
            alters.append(([("tenant", tenant.tenant_id)], {"producer_byte_rate": quotas[tenant.tenant_id]}))

        async def set_quotas() -> None:
            async with AdminClient(f"127.0.0.1:{world.broker.port}", client_id="bench-fairness") as admin:
                await admin.alter_client_quotas(alters)

        asyncio.run(set_quotas())
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        t0 = time.monotonic() + 3.0
        procs = []
        for c, tenant in enumerate(world.load):
            sec = bench_tenants.tenant_security(tenant.user)
            procs.append(ctx.Process(target=_producer, args=(world.sasl_bootstrap, sec, f"load-{c}",
                                                             args.real_seconds, args.real_size, t0, out)))
        for p in procs:
            p.start()
        got = dict(out.get(timeout=args.real_seconds + 120) for _ in procs)
        for p in procs:
            p.join(30)
        series = {world.load[c].tenant_id: got[f"load-{c}"] for c in range(len(procs))}
        demand = {t: 1e12 for t in quotas}  # as fast as they can
        return Scenario(quotas, demand, limit), series
    finally:
        world.broker.stop()


# --------------------------------------------------------------------------

def fmt(r: dict) -> str:
    conv = "never" if r["converged_s"] is None else f"{r['converged_s']} s"
    if r.get("settled_s") is not None:
        conv += f" (quotas settled after {r['settled_s']:.0f} s)"
    return (f"tenants {r['tenants']:>3}  limit {r['limit_MBps']:.1f} MB/s  Jain(achieved/ideal) {r['jain_ideal']:.4f}"
            f"  Jain(weighted, {r['saturated']} saturated) {r['jain_weighted']:.4f}  worst {r['worst_dev'] * 100:.1f}%"
            f"  usage {r['usage_of_limit'] * 100:.1f}% of limit  converged after {conv}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", default="4,100", help="simulated tenant counts (comma-separated)")
    ap.add_argument("--seconds", type=int, default=180, help="simulated seconds per run")
    ap.add_argument("--interval-ms", type=int, default=5000, help="shoal.quota.autotune.interval.ms")
    ap.add_argument("--limit-fraction", type=float, default=0.5, help="broker limit / demand within quotas")
    ap.add_argument("--chunk", type=int, default=64 * 1024, help="simulated produce request size (bytes)")
    ap.add_argument("--tail", type=int, default=44, help="seconds scored at the end (4 quota windows)")
    ap.add_argument("--smooth", type=int, default=22, help="moving average (s) for convergence (two quota windows)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--real", action="store_true", help="also run 4 real tenants against a broker")
    ap.add_argument("--real-seconds", type=int, default=90)
    ap.add_argument("--real-limit", type=float, default=20.0, help="broker-wide produce limit, MB/s")
    ap.add_argument("--real-quota", type=float, default=10.0, help="tenant quotas are 1..4 x this, MB/s")
    ap.add_argument("--real-size", type=int, default=10_000, help="message size (bytes)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    results = []
    for n in [int(x) for x in args.tenants.split(",") if x]:
        sc = scenario(n, args.seed, args.limit_fraction)
        t = time.perf_counter()
        series, history = simulate(sc, args.seconds, args.interval_ms, args.chunk)
        r = score(sc, series, args.tail, args.smooth)
        r.update(kind="simulated", interval_ms=args.interval_ms, cpu_s=time.perf_counter() - t,
                 settled_s=quota_convergence(history, sc.limit))
        print("simulated", fmt(r), flush=True)
        if r["tail"]:
            print("   tail MB/s (achieved, ideal):", {k: (round(a, 2), round(b, 2)) for k, (a, b) in r["tail"].items()})
        results.append(r)
    if args.real:
        sc, series = run_real(args)
        r = score(sc, series, args.tail, args.smooth)
        r.update(kind="real", interval_ms=args.interval_ms)
        print("real     ", fmt(r), flush=True)
        print("   tail MB/s (achieved, ideal):", {k: (round(a, 2), round(b, 2)) for k, (a, b) in r["tail"].items()})
        print("   per-second MB/s:", {k: [round(v / MB, 1) for v in s] for k, s in series.items()})
        results.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
